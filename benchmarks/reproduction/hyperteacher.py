"""Reproduce the table of docs/methods/numbers.md (seed 003's paper).

Trains the hypernetwork transformer and the vanilla transformer on modular in-context
regression with the Connected+, Connected and Disconnected supports, several seeds each,
decoding z from every layer over training (fit in-distribution, R² out-of-distribution),
and prints mean ± std beside the paper's numbers. Results (JSON), the run directories and
the figures go to ``--out``.

    python benchmarks/reproduction/hyperteacher.py --size cpu [--seeds 3]
        [--out runs/hyperteacher-cpu]
    python benchmarks/reproduction/hyperteacher.py --size gpu --device cuda   # 100k steps

Sizes: ``gpu`` is the reference's setup (batch 128, lr 1e-3, 100,000 steps, R² over 16,000
sequences). ``cpu`` keeps the models and the task but trains 1,000 steps of batch 64 at lr
3e-3 and evaluates on 1,024 sequences, so that 18 runs fit a 2-core CPU in about 25
minutes: its numbers show the direction of each effect, not the paper's converged values.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch

from latentlens.figures import decoding_curves, metric_curves, save_figure
from latentlens.probes import read_decoding, tracking_callbacks
from latentlens.reports.seeds import mean_std
from latentlens.training import (
    TrainConfig,
    Trainer,
    model_for_task,
    train_or_resume,
)

SIZES: dict[str, dict[str, Any]] = {
    "cpu": dict(steps=1_000, batch_size=64, lr=3e-3, warmup_steps=100, eval_every=250,
                eval_examples=1_024),
    "gpu": dict(steps=100_000, batch_size=128, lr=1e-3, warmup_steps=1_000, eval_every=2_000,
                eval_examples=16_000),
}  # fmt: skip
MODELS = {"hypernetwork": "hypernetwork transformer", "transformer": "vanilla transformer"}
SUPPORTS = ("connected-plus", "connected", "disconnected")
# docs/methods/numbers.md (read from the paper's figures)
PAPER = {
    ("hypernetwork", "ood_r2"): 0.987,
    ("transformer", "ood_r2"): 0.871,
    ("hypernetwork", "id_r2"): 0.9998,
    ("transformer", "id_r2"): 0.998,
    ("hypernetwork", "probe_r2"): 0.875,
    ("transformer", "probe_r2"): 0.876,
    ("hypernetwork", "control_r2"): -0.29,
    ("transformer", "control_r2"): 0.16,
    ("hypernetwork", "ood_r2_connected"): 0.90,
    ("transformer", "ood_r2_connected"): 0.86,
    ("hypernetwork", "ood_r2_disconnected"): 0.78,
    ("transformer", "ood_r2_disconnected"): 0.86,
}
ROWS = (
    ("ood_r2", "OOD R² (Connected+)"),
    ("peak_ood_r2", "peak OOD R² over training"),
    ("id_r2", "in-distribution R²"),
    ("probe_r2", "probe R² of z, OOD (best layer)"),
    ("bottleneck_r2", "probe R² of z from ẑ, OOD"),
    ("control_r2", "R² on the random control"),
    ("ood_r2_connected", "OOD R², Connected"),
    ("ood_r2_disconnected", "OOD R², Disconnected"),
)


def run_config(kind: str, support: str, seed: int, size: dict) -> dict[str, Any]:
    """The resolved config of one run (``Trainer.resolve_config``)."""
    task = {"support": support}
    return Trainer.resolve_config(
        "modular-icl",
        model_for_task("modular-icl", task, kind),
        TrainConfig.for_task("modular-icl", kind, seed=seed, **size),
        task,
    )


def train_one(out: Path, kind: str, support: str, seed: int, size: dict, device: str) -> dict:
    """Train one run (resume an unfinished one, reuse a finished one in ``out``) and return
    its final numbers."""
    run = out / "runs" / f"{kind}-{support}-s{seed}"
    config = run_config(kind, support, seed, size)
    train_or_resume(run, config, tracking_callbacks(config), device=device, quiet=True)
    return final_numbers(run)


def final_numbers(run: Path) -> dict[str, Any]:
    """A finished run's R² (final and peak OOD, in-distribution, random control) and its
    best z probes (any layer's residual stream; the bottleneck ẑ), at the last step."""
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    last_step = metrics[-1]["step"]
    final = {r["split"]: r["r2"] for r in metrics if r["step"] == last_step}
    decoding = [r for r in read_decoding(run) if r["step"] == last_step]
    residual = [r["r2_ood"] for r in decoding if r["site"].endswith("hook_resid_post")]
    bottleneck = [r["r2_ood"] for r in decoding if r["site"] == "hook_task_latent"]
    return {
        "run": str(run),
        "ood_r2": final["ood"],
        "peak_ood_r2": max(r["r2"] for r in metrics if r["split"] == "ood"),
        "id_r2": final["train"],
        "control_r2": final["control"],
        "probe_r2": max(residual),
        "bottleneck_r2": bottleneck[0] if bottleneck else None,
    }


def table_of(results: dict[str, dict[str, list[dict]]]) -> dict[str, dict[str, str]]:
    """mean ± std over seeds of every row of :data:`ROWS`, by model kind; ``results`` holds
    :func:`final_numbers` by kind, support and seed."""
    table: dict[str, dict[str, str]] = {}
    for kind in MODELS:
        plus = results[kind]["connected-plus"]
        column = {key: mean_std([r[key] for r in plus]) for key, _ in ROWS[:6]}
        for support in ("connected", "disconnected"):
            column[f"ood_r2_{support}"] = mean_std([r["ood_r2"] for r in results[kind][support]])
        table[kind] = column
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="cpu")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--out", type=Path, help="default: runs/hyperteacher-SIZE")
    args = parser.parse_args()
    out = args.out or Path(f"runs/hyperteacher-{args.size}")
    size = SIZES[args.size]
    start = time.perf_counter()
    results: dict[str, dict[str, list[dict]]] = {}
    for kind in MODELS:
        for support in SUPPORTS:
            for seed in range(args.seeds):
                print(f"training {kind} on {support}, seed {seed} ...", file=sys.stderr)
                result = train_one(out, kind, support, seed, size, args.device)
                results.setdefault(kind, {}).setdefault(support, []).append(result)

    table = table_of(results)

    wall = time.perf_counter() - start
    print(
        f"\nmodular in-context regression, size {args.size} ({size['steps']} steps, batch "
        f"{size['batch_size']}), {args.seeds} seeds, torch {torch.__version__}, "
        f"{wall / 60:.1f} min\n"
    )
    header = f"{'quantity':<34}" + "".join(f"{MODELS[k]:>28}{'paper':>8}" for k in MODELS)
    print(header)
    for key, label in ROWS:
        cells = "".join(
            f"{table[k][key]:>28}{PAPER.get((k, key), float('nan')):>8.3f}" for k in MODELS
        )
        print(f"{label:<34}{cells}")

    out.mkdir(parents=True, exist_ok=True)
    summary = {"size": args.size, "train": size, "seeds": args.seeds, "wall_s": wall,
               "table": table, "paper": {f"{k}/{q}": v for (k, q), v in PAPER.items()},
               "runs": results}  # fmt: skip
    (out / "results.json").write_text(json.dumps(summary, indent=2))
    for support in SUPPORTS:  # the first seed's curves, per support
        runs = {MODELS[k]: results[k][support][0]["run"] for k in MODELS}
        figure = metric_curves(runs, metric="r2", ylim=(-1.0, 1.0))
        figure.suptitle(f"modular ICL, {support} support")
        save_figure(figure, out / "figures" / f"r2-{support}")
        save_figure(decoding_curves(runs), out / "figures" / f"decoding-{support}")
    print(f"\nresults: {out / 'results.json'}; figures: {out / 'figures'}")


if __name__ == "__main__":
    main()
