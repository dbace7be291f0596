"""Swaps of SRAVEN's final-query codes (:mod:`latentlens.probes.sraven_swaps`) on trained
SRAVEN runs: one-rule, random-combination and same-combination donors, each layer alone
and all layers, on the held-out rule combinations; then a table over the runs.

    python benchmarks/codes/sraven_code_swaps.py RUN_DIR ... [--examples 1024]
        --out FILE.jsonl          # one line per run (resumes: runs already there skip)
    python benchmarks/codes/sraven_code_swaps.py --summary FILE.jsonl   # the table, markdown
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from latentlens.models.config import VARIANTS
from latentlens.probes.sraven_swaps import sraven_code_swaps
from latentlens.training import Trainer
from latentlens.training.run_dir import append_jsonl, read_jsonl


def run(runs: list[Path], examples: int, out: Path) -> None:
    done = {row["run"] for row in read_jsonl(out)} if out.exists() else set()
    for path in runs:
        shown = str(path).replace(str(Path.home()), "~", 1)  # a user's path, not this machine's
        if shown in done:
            continue
        start = time.perf_counter()
        trainer = Trainer.load(path, device="cpu")
        swaps = sraven_code_swaps(trainer.model, trainer.task, examples=examples)
        ood = next(r for r in reversed(trainer.run_dir.read_metrics()) if r["split"] == "ood")
        row = {"run": shown, "variant": trainer.config["model"]["attention"],
               "step": trainer.step, "ood_accuracy": ood["accuracy"], "examples": examples,
               "swaps": swaps, "seconds": round(time.perf_counter() - start, 1)}  # fmt: skip
        append_jsonl(out, [row])
        print(f"{path}: {row['seconds']} s", flush=True)


def pick(row: dict, donor: str, layers: tuple[int, ...]) -> dict:
    (swap,) = [s for s in row["swaps"] if s["donor"] == donor and tuple(s["layers"]) == layers]
    return swap


def with_error(value: float, error: float) -> str:
    return f"{value:.2f} ± {error:.2f}"


def finding(rows: list[dict]) -> str:
    """Per model, the single layer whose one-rule swap raises the donor rule's answers most,
    beside the same-combination control there: the section's opening sentence."""
    parts = []
    for row in rows:
        singles = [s for s in row["swaps"] if s["donor"] == "one-rule" and len(s["layers"]) == 1]
        best = max(singles, key=lambda s: s["donor_swapped"] - s["donor_clean"])
        (layer,) = best["layers"]
        same = pick(row, "same-combination", (layer,))
        parts.append(
            f"{VARIANTS[row['variant']].paper_name}, layer {layer}: "
            f"{best['donor_clean']:.2f} → {best['donor_swapped']:.2f} ± "
            f"{best['donor_swapped_se']:.2f} (kept rules right {best['kept_clean']:.2f} → "
            f"{best['kept_swapped']:.2f}; the same rules' codes from other panels "
            f"{same['kept_clean']:.2f} → {same['kept_swapped']:.2f})"
        )
    return (
        "**Finding.** Swapping the final queries' codes for those of a puzzle whose rules "
        "differ in one feature, in the layer where it moves most, changes how often a model "
        "answers its own puzzle with the donor's rule as follows: " + "; ".join(parts) + "."
    )


def summary(rows: list[dict]) -> str:
    """Per run and swapped layers: the donor rule's answer given (clean → one-rule swap,
    beside the random-combination swap), the puzzle's own answer kept on the changed
    features, and right answers where the rule is kept, under the one-rule swap and the
    same-combination control."""
    lines = [
        "| model | layers swapped | donor rule's answer, clean → one-rule swap | same, "
        "random combination | own answer, clean → one-rule swap | kept rules right, "
        "one-rule swap | kept rules right, same-combination swap |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        layers = sorted({tuple(s["layers"]) for s in row["swaps"]}, key=lambda x: (len(x), x))
        name = f"{VARIANTS[row['variant']].paper_name} (step {row['step']:,})"
        for swapped in layers:
            one, other = pick(row, "one-rule", swapped), pick(row, "random-combination", swapped)
            same = pick(row, "same-combination", swapped)
            shown = "all" if len(swapped) > 1 else str(swapped[0])
            lines.append(
                f"| {name} | {shown} | {one['donor_clean']:.2f} → "
                f"{with_error(one['donor_swapped'], one['donor_swapped_se'])} | "
                f"{other['donor_clean']:.2f} → "
                f"{with_error(other['donor_swapped'], other['donor_swapped_se'])} | "
                f"{one['own_clean']:.2f} → {with_error(one['own_swapped'], one['own_swapped_se'])}"
                f" | {one['kept_clean']:.2f} → "
                f"{with_error(one['kept_swapped'], one['kept_swapped_se'])} | "
                f"{same['kept_clean']:.2f} → "
                f"{with_error(same['kept_swapped'], same['kept_swapped_se'])} |"
            )
    first = rows[0]["swaps"][0]
    lines += [
        "",
        f"{rows[0]['examples']:,} unpermuted puzzles of the held-out rule combinations per "
        f"model; {first['pairs']:,} (puzzle, feature) pairs whose one-rule donor answers the "
        "puzzle's last row differently (± standard error over 16 parts of the puzzles).",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="*", type=Path, help="SRAVEN run directories")
    parser.add_argument("--examples", type=int, default=1_024)
    parser.add_argument("--out", type=Path, help="JSONL of results (appended, resumable)")
    parser.add_argument("--summary", type=Path, help="print the table of a results JSONL")
    args = parser.parse_args(argv)
    if args.summary is not None:
        rows = read_jsonl(args.summary)
        print(f"{finding(rows)}\n\n{summary(rows)}")
        return 0
    if not args.runs or args.out is None:
        parser.error("give RUN_DIR ... and --out FILE.jsonl, or --summary FILE.jsonl")
    run(args.runs, args.examples, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
