"""Where a `latentlens train` command's time goes, step by step and around the step.

    python benchmarks/speed/loop_profile.py [--task fuzzy-logic] [--attention hyla]
        [--steps 3000] [--out FILE.json] [-- EXTRA TRAIN FLAGS]
    python benchmarks/speed/loop_profile.py --steps 50000 -- --time-budget 60  # the default run

Runs ``latentlens train --task T --attention V --steps N --device cpu --quiet`` in this
process under cProfile (its defaults otherwise: evaluation and tracked metrics every 1,000
steps, checkpoints) and splits the wall time into the parts of the loop: start-up
(imports, config, model, the thread check, the path's calibration), the training steps
(``Trainer.train_step``), evaluation (``Trainer.evaluate``), the tracked metrics of the
callbacks (``on_eval``), checkpoints (``save_checkpoint``), and the rest of the loop
(progress bar, finite checks, logging). It prints each part's seconds and share, and the
command's steps/s beside the steps' own rate: the loop's overhead. A command stopped by
``--time-budget`` is profiled up to where it stopped (a run of the default 50,000 steps,
on the path it takes for them).
"""

from __future__ import annotations

import argparse
import cProfile
import inspect
import json
import pstats
import sys
import time
from pathlib import Path
from tempfile import TemporaryDirectory

STOPPED_BY_BUDGET = 3  # `latentlens train`'s exit code where --time-budget stopped it


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
    # unwrapped: a decorator's wrapper (torch.no_grad's) is shared by every function it wraps
    functions = {label: inspect.unwrap(f) for label, f in functions.items()}
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


def called_from(
    stats: pstats.Stats, function: tuple[str, str], caller: tuple[str, str]
) -> tuple[int, float]:
    """(calls, cumulative seconds) of ``function`` made directly by ``caller`` (each a
    file and a name): the loop's steps, not the path calibration's before it."""
    count, seconds = 0, 0.0
    for (where, _, name), row in stats.stats.items():  # type: ignore[attr-defined]
        if (where, name) != function:
            continue
        for (by_file, _, by_name), by_row in row[4].items():
            if (by_file, by_name) == caller:
                count, seconds = count + by_row[1], seconds + by_row[3]
    return count, seconds


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
        shown = ["train", "--task", args.task, "--attention", args.attention, "--steps",
                 str(args.steps), "--device", "cpu", "--quiet", *args.extra]  # fmt: skip
        command = [*shown, "--run-dir", str(Path(tmp) / "run")]
        profile = cProfile.Profile()
        began = time.perf_counter()
        profile.enable()
        code = latentlens(command)
        profile.disable()
        wall = time.perf_counter() - began
    if code not in (0, STOPPED_BY_BUDGET):
        raise SystemExit(f"error: latentlens {' '.join(command)} exited with {code}")
    stats = pstats.Stats(profile)
    where = parts_of()
    steps, stepping = called_from(stats, where.pop("steps"), where["training loop"])
    parts = {"steps": stepping, **{label: cumulative(stats, *at) for label, at in where.items()}}
    loop = parts.pop("training loop")
    parts["rest of the loop"] = loop - sum(parts.values())
    parts["start-up and the end"] = wall - loop
    print(
        f"latentlens {' '.join(shown)}: {wall:.1f} s, {steps} steps, {steps / wall:.1f} "
        f"steps/s as a whole; the steps alone {steps / parts['steps']:.1f} steps/s "
        "(profiled: cProfile slows Python-heavy parts)\n"
    )
    print(f"{'part':30}{'seconds':>10}{'share':>8}")
    for label, seconds in parts.items():
        print(f"{label:30}{seconds:10.2f}{seconds / wall:8.1%}")
    if args.out:
        args.out.write_text(json.dumps({"command": shown, "wall": wall, "parts": parts,
                                        "steps": steps}, indent=1))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
