"""Fig. A8 on the fuzzy-logic zoo: do several heads carry a term combination together, on
single examples and not only on average? (:mod:`latentlens.probes.head_sharing`)

    python benchmarks/codes/head_sharing_zoo.py --out DIR [--group fuzzy-logic-a1] [--examples 2048]

For every model: the self-code of the last layer (the final query on itself, fixed query
input, training combinations: the official protocol's codes) of ``--examples`` problems,
grouped by term combination. Writes ``DIR/head_sharing.jsonl`` (one line per model),
``DIR/head_sharing.png`` (seed 1 of each variant: HYLA's seed 0 has constant self-codes)
and prints a markdown table over seeds.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np
import torch

from latentlens import zoo
from latentlens.figures.head_sharing import head_sharing_figure
from latentlens.figures.save import save_figure
from latentlens.models import pattern_hook_name
from latentlens.probes import extract
from latentlens.probes.head_sharing import head_sharing
from latentlens.reports.seeds import mean_std
from latentlens.training.run_dir import append_jsonl, read_jsonl

VARIANTS = ("softmax", "linear", "hyla")
SAMPLE = 40


def last_self_codes(model, task, examples: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The last layer's self-codes ``[n, heads]`` and the combinations ``[n]``."""
    name = pattern_hook_name(len(model.blocks) - 1)
    got = extract(
        model, task, "train", [name], examples, select={name: lambda a, b: a[:, :, -1, -1]},
        sample_options={"inputs": "fixed_query"},
    )  # fmt: skip
    return got.activations[name], got.labels["combination"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--group", default="fuzzy-logic-a1")
    parser.add_argument("--examples", type=int, default=2048)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    path = args.out / "head_sharing.jsonl"
    path.unlink(missing_ok=True)
    drawn = {}
    for name in zoo.names():
        if not name.startswith(args.group + "/"):
            continue
        model, task = zoo.load(name, device="cpu")
        codes, groups = last_self_codes(model, task, args.examples)
        result = head_sharing(codes, groups)
        append_jsonl(path, [{"model": name, **result}])
        if name.endswith("/s1"):
            drawn[name.split("/")[1]] = (result, codes[:SAMPLE].numpy())
    ordered = {v: drawn[v] for v in VARIANTS if v in drawn}
    save_figure(head_sharing_figure(ordered, "term combination"), args.out / "head_sharing",
                formats=("png",))  # fmt: skip
    rows = read_jsonl(path)
    print("| variant | effective heads per example | examples with ≥ 2 active heads | "
          "effective heads of the mean code per combination | effective heads the "
          "combinations differ by |")  # fmt: skip
    print("|---|---|---|---|---|")
    for variant in VARIANTS:
        group = [r for r in rows if f"/{variant}/" in r["model"]]
        per_combination = [float(np.mean(r["group_participation"])) for r in group]
        varied = [float(np.nanmean(r["variation_participation"])) for r in group
                  if not all(math.isnan(v) for v in r["variation_participation"])]  # fmt: skip
        print(f"| {variant} | {mean_std([r['participation_mean'] for r in group], 2)} | "
              f"{mean_std([r['share_two_or_more_active'] for r in group], 2)} | "
              f"{mean_std(per_combination, 2)} | {mean_std(varied, 2)} "
              f"({len(varied)} seeds) |")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
