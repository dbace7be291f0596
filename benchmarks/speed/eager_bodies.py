"""How an eager fused step reaches the kernels' operators' bodies: three routes, in turns.

    python benchmarks/speed/eager_bodies.py [--task fuzzy-logic] [--variants hyla linear
        softmax] [--rounds 8] [--steps 20]

A run of 1,000 to 4,999 steps compiles nothing and may take the fused kernels eagerly
(``latentlens.training.fast_path``), whose autograd functions (the GELUs, the layer norms,
the MLP) call the kernels. This times one Trainer's fused eager step in one process, the
route switched between rounds of ``--steps`` steps, the order rotated every round:

- ``registered``: the autograd functions call the operators' registered bodies below
  autograd (``latentlens.kernels.build.body``; C++ where a C++ compiler built them), as
  the library does;
- ``python``: the autograd functions call the Python bodies directly (the library before
  2026-12-05, and where no C++ compiler is found);
- ``operators``: the layers call the operators themselves, as a compiled step does, each
  call through torch.library's Python autograd wrapper.

Prints each route's median steps/s and each round's rate over ``python``'s, with their
median. A diagnosis of the step; ``operator_bodies.py --lengths`` times the command.
"""

from __future__ import annotations

import argparse
import statistics
import time

from latentlens.kernels import build, compiling, gelu_tanh, layer_norm, mlp, native
from latentlens.training import TrainConfig, Trainer, model_for_task

ROUTES = ("registered", "python", "operators")
MODULES = (gelu_tanh, layer_norm, mlp)  # the kernels with eager autograd functions


def python_body(op, *args):
    """``op``'s Python body, called directly."""
    return build.PYTHON_BODIES[op._schema.name.split("::")[1]](*args)


def use_route(route: str) -> None:
    """Point the kernels' modules' ``body`` and ``compiling`` at ``route``'s."""
    for module in MODULES:
        module.body = python_body if route == "python" else build.body
        module.compiling = (lambda: True) if route == "operators" else compiling


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", default="fuzzy-logic", choices=["fuzzy-logic", "sraven"])
    parser.add_argument("--variants", nargs="+", default=["hyla", "linear", "softmax"])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--steps", type=int, default=20, help="steps a route's turn")
    args = parser.parse_args(argv)
    for variant in args.variants:
        config = Trainer.resolve_config(
            args.task,
            model_for_task(args.task, attention=variant),
            TrainConfig.for_task(args.task, batch_size=128),
        )
        trainer = Trainer(None, config, device="cpu", quiet=True, fused=True)
        bodies = "C++" if native.loaded() else "Python"
        rates: dict[str, list[float]] = {route: [] for route in ROUTES}
        for route in ROUTES:  # each route's first steps: allocations, kernel libraries
            use_route(route)
            for _ in range(3):
                trainer.train_step()
        try:
            for round_ in range(args.rounds):
                order = ROUTES[round_ % 3 :] + ROUTES[: round_ % 3]
                for route in order:
                    use_route(route)
                    began = time.perf_counter()
                    for _ in range(args.steps):
                        trainer.train_step()
                    rates[route].append(args.steps / (time.perf_counter() - began))
        finally:
            use_route("registered")
        print(f"{args.task} {variant} (registered bodies: {bodies}), steps/s: "
              + ", ".join(f"{r} {statistics.median(rates[r]):.1f}" for r in ROUTES))  # fmt: skip
        for route in ("registered", "operators"):
            ratios = [a / b for a, b in zip(rates[route], rates["python"], strict=True)]
            print(f"  {route} / python: median {statistics.median(ratios):.3f}, rounds "
                  + " ".join(f"{ratio:.3f}" for ratio in ratios))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
