"""Where a training step's time goes: the Trainer's step under torch.profiler.

Prints the wall time per step, and on a GPU the kernels per step and the time the device
spends in them. Busy time well below the wall time means the step waits on launches (cut
kernels: graphs, fusion); busy time close to it means arithmetic or memory traffic (cut
work: bf16, fewer positions). Then the kernels (on a CPU, the ops) that take the most time
per step. With ``--cuda-graphs`` the profiler sees the kernels a replay runs.

    python benchmarks/speed/step_profile.py [--task sraven] [--attention hyla] [--device auto]
                                      [--compile] [--fused] [--cuda-graphs]
                                      [--precision fp32|tf32|bf16]
                                      [--steps 20] [--top 25]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from pathlib import Path

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from latentlens.devices import resolve_device  # noqa: E402
from latentlens.training import PRECISIONS, TrainConfig, Trainer, model_for_task  # noqa: E402
from speed.train_throughput import synchronize  # noqa: E402

WARMUP_STEPS = 5  # past the graph capture (3 warm-up calls) and compilation


def per_step_table(events: list, steps: int) -> list[tuple[str, float, float]]:
    """``(name, calls per step, microseconds per step)`` of profiler ``events``, grouped
    by name, the costliest first."""
    calls: dict[str, int] = defaultdict(int)
    micros: dict[str, float] = defaultdict(float)
    for event in events:
        calls[event.name] += 1
        micros[event.name] += event.time_range.elapsed_us()
    rows = [(name, calls[name] / steps, micros[name] / steps) for name in calls]
    return sorted(rows, key=lambda row: -row[2])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="sraven", choices=["fuzzy-logic", "sraven"])
    parser.add_argument("--attention", default="hyla")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--fused", action="store_true", help="the fused CPU kernels")
    parser.add_argument("--cuda-graphs", action="store_true")
    parser.add_argument("--precision", default="fp32", choices=PRECISIONS)
    parser.add_argument("--steps", type=int, default=20, help="profiled steps")
    parser.add_argument("--top", type=int, default=25, help="rows of the table")
    args = parser.parse_args()
    device = resolve_device(args.device)
    config = Trainer.resolve_config(
        args.task,
        model_for_task(args.task, attention=args.attention),
        TrainConfig.for_task(args.task, batch_size=128, precision=args.precision),
    )
    trainer = Trainer(
        None,
        config,
        device=str(device),
        compile=args.compile,
        cuda_graphs=args.cuda_graphs,
        quiet=True,
        fused=args.fused,
    )
    for _ in range(WARMUP_STEPS):
        trainer.train_step()
    synchronize(device)

    on_gpu = device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_gpu else [])
    with profile(activities=activities) as prof:
        start = time.perf_counter()
        for _ in range(args.steps):
            trainer.train_step()
        synchronize(device)
        wall = (time.perf_counter() - start) / args.steps * 1e6
    # Profiling slows the host side; the wall time is the profiled one.
    events = list(prof.events())
    print(
        f"{args.task} {args.attention} on {device}, torch {torch.__version__}, batch 128, "
        f"{args.precision}, compile={args.compile}, fused={args.fused}, "
        f"cuda_graphs={args.cuda_graphs}, "
        f"{args.steps} profiled steps"
    )
    print(f"wall time per step (profiled): {wall:8.1f} us")
    if on_gpu:
        kernels = [e for e in events if e.device_type == DeviceType.CUDA]
        if not kernels:
            sys.exit("the profiler saw no kernels (no CUPTI records): drop --cuda-graphs")
        busy = sum(e.time_range.elapsed_us() for e in kernels) / args.steps
        print(f"device kernels per step:       {len(kernels) / args.steps:8.1f}")
        print(f"device busy per step:          {busy:8.1f} us ({busy / wall:.0%} of the wall time)")
        rows, unit = per_step_table(kernels, args.steps), "kernel"
    else:
        top_level = [e for e in events if e.device_type == DeviceType.CPU and e.cpu_parent is None]
        rows, unit = per_step_table(top_level, args.steps), "top-level op"
    print(f"\n{unit + ' (costliest first)':<72}{'calls/step':>11}{'us/step':>10}")
    for name, calls, micros in rows[: args.top]:
        print(f"{name[:70]:<72}{calls:>11.1f}{micros:>10.1f}")


if __name__ == "__main__":
    main()
