"""A residual add and the layer norm of its sum as one fused CPU pass, forward and backward.

A pre-LN transformer adds each sublayer's output to the residual stream and normalises
the sum for the next sublayer. Compiled, PyTorch walks the ``[rows, d_model]`` arrays
three times for a layer norm's forward (sum, variance, output) and sums its weight
gradients in strided passes of their own backward: at Table A1's fuzzy-logic setting its
layer-norm kernels took 15% of a compiled step, bound by memory. The kernels of
``layer_norm.c`` read each row once, add, normalise and, backward, sum the weight, bias
and residual-bias gradients in the same pass. The first layer norm of a model with a
linear embedding of a few input columns also computes the embedding in its pass
(:func:`embed_forward_values`), and backward sums the embedding's gradients there, where
PyTorch ran a matmul of inner size ``d_input`` each way and wrote the embedding to memory.
The numbers are PyTorch's to float32 rounding (the sums run in another order).
"""

from __future__ import annotations

import ctypes
from functools import cache, partial

import torch
from torch.library import register_autograd, register_fake

from latentlens.kernels import compiling
from latentlens.kernels.attention_core import address
from latentlens.kernels.build import body, load, operators, slices, threads

# A compiled step takes the kernels for a stream of at least this many numbers (batch x
# positions x d_model); below, inductor's own fused kernels cost less than the operators'
# calls. Measured in alternating rounds on one thread of a Xeon, the compiled step with
# the kernels against without: 0.91x on small SRAVEN models (64 x 18 x 64), 1.01x at
# fuzzy logic's T = 16 (128 x 16 x 128 = 2^18), 1.03-1.06x at Table A1's T = 32 and
# 1.04x on the reference's SRAVEN. Eager steps take them at any size (1.11x on small
# SRAVEN).
COMPILED_FROM = 2**18
# A linear embedding of at most this many input columns is computed in the first layer
# norm's pass, its weight gradient in the backward pass's, where PyTorch ran a matmul of
# inner size k and wrote the embedding to memory. On one thread of a Xeon, at 4096 rows of
# 128, forward and backward took 0.61-0.79x the time of PyTorch's matmul and separate pass
# at k = 5 (three runs), 0.62-0.72x at k = 8, 0.96-1.18x at k = 17 and 1.32-1.94x at 32.
EMBEDDED_UP_TO = 8


@cache
def library(defines: tuple[tuple[str, int], ...] = ()) -> ctypes.CDLL:
    """The kernels' library, for this machine's vector width unless ``defines`` sets one
    (``(("LANES", 8),)``: the tests compare the widths)."""
    lib = load("layer_norm", defines)
    size, pointer = ctypes.c_size_t, ctypes.c_void_p
    lib.add_layer_norm_forward.argtypes = (
        [ctypes.c_int, size, size] + [pointer] * 5 + [ctypes.c_float] + [pointer] * 4
    )
    lib.add_layer_norm_backward.argtypes = [ctypes.c_int] * 2 + [size] * 4 + [pointer] * 12
    lib.embed_layer_norm_forward.argtypes = (
        [ctypes.c_int, size, size, size] + [pointer] * 5 + [ctypes.c_float] + [pointer] * 4
    )
    lib.embed_layer_norm_backward.argtypes = [ctypes.c_int] * 2 + [size] * 3 + [pointer] * 12
    return lib


def forward_values(
    x: torch.Tensor,
    delta: torch.Tensor | None,
    delta_bias: torch.Tensor | None,
    weight: torch.Tensor,
    bias: torch.Tensor,
    eps: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(s, layer_norm(s), mean, rstd)`` of ``s = x + delta + delta_bias`` (float32 CPU
    ``[..., d]``; ``delta`` as ``x`` and ``delta_bias`` ``[d]`` may be None); mean and
    rstd ``[...]``, the row statistics the backward pass reads."""
    # held in names while the kernel runs (a temporary copy could be freed before)
    x, weight, bias = x.contiguous(), weight.contiguous(), bias.contiguous()
    delta = None if delta is None else delta.contiguous()
    delta_bias = None if delta_bias is None else delta_bias.contiguous()
    columns = x.shape[-1]
    rows = x.numel() // max(columns, 1)
    total, normed = torch.empty_like(x), torch.empty_like(x)
    mean = x.new_empty(x.shape[:-1])
    rstd = x.new_empty(x.shape[:-1])
    library().add_layer_norm_forward(
        threads(), rows, columns, x.data_ptr(), address(delta), address(delta_bias),
        weight.data_ptr(), bias.data_ptr(), eps,
        total.data_ptr(), normed.data_ptr(), mean.data_ptr(), rstd.data_ptr(),
    )  # fmt: skip
    return total, normed, mean, rstd


def backward_values(
    total: torch.Tensor,
    mean: torch.Tensor,
    rstd: torch.Tensor,
    weight: torch.Tensor,
    d_normed: torch.Tensor,
    d_total: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(dx, dweight, dbias, ddelta_bias)`` from the forward's sum, statistics and
    weight, the gradient of its normed output and (None: zero) of its sum; ``dx`` is
    also ``delta``'s gradient and ``ddelta_bias`` its column sums."""
    rows = total.numel() // max(total.shape[-1], 1)
    return norm_backward(total, mean, rstd, weight, d_normed, None, d_total, rows, 0)


def norm_backward(
    total: torch.Tensor,
    mean: torch.Tensor,
    rstd: torch.Tensor,
    weight: torch.Tensor,
    d_normed: torch.Tensor,
    d_kept_normed: torch.Tensor | None,
    d_kept_total: torch.Tensor | None,
    positions: int,
    keep_from: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The backward kernel's ``(dx, dweight, dbias, ddelta_bias)``, its rows (batch
    element, position) pairs of ``positions`` positions, those from ``keep_from`` on
    given out apart (``d_kept_normed``, ``d_kept_total``: their gradients, None: zero)."""
    total, d_normed = total.contiguous(), d_normed.contiguous()
    mean, rstd, weight = mean.contiguous(), rstd.contiguous(), weight.contiguous()
    d_kept_normed = None if d_kept_normed is None else d_kept_normed.contiguous()
    d_kept_total = None if d_kept_total is None else d_kept_total.contiguous()
    columns = total.shape[-1]
    rows = total.numel() // max(columns, 1)
    dx = torch.empty_like(total)
    dweight, dbias, ddelta_bias = (total.new_empty(columns) for _ in range(3))
    count = slices(rows)
    partial = total.new_zeros(count, 4, columns)  # each slice's column sums and a row
    library().add_layer_norm_backward(
        threads(), count, rows, columns, positions, keep_from, total.data_ptr(), mean.data_ptr(),
        rstd.data_ptr(), weight.data_ptr(), d_normed.data_ptr(), address(d_kept_normed),
        address(d_kept_total), dx.data_ptr(), dweight.data_ptr(), dbias.data_ptr(),
        ddelta_bias.data_ptr(), partial.data_ptr(),
    )  # fmt: skip
    return dx, dweight, dbias, ddelta_bias


def kept_forward_values(
    x: torch.Tensor,
    delta: torch.Tensor | None,
    delta_bias: torch.Tensor | None,
    weight: torch.Tensor,
    bias: torch.Tensor,
    eps: float,
    keep_from: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`forward_values` of ``[batch, positions, d]`` inputs, also giving out the sum
    and the normed output at the kept positions (``keep_from`` on), where a transformer's
    last block reads them: ``(s[:, keep_from:], layer_norm(s), layer_norm(s)[:,
    keep_from:], s, mean, rstd)``, the kept rows as copies of their own."""
    total, normed, mean, rstd = forward_values(x, delta, delta_bias, weight, bias, eps)
    kept_total, kept_normed = total[:, keep_from:].clone(), normed[:, keep_from:].clone()
    return kept_total, normed, kept_normed, total, mean, rstd


def kept_backward_values(
    total: torch.Tensor,
    mean: torch.Tensor,
    rstd: torch.Tensor,
    weight: torch.Tensor,
    d_normed: torch.Tensor,
    d_kept_normed: torch.Tensor | None,
    d_kept_total: torch.Tensor | None,
    keep_from: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`backward_values` of :func:`kept_forward_values`: the gradient of the normed
    output and those (None: zero) of the kept rows' normed output and sum. A kept row's
    gradients join its row's in the kernel's pass, where autograd would have padded them
    with zeros to every position and added them."""
    return norm_backward(total, mean, rstd, weight, d_normed, d_kept_normed, d_kept_total,
                         total.shape[1], keep_from)  # fmt: skip


def embed_forward_values(
    inputs: torch.Tensor,
    embed_weight: torch.Tensor,
    embed_bias: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    eps: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(s, layer_norm(s), mean, rstd)`` of the embedding ``s = inputs @ embed_weight.T +
    embed_bias`` (float32 CPU; inputs ``[..., k]``, embed_weight ``[d, k]``): the linear
    embedding of a few input columns computed in the layer norm's pass."""
    if inputs.shape[-1] != embed_weight.shape[1]:
        raise ValueError(
            f"inputs of shape {list(inputs.shape)} do not fit an embedding weight of shape "
            f"{list(embed_weight.shape)}: their last dimension must be {embed_weight.shape[1]}"
        )
    inputs, embed_bias = inputs.contiguous(), embed_bias.contiguous()
    embed_t, weight, bias = embed_weight.t().contiguous(), weight.contiguous(), bias.contiguous()
    columns, width = embed_weight.shape
    rows = inputs.numel() // max(width, 1)
    total = inputs.new_empty(*inputs.shape[:-1], columns)
    normed = torch.empty_like(total)
    mean, rstd = inputs.new_empty(inputs.shape[:-1]), inputs.new_empty(inputs.shape[:-1])
    library().embed_layer_norm_forward(
        threads(), rows, columns, width, inputs.data_ptr(), embed_t.data_ptr(),
        embed_bias.data_ptr(), weight.data_ptr(), bias.data_ptr(), eps,
        total.data_ptr(), normed.data_ptr(), mean.data_ptr(), rstd.data_ptr(),
    )  # fmt: skip
    return total, normed, mean, rstd


def embed_backward_values(
    inputs: torch.Tensor,
    total: torch.Tensor,
    mean: torch.Tensor,
    rstd: torch.Tensor,
    weight: torch.Tensor,
    d_normed: torch.Tensor,
    d_total: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(dembed_weight, dembed_bias, dweight, dbias)`` of :func:`embed_forward_values`
    from its inputs, sum and statistics, the layer norm's weight and the gradients of its
    normed output and (None: zero) of its sum; the inputs get none."""
    inputs, total, d_normed = inputs.contiguous(), total.contiguous(), d_normed.contiguous()
    mean, rstd, weight = mean.contiguous(), rstd.contiguous(), weight.contiguous()
    d_total = None if d_total is None else d_total.contiguous()
    columns, width = total.shape[-1], inputs.shape[-1]
    rows = total.numel() // max(columns, 1)
    d_embed_weight = total.new_empty(columns, width)
    d_embed_bias, dweight, dbias = (total.new_empty(columns) for _ in range(3))
    count = slices(rows)
    partial = total.new_zeros(count, 4 + width, columns)  # each slice's sums and a row
    library().embed_layer_norm_backward(
        threads(), count, rows, columns, width, inputs.data_ptr(), total.data_ptr(),
        mean.data_ptr(), rstd.data_ptr(), weight.data_ptr(), d_normed.data_ptr(), address(d_total),
        dweight.data_ptr(), dbias.data_ptr(), d_embed_weight.data_ptr(),
        d_embed_bias.data_ptr(), partial.data_ptr(),
    )  # fmt: skip
    return d_embed_weight, d_embed_bias, dweight, dbias


class AddLayerNorm(torch.autograd.Function):
    """The kernels in eager mode (an autograd function calling the operators' bodies costs
    less a call than the operators below): ``(s, layer_norm(s))`` of ``s = x + delta +
    delta_bias``."""

    @staticmethod
    def forward(ctx, x, delta, delta_bias, weight, bias, eps):  # type: ignore[override]
        total, normed, mean, rstd = body(add_layer_norm, x, delta, delta_bias, weight, bias, eps)
        _save(ctx, (x, delta, delta_bias, weight, bias, eps), (total, normed, mean, rstd))
        return total, normed

    @staticmethod
    def backward(ctx, d_total, d_normed):  # type: ignore[override]
        return _gradients(ctx, d_total, d_normed, partial(body, add_layer_norm_backward))


def _save(ctx, inputs, output) -> None:
    """What the backward pass reads: the sum, its row statistics, the weight, and which of
    delta and delta_bias were given."""
    _x, delta, delta_bias, weight, _bias, _eps = inputs
    total, _normed, mean, rstd = output
    ctx.save_for_backward(total, mean, rstd, weight)
    ctx.has_delta, ctx.has_delta_bias = delta is not None, delta_bias is not None


def _gradients(ctx, d_total, d_normed, backward) -> tuple:
    """The inputs' gradients (``x, delta, delta_bias, weight, bias, eps``) by ``backward``
    (:func:`backward_values` or its operator) from ``ctx``'s saved tensors."""
    total, mean, rstd, weight = ctx.saved_tensors
    if d_normed is None:
        d_normed = torch.zeros_like(total)
    dx, dweight, dbias, ddelta_bias = backward(total, mean, rstd, weight, d_normed, d_total)
    delta_grad = dx if ctx.has_delta else None
    delta_bias_grad = ddelta_bias if ctx.has_delta_bias else None
    return dx, delta_grad, delta_bias_grad, dweight, dbias, None


def on_kernels(operator, function: type[torch.autograd.Function], args: tuple, outputs: int):
    """The first ``outputs`` results of a kernel: ``operator`` (its PyTorch operator) inside
    torch.compile, ``function`` (its autograd function, which costs less a call) in eager
    mode."""
    if compiling():
        return operator(*args)[:outputs]
    return function.apply(*args)


def fused_add_layer_norm(
    x: torch.Tensor,
    delta: torch.Tensor | None,
    delta_bias: torch.Tensor | None,
    norm: torch.nn.LayerNorm,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(s, norm(s))`` of ``s = x + delta + delta_bias`` (float32 CPU ``[..., d]``,
    ``delta`` as ``x`` or None, ``delta_bias`` ``[d]`` or None) on the kernels: an
    autograd function in eager mode, the operator inside torch.compile."""
    args = (x, delta, delta_bias, norm.weight, norm.bias, norm.eps)
    return on_kernels(add_layer_norm, AddLayerNorm, args, 2)


add_layer_norm, add_layer_norm_backward = operators(
    "add_layer_norm", forward_values, backward_values
)


@register_fake(add_layer_norm)
def _(x, delta, delta_bias, weight, bias, eps):
    like = torch.empty_like(x, memory_format=torch.contiguous_format)
    rows = x.new_empty(x.shape[:-1])
    return like, torch.empty_like(like), rows, torch.empty_like(rows)


@register_fake(add_layer_norm_backward)
def _(total, mean, rstd, weight, d_normed, d_total):
    columns = total.shape[-1]
    dx = torch.empty_like(total, memory_format=torch.contiguous_format)
    return dx, total.new_empty(columns), total.new_empty(columns), total.new_empty(columns)


def _setup_context(ctx, inputs, output) -> None:
    _save(ctx, inputs, output)
    ctx.mark_non_differentiable(*output[2:])


def _backward(ctx, d_total, d_normed, _d_mean, _d_rstd):
    return _gradients(ctx, d_total, d_normed, add_layer_norm_backward)


register_autograd(add_layer_norm, _backward, setup_context=_setup_context)


class EmbedLayerNorm(torch.autograd.Function):
    """:func:`embed_forward_values` in eager mode: ``(s, layer_norm(s))`` of the
    embedding ``s = inputs @ embed_weight.T + embed_bias``."""

    @staticmethod
    def forward(ctx, inputs, embed_weight, embed_bias, weight, bias, eps):  # type: ignore[override]
        output = body(embed_layer_norm, inputs, embed_weight, embed_bias, weight, bias, eps)
        _save_embed(ctx, (inputs, embed_weight, embed_bias, weight, bias, eps), output)
        return output[:2]

    @staticmethod
    def backward(ctx, d_total, d_normed):  # type: ignore[override]
        return _embed_gradients(ctx, d_total, d_normed, partial(body, embed_layer_norm_backward))


def _save_embed(ctx, inputs, output) -> None:
    """What the embedding's backward pass reads: the inputs, the sum, its row statistics
    and the layer norm's weight."""
    total, _normed, mean, rstd = output
    ctx.save_for_backward(inputs[0], total, mean, rstd, inputs[3])


def _embed_gradients(ctx, d_total, d_normed, backward) -> tuple:
    """The gradients of ``inputs, embed_weight, embed_bias, weight, bias, eps`` by
    ``backward`` (:func:`embed_backward_values` or its operator); the inputs get none."""
    inputs, total, mean, rstd, weight = ctx.saved_tensors
    if d_normed is None:
        d_normed = torch.zeros_like(total)
    d_embed_weight, d_embed_bias, dweight, dbias = backward(
        inputs, total, mean, rstd, weight, d_normed, d_total
    )
    return None, d_embed_weight, d_embed_bias, dweight, dbias, None


def fused_embed_layer_norm(
    inputs: torch.Tensor, embed: torch.nn.Linear, norm: torch.nn.LayerNorm
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(s, norm(s))`` of ``s = embed(inputs)`` (float32 CPU, inputs ``[..., k]`` that
    need no gradient) on the kernels: an autograd function in eager mode, the operator
    inside torch.compile."""
    args = (inputs, embed.weight, embed.bias, norm.weight, norm.bias, norm.eps)
    return on_kernels(embed_layer_norm, EmbedLayerNorm, args, 2)


embed_layer_norm, embed_layer_norm_backward = operators(
    "embed_layer_norm", embed_forward_values, embed_backward_values
)


@register_fake(embed_layer_norm)
def _(inputs, embed_weight, embed_bias, weight, bias, eps):
    total = inputs.new_empty(*inputs.shape[:-1], embed_weight.shape[0])
    rows = inputs.new_empty(inputs.shape[:-1])
    return total, torch.empty_like(total), rows, torch.empty_like(rows)


@register_fake(embed_layer_norm_backward)
def _(inputs, total, mean, rstd, weight, d_normed, d_total):
    columns = total.shape[-1]
    return (
        total.new_empty(columns, inputs.shape[-1]),
        *(total.new_empty(columns) for _ in range(3)),
    )


def _setup_embed_context(ctx, inputs, output) -> None:
    _save_embed(ctx, inputs, output)
    ctx.mark_non_differentiable(*output[2:])


def _embed_backward(ctx, d_total, d_normed, _d_mean, _d_rstd):
    return _embed_gradients(ctx, d_total, d_normed, embed_layer_norm_backward)


register_autograd(embed_layer_norm, _embed_backward, setup_context=_setup_embed_context)


class KeptAddLayerNorm(torch.autograd.Function):
    """:func:`kept_forward_values` in eager mode: ``(s[:, keep_from:], layer_norm(s),
    layer_norm(s)[:, keep_from:])``."""

    @staticmethod
    def forward(ctx, x, delta, delta_bias, weight, bias, eps, keep_from):  # type: ignore[override]
        output = body(kept_add_layer_norm, x, delta, delta_bias, weight, bias, eps, keep_from)
        _save_kept(ctx, (x, delta, delta_bias, weight, bias, eps, keep_from), output)
        return output[:3]

    @staticmethod
    def backward(ctx, d_kept_total, d_normed, d_kept_normed):  # type: ignore[override]
        backward = partial(body, kept_add_layer_norm_backward)
        return _kept_gradients(ctx, d_kept_total, d_normed, d_kept_normed, backward)


def _save_kept(ctx, inputs, output) -> None:
    """:func:`_save` of the whole sum, and the kept positions."""
    _kept_total, normed, _kept_normed, total, mean, rstd = output
    _save(ctx, inputs[:6], (total, normed, mean, rstd))
    ctx.keep_from = inputs[6]


def _kept_gradients(ctx, d_kept_total, d_normed, d_kept_normed, backward) -> tuple:
    """The gradients of ``x, delta, delta_bias, weight, bias, eps, keep_from`` by
    ``backward`` (:func:`kept_backward_values` or its operator)."""

    def whole(total, mean, rstd, weight, d_normed, _d_total):
        return backward(total, mean, rstd, weight, d_normed, d_kept_normed, d_kept_total,
                        ctx.keep_from)  # fmt: skip

    return (*_gradients(ctx, None, d_normed, whole), None)


def fused_kept_add_layer_norm(
    x: torch.Tensor,
    delta: torch.Tensor | None,
    delta_bias: torch.Tensor | None,
    norm: torch.nn.LayerNorm,
    keep_from: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(s[:, keep_from:], norm(s), norm(s)[:, keep_from:])`` of ``s = x + delta +
    delta_bias`` (``[batch, positions, d]``, as :func:`fused_add_layer_norm`'s) on the
    kernels: a transformer's last block, whose queries and residual are its last
    positions, while its keys and values read every position."""
    args = (x, delta, delta_bias, norm.weight, norm.bias, norm.eps, keep_from)
    return on_kernels(kept_add_layer_norm, KeptAddLayerNorm, args, 3)


kept_add_layer_norm, kept_add_layer_norm_backward = operators(
    "kept_add_layer_norm", kept_forward_values, kept_backward_values
)


@register_fake(kept_add_layer_norm)
def _(x, delta, delta_bias, weight, bias, eps, keep_from):
    total = torch.empty_like(x, memory_format=torch.contiguous_format)
    kept, rows = total[:, keep_from:].clone(), x.new_empty(x.shape[:-1])
    return kept, torch.empty_like(total), kept.clone(), total, rows, torch.empty_like(rows)


@register_fake(kept_add_layer_norm_backward)
def _(total, mean, rstd, weight, d_normed, d_kept_normed, d_kept_total, keep_from):
    columns = total.shape[-1]
    dx = torch.empty_like(total, memory_format=torch.contiguous_format)
    return dx, total.new_empty(columns), total.new_empty(columns), total.new_empty(columns)


def _setup_kept_context(ctx, inputs, output) -> None:
    _save_kept(ctx, inputs, output)
    ctx.mark_non_differentiable(*output[3:])


def _kept_backward(ctx, d_kept_total, d_normed, d_kept_normed, _d_total, _d_mean, _d_rstd):
    return _kept_gradients(ctx, d_kept_total, d_normed, d_kept_normed, kept_add_layer_norm_backward)


register_autograd(kept_add_layer_norm, _kept_backward, setup_context=_setup_kept_context)
