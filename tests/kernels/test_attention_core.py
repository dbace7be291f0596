"""The fused attention core against the equations (float64, written out pair by pair) and
against :class:`~latentlens.models.attention.Attention`'s PyTorch path, forward and
backward. Tolerances: the kernel computes in float32 and sums in another order than
PyTorch, so results agree to float32 rounding accumulated over a few dozen terms
(relative 1e-5 of the largest entry)."""

from __future__ import annotations

import itertools

import pytest
import torch

from latentlens.kernels import attention_core, native
from latentlens.kernels.attention_core import fused_attention_core
from latentlens.models import AttentionConfig, use_fused_kernels
from latentlens.models.attention import Attention

TOLERANCE = dict(rtol=1e-5, atol=1e-5)


def reference(q, k, v, bias, drop, normalization, activation, causal, query_start, eps):
    """z [batch, query, head, e] from the equations, one (query, key) pair at a time."""
    batch, queries, heads, d_head = q.shape
    keys = k.shape[1]
    z = torch.zeros(batch, queries, heads, v.shape[-1], dtype=q.dtype)
    for i in range(queries):
        seen = [j for j in range(keys) if not causal or j <= query_start + i]
        scores = torch.stack(
            [(q[:, i] * k[:, j]).sum(-1) / d_head**0.5 for j in seen], -1
        )  # [batch, head, seen]
        if bias is not None:
            scores = scores + bias[:, i, seen]
        if normalization == "softmax":
            a = scores.exp() / scores.exp().sum(-1, keepdim=True)
        elif normalization == "rms_head":
            a = scores / (scores.square().mean(1, keepdim=True) + eps).sqrt()
        else:
            a = scores
        if drop is not None:
            a = a * drop[i, seen]
        for n, j in enumerate(seen):
            weight = a[:, :, n, None]  # [batch, head, 1]
            if activation is None:
                z[:, i] += weight * v[:, j]
            else:
                u = (weight * v[:, j]).sum(1)  # [batch, e]
                phi = u.relu() if activation == "relu" else u
                z[:, i] += weight * phi[:, None]
    return z


CASES = list(itertools.product(["softmax", "rms_head", "none"], [None, "relu", "identity"]))


# 3 heads hold their keys in the vectors; 9 (softmax and no normalisation with linear
# values) hold the heads, in two vectors of 8, the second mostly padding
@pytest.mark.parametrize("heads", [3, 9])
@pytest.mark.parametrize(("normalization", "activation"), CASES)
@pytest.mark.parametrize(
    ("causal", "bias", "dropout", "keys"),
    # 6 keys: one block of 16 lanes, mostly padding; 21: a full block and a partial one
    [(False, True, True, 6), (True, False, False, 6), (True, True, True, 21)],
)
def test_the_kernel_computes_the_equations(
    normalization, activation, causal, bias, dropout, keys, heads
) -> None:
    gen = torch.Generator().manual_seed(0)
    batch, queries, d_head, d_value = 3, 4, 2, 3
    query_start = keys - queries
    tensors = [
        torch.randn(batch, queries, heads, d_head, generator=gen),
        torch.randn(batch, keys, heads, d_head, generator=gen),
        torch.randn(batch, keys, heads, d_value, generator=gen),
        torch.randn(heads, queries, keys, generator=gen) if bias else None,
        (torch.rand(queries, keys, generator=gen) > 0.3) / 0.7 if dropout else None,
    ]
    options = dict(normalization=normalization, activation=activation, causal=causal,
                   query_start=query_start, eps=1e-6)  # fmt: skip
    ours = [t.clone().requires_grad_(i < 4) if t is not None else None
            for i, t in enumerate(tensors)]  # fmt: skip
    exact = [t.double().requires_grad_(i < 4) if t is not None else None
             for i, t in enumerate(tensors)]  # fmt: skip
    spec = attention_core.core_spec(*tensors[:3], **options)
    in_lanes = heads == 9 and normalization != "rms_head" and activation is None
    assert attention_core.heads_in_lanes(spec) == in_lanes
    z = fused_attention_core(*ours, **options)
    z_exact = reference(*exact, **options)
    torch.testing.assert_close(z.double(), z_exact.detach(), **TOLERANCE)
    dz = torch.randn(z.shape, generator=gen)
    z.backward(dz)
    z_exact.backward(dz.double())
    for name, mine, theirs in zip("qkvb", ours, exact, strict=False):
        if mine is not None:
            torch.testing.assert_close(mine.grad.double(), theirs.grad, **TOLERANCE, msg=name)


@pytest.mark.parametrize(("normalization", "activation"), CASES)
def test_a_fused_layer_trains_as_the_pytorch_layer(normalization, activation) -> None:
    """Table A1's head size (2) and every option the model's layers use: relative
    positions, dropout (the same mask: both draw it alike), a query slice (the last
    layer's ``query_start``), several threads."""
    value_network = "linear" if activation is None else "mlp"
    cfg = AttentionConfig(d_model=32, n_heads=8, qk_dim=16, v_dim=16,
                          normalization=normalization, value_network=value_network,
                          activation=activation, relative_position=True,
                          num_buckets=16, max_distance=16, dropout=0.1)  # fmt: skip
    torch.manual_seed(0)
    layer = Attention(cfg).train()
    x = torch.randn(5, 12, 32, requires_grad=True)
    for query_start, threads in [(0, 1), (11, 2), (4, 3)]:
        runs = []
        for fused in (False, True):
            layer.fused = fused
            layer.zero_grad()
            x.grad = None
            torch.manual_seed(1)
            with torch_threads(threads):
                out = layer(x, query_start=query_start)
                out.backward(torch.linspace(-1, 1, out.numel()).view_as(out))
            grads = {name: p.grad.clone() for name, p in layer.named_parameters()}
            runs.append((out.detach(), x.grad.clone(), grads))
        (out, dx, grads), (fused_out, fused_dx, fused_grads) = runs
        assert_close_to_largest(fused_out, out, "out")
        assert_close_to_largest(fused_dx, dx, "x.grad")
        for name, grad in grads.items():
            if normalization == "softmax" and name == "b_K":
                # exactly 0: b_K shifts each query's scores by one q . b_K, which softmax
                # ignores; both paths hold rounding noise, small beside W_K's gradient
                noise = torch.stack([fused_grads[name], grad]).abs().max()
                assert noise < 1e-5 * grads["W_K"].abs().max()
                continue
            assert_close_to_largest(fused_grads[name], grad, name)


@pytest.mark.parametrize(("normalization", "activation"), CASES)
@pytest.mark.parametrize("cross", [False, True])
def test_a_fused_layer_with_queries_apart_trains_as_the_pytorch_layer(
    normalization, activation, cross
) -> None:
    """``attn(queries, kv=stream, query_start)`` on the kernel (q projected from the
    queries alone, k and v read in place in their joint projection): a transformer's last
    block (the queries its stream's last positions, relative positions, dropout) and
    cross-attention (another stream's keys and values); the output without its bias
    (``unbiased``) is the output less b_O."""
    value_network = "linear" if activation is None else "mlp"
    cfg = AttentionConfig(d_model=32, n_heads=8, qk_dim=16, v_dim=16,
                          normalization=normalization, value_network=value_network,
                          activation=activation, relative_position=not cross,
                          num_buckets=16, max_distance=16, dropout=0.1,
                          d_kv_input=24 if cross else None)  # fmt: skip
    torch.manual_seed(0)
    layer = Attention(cfg).train()
    torch.nn.init.normal_(layer.b_O)
    stream = torch.randn(5, 12, 24 if cross else 32, requires_grad=True)
    queries = torch.randn(5, 3, 32) if cross else stream[:, 9:].detach()
    queries.requires_grad_()
    query_start = 0 if cross else 9
    runs = []
    for fused in (False, True):
        layer.fused = fused
        layer.zero_grad()
        stream.grad = queries.grad = None
        torch.manual_seed(1)
        out = layer(queries, kv=stream, query_start=query_start)
        out.backward(torch.linspace(-1, 1, out.numel()).view_as(out))
        grads = {name: p.grad.clone() for name, p in layer.named_parameters()}
        runs.append((out.detach(), queries.grad.clone(), stream.grad.clone(), grads))
        torch.manual_seed(1)
        unbiased = layer(queries, kv=stream, query_start=query_start, unbiased=True)
        torch.testing.assert_close(unbiased + layer.b_O, out, rtol=1e-6, atol=1e-6)
    names = ("out", "queries.grad", "stream.grad")
    for name, ours, theirs in zip(names, runs[1][:3], runs[0][:3], strict=True):
        assert_close_to_largest(ours, theirs, name)
    for name, grad in runs[0][3].items():
        if normalization == "softmax" and name == "b_K":
            continue  # 0 up to rounding: see test_a_fused_layer_trains_as_the_pytorch_layer
        assert_close_to_largest(runs[1][3][name], grad, name)


def assert_close_to_largest(ours: torch.Tensor, theirs: torch.Tensor, name: str) -> None:
    """Within 1e-5 of the largest entry's magnitude. The rms normalisation divides by the
    scores' RMS across heads, which can be small: both float32 paths then sit ~5e-7 of
    the largest entry from float64, on gradients up to ~100."""
    scale = theirs.abs().max().item()
    torch.testing.assert_close(ours / scale, theirs / scale, **TOLERANCE, msg=name)


class torch_threads:
    def __init__(self, threads: int):
        self.threads = threads

    def __enter__(self):
        self.before = torch.get_num_threads()
        torch.set_num_threads(self.threads)

    def __exit__(self, *exc):
        torch.set_num_threads(self.before)


def test_a_hook_on_the_core_sees_the_pytorch_path() -> None:
    """A hook on the scores, the pattern or the value network's hidden units needs them
    computed: the layer then takes PyTorch's path (a cached pattern is the real one)."""
    cfg = AttentionConfig(d_model=16, n_heads=4, qk_dim=8, v_dim=8, normalization="rms_head",
                          value_network="mlp", activation="relu")  # fmt: skip
    layer = Attention(cfg).eval()
    use_fused_kernels(layer)
    x = torch.randn(2, 5, 16)
    seen = []
    layer.hook_pattern.add_hook(lambda t, hook: seen.append(t.shape))
    hooked = layer(x)
    layer.hook_pattern.remove_hooks()
    fused = layer(x)
    assert seen == [torch.Size([2, 4, 5, 5])]
    torch.testing.assert_close(fused, hooked, **TOLERANCE)


def test_a_padding_mask_takes_the_pytorch_path(monkeypatch) -> None:
    """The core's kernel does not cover it: PyTorch's core runs (the projections may still
    be oneDNN's, the same to float32 rounding)."""
    linear = Attention(AttentionConfig(d_model=16, n_heads=4, qk_dim=8, v_dim=8,
                                       normalization="none"))  # fmt: skip
    x, mask = torch.randn(2, 5, 16), torch.tensor([[True] * 5, [True] * 3 + [False] * 2])
    plain = linear(x, key_mask=mask)
    assert use_fused_kernels(linear) == 1
    called = []
    kernel = attention_core.core_forward
    monkeypatch.setattr(attention_core, "core_forward", lambda *a: called.append(1) or kernel(*a))
    with native.python_bodies():  # whose calls of core_forward are seen
        torch.testing.assert_close(linear(x, key_mask=mask), plain, rtol=1e-6, atol=1e-6)
        assert called == []
        assert linear(x) is not None and called == [1]  # without the mask, the kernel


def test_the_kernels_run_on_several_threads() -> None:
    """Built with OpenMP (every kernel takes build.FLAGS), a parallel region gets the
    threads it asks for; a build without it would run every call on one thread and still
    compute the same numbers."""
    assert attention_core.library().threads_used(1) == 1
    assert attention_core.library().threads_used(3) == 3


def test_self_attention_reads_q_k_and_v_in_place_or_apart_alike() -> None:
    """Self-attention's fused path reads q, k and v inside their joint projection and
    writes its gradient whole; a hook on q makes the layer form q, k and v apart (the
    hook sees the real q). Both give the same outputs and gradients, bit for bit."""
    cfg = AttentionConfig(d_model=24, n_heads=4, qk_dim=8, v_dim=12, normalization="softmax",
                          relative_position=True, num_buckets=8, max_distance=8)  # fmt: skip
    layer = Attention(cfg)
    use_fused_kernels(layer)
    x = torch.randn(3, 19, 24, requires_grad=True)
    dout = torch.randn(3, 19 - 5, 24)
    runs, seen = [], []
    for hooked in (False, True):
        if hooked:
            layer.hook_q.add_hook(lambda t, hook: seen.append(t.shape))
        layer.zero_grad()
        x.grad = None
        out = layer(x, query_start=5)
        out.backward(dout)
        runs.append([out, x.grad] + [p.grad for p in layer.parameters()])
        layer.hook_q.remove_hooks()
    assert seen == [torch.Size([3, 14, 4, 2])]
    for packed, apart in zip(*runs, strict=True):
        torch.testing.assert_close(packed, apart, rtol=0, atol=0)


def test_an_unpadded_bias_is_refused_before_the_kernel_reads_past_it() -> None:
    packed, bias = torch.randn(2, 19, 3, 7), torch.randn(3, 19, 19)
    options = ("softmax", None, False, 0, 1e-6)
    with pytest.raises(ValueError, match="bias must come padded to 32 keys"):
        attention_core.self_attention_core(packed, bias, None, 2, 2, *options)
    z, _ = attention_core.self_attention_core(
        packed, attention_core.padded(bias), None, 2, 2, *options
    )
    assert z.shape == (2, 19, 3, 3)


@pytest.mark.parametrize(
    ("normalization", "activation", "causal"),
    [("softmax", None, True), ("rms_head", "relu", False), ("none", "identity", True),
     ("none", None, False)],
)  # fmt: skip
def test_a_library_built_for_the_sizes_computes_the_generic_numbers(
    normalization, activation, causal, monkeypatch
) -> None:
    """A call of a training step's size takes a library built for its sizes and options
    (the compiler unrolls its loops); it computes the generic library's numbers bit for
    bit, forward and backward, here with a query slice, bias, dropout and 2 threads (8
    heads: softmax and linear values hold the heads in the vectors, the others the keys).
    Called with a spec it was not built for (other heads), it takes its generic path."""
    gen = torch.Generator().manual_seed(0)

    def call(heads: int, choose) -> list[torch.Tensor]:
        batch, keys, d, start = 64, 21, 2, 5
        packed = torch.randn(batch, keys, heads, 3 * d, generator=gen)
        bias = attention_core.padded(torch.randn(heads, keys - start, keys, generator=gen))
        drop = attention_core.padded((torch.rand(keys - start, keys, generator=gen) > 0.2) / 0.8)
        dz = torch.randn(batch, keys - start, heads, d, generator=gen)
        options = (d, d, normalization, activation, causal, start, 1e-6)
        monkeypatch.setattr(attention_core, "kernels_for", choose)
        with torch_threads(2), native.python_bodies():  # whose kernels_for is chosen here
            z, rows = attention_core.self_attention_core(packed, bias, drop, *options)
            grads = attention_core.self_attention_core_backward(
                packed, bias, drop, rows, dz, *options
            )
        monkeypatch.undo()
        return [z, rows, *grads]

    chosen = []
    kernels_for = attention_core.kernels_for
    state = gen.get_state()
    specialised = call(8, lambda spec: chosen.append(kernels_for(spec)) or chosen[-1])
    assert chosen[0] is not attention_core.library()  # built for (2, 2, 8, 21, ...)
    gen.set_state(state)
    generic = call(8, lambda spec: attention_core.library())
    state = gen.get_state()
    mismatched = call(4, lambda spec: chosen[0])
    # its generic path, at its own vectors' width (8 floats on AVX2 without AVX-512)
    lanes = chosen[0].vector_lanes()
    gen.set_state(state)
    generic_4 = call(4, lambda spec: attention_core.library((("LANES", lanes),)))
    for ours, theirs in zip(specialised + mismatched, generic + generic_4, strict=True):
        torch.testing.assert_close(ours, theirs, rtol=0, atol=0)


@pytest.mark.parametrize(
    ("normalization", "activation", "keys", "query_start"),
    [("softmax", None, 16, 0), ("none", None, 32, 0), ("rms_head", "relu", 32, 31),
     ("softmax", None, 21, 5)],
)  # fmt: skip
def test_a_library_built_for_the_sizes_computes_the_same_numbers_at_every_vector_width(
    normalization, activation, keys, query_start
) -> None:
    """A library built for a step's sizes holds its keys in vectors of 8 floats (AVX2's
    registers: what such a CPU builds) or 16 (AVX-512's); both compute the generic
    library's numbers bit for bit, forward and backward, with 8 heads of 16 and one block
    of 16 keys or two (fuzzy logic's T = 16 and Table A1's T = 32), and with a query
    slice. (Softmax and no normalisation hold their heads in vectors of 8 at every width:
    their numbers cannot depend on it; rms holds the keys.)"""
    heads, d, batch = 8, 16, 32
    gen = torch.Generator().manual_seed(1)
    packed = torch.randn(batch, keys, heads, 3 * d, generator=gen)
    dz = torch.randn(batch, keys - query_start, heads, d, generator=gen)
    options = (d, d, normalization, activation, False, query_start, 1e-6)

    def call(choose) -> list[torch.Tensor]:
        original = attention_core.kernels_for
        attention_core.kernels_for = choose
        try:
            with torch_threads(2):
                z, rows = attention_core.self_attention_core(packed, None, None, *options)
                grads = attention_core.self_attention_core_backward(
                    packed, None, None, rows, dz, *options
                )
        finally:
            attention_core.kernels_for = original
        return [z, rows, *grads]

    def built(lanes: int):
        def choose(spec):
            return attention_core.library((*attention_core.fixed_defines(spec), ("LANES", lanes)))

        return choose

    generic = call(lambda spec: attention_core.library())
    for lanes in (8, 16):
        for ours, theirs in zip(call(built(lanes)), generic, strict=True):
            torch.testing.assert_close(ours, theirs, rtol=0, atol=0, msg=f"{lanes} lanes")


@pytest.mark.parametrize("batch", [2, 64])  # the generic library and one built for the sizes
def test_dz_is_read_where_it_lies(batch) -> None:
    """The backward pass reads dz with its strides: laid out [batch, query, d_head, head]
    (as a matmul's gradient through W_O comes) or with an expanded batch, it gives the
    gradients of the same values made contiguous, bit for bit."""
    gen = torch.Generator().manual_seed(5)
    heads, keys, d, start = 8, 21, 2, 5
    packed = torch.randn(batch, keys, heads, 3 * d, generator=gen)
    options = (d, d, "softmax", None, False, start, 1e-6)
    _, rows = attention_core.self_attention_core(packed, None, None, *options)
    transposed = torch.randn(batch, keys - start, d, heads, generator=gen).transpose(2, 3)
    expanded = torch.randn(1, keys - start, heads, d, generator=gen).expand(batch, -1, -1, -1)
    for dz in (transposed, expanded):
        assert not dz.is_contiguous()
        strided = attention_core.self_attention_core_backward(
            packed, None, None, rows, dz, *options
        )
        contiguous = attention_core.self_attention_core_backward(
            packed, None, None, rows, dz.contiguous(), *options
        )
        for ours, theirs in zip(strided, contiguous, strict=True):
            torch.testing.assert_close(ours, theirs, rtol=0, atol=0)
