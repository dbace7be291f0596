"""The side-by-side table of the official ``LogicLatents`` protocol (``r2_attn_latent``):
latentlens's zoo models (``zoo_logic_latents.py``'s JSON lines) beside models the official
code trained (``official_logic_latents.py``'s run directories), final and over training.

    python benchmarks/codes/logic_latents_table.py ZOO.jsonl RUN_DIR [RUN_DIR ...]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from latentlens.reports.seeds import mean_std

VARIANTS = ("softmax", "linear", "hyla")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("zoo", type=Path)
    parser.add_argument("runs", type=Path, nargs="+")
    args = parser.parse_args(argv)
    zoo = [json.loads(line) for line in args.zoo.read_text().splitlines() if line.strip()]
    runs = {}
    for run in args.runs:
        spec = json.loads((run / "spec.json").read_text())
        lines = (run / "records.jsonl").read_text().splitlines()
        runs[spec["variant"]] = (spec, [json.loads(line) for line in lines if line.strip()])
    steps = sorted({r["step"] for _, records in runs.values() for r in records})
    shown = [s for s in steps if s % 10_000 == 0]
    print(
        "| variant | latentlens zoo, 50,000 steps (3 seeds) | official code, seed 0: "
        + " | ".join(f"step {s:,}" for s in shown)
        + " | official, last step reached |"
    )
    print("|---" * (3 + len(shown)) + "|")
    for variant in VARIANTS:
        ours = [row["r2_attn_latent"] for row in zoo if f"/{variant}/" in row["model"]]
        spec, records = runs.get(variant, ({}, []))
        at = {r["step"]: r["r2_attn_latent"] for r in records}
        cells = [f"{at[s]:.3f}" if s in at else "–" for s in shown]
        last = f"{records[-1]['r2_attn_latent']:.3f} at {records[-1]['step']:,} of " \
               f"{spec['steps']:,}" if records else "not run"  # fmt: skip
        print(f"| {variant} | {mean_std(ours)} | " + " | ".join(cells) + f" | {last} |")
    print()
    print("| variant | official: test R² at the last step | official: OOD R² |")
    print("|---|---|---|")
    for variant in VARIANTS:
        if variant in runs:
            last = runs[variant][1][-1]
            print(f"| {variant} | {last['test_r2']:.3f} | {last['ood_r2']:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
