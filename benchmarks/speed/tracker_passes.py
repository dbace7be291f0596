"""The over-training tracker's forward passes, as the command reads them, against before.

    python benchmarks/speed/tracker_passes.py [--attention softmax] [--rounds 6]
        [--config a1] [--out FILE.json]

At every evaluation (every 1,000 steps by default) a fuzzy-logic run computes the official
``r2_attn_latent`` (:class:`latentlens.probes.LogicLatentsTracker`) on 16,000 problems: a
forward pass of every example through the first block and the second block's pattern.
latentlens reads them in passes of ``FUZZY_LOGIC_FORWARD_POSITIONS`` positions with the
last block's last query alone (``now``); before, in passes of 256 examples with every
query (``before``, the module's constants patched). Both are timed in alternating turns
on one fused-compile trainer after 50 steps, with the training step's time for 1,000
steps beside them: the tracker's share of a command's time between evaluations.
``--config a1``: Table A1's T = 32.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from latentlens.probes import codes  # noqa: E402
from latentlens.probes.official import logic_latents  # noqa: E402
from speed.command_side_by_side import A1_CONFIG  # noqa: E402
from speed.host_share import trainer_for  # noqa: E402

WARMUP_STEPS = 50
STEPS = 20  # training steps timed a turn
BEFORE = {"FUZZY_LOGIC_FORWARD_POSITIONS": 0, "last_positions_kwargs": lambda model, n: {}}


def seconds_of_tracker(trainer, patched: dict) -> tuple[float, float]:
    """The tracker's ``(seconds, r2_attn_latent)`` on ``trainer`` with ``codes``'s names
    set to ``patched`` for the call (none: as it ships)."""
    kept = {name: getattr(codes, name) for name in patched}
    for name, value in patched.items():
        setattr(codes, name, value)
    try:
        start = time.perf_counter()
        r2 = logic_latents(trainer.model, trainer.task)["r2_attn_latent"]
        return time.perf_counter() - start, r2
    finally:
        for name, value in kept.items():
            setattr(codes, name, value)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--attention", default="softmax")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--config", choices=["t16", "a1"], default="t16")
    parser.add_argument("--out", type=Path, help="write the turns and medians here as JSON")
    args = parser.parse_args(argv)
    torch.set_num_threads(2)
    task_config = A1_CONFIG["task"] if args.config == "a1" else None
    trainer = trainer_for("fuzzy-logic", args.attention, 128, task_config)
    seq_len = trainer.task.config.seq_len
    for _ in range(WARMUP_STEPS):
        trainer.train_step()
    turns: dict[str, list[float]] = {"now": [], "before": [], "1,000 steps": []}
    r2: dict[str, float] = {}
    for _ in range(args.rounds):
        for name, patched in (("now", {}), ("before", BEFORE)):
            seconds, r2[name] = seconds_of_tracker(trainer, patched)
            turns[name].append(seconds)
        start = time.perf_counter()
        for _ in range(STEPS):
            trainer.train_step()
        turns["1,000 steps"].append((time.perf_counter() - start) / STEPS * 1000)
    median = {name: statistics.median(values) for name, values in turns.items()}
    steps = median["1,000 steps"]
    print(f"fuzzy logic (T = {seq_len}) {args.attention}, 2 threads, {args.rounds} alternating "
          f"turns; seconds, median [min-max]")  # fmt: skip
    for name, values in turns.items():
        share = "" if name == "1,000 steps" else f"  {median[name] / (steps + median[name]):.1%}"
        print(f"{name:12}{median[name]:8.3f} [{min(values):.3f}-{max(values):.3f}]{share}")
    ratios = [b / n for b, n in zip(turns["before"], turns["now"], strict=True)]
    print(f"before / now: {statistics.median(ratios):.2f}x [{min(ratios):.2f}-{max(ratios):.2f}]; "
          f"r2_attn_latent now {r2['now']:.9f}, before {r2['before']:.9f}")  # fmt: skip
    if args.out:
        result = {"attention": args.attention, "seq_len": seq_len, "turns_s": turns,
                  "median_s": median, "ratios": ratios, "r2_attn_latent": r2}  # fmt: skip
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
