"""Whether one thread or every CPU trains small models faster, beside the count the rule
gives a new run (:func:`latentlens.threads.run_threads`: one thread under
:data:`~latentlens.threads.SMALL_WORK` elements in the step's widest activation).

    python benchmarks/speed/small_work_threads.py [--seconds 2] [--rounds 3]

Times the eager training step of the models the tests, the tiny demo and the notebooks
train, each on one thread and on every CPU in turns (``--rounds`` rounds of ``--seconds``
each, the best round kept per count, so that a burst of other work does not decide), and
prints steps/s, the speed on every CPU over one thread's, the step's work and whether the
rule's count was the faster one (within 5%). Run it on an idle machine. About 1 min on 2
cores.
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import dataclass
from typing import Any

# A count within this of the other's speed is as fast: the rule's count is then right.
AS_FAST = 1.05


@dataclass(frozen=True)
class Case:
    """A small model a user trains: its name, task, sizes, batch and task settings."""

    name: str
    task: str
    sizes: dict[str, Any]
    batch: int
    task_config: dict[str, Any] | None = None
    kind: str | None = None


CASES = (
    Case("the test models", "fuzzy-logic",
         dict(d_model=16, n_heads=4, qk_dim=8, v_dim=8, d_mlp=32), 32),
    Case("fuzzy logic, width 32", "fuzzy-logic",
         dict(d_model=32, n_heads=4, qk_dim=8, v_dim=8, d_mlp=64), 64),
    Case("notebook 01 (quick tour)", "fuzzy-logic", dict(d_model=64, d_mlp=128), 64),
    Case("SRAVEN, width 32", "sraven", dict(d_model=32, n_heads=4, qk_dim=8, v_dim=8, d_mlp=64),
         32, {"num_features": 2, "num_values": 4}),
    Case("notebook 03 (fusion)", "translation",
         dict(fuse="both", connection="gca", d_model=32, n_heads=2, qk_dim=32, v_dim=32,
              d_mlp=64), 64, {"train_sentences": 4000, "compounds_per_subset": 40}, "fusion"),
    Case("modular ICL, width 32", "modular-icl",
         dict(d_model=32, n_heads=4, qk_dim=8, v_dim=8, d_mlp=64), 64),
)  # fmt: skip


def steps_per_second(step, seconds: float) -> float:
    """``step`` called for ``seconds`` after three calls of warm-up: its calls a second."""
    for _ in range(3):
        step()
    calls, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        step()
        calls += 1
    return calls / (time.perf_counter() - start)


def measure(case: Case, cpus: int, seconds: float, rounds: int) -> dict[str, Any]:
    """Steps/s of ``case``'s eager step on 1 and on ``cpus`` threads (best of ``rounds``,
    the counts in turns), its work and the rule's count."""
    import torch

    from latentlens.threads import run_threads, work_of
    from latentlens.training import TrainConfig, Trainer, model_for_task

    args = (case.kind,) if case.kind else ()
    model = model_for_task(case.task, case.task_config, *args, **case.sizes)
    train = TrainConfig.for_task(case.task, steps=100, batch_size=case.batch, threads=1)
    config = Trainer.resolve_config(case.task, model, train, case.task_config)
    trainer = Trainer(None, config, device="cpu", quiet=True)
    best = {1: 0.0, cpus: 0.0}
    for _ in range(rounds):
        for count in best:
            torch.set_num_threads(count)
            best[count] = max(best[count], steps_per_second(trainer.train_step, seconds))
    work = work_of(config)
    return {"work": work, "one": best[1], "all": best[cpus], "rule": run_threads(work)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="seconds a round and count")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    from latentlens.threads import ENVIRONMENT, available_cpus

    os.environ.pop(ENVIRONMENT, None)  # the rule's own count, not a request
    cpus = available_cpus()
    if cpus < 2:
        print("one CPU: every count is 1 thread")
        return 0
    print(f"eager steps/s on 1 thread and on {cpus}; best of {args.rounds} rounds of "
          f"{args.seconds:g} s each")  # fmt: skip
    header = f"{'model':28s} {'work':>8s} {'1 thread':>9s} {f'{cpus} threads':>10s} "
    print(header + f"{'ratio':>6s}  rule")
    for case in CASES:
        found = measure(case, cpus, args.seconds, args.rounds)
        ratio = found["all"] / found["one"]
        faster = cpus if ratio >= AS_FAST else 1 if ratio <= 1 / AS_FAST else found["rule"]
        verdict = "right" if found["rule"] == faster else f"slower ({faster} is faster)"
        print(f"{case.name:28s} {found['work']:8,d} {found['one']:9.1f} {found['all']:10.1f} "
              f"{ratio:6.2f}  {found['rule']} thread(s): {verdict}", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
