"""CPU training steps per second with glibc's default malloc against
:func:`latentlens.allocator.keep_freed_memory` (what the trainer sets on a CPU), in
alternating rounds of fresh processes, one thread each, at Table A1's fuzzy-logic setting
(benchmarks/reproduction/sweeps/fuzzy-logic-a1.yaml's seed-0 runs).

Each round prints both modes' steps/s, CPU milliseconds per step (user and kernel: less
moved by other work on the machine than the wall time), page faults per step, the
kernel's share of the CPU time and the ratios; then the median ratios per variant, and
whether both modes computed the same loss after the same steps (they must: the allocator
moves memory, not numbers).

    python benchmarks/speed/allocator.py [--variants softmax linear hyla] [--rounds 3] [--steps 150]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SPEC = Path(__file__).resolve().parents[1] / "reproduction" / "sweeps" / "fuzzy-logic-a1.yaml"
MODES = ("default", "kept")


def measure(variant: str, mode: str, steps: int) -> dict[str, float]:
    """In this process: ``steps`` timed training steps (after 20 untimed) of the variant's
    seed-0 run on one thread, with glibc's defaults or the freed memory kept."""
    import torch

    import latentlens.training.trainer as trainer_module
    from latentlens.sweep import SweepSpec
    from latentlens.training import Trainer

    torch.set_num_threads(1)
    if mode == "default":  # the trainer's call, undone before it is made
        trainer_module.keep_freed_memory = lambda: False
    cell = next(c for c in SweepSpec.read(SPEC).cells() if c.name == f"{variant}-s0")
    trainer = Trainer.create(Path(tempfile.mkdtemp()) / "run", cell.config, quiet=True)
    for _ in range(20):
        trainer.train_step()
    before, start = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    for _ in range(steps - 1):
        trainer.train_step()
    loss = float(trainer.train_step())
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_SELF)
    kernel = after.ru_stime - before.ru_stime
    cpu = kernel + after.ru_utime - before.ru_utime
    return {
        "steps_per_s": steps / seconds,
        "cpu_ms_per_step": 1000 * cpu / steps,
        "faults_per_step": (after.ru_minflt - before.ru_minflt) / steps,
        "kernel_share": kernel / max(cpu, 1e-9),
        "loss": loss,
    }


def in_fresh_process(variant: str, mode: str, steps: int) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, __file__, "--measure", variant, mode, "--steps", str(steps)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", nargs="+", default=["softmax", "linear", "hyla"])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=150, help="timed steps per process")
    parser.add_argument("--measure", nargs=2, metavar=("VARIANT", "MODE"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.measure:
        print(json.dumps(measure(*args.measure, args.steps)))
        return 0
    import torch

    print(f"torch {torch.__version__}, one thread per process, {args.steps} steps a side")
    for variant in args.variants:
        ratios, cpu_ratios, same = [], [], True
        for index in range(args.rounds):
            order = MODES if index % 2 == 0 else MODES[::-1]
            got = {mode: in_fresh_process(variant, mode, args.steps) for mode in order}
            ratio = got["kept"]["steps_per_s"] / got["default"]["steps_per_s"]
            cpu_ratio = got["default"]["cpu_ms_per_step"] / got["kept"]["cpu_ms_per_step"]
            ratios.append(ratio)
            cpu_ratios.append(cpu_ratio)
            same &= got["kept"]["loss"] == got["default"]["loss"]
            shown = "; ".join(
                f"{mode} {got[mode]['steps_per_s']:.2f} steps/s, "
                f"{got[mode]['cpu_ms_per_step']:.0f} CPU ms/step, "
                f"{got[mode]['faults_per_step']:.0f} faults/step, "
                f"kernel {100 * got[mode]['kernel_share']:.0f}%"
                for mode in MODES
            )
            print(f"{variant} round {index + 1}: {shown}; kept/default {ratio:.2f}x steps/s, "
                  f"{cpu_ratio:.2f}x CPU time", flush=True)  # fmt: skip
        spread = {name: f"{statistics.median(r):.2f}x [{min(r):.2f}-{max(r):.2f}]"
                  for name, r in (("steps/s", ratios), ("CPU time", cpu_ratios))}  # fmt: skip
        print(f"{variant}: kept/default median {spread['steps/s']} steps/s, "
              f"{spread['CPU time']} CPU time, same loss: {same}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
