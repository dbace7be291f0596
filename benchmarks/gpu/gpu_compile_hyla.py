"""Where does ``--compile`` on CUDA depart from eager HYLA on 4-layer SRAVEN?

Round 3 of ``gpu_sraven_hyla.sh`` (benchmarks/results/h200_2026-11-26) found that
``--cuda-graphs`` alone trains HYLA exactly as eager does and ``--compile`` does not: its
third loss already differs by 0.14. This script takes one SRAVEN training batch at the
reference size (attention dropout 0) and compares, per attention, what the compiled
objective computes with the eager one on the same weights:

- the batch the compiled assembly makes (it must be the same integers),
- the loss, and each parameter's gradient (relative norm of the difference),

at initialisation and again after a few eager AdamW steps (the failure shows once the
weights have moved). The attentions include HYLA's ablations, so the part of HYLA that
inductor miscompiles shows as the one whose removal makes the gradients agree.

Round 4 (benchmarks/results/h200_2026-11-27) found the cause: inductor's comprehensive
padding. ``inductor`` here compiles with inductor's defaults, padding on;
``inductor:comprehensive_padding=False`` is what ``--compile`` runs
(:func:`latentlens.training.objective.inductor_options`).

``--variants`` compiles the objective several ways, to tell which stage departs: a
backend alone (``aot_eager``: AOT autograd's traced graphs run eagerly;
``aot_eager_decomp_partition``: with inductor's decompositions and partitioner too;
``inductor``: Triton's kernels), or inductor with some of its settings changed
(``inductor:split_reductions=False,triton.persistent_reductions=False``), or under
``torch.use_deterministic_algorithms`` (``inductor:deterministic``: scatter-adds without
atomics).

    python benchmarks/gpu/gpu_compile_hyla.py [--attentions hyla softmax ...] [--steps 5]
        [--variants inductor aot_eager ...] [--device cuda]
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path

import torch

from latentlens.models import TransformerConfig
from latentlens.training import TrainConfig, Trainer
from latentlens.training.objective import TrainingObjective

ATTENTIONS = [
    "hyla", "hyla_no_rms_head", "hyla_mlp_linear", "hyla_mlp_linear_no_rms_head",
    "linear", "softmax",
]  # fmt: skip


def loss_and_grads(
    objective: torch.nn.Module, draws: dict[str, torch.Tensor]
) -> tuple[float, dict[str, torch.Tensor]]:
    """``objective``'s loss on ``draws`` and the gradient of each of its parameters."""
    objective.zero_grad(set_to_none=True)
    loss = objective(draws)
    loss.backward()
    named = objective.named_parameters()
    return float(loss), {n: p.grad.detach().clone() for n, p in named if p.grad is not None}


def compare(eager: torch.nn.Module, compiled: torch.nn.Module, draws: dict, label: str) -> None:
    """Print the loss difference and the parameters whose gradients differ most."""
    loss_e, grads_e = loss_and_grads(eager, draws)
    loss_c, grads_c = loss_and_grads(compiled, draws)
    rows = []
    for name, g in grads_e.items():
        other = grads_c.get(name.removeprefix("_orig_mod."))
        if other is None:
            other = grads_c.get("_orig_mod." + name)
        scale = float(g.norm())
        diff = float((other - g).norm()) if other is not None else float("nan")
        rows.append((diff / max(scale, 1e-30), name, scale))
    rows.sort(key=lambda r: -r[0] if r[0] == r[0] else -1e9)
    worse = sum(r[0] > 1e-3 for r in rows)
    print(
        f"  {label}: loss eager {loss_e:.7f} compiled {loss_c:.7f} "
        f"(diff {loss_c - loss_e:+.2e}); {worse} of {len(rows)} gradients off by > 1e-3"
    )
    for rel, name, scale in rows[:4]:
        print(f"    {name}: relative difference {rel:.2e} (gradient norm {scale:.2e})")


@contextlib.contextmanager
def compiled_as(variant: str) -> Iterator[str]:
    """Inductor's settings and the determinism ``variant`` (``BACKEND[:KEY=VALUE,...]``)
    names, in force inside the block; yields the backend's name."""
    backend, _, settings = variant.partition(":")
    patches, deterministic = {}, False
    for setting in filter(None, settings.split(",")):
        if setting == "deterministic":
            deterministic = True
            continue
        key, _, value = setting.partition("=")
        patches[key] = ast.literal_eval(value)
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(deterministic or before, warn_only=True)
    try:
        with torch._inductor.config.patch(patches):
            yield backend
    finally:
        torch.use_deterministic_algorithms(before)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--attentions", nargs="+", default=ATTENTIONS)
    parser.add_argument("--steps", type=int, default=5, help="eager steps before the 2nd look")
    parser.add_argument(
        "--variants",
        nargs="+",
        default=["inductor"],
        help="BACKEND[:KEY=VALUE,...|deterministic] per compilation",
    )
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    for attention in args.attentions:
        print(f"{attention}:", flush=True)
        config = Trainer.resolve_config(
            "sraven",
            TransformerConfig.preset("sraven", attention=attention, attention_dropout=0.0),
            TrainConfig.for_task("sraven", steps=100, warmup_steps=2),
        )
        with tempfile.TemporaryDirectory() as folder:
            trainer = Trainer.create(Path(folder) / "run", config, device=args.device, quiet=True)
            task = trainer.task
            draws = task.draw(trainer.train_cfg.batch_size, "train", trainer.data_generator)
            batch = task.assemble(draws, "train")
            assembled = torch.compile(task.assemble, dynamic=False)(draws, "train")
            same = torch.equal(assembled.inputs, batch.inputs) and torch.equal(
                assembled.targets, batch.targets
            )
            print(f"  compiled assembly gives the same batch: {same}")
            eager = TrainingObjective(trainer.model, task)
            for variant in args.variants:
                with compiled_as(variant) as backend:
                    objective = TrainingObjective(trainer.model, task)
                    compiled = torch.compile(objective, backend=backend, dynamic=False)
                    compare(eager, compiled, draws, f"{variant}, at initialisation")
                torch._dynamo.reset()
            if args.steps:
                for _ in range(args.steps):
                    trainer.train_step()
                compiled = torch.compile(TrainingObjective(trainer.model, task), dynamic=False)
                compare(eager, compiled, draws, f"inductor, after {args.steps} eager steps")
                torch._dynamo.reset()
            trainer.close()


if __name__ == "__main__":
    main()
