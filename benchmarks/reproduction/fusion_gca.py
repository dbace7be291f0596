"""FUSION and the encoder-decoder layer connection (GCA) on compositional translation.

Implements the comparisons of docs/methods/models.md on latentlens's synthetic translation
task (CoGnition itself is not available offline): the baseline encoder-decoder against
fuse-attention in the encoder, the decoder and both (CTER at instance and aggregate level,
BLEU), the layer connection with the ``original`` and the ``gca`` initialisation, and the
fuse weights at the end of training and over it: do they leave the uniform weighting, and
do they differ by layer? Prints mean ± std over seeds beside the paper's relative CTER
changes; results (JSON), the run directories and figures go to ``--out``.

    python benchmarks/reproduction/fusion_gca.py --size cpu [--seeds 3] [--out runs/fusion-gca-cpu]
    python benchmarks/reproduction/fusion_gca.py --size gpu --device cuda

Both sizes use the task's defaults: the synthetic CoGnition twin, 20,000 training sentences,
2,160 CG compounds in 5 contexts each. ``gpu`` trains the encoder-decoder of the reference
(3 + 3 layers, d_model 128) for the task's default 10,000 steps of batch 128. ``cpu`` halves
the width and trains 1,500 steps of batch 64 (about 2 minutes a run on one core). The last
evaluation decodes the whole CG test; earlier ones a spread fifth of its compounds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from latentlens.figures import fuse_weight_curves, load_tracked, routing_evolution, save_figure
from latentlens.figures.routing import load_fuse_weights
from latentlens.probes import tracking_callbacks
from latentlens.reports.seeds import mean_std
from latentlens.training import (
    RunDirectory,
    TrainConfig,
    Trainer,
    model_for_task,
    train_or_resume,
)
from latentlens.training.run_dir import read_jsonl

SIZES: dict[str, dict[str, Any]] = {
    "cpu": dict(
        task=dict(),
        model=dict(d_model=64, n_heads=4, qk_dim=64, v_dim=64, d_mlp=128),
        train=dict(
            steps=1_500, batch_size=64, lr=2e-3, warmup_steps=100, eval_every=500, eval_examples=512
        ),
    ),
    "gpu": dict(
        task=dict(),
        model=dict(),
        train=dict(batch_size=128, eval_every=1_000, eval_examples=2_048),
    ),
}
SYSTEMS: dict[str, dict[str, str]] = {
    "baseline": dict(fuse="none", connection="none"),
    "fusion-encoder": dict(fuse="encoder", connection="none"),
    "fusion-decoder": dict(fuse="decoder", connection="none"),
    "fusion-both": dict(fuse="both", connection="none"),
    "connection-original": dict(fuse="none", connection="original"),
    "connection-gca": dict(fuse="none", connection="gca"),
}
# docs/methods/numbers.md: CoGnition CTER relative to the baseline, in percent
PAPER_RELATIVE_CTER = {
    "fusion-encoder": (-7.2, -9.6),
    "fusion-decoder": (-2.6, -4.1),
    "fusion-both": (-8.4, -12.6),
}
QUALITY = ("cter_instance", "cter_aggregate", "bleu_cg", "bleu_test")
SUBSET_QUALITY = tuple(
    f"cter_{s}_{level}" for s in ("NP", "VP", "PP") for level in ("instance", "aggregate")
)


def run_config(system: str, seed: int, size: dict) -> dict[str, Any]:
    """The resolved config of one run (``Trainer.resolve_config``)."""
    model = "transformer" if SYSTEMS[system]["fuse"] == "none" else "fusion"
    return Trainer.resolve_config(
        "translation",
        model_for_task("translation", size["task"], model, **SYSTEMS[system], **size["model"]),
        TrainConfig.for_task("translation", seed=seed, **size["train"]),
        size["task"],
    )


def train_one(out: Path, system: str, seed: int, size: dict, device: str) -> Path:
    """Train one run in ``out/runs`` (reused if finished, resumed if interrupted)."""
    config = run_config(system, seed, size)
    run = out / "runs" / f"{system}-s{seed}"
    return train_or_resume(run, config, tracking_callbacks(config), device=device, quiet=True)


def final_quality(run: Path) -> dict[str, float]:
    records = read_jsonl(RunDirectory(run).tracking / "translation_quality.jsonl")
    return {key: records[-1][key] for key in (*QUALITY, *SUBSET_QUALITY)}


def fuse_summary(run: Path) -> dict[str, Any]:
    """Per fused layer: the mean weights per source at the first record (step 0, the
    initialisation, in runs since the recorders record it) and the last, and their largest
    distance from uniform (1 / number of sources)."""
    summary = {}
    for (side, layer), (steps, values) in sorted(load_fuse_weights(run).items()):
        if values.shape[1] < 2:
            continue  # block 0 fuses the embedding alone: its weight is 1
        uniform = 1.0 / values.shape[1]
        summary[f"{side}.{layer}"] = {
            "first_step": int(steps[0]),
            "first": np.round(values[0].astype(float), 3).tolist(),
            "last": np.round(values[-1].astype(float), 3).tolist(),
            "first_from_uniform": float(np.abs(values[0] - uniform).max()),
            "last_from_uniform": float(np.abs(values[-1] - uniform).max()),
        }
    return summary


def routing_summary(run: Path) -> dict[str, Any]:
    tracked = load_tracked(RunDirectory(run).tracking / "routing_matrix.safetensors")
    values = tracked.values
    return {
        "first_step": int(tracked.steps[0]),
        "first": np.round(values[0].astype(float), 3).tolist(),
        "last": np.round(values[-1].astype(float), 3).tolist(),
        "moved": float(np.abs(values[-1] - values[0]).max()),
    }


def summarise(runs: dict[str, list[Path]]) -> dict[str, Any]:
    """By system: every seed's final quality, and its fuse or routing summary if it has one."""
    systems = {}
    for system, paths in runs.items():
        entry: dict[str, Any] = {"quality": [final_quality(p) for p in paths]}
        if SYSTEMS[system]["fuse"] != "none":
            entry["fuse"] = [fuse_summary(p) for p in paths]
        if SYSTEMS[system]["connection"] != "none":
            entry["routing"] = [routing_summary(p) for p in paths]
        systems[system] = entry
    return systems


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="cpu", choices=sorted(SIZES))
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--steps", type=int, help="override the size's training steps")
    parser.add_argument("--only", nargs="*", choices=sorted(SYSTEMS), default=sorted(SYSTEMS))
    args = parser.parse_args()
    size = SIZES[args.size]
    if args.steps:
        every = max(args.steps // 4, 1)
        size = {**size, "train": {**size["train"], "steps": args.steps, "eval_every": every}}
    out = args.out or Path(f"runs/fusion-gca-{args.size}")
    out.mkdir(parents=True, exist_ok=True)
    systems = [s for s in SYSTEMS if s in args.only]
    start = time.perf_counter()
    runs: dict[str, list[Path]] = {}
    for system in systems:
        for seed in range(args.seeds):
            print(f"training {system}, seed {seed} ...", flush=True)
            runs.setdefault(system, []).append(train_one(out, system, seed, size, args.device))
    results = {"size": args.size, "seeds": args.seeds, "systems": summarise(runs)}
    results["wall_s"] = round(time.perf_counter() - start, 1)
    (out / "results.json").write_text(json.dumps(results, indent=2))
    print_tables(results)
    for system in ("fusion-both", "connection-gca"):
        if system in runs:
            first = runs[system][0]
            if system == "fusion-both":
                save_figure(fuse_weight_curves(first), out / "fuse_weights", ("png", "svg"))
                save_figure(
                    fuse_weight_curves(first, heatmaps=True),
                    out / "fuse_weights_heatmap",
                    ("png", "svg"),
                )
            else:
                save_figure(routing_evolution(first), out / "routing_gca", ("png", "svg"))
    print(f"\nresults, runs and figures in {out} ({results['wall_s']:.0f} s)")


def print_tables(results: dict[str, Any]) -> None:
    systems = results["systems"]
    print(f"\ntranslation ({results['size']} size, {results['seeds']} seeds): mean ± std")
    print(f"{'system':<21}" + "".join(f"{k:>18}" for k in QUALITY) + "   paper ΔCTER inst/aggr")
    base = systems.get("baseline")
    for system, entry in systems.items():
        cells = [mean_std([q[k] for q in entry["quality"]]) for k in QUALITY]
        paper = PAPER_RELATIVE_CTER.get(system)
        relative = ""
        if base and paper:
            ours = [
                100
                * (
                    statistics.mean(q[k] for q in entry["quality"])
                    / max(statistics.mean(q[k] for q in base["quality"]), 1e-9)
                    - 1
                )
                for k in ("cter_instance", "cter_aggregate")
            ]
            relative = (
                f"   ours {ours[0]:+.1f}%/{ours[1]:+.1f}%, paper {paper[0]:+.1f}%/{paper[1]:+.1f}%"
            )
        print(f"{system:<21}" + "".join(f"{c:>18}" for c in cells) + relative)
    for system, entry in systems.items():
        if "fuse" not in entry:
            continue
        print(f"\nfuse weights of {system} (seed 0, mean over batch, heads, positions):")
        for layer, s in entry["fuse"][0].items():
            print(f"  {layer:<10} step {s['first_step']}: {s['first']}  end: {s['last']}")
        for layer in entry["fuse"][0]:
            gaps = [seed_summary[layer]["last_from_uniform"] for seed_summary in entry["fuse"]]
            print(f"  {layer:<10} max |w - uniform| at the end over seeds: {mean_std(gaps)}")
    for system, entry in systems.items():
        if "routing" in entry:
            moved = [r["moved"] for r in entry["routing"]]
            first = entry["routing"][0]["first_step"]
            print(
                f"\nrouting matrix of {system}: largest change from step {first} to the end "
                f"{mean_std(moved)}; seed 0 at the end: {entry['routing'][0]['last']}"
            )


if __name__ == "__main__":
    main()
