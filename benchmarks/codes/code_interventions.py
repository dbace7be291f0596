"""Interventions on the latent codes of every fuzzy-logic model of the zoo
(:mod:`latentlens.probes.code_interventions`): where the codes carry the terms, swaps of
the final query's codes from one-term, random-combination and same-combination donors,
and steering along the term bits' decoder directions; then a summary over seeds.

    python benchmarks/codes/code_interventions.py [--group fuzzy-logic-a1] [--examples 512]
        --out FILE.jsonl          # one line per model (resumes: models already there skip)
    python benchmarks/codes/code_interventions.py --summary FILE.jsonl   # the tables, markdown
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

import torch

from latentlens import zoo
from latentlens.probes.code_interventions import code_interventions
from latentlens.reports.seeds import difference_interval, mean_std
from latentlens.training.run_dir import append_jsonl, read_jsonl

VARIANTS = ("softmax", "linear", "hyla")


def run(group: str, examples: int, out: Path) -> None:
    done = {row["model"] for row in read_jsonl(out)} if out.exists() else set()
    for name in zoo.names():
        if not name.startswith(group + "/") or name in done:
            continue
        start = time.perf_counter()
        model, task = zoo.load(name, device="cpu")
        result = code_interventions(model, task, examples=examples)
        row = {"model": name, "examples": examples, **result,
               "seconds": round(time.perf_counter() - start, 1)}  # fmt: skip
        append_jsonl(out, [row])
        print(f"{name}: {row['seconds']} s", flush=True)


def by_variant(rows: list[dict]) -> dict[str, list[dict]]:
    grouped = defaultdict(list)
    for row in rows:
        grouped[row["model"].split("/")[1]].append(row)
    return grouped


def swap_value(row: dict, donor: str, layers: tuple[int, ...], field: str) -> float:
    (swap,) = [s for s in row["swaps"] if s["donor"] == donor and tuple(s["layers"]) == layers]
    return swap[field]


def interval(ours: list[float], base: list[float]) -> str:
    difference, low, high = difference_interval(ours, base)
    return f"{difference:+.3f} [{low:+.3f}, {high:+.3f}]"


def summary(rows: list[dict]) -> str:
    grouped = by_variant(rows)
    variants = [v for v in VARIANTS if v in grouped]
    layers = len(grouped[variants[0]][0]["decoding"]["pooled"])
    lines = ["Where the terms decode (ridge R², held-out half; mean ± std over seeds; "
             "permutation p-value of the median seed):", "",
             "| variant | seeds | self-code, all layers | " + " | ".join(
                 f"layer {i}: self | layer {i}: other keys (best) | layer {i}: all keys"
                 for i in range(layers)) + " |",
             "|---" * (2 + 3 * layers) + "|"]  # fmt: skip
    for variant in variants:
        group = grouped[variant]
        cells = [mean_std([r["decoding"]["self_all_layers"]["test"] for r in group])]
        for layer in range(layers):
            keys = [r["decoding"]["by_key"][layer] for r in group]
            cells.append(mean_std([k[-1]["test"] for k in keys]))
            cells.append(mean_std([max(s["test"] for s in k[:-1]) for k in keys]))
            cells.append(mean_std([r["decoding"]["pooled"][layer]["test"] for r in group]))
        lines.append(f"| {variant} | {len(group)} | " + " | ".join(cells) + " |")
    last = (layers - 1,)
    every = tuple(range(layers))
    lines += ["", "Swaps of the final query's codes (fraction of the donor run's change "
              "reproduced; R² against the problem's own targets after the swap):", "",
              "| variant | layers swapped | moved, one-term donor | moved, random combination "
              "| R² own, clean | R² own, same-combination swap | R² own, one-term swap |",
              "|---|---|---|---|---|---|---|"]  # fmt: skip
    for variant in variants:
        group = grouped[variant]
        for chosen in [(i,) for i in range(layers)] + ([every] if layers > 1 else []):
            value = lambda d, f, c=chosen, g=group: [swap_value(r, d, c, f) for r in g]  # noqa: E731
            lines.append(
                f"| {variant} | {','.join(map(str, chosen))} | "
                f"{mean_std(value('one-term', 'moved'))} | "
                f"{mean_std(value('random-combination', 'moved'))} | "
                f"{mean_std(value('one-term', 'r2_own_clean'))} | "
                f"{mean_std(value('same-combination', 'r2_own'))} | "
                f"{mean_std(value('one-term', 'r2_own'))} |"
            )
    lines += [
        "",
        "Differences of the one-term swap's `moved` (layers "
        f"{','.join(map(str, last))}; 95% Welch interval over seeds):",
        "",
    ]
    moved = {v: [swap_value(r, "one-term", last, "moved") for r in grouped[v]] for v in variants}
    for a, b in (("hyla", "softmax"), ("hyla", "linear"), ("softmax", "linear")):
        if a in moved and b in moved:
            lines.append(f"- {a} − {b}: {interval(moved[a], moved[b])}")
    lines += ["", "Steering along each term bit's decoder direction (layer's final-query "
              "codes, all keys; mean over the K·L bits, then mean ± std over seeds):", "",
              "| variant | layer | edit norm | mean abs change | random directions | toward the "
              "flipped function | random directions | bits with p ≤ 0.05 |",
              "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for variant in variants:
        group = grouped[variant]
        for layer in range(layers):
            rows_of = [[s for s in r["steering"] if s["layer"] == layer] for r in group]
            mean = lambda f, rs=rows_of: [statistics.mean(s[f] for s in r) for r in rs]  # noqa: E731
            significant = sum(s["p_value"] <= 0.05 for r in rows_of for s in r)
            lines.append(
                f"| {variant} | {layer} | {mean_std(mean('edit_norm'))} | "
                f"{mean_std(mean('change'), 4)} | {mean_std(mean('random_change'), 4)} | "
                f"{mean_std(mean('toward'))} | {mean_std(mean('random_toward'))} | "
                f"{significant} of {sum(map(len, rows_of))} |"
            )
    seconds = sum(r["seconds"] for r in rows)
    lines += ["", f"{len(rows)} models, {rows[0]['examples']} problems per analysis, "
              f"{seconds / 60:.1f} min in all."]  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--group", default="fuzzy-logic-a1")
    parser.add_argument("--examples", type=int, default=512)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--summary", type=Path)
    args = parser.parse_args(argv)
    if args.summary:
        print(summary(read_jsonl(args.summary)))
        return 0
    if args.out is None:
        parser.error("give --out FILE.jsonl (or --summary FILE.jsonl)")
    torch.set_num_threads(1)
    run(args.group, args.examples, args.out)
    print(summary(read_jsonl(args.out)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
