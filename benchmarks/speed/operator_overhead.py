"""What a fused kernel's operator costs a call, beside ``torch.library.custom_op``'s.

A fused-compile step calls each kernel as an operator (``torch.ops.latentlens``): about
30 calls a step at fuzzy logic's T = 16. The kernels are defined as plain library
operators (``latentlens.kernels.build.operator``); this times a call of the projection's
operators (forward, with its autograd formula; backward, without one) on a tiny input,
so that the call and not the matmul is timed, beside the same Python functions made
operators by ``torch.library.custom_op`` (the reference; what the kernels were before)
and called directly. Calls are interleaved in rounds, medians reported. Then it counts
the operators' calls in one profiled fused-compile step of ``--task`` and prints what the
difference saves a step.

    python benchmarks/speed/operator_overhead.py [--task fuzzy-logic] [--attention linear]
        [--calls 2000] [--rounds 7]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
from torch.profiler import ProfilerActivity, profile

from latentlens.kernels import linear as kernels
from latentlens.training import TrainConfig, Trainer, model_for_task

STEPS = 20  # profiled fused-compile steps, after as many to compile and warm up


def reference_operators() -> tuple[Callable, Callable]:
    """The projection's functions as ``torch.library.custom_op`` operators, the forward
    one with the same autograd formula as latentlens's."""
    forward = torch.library.custom_op(
        "overhead_reference::projection", kernels.projection_values, mutates_args=()
    )
    backward = torch.library.custom_op(
        "overhead_reference::projection_backward",
        kernels.projection_backward_values,
        mutates_args=(),
    )

    def save(ctx, inputs, output) -> None:
        ctx.save_for_backward(inputs[0], inputs[1])

    def gradient(ctx, dy):
        x, weight = ctx.saved_tensors
        dx, dweight, _ = backward(x, weight, dy, False)
        return dx, dweight, None

    forward.register_autograd(gradient, setup_context=save)
    return forward, backward


def microseconds_per_call(calls: dict[str, Callable[[], object]], count: int, rounds: int):
    """``{name: median microseconds a call}``, the calls interleaved round by round."""
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(rounds):
        for name, call in calls.items():
            for _ in range(count // 10):
                call()
            start = time.perf_counter()
            for _ in range(count):
                call()
            times[name].append((time.perf_counter() - start) / count * 1e6)
    return {name: statistics.median(values) for name, values in times.items()}


def operator_calls_per_step(task: str, attention: str) -> tuple[int, int, float]:
    """``(forward calls, calls without autograd, microseconds a step)`` of latentlens's
    operators in a profiled fused-compile step of ``task``."""
    config = Trainer.resolve_config(
        task, model_for_task(task, attention=attention), TrainConfig.for_task(task)
    )
    trainer = Trainer(None, config, device="cpu", compile=True, fused=True, quiet=True)
    for _ in range(STEPS):
        trainer.train_step()
    start = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(STEPS):
            trainer.train_step()
    step = (time.perf_counter() - start) / STEPS * 1e6
    names = [e.name for e in prof.events() if e.name.startswith("latentlens::")]
    # an operator with an autograd formula has a kernel for the Autograd key
    plain = sum(not torch._C._dispatch_has_kernel_for_dispatch_key(n, "Autograd") for n in names)
    return (len(names) - plain) // STEPS, plain // STEPS, step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="fuzzy-logic", choices=["fuzzy-logic", "sraven"])
    parser.add_argument("--attention", default="linear")
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    x, weight, dy = torch.randn(4, 8), torch.randn(8, 8), torch.randn(4, 8)
    reference, reference_backward = reference_operators()
    ours, ours_backward = torch.ops.latentlens.projection, torch.ops.latentlens.projection_backward
    with torch.no_grad():  # as the compiled graphs call them
        cost = microseconds_per_call(
            {
                "direct": lambda: kernels.projection_values(x, weight, None),
                "custom_op": lambda: reference(x, weight, None),
                "latentlens": lambda: ours(x, weight, None),
                "direct backward": lambda: kernels.projection_backward_values(x, weight, dy, False),
                "custom_op backward": lambda: reference_backward(x, weight, dy, False),
                "latentlens backward": lambda: ours_backward(x, weight, dy, False),
            },
            args.calls,
            args.rounds,
        )
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; us a call, median")
    for kind in ("", " backward"):
        direct = cost[f"direct{kind}"]
        print(
            f"  projection{kind or ' forward'}: direct {direct:6.2f}, "
            f"custom_op +{cost[f'custom_op{kind}'] - direct:5.2f}, "
            f"latentlens +{cost[f'latentlens{kind}'] - direct:5.2f}"
        )
    forward_calls, plain_calls, step = operator_calls_per_step(args.task, args.attention)
    saved = forward_calls * (cost["custom_op"] - cost["latentlens"]) + plain_calls * (
        cost["custom_op backward"] - cost["latentlens backward"]
    )
    print(
        f"{args.task} {args.attention}, fused-compile: {forward_calls} forward and "
        f"{plain_calls} backward operator calls a step of {step:.0f} us (profiled); "
        f"saved against custom_op: {saved:.0f} us a step ({saved / step:.1%})"
    )


if __name__ == "__main__":
    main()
