"""How a run's step computes: AdamW's parameter groups, its arithmetic (fp32, tf32, bf16), and
the checks and switches of its paths (compile's C++ compiler, CUDA graphs, the fused CPU
kernels). Used by :class:`~latentlens.training.trainer.Trainer` and the seed group."""

from __future__ import annotations

import contextlib
import os
import shutil
import warnings
from collections.abc import Iterator
from typing import Any

import torch

from latentlens.models import use_fused_kernels
from latentlens.tasks import Task


def weight_decay_groups(model: torch.nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """AdamW groups: decay for parameters of 2 or more dims, none for 1-D ones (biases of
    the output layers, norms), as in the official code's mask."""
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


def check_cuda_options(
    device: torch.device,
    task: Task | type[Task],
    compile: bool,
    cuda_graphs: bool,
    distributed: bool,
) -> None:
    """Refuse ``--compile`` and ``--cuda-graphs`` where they cannot work (``task``: the
    task or its class). On the CPU, inductor builds C++ kernels: it needs a compiler."""
    if compile and device.type == "cpu" and not cpp_compiler():
        raise ValueError(
            "--compile on the CPU builds C++ kernels and no C++ compiler was found (g++, "
            "c++ or clang++, or $CXX); install one (e.g. apt install g++) or drop --compile"
        )
    if cuda_graphs and (device.type != "cuda" or distributed):
        raise ValueError(
            "--cuda-graphs captures the whole step on one CUDA device: it needs a CUDA "
            "device and a single process (not torchrun); drop it here"
        )
    if cuda_graphs and not task.graph_capturable:
        raise ValueError(
            f"the {task.name} task's batches cannot be captured in a CUDA graph "
            "(its sampler synchronises with the host); drop --cuda-graphs (--compile works)"
        )


def cpp_compiler() -> str | None:
    """The C++ compiler inductor's CPU backend would use, if one is on the PATH."""
    names = [os.environ["CXX"]] if os.environ.get("CXX") else ["g++", "c++", "clang++"]
    return next((found for name in names if (found := shutil.which(name))), None)


def use_fused_kernels_on_cpu(model: torch.nn.Module, device: torch.device) -> None:
    """``--fused``: the model's attention cores on the fused CPU kernel (float32, to
    rounding the same step); refused where it cannot apply."""
    if device.type != "cpu":
        raise ValueError(
            f"--fused computes attention with CPU kernels; the run is on {device.type}: drop "
            "--fused (on CUDA, --compile or --cuda-graphs speed up the step)"
        )
    if not use_fused_kernels(model):
        raise ValueError(
            "--fused has no kernel for this model (it covers transformer MLPs and softmax, "
            "linear or HYLA attention with linear, relu or identity values); drop --fused"
        )


def warn_if_bf16_is_emulated() -> None:
    """bf16 on a CPU without bfloat16 arithmetic (AVX-512 BF16 or AMX) is emulated: a step
    ran 10x slower than float32 on a 2-core AVX2 machine (docs/benchmarks.md)."""
    if not (torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()):
        warnings.warn(
            "--precision bf16: this CPU has no bfloat16 arithmetic (AVX-512 BF16 or AMX), so "
            "it is emulated and about 10x slower than fp32; use --precision fp32 here",
            stacklevel=3,
        )


def precision_scope(
    precision: str, device: torch.device, graphed: bool
) -> contextlib.AbstractContextManager:
    """The arithmetic of ``precision`` for the code run inside it.

    ``bf16``: bf16 autocast (its cast cache would hold tensors across a CUDA-graph capture:
    it is off for a ``graphed`` step). ``tf32``: on CUDA, float32 matmuls multiply on TF32
    tensor cores (inputs rounded to a 10-bit mantissa, float32 accumulation), as JAX does by
    default on Ampere and Hopper GPUs; the process's setting is restored on exit. On the
    CPU ``tf32`` is strict float32. ``fp32``: strict float32, nothing changes.
    """
    if precision == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16, cache_enabled=not graphed)
    if precision == "tf32" and device.type == "cuda":
        return float32_matmul_precision("high")
    return contextlib.nullcontext()


@contextlib.contextmanager
def float32_matmul_precision(precision: str) -> Iterator[None]:
    """:func:`torch.set_float32_matmul_precision` inside the block only."""
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(precision)
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(previous)
