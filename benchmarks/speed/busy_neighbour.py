"""A training run beside a CPU-busy neighbour: how much slower it gets, with latentlens's
thread choice and with PyTorch's default.

    python benchmarks/speed/busy_neighbour.py [--steps 300] [--path eager]
        [--out benchmarks/results]

Trains the demo's model (fuzzy logic, D=128, batch 128) for ``--steps`` steps in a fresh
process, timing the steps alone (no evaluation, no start-up), alone and beside one
neighbour (a process spinning on one core), with threads chosen

- by latentlens (:mod:`latentlens.threads`: the CPUs free when the run starts);
- as PyTorch does (a thread per CPU, OpenMP's idle threads spinning a while);
- as PyTorch does, with ``OMP_WAIT_POLICY=PASSIVE`` (idle threads sleep at once).

``--path`` computes the step another way (``fused-compile``: the fused kernels, compiled;
their sums are the same on any thread count, so latentlens may drop a thread for them as
for eager). Prints steps/s and the slowdown beside the neighbour (target for latentlens:
at most 2.5x on 2 cores), and draws ``busy_neighbour.png``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

NEIGHBOUR = "while True:\n    pass\n"
MODES = ("latentlens", "pytorch default", "pytorch, passive")


def worker(mode: str, steps: int, path: str) -> None:
    """Train in this process and print its steps/s as JSON (the benchmark's subprocess)."""
    if mode == "pytorch, passive":
        os.environ["OMP_WAIT_POLICY"] = "PASSIVE"  # before torch is imported
    import torch

    from latentlens.threads import available_cpus, use_threads, work_of
    from latentlens.training import TrainConfig, Trainer, model_for_task
    from latentlens.training.fast_path import options_of

    config = Trainer.resolve_config(
        "fuzzy-logic",
        model_for_task("fuzzy-logic", attention="softmax", attention_dropout=0.0),
        TrainConfig.for_task("fuzzy-logic", steps=steps, eval_every=steps, eval_examples=128),
    )
    if mode == "latentlens":
        threads = use_threads(work=work_of(config))
    else:
        threads = available_cpus()
        torch.set_num_threads(threads)
    with tempfile.TemporaryDirectory() as folder:
        trainer = Trainer.create(
            Path(folder) / "run", config, device="cpu", quiet=True, **options_of(path)
        )
        for _ in range(10):  # warm-up: allocator, first kernels
            trainer.train_step()
        start = time.perf_counter()
        for _ in range(steps):
            trainer.train_step()
        float(trainer.train_step())  # a host sync before the clock stops
        elapsed = time.perf_counter() - start
        trainer.close()
    print(json.dumps({"steps_per_s": (steps + 1) / elapsed, "threads": threads}))


def measure(mode: str, steps: int, neighbour: bool, path: str) -> dict:
    """One timed run in a fresh process, beside a fresh spinning neighbour if asked."""
    spinner = subprocess.Popen([sys.executable, "-c", NEIGHBOUR]) if neighbour else None
    try:
        if spinner is not None:
            time.sleep(1.0)  # the neighbour is running before the run chooses its threads
        done = subprocess.run(
            [sys.executable, __file__, "--worker", mode, "--steps", str(steps), "--path", path],
            capture_output=True, text=True, check=True, timeout=1800,
        )  # fmt: skip
    finally:
        if spinner is not None:
            spinner.kill()
            spinner.wait()
    return json.loads(done.stdout.strip().splitlines()[-1])


def draw(results: dict, out: Path, path: str) -> Path:
    from matplotlib.figure import Figure

    figure = Figure(figsize=(6.4, 3.6), layout="constrained")
    ax = figure.subplots()
    for index, mode in enumerate(MODES):
        alone, busy = results[mode]["alone"], results[mode]["busy"]
        bars = ax.bar([index - 0.2, index + 0.2], [alone["steps_per_s"], busy["steps_per_s"]],
                      0.4, color=["C0", "C1"])  # fmt: skip
        slowdown = alone["steps_per_s"] / busy["steps_per_s"]
        top = (index + 0.2, bars[1].get_height())
        ax.annotate(f"{slowdown:.1f}x slower", top, ha="center", va="bottom", xytext=(0, 2),
                    textcoords="offset points")  # fmt: skip
    names = [
        f"{m}\n({results[m]['alone']['threads']} / {results[m]['busy']['threads']} threads)"
        for m in MODES
    ]
    ax.set_xticks(range(len(MODES)), names)
    ax.set_ylabel("training steps/s")
    ax.legend(handles=ax.patches[:2], labels=["alone", "beside a busy neighbour"], frameon=False)
    ax.set_title(f"demo model ({path}) on {os.cpu_count()} CPUs, one neighbour spinning on a core")
    figure_path = out / ("busy_neighbour.png" if path == "eager" else f"busy_neighbour_{path}.png")
    out.mkdir(parents=True, exist_ok=True)
    figure.savefig(figure_path, dpi=150)
    return figure_path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--path", default="eager", choices=["eager", "fused", "fused-compile"])
    parser.add_argument("--worker", choices=MODES, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.worker, args.steps, args.path)
        return 0
    results = {
        mode: {
            "alone": measure(mode, args.steps, False, args.path),
            "busy": measure(mode, args.steps, True, args.path),
        }  # fmt: skip
        for mode in MODES
    }
    print(f"{'threads chosen by':<18}{'alone':>14}{'beside neighbour':>20}{'slowdown':>10}")
    for mode in MODES:
        alone, busy = results[mode]["alone"], results[mode]["busy"]
        print(f"{mode:<18}{alone['steps_per_s']:>8.1f} ({alone['threads']} t)"
              f"{busy['steps_per_s']:>14.1f} ({busy['threads']} t)"
              f"{alone['steps_per_s'] / busy['steps_per_s']:>9.2f}x")  # fmt: skip
    print(
        f"target: latentlens at most 2.5x slower beside one neighbour; figure: "
        f"{draw(results, args.out, args.path)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
