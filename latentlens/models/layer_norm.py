"""A layer norm whose gradients do not depend on the number of CPU threads.

PyTorch's CPU layer-norm backward sums the weight's and bias's gradients over the rows in
one partial sum per thread, then adds the partials: the same run on 1 and on 2 threads
rounds those sums differently, and the runs drift apart from the first step (by about
1e-7 of a loss after 300 steps). :class:`LayerNorm` computes the same function with the
input's gradient from PyTorch's kernel (row by row, so the same on any thread count) and
the weight's and bias's as column sums of ``[rows, d]`` products, which PyTorch splits
over threads by column, each column summed whole by one thread in a fixed order.

Under ``torch.compile`` and off the CPU it is ``nn.LayerNorm`` itself (inductor writes its
own reductions; a GPU's do not follow the CPU's thread count).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from latentlens.kernels import compiling


class _ColumnSummedLayerNorm(torch.autograd.Function):
    """``torch.native_layer_norm`` over the last dimension (out, mean, rstd), with weight and
    bias gradients summed by column. x: ``[..., d]``; weight, bias: ``[d]``. Written with
    PyTorch operations only, so that vmap (a seed group's step) batches it."""

    generate_vmap_rule = True

    @staticmethod
    def forward(
        x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return torch.native_layer_norm(x, (x.shape[-1],), weight, bias, eps)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: tuple) -> None:
        x, weight, bias, _ = inputs
        _, mean, rstd = output
        ctx.mark_non_differentiable(mean, rstd)
        ctx.save_for_backward(x, weight, bias, mean, rstd)

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor, *_: Any) -> tuple[torch.Tensor | None, ...]:
        x, weight, bias, mean, rstd = ctx.saved_tensors
        d = x.shape[-1]
        dx = None
        if ctx.needs_input_grad[0]:
            dx = torch.ops.aten.native_layer_norm_backward(
                dy, x, [d], mean, rstd, weight, bias, [True, False, False]
            )[0]
        dy_rows = dy.reshape(-1, d)
        dweight = dbias = None
        if ctx.needs_input_grad[1]:
            normed = (x - mean) * rstd
            dweight = (dy_rows * normed.reshape(-1, d)).sum(0)
        if ctx.needs_input_grad[2]:
            dbias = dy_rows.sum(0)
        return dx, dweight, dbias, None


class LayerNorm(nn.LayerNorm):
    """``nn.LayerNorm`` (affine, over the last dimension) whose gradients are the same on
    any number of CPU threads; see the module's docstring."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``[..., d] -> [..., d]``."""
        if (
            x.device.type != "cpu"
            or self.weight is None
            or self.bias is None
            or not torch.is_grad_enabled()
            or compiling()
        ):
            return super().forward(x)
        return _ColumnSummedLayerNorm.apply(x, self.weight, self.bias, self.eps)[0]
