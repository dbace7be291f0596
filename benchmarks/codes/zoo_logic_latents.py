"""The official code's ``r2_attn_latent`` (:func:`latentlens.probes.official.logic_latents`)
of every fuzzy-logic model of the zoo, beside latentlens's own decoding of the same model
(held-out combinations, 2-fold, from its probe results), as JSON lines.

    python benchmarks/codes/zoo_logic_latents.py [--group fuzzy-logic-a1] [--out FILE.jsonl]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from latentlens import zoo
from latentlens.probes.official import logic_latents


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--group", default="fuzzy-logic-a1")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    rows = []
    for name in zoo.names():
        if not name.startswith(args.group + "/"):
            continue
        model, task = zoo.load(name, device="cpu")
        result = logic_latents(model, task)
        row = {"model": name, "steps": zoo.card(name)["training"]["steps"],
               "r2_attn_latent": result["r2_attn_latent"],
               "r2_per_target": result["r2_per_target"]}  # fmt: skip
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.out:
        args.out.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
