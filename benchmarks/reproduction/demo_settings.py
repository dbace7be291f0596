"""The search behind ``latentlens demo``'s settings: which model size and learning rate let
softmax, linear and HYLA attention all train healthily on fuzzy logic in the demo's steps.

    python benchmarks/reproduction/demo_settings.py [--steps 3000] [--cpus 2]
        [--out runs/demo-settings]

Trains the grid through ``latentlens.sweep`` (Ray, one CPU per cell): HYLA at the
reference's default size (D=128, MLP 256) and at half its width (the demo's size before,
D=64, MLP 128), lr 1e-3 (the reference's) and 3e-3 (the paper's sweep), seeds 2024, 1 and
2; softmax and linear attention at the reference size and both learning rates, seed 2024.
Prints, per cell, the final test R² (held-out combinations, ± standard error over the
evaluation batches) and the share of HYLA's layer-0 value-network outputs that are exactly
zero at the query: a layer is dead (``latentlens.probes.health``) from 99%.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from latentlens.probes.health import DEAD_SHARE
from latentlens.sweep import SweepSpec, run_sweep
from latentlens.training import Trainer

HALF_WIDTH = {"d_model": 64, "d_mlp": 128}


def grids(steps: int) -> list[tuple[str, SweepSpec]]:
    train = {"steps": steps, "batch_size": 128, "warmup_steps": 100, "eval_every": steps,
             "eval_examples": 2048}  # fmt: skip

    def grid(model: dict, axes: dict) -> SweepSpec:
        return SweepSpec.from_dict({
            "task": "fuzzy-logic",
            "base": {"model": {"attention_dropout": 0.0, **model}, "train": train},
            "axes": axes,
        })  # fmt: skip

    lrs = [1e-3, 3e-3]
    return [
        ("reference size", grid({}, {"model.attention": ["hyla"], "train.lr": lrs,
                                     "train.seed": [2024, 1, 2]})),
        ("half width", grid(HALF_WIDTH, {"model.attention": ["hyla"], "train.lr": lrs,
                                         "train.seed": [2024, 1, 2]})),
        ("reference size", grid({}, {"model.attention": ["softmax", "linear"], "train.lr": lrs,
                                     "train.seed": [2024]})),
    ]  # fmt: skip


@torch.no_grad()
def zero_share(trainer: Trainer) -> float | None:
    """Share of layer 0's value-network outputs at the query that are exactly 0."""
    name = "blocks.0.attn.hook_vnet_post"
    if name not in trainer.model.hook_dict:
        return None
    batch = trainer.evaluation_set("test")
    _, cache = trainer.model.eval().run_with_cache(
        *trainer.task.model_inputs(batch), names_filter=[name]
    )
    return float((cache[name][:, -1] == 0).float().mean())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--cpus", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("runs/demo-settings"))
    args = parser.parse_args(argv)
    rows = []
    for index, (size, spec) in enumerate(grids(args.steps)):
        out = args.out / f"grid{index}"
        run_sweep(spec, out, num_cpus=args.cpus)
        for cell in spec.cells():
            trainer = Trainer.load(out / cell.name, device="cpu")
            test = trainer.evaluate("test", errors=True)
            zeros = zero_share(trainer)
            rows.append((trainer.config["model"]["attention"], size, trainer.train_cfg.lr,
                         trainer.train_cfg.seed, test["r2"], test["r2_se"], zeros))  # fmt: skip
    print(f"{'attention':<10}{'size':<16}{'lr':>8}{'seed':>6}{'test R²':>18}"
          f"{'layer-0 zeros':>15}  state")  # fmt: skip
    for attention, size, lr, seed, r2, se, zeros in rows:
        state = "" if zeros is None else ("dead" if zeros >= DEAD_SHARE else "alive")
        shown = "-" if zeros is None else f"{zeros:.3f}"
        print(f"{attention:<10}{size:<16}{lr:>8g}{seed:>6}{r2:>11.3f} ± {se:.3f}{shown:>15}  "
              f"{state}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
