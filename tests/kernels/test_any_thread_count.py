"""Every fused kernel's sum over rows gives the same bits on 1, 2 and 3 threads: the rows
are cut into a fixed number of slices (``build.SLICES``; the MLP's blocks into
``mlp.BACKWARD_RUNS`` runs) whatever the thread count, so that a fused run may follow the
machine's load. With the sums cut by thread, as before, each of these differed between 1
and 2 threads in the last bits."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from latentlens.kernels import attention_core, mlp
from latentlens.kernels.gelu_tanh import bias_backward_values
from latentlens.kernels.layer_norm import add_layer_norm_backward, embed_layer_norm_backward


def on_threads(threads: int, call: Callable[[], tuple[torch.Tensor, ...]]) -> list[torch.Tensor]:
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(threads)
        return [t.clone() for t in call() if t is not None]
    finally:
        torch.set_num_threads(before)


def layer_norm_call(gen: torch.Generator) -> Callable[[], tuple[torch.Tensor, ...]]:
    total, d_normed = torch.randn(1000, 64, generator=gen), torch.randn(1000, 64, generator=gen)
    mean, rstd = total.mean(-1), torch.rand(1000, generator=gen) + 0.5
    weight = torch.randn(64, generator=gen)
    return lambda: add_layer_norm_backward(total, mean, rstd, weight, d_normed, None)


def embedding_call(gen: torch.Generator) -> Callable[[], tuple[torch.Tensor, ...]]:
    total, d_normed = torch.randn(1000, 64, generator=gen), torch.randn(1000, 64, generator=gen)
    mean, rstd = total.mean(-1), torch.rand(1000, generator=gen) + 0.5
    weight, inputs = torch.randn(64, generator=gen), torch.randn(1000, 5, generator=gen)
    return lambda: embed_layer_norm_backward(inputs, total, mean, rstd, weight, d_normed, None)


def bias_gelu_call(gen: torch.Generator) -> Callable[[], tuple[torch.Tensor, ...]]:
    h, dy = torch.randn(1000, 96, generator=gen), torch.randn(1000, 96, generator=gen)
    bias = torch.randn(96, generator=gen)
    return lambda: bias_backward_values(h, bias, dy)


def attention_call(gen: torch.Generator, heads: int = 4) -> Callable[[], tuple[torch.Tensor, ...]]:
    batch, keys, d = 50, 21, 8  # 16 slices of 3 or 4 batch elements
    packed = torch.randn(batch, keys, heads, 3 * d, generator=gen)
    bias = attention_core.padded(torch.randn(heads, keys, keys, generator=gen))
    dz = torch.randn(batch, keys, heads, d, generator=gen)
    options = (d, d, "softmax", None, True, 0, 1e-6)
    _, rows = attention_core.self_attention_core(packed, bias, None, *options)
    backward = attention_core.self_attention_core_backward
    return lambda: backward(packed, bias, None, rows, dz, *options)


def attention_heads_call(gen: torch.Generator) -> Callable[[], tuple[torch.Tensor, ...]]:
    """The attention call with 12 heads: the kernel holds them in its vectors."""
    return attention_call(gen, heads=12)


@pytest.mark.parametrize(
    "make_call",
    [layer_norm_call, embedding_call, bias_gelu_call, attention_call, attention_heads_call],
)
def test_the_backward_sums_are_the_same_bits_on_any_thread_count(make_call) -> None:
    call = make_call(torch.Generator().manual_seed(0))
    one = on_threads(1, call)
    assert one and all(t.abs().sum() > 0 for t in one)  # a sum that is there to compare
    for threads in (2, 3):
        for a, b in zip(one, on_threads(threads, call), strict=True):
            assert torch.equal(a, b), f"{make_call.__name__} on {threads} threads"


MLP_ENGINES = [e for e, here in (("sgemm", mlp.sgemm_address() is not None),
                                 ("onednn", mlp.has_onednn())) if here]  # fmt: skip


@pytest.mark.parametrize("engine", MLP_ENGINES)
@pytest.mark.parametrize(
    "rows, d_model, d_mlp",
    [(9 * mlp.block_rows(64) + 5, 32, 64), (128 * 36, 128, 256), (128, 128, 256)],
    ids=["10 blocks", "SRAVEN", "one query"],
)
def test_the_mlp_is_the_same_bits_on_any_thread_count(
    engine: str, rows: int, d_model: int, d_mlp: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each engine's forward and backward (the weights' gradients sum over rows: the sgemm
    kernel in its fixed runs, oneDNN as its matmul cuts them) on 1 to 4 threads, at a
    shape of ten blocks and at SRAVEN's and a one-query last layer's."""
    monkeypatch.setattr(mlp, "engine", lambda: engine)
    gen = torch.Generator().manual_seed(0)
    x, dout = torch.randn(rows, d_model, generator=gen), torch.randn(rows, d_model, generator=gen)
    w_in, b_in = torch.randn(d_mlp, d_model, generator=gen), torch.randn(d_mlp, generator=gen)
    w_out = torch.randn(d_model, d_mlp, generator=gen)

    def call() -> tuple[torch.Tensor, ...]:
        out, h, y = mlp.forward_values(x, w_in, b_in, w_out)
        return (out, *mlp.backward_values(x, w_in, b_in, w_out, h, y, dout))

    one = on_threads(1, call)
    for threads in (2, 3, 4):
        for a, b in zip(one, on_threads(threads, call), strict=True):
            assert torch.equal(a, b), f"{engine} on {threads} threads"
