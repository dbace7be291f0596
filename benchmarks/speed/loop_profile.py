"""Where a `latentlens train` command's time goes, step by step and around the step.

    python benchmarks/speed/loop_profile.py [--task fuzzy-logic] [--attention hyla]
        [--steps 3000] [--out FILE.json] [-- EXTRA TRAIN FLAGS]

Runs ``latentlens train --task T --attention V --steps N --device cpu --quiet`` in this
process under cProfile (its defaults otherwise: evaluation and tracked metrics every 1,000
steps, checkpoints) and splits the wall time into the parts of the loop: start-up
(imports, config, model, the thread check), the training steps (``Trainer.train_step``),
evaluation (``Trainer.evaluate``), the tracked metrics of the callbacks (``on_eval``),
checkpoints (``save_checkpoint``), and the rest of the loop (progress bar, finite checks,
logging). It prints each part's seconds and share, and the command's steps/s beside the
steps' own rate: the loop's overhead.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import sys
import time
from pathlib import Path
from tempfile import TemporaryDirectory


def parts_of() -> dict[str, tuple[str, str]]:
    """Each part's function as cProfile names it: (its file, its name), read from the
    functions themselves, so that a module split moves them along."""
    from latentlens.training.checkpoint import save_checkpoint  # noqa: PLC0415
    from latentlens.training.evaluation import Evaluation  # noqa: PLC0415
    from latentlens.training.loop import TrainingLoop  # noqa: PLC0415

    functions = {
        "steps": TrainingLoop.train_step,
        "evaluation": Evaluation.evaluate,
        "checkpoints": save_checkpoint,
        "training loop": TrainingLoop._train,
    }
    parts = {label: (f.__code__.co_filename, f.__code__.co_name) for label, f in functions.items()}
    return {**parts, "tracked metrics (on_eval)": ("latentlens/", "on_eval")}


def cumulative(stats: pstats.Stats, file: str, name: str) -> float:
    """Cumulative seconds of every function ``name`` in ``file`` (for ``on_eval``, of any
    module under ``latentlens/``: the callbacks')."""
    total = 0.0
    for (where, _, function), row in stats.stats.items():  # type: ignore[attr-defined]
        if function == name and (where == file or (file == "latentlens/" and file in where)):
            total += row[3]
    return total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", default="fuzzy-logic")
    parser.add_argument("--attention", default="hyla")
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--out", type=Path)
    parser.add_argument("extra", nargs="*", help="more `latentlens train` flags, after --")
    args = parser.parse_args(argv)
    from latentlens.cli.main import main as latentlens  # noqa: PLC0415

    with TemporaryDirectory() as tmp:
        command = ["train", "--task", args.task, "--attention", args.attention, "--steps",
                   str(args.steps), "--device", "cpu", "--quiet", "--run-dir",
                   str(Path(tmp) / "run"), *args.extra]  # fmt: skip
        profile = cProfile.Profile()
        began = time.perf_counter()
        profile.enable()
        code = latentlens(command)
        profile.disable()
        wall = time.perf_counter() - began
    if code != 0:
        raise SystemExit(f"error: latentlens {' '.join(command)} exited with {code}")
    stats = pstats.Stats(profile)
    parts = {label: cumulative(stats, *where) for label, where in parts_of().items()}
    loop = parts.pop("training loop")
    parts["rest of the loop"] = loop - sum(parts.values())
    parts["start-up and the end"] = wall - loop
    print(
        f"latentlens {' '.join(command[:-2])}: {wall:.1f} s, {args.steps / wall:.1f} steps/s "
        f"as a whole; the steps alone {args.steps / parts['steps']:.1f} steps/s "
        "(profiled: cProfile slows Python-heavy parts)\n"
    )
    print(f"{'part':30}{'seconds':>10}{'share':>8}")
    for label, seconds in parts.items():
        print(f"{label:30}{seconds:10.2f}{seconds / wall:8.1%}")
    if args.out:
        args.out.write_text(json.dumps({"command": command[:-2], "wall": wall, "parts": parts,
                                        "steps": args.steps}, indent=1))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
