"""How fast a training step could run on this CPU: its matmul FLOPs at the rate PyTorch's
float32 matmul reaches here (MKL's or oneDNN's, the faster) on the step's largest shapes.

    python benchmarks/speed/matmul_ceiling.py [--tasks fuzzy-logic fuzzy-logic-a1 sraven]
        [--variants softmax linear hyla] [--threads N]

A step's matmuls (counted by :class:`torch.utils.flop_counter.FlopCounterMode` on the
objective latentlens trains: forward and backward, the last layer on its predicted
positions only) cannot run faster than the matmul itself, and everything else a step does
(normalisations, the attention core, the optimiser, Python) only adds time. So the
*ceiling*, ``matmul rate / FLOPs per step``, bounds the steps/s of any path, and a target
of ``k`` times the official code's rate is reachable only where ``k x official`` lies
under it; how close a command comes is its share of the ceiling. The rate is the best of
a few rounds of the MLP's two matmuls (``[batch x positions, d_model] x [d_model, d_mlp]``
and back), the step's largest, on ``--threads`` threads (default: every CPU; one per core
for runs side by side, whose ceilings add up).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from latentlens.kernels.linear import has_onednn, linear  # noqa: E402
from latentlens.threads import available_cpus  # noqa: E402
from latentlens.training import Trainer  # noqa: E402
from latentlens.training.objective import TrainingObjective  # noqa: E402
from speed.cpu_side_by_side import latentlens_config, task_spec  # noqa: E402
from speed.step_flops import step_flops  # noqa: E402

OFFICIAL_SPEC = {"fuzzy-logic": "fuzzy-logic", "fuzzy-logic-a1": "fuzzy-logic-a1",
                 "sraven": "sraven-default"}  # fmt: skip
ROUNDS, CALLS = 5, 20


def matmul_rate(rows: int, d_model: int, d_mlp: int, threads: int) -> tuple[float, str]:
    """FLOP/s of the faster float32 matmul PyTorch has here (MKL's ``torch.mm`` or
    oneDNN's, :func:`latentlens.kernels.linear.linear`) on ``threads`` threads at an
    MLP's shapes (``rows`` by ``d_model`` into ``d_mlp`` and back), each the best of
    :data:`ROUNDS` rounds; and which it was."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        x, w_in, w_out = (torch.randn(rows, d_model), torch.randn(d_mlp, d_model),
                          torch.randn(d_model, d_mlp))  # fmt: skip
        engines = {"mkl": lambda a, w: torch.mm(a, w.T)}
        if has_onednn():
            engines["onednn"] = linear
        rates = {}
        for name, matmul in engines.items():
            fastest = float("inf")
            for _ in range(ROUNDS + 1):  # the first round warms up
                began = time.perf_counter()
                for _ in range(CALLS):
                    matmul(matmul(x, w_in), w_out)
                fastest = min(fastest, time.perf_counter() - began)
            rates[name] = 2 * 2 * rows * d_model * d_mlp * CALLS / fastest
        best = max(rates, key=rates.__getitem__)
        return rates[best], best
    finally:
        torch.set_num_threads(before)


def ceiling(config: dict, threads: int) -> tuple[float, float, float, str]:
    """``(steps/s ceiling, matmul FLOPs per step, matmul FLOP/s, its engine)`` of
    ``config``'s step on ``threads`` threads of this CPU."""
    trainer = Trainer(None, config, device="cpu", quiet=True)
    flops = step_flops(TrainingObjective(trainer.model, trainer.task), trainer)
    model, batch = config["model"], config["train"]["batch_size"]
    rate, engine = matmul_rate(batch * model["n_ctx"], model["d_model"], model["d_mlp"], threads)
    return rate / flops, flops, rate, engine


def task_ceiling(task: str, variant: str, threads: int) -> tuple[float, float, float, str]:
    """:func:`ceiling` of the command-side-by-side ``task`` (``fuzzy-logic``,
    ``fuzzy-logic-a1``, ``sraven``) for ``variant``."""
    spec = task_spec(OFFICIAL_SPEC[task], variant)
    return ceiling(latentlens_config(spec, "fp32", threads), threads)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="+", default=list(OFFICIAL_SPEC),
                        choices=list(OFFICIAL_SPEC))  # fmt: skip
    parser.add_argument("--variants", nargs="+", default=["softmax", "linear", "hyla"])
    parser.add_argument("--threads", type=int, default=available_cpus())
    args = parser.parse_args(argv)
    print(f"matmul ceiling on {args.threads} thread(s), torch {torch.__version__}\n")
    print(f"{'task':16}{'variant':9}{'GFLOP/step':>12}{'matmul GFLOP/s':>16}{'engine':>8}"
          f"{'ceiling steps/s':>17}")  # fmt: skip
    for task in args.tasks:
        for variant in args.variants:
            steps, flops, rate, engine = task_ceiling(task, variant, args.threads)
            print(f"{task:16}{variant:9}{flops / 1e9:12.3f}{rate / 1e9:16.1f}{engine:>8}"
                  f"{steps:17.1f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
