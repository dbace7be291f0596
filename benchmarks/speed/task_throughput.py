"""Task generation speed against one training step of the default model, and SRAVEN's
ambiguity rate at the defaults.

Target: generating a batch costs at most 5% of a training step (forward, backward and an
AdamW update of the reference's default model for that task, same batch size).

    python benchmarks/speed/task_throughput.py [--batch 128] [--device auto]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

from latentlens.devices import resolve_device
from latentlens.models import DecoderTransformer, TransformerConfig
from latentlens.tasks import FuzzyLogicTask, SRavenTask, Task


def median_seconds(fn: Callable[[], object], device: torch.device, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    device = resolve_device(args.device)
    print(f"batch {args.batch}, device {device}, torch {torch.__version__}\n")
    print(
        f"{'task':<12}{'examples/s':>14}{'batch ms':>10}{'step ms':>10}{'batch/step':>12}"
        "  target <= 5%"
    )
    tasks: dict[str, Task] = {
        "fuzzy-logic": FuzzyLogicTask(seed=0, device=device),
        "sraven": SRavenTask(seed=0, device=device),
    }
    for name, task in tasks.items():
        batch_s = median_seconds(lambda t=task: t.sample(args.batch), device, args.repeats)
        model = DecoderTransformer(TransformerConfig.preset(name, attention="softmax")).to(device)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        batch = task.sample(args.batch)

        def step(model=model, optimizer=optimizer, batch=batch, task=task) -> None:
            optimizer.zero_grad(set_to_none=True)
            task.loss(model(batch.inputs), batch).backward()
            optimizer.step()

        step()
        step_s = median_seconds(step, device, max(5, args.repeats // 3))
        share = batch_s / step_s
        print(
            f"{name:<12}{args.batch / batch_s:>14,.0f}{batch_s * 1e3:>10.2f}"
            f"{step_s * 1e3:>10.1f}{share:>11.1%}  {'ok' if share <= 0.05 else 'OVER'}"
        )

    sraven = tasks["sraven"]
    counted = [sraven.ambiguous(sraven.sample(4096)) for _ in range(5)]
    rate = torch.cat(counted).float().mean().item()
    print(f"\nSRAVEN ambiguity at the defaults (F=4, V=8), 20,480 training instances: {rate:.1%}")
    print(
        "(another rule fits a feature's first 8 panels but answers differently, features "
        "matched by the true permutation)"
    )


if __name__ == "__main__":
    main()
