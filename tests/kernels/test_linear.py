"""oneDNN's linear maps (:mod:`latentlens.kernels.linear`) against the formula in float64,
and their weight gradients the same bits on any thread count at the models' shapes."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from latentlens.kernels import linear as linear_kernels
from latentlens.kernels.linear import projection, row_products, transposed

pytestmark = pytest.mark.skipif(not linear_kernels.has_onednn(), reason="PyTorch has no oneDNN")


def within_rounding(a: torch.Tensor, exact: torch.Tensor, bound: float = 2e-6) -> bool:
    """``a`` within float32 rounding of float64 ``exact``: ``bound`` of its norm."""
    exact = exact.detach()
    return float((a.detach().double() - exact).norm()) <= bound * float(exact.norm())


@pytest.mark.parametrize("shape, outputs", [((4, 9, 32), 48), ((2, 300, 16), 8), ((0, 3, 8), 16)])
@pytest.mark.parametrize("with_bias", [True, False])
def test_the_projection_and_its_gradients_match_the_formula(shape, outputs, with_bias) -> None:
    gen = torch.Generator().manual_seed(0)
    exact = [torch.randn(*shape, generator=gen, dtype=torch.float64),
             torch.randn(outputs, shape[-1], generator=gen, dtype=torch.float64) / shape[-1] ** 0.5,
             torch.randn(outputs, generator=gen, dtype=torch.float64)]  # fmt: skip
    if not with_bias:
        exact[2] = None
    dy = torch.randn(*shape[:-1], outputs, generator=gen, dtype=torch.float64)
    ours = [None if t is None else t.float().requires_grad_() for t in exact]
    out = projection(*ours)
    out.backward(dy.float())
    exact = [None if t is None else t.requires_grad_() for t in exact]
    exact_out = F.linear(*exact)
    exact_out.backward(dy)
    assert out.shape == exact_out.shape
    grads = [(p.grad, q.grad) for p, q in zip(ours, exact, strict=True) if p is not None]
    for a, b in [(out, exact_out), *grads]:
        assert within_rounding(a, b)
    if shape[0] == 0:
        assert torch.equal(ours[1].grad, torch.zeros_like(ours[1].grad))


@pytest.mark.parametrize("outputs, inputs", [(16, 24), (24, 16)])
def test_a_long_sum_is_cut_in_fixed_chunks_added_in_order(monkeypatch, outputs, inputs) -> None:
    """Rows beyond ROWS_PER_SUM are summed chunk by chunk: the same bits as the chunks'
    products added in order, and the formula's to rounding. Where ``x`` is the narrower
    operand the chunks are ``x^T dy``'s and their sum is transposed once at the end."""
    monkeypatch.setattr(linear_kernels, "ROWS_PER_SUM", 100)
    gen = torch.Generator().manual_seed(1)
    dy, x = torch.randn(250, outputs, generator=gen), torch.randn(250, inputs, generator=gen)
    first, second = (x, dy) if inputs < outputs else (dy, x)
    chunks = [
        linear_kernels.linear(first[s : s + 100].T, second[s : s + 100].T) for s in (0, 100, 200)
    ]
    total = chunks[0] + chunks[1] + chunks[2]
    found = row_products(dy, x)
    assert found.shape == (outputs, inputs) and found.is_contiguous()
    assert torch.equal(found, total.T if inputs < outputs else total)
    assert within_rounding(found, dy.double().T @ x.double())


@pytest.mark.parametrize(
    "outputs, inputs, flipped", [(256, 128, True), (128, 256, False), (128, 7, False)]
)
def test_the_narrower_operand_is_the_one_copied_transposed(
    monkeypatch, outputs, inputs, flipped
) -> None:
    """``x`` is copied (and the product taken as ``(x^T dy)^T``) only where it is narrower
    than ``dy`` and at least MIN_OUTPUTS wide: oneDNN sums the same way on any thread count
    only for products of that many rows."""
    copied = []
    original = linear_kernels.transposed
    monkeypatch.setattr(
        linear_kernels, "transposed", lambda t: copied.append(t.shape) or original(t)
    )
    gen = torch.Generator().manual_seed(4)
    dy, x = torch.randn(300, outputs, generator=gen), torch.randn(300, inputs, generator=gen)
    found = row_products(dy, x)
    assert copied[0] == ((300, inputs) if flipped else (300, outputs))
    assert within_rounding(found, dy.double().T @ x.double())


def on_each_thread_count(call) -> list[torch.Tensor]:
    """``call()`` on 1, 2, 3 and 4 threads (PyTorch's count restored after)."""
    before = torch.get_num_threads()
    try:
        found = []
        for threads in (1, 2, 3, 4):
            torch.set_num_threads(threads)
            found.append(call())
    finally:
        torch.set_num_threads(before)
    return found


# the weight gradients' shapes of the reference models: (outputs, inputs, rows)
MODEL_SHAPES = [(48, 128, 2048), (48, 128, 4096), (192, 128, 4608), (128, 64, 4608),
                (128, 16, 2048), (256, 128, 4608), (128, 256, 4096), (8, 128, 512),
                (128, 128, 3 * 8192 + 5)]  # fmt: skip


@pytest.mark.parametrize("outputs, inputs, rows", MODEL_SHAPES)
def test_weight_gradients_are_the_same_bits_on_any_thread_count(outputs, inputs, rows) -> None:
    """At every shape the reference models' fused steps sum (and one of 24,581 rows, past
    ROWS_PER_SUM, where oneDNN alone split a 128 x 128 sum by thread)."""
    gen = torch.Generator().manual_seed(2)
    dy, x = torch.randn(rows, outputs, generator=gen), torch.randn(rows, inputs, generator=gen)
    found = on_each_thread_count(lambda: row_products(dy, x))
    assert all(torch.equal(found[0], other) for other in found[1:])


def test_narrow_outputs_are_left_to_pytorch() -> None:
    assert linear_kernels.projects(linear_kernels.MIN_OUTPUTS)
    assert not linear_kernels.projects(linear_kernels.MIN_OUTPUTS - 1)


TRANSPOSE_SHAPES = [(2048, 256), (4608, 192), (333, 77), (40, 13), (7, 9), (31, 1), (1, 40),
                    (0, 5), (5, 0)]  # fmt: skip


@pytest.mark.parametrize("shape", TRANSPOSE_SHAPES)
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_the_tiled_transpose_is_the_transpose(shape, threads) -> None:
    """Shapes off the 32 x 32 tiles and the 8 x 8 blocks included (ragged last tiles and
    blocks each way), any thread count, a transposed view as input: every element where
    the transpose puts it."""
    x = torch.arange(shape[0] * shape[1], dtype=torch.float32).view(shape)
    view = torch.randn(shape[1], shape[0], generator=torch.Generator().manual_seed(0))
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        out, back = transposed(x), transposed(view.T)
    finally:
        torch.set_num_threads(previous)
    assert out.shape == (shape[1], shape[0]) and out.is_contiguous()
    assert torch.equal(out, x.T) and torch.equal(back, view)


@pytest.mark.parametrize("shape", TRANSPOSE_SHAPES)
def test_the_vector_blocks_copy_what_the_element_loop_copies(shape) -> None:
    """The build that turns 8 x 8 blocks in registers (where the machine has AVX) and the
    one that copies element by element write the same array, both the transpose."""
    x = torch.randn(shape, generator=torch.Generator().manual_seed(1))
    outs = []
    for defines in ((), (("SCALAR_TRANSPOSE", 1),)):
        out = x.new_full((shape[1], shape[0]), float("nan"))
        linear_kernels.library(defines).transpose(2, *shape, x.data_ptr(), out.data_ptr())
        outs.append(out)
    assert torch.equal(outs[0], x.T) and torch.equal(outs[1], x.T)


@pytest.mark.parametrize("outputs, inputs, rows", MODEL_SHAPES[:-1])
def test_a_transposed_view_as_second_operand_is_its_copy_to_the_bit(outputs, inputs, rows) -> None:
    """The backward passes give oneDNN the weight and ``x`` as transposed views where they
    once copied them: the same bits on 1 to 3 threads, so a run resumed across that change
    goes on as before."""
    gen = torch.Generator().manual_seed(3)
    a, w = torch.randn(outputs, rows, generator=gen), torch.randn(rows, inputs, generator=gen)
    before = torch.get_num_threads()
    try:
        for threads in (1, 2, 3):
            torch.set_num_threads(threads)
            copied = linear_kernels.linear(a, transposed(w))
            assert torch.equal(linear_kernels.linear(a, w.T), copied)
    finally:
        torch.set_num_threads(before)


needs_per_core = pytest.mark.skipif(
    not linear_kernels.has_per_core(), reason="PyTorch's library exports no sgemm_"
)


@needs_per_core
@pytest.mark.parametrize("outputs, inputs, rows", [*MODEL_SHAPES, (16, 7, 3), (8, 8, 0)])
def test_per_core_weight_gradients_match_the_formula_on_any_thread_count(
    outputs, inputs, rows
) -> None:
    """The per-core engine at the models' shapes, at fewer rows than parts and at none:
    within float32 rounding of the float64 sum, and the same bits on 1 to 4 threads."""
    gen = torch.Generator().manual_seed(5)
    dy, x = torch.randn(rows, outputs, generator=gen), torch.randn(rows, inputs, generator=gen)
    found = on_each_thread_count(lambda: linear_kernels.per_core_row_products(dy, x))
    assert found[0].shape == (outputs, inputs) and found[0].is_contiguous()
    assert all(torch.equal(found[0], other) for other in found[1:])
    if rows:
        assert within_rounding(found[0], dy.double().T @ x.double())
    else:
        assert torch.equal(found[0], torch.zeros(outputs, inputs))


@needs_per_core
def test_per_core_parts_are_summed_apart_and_added_as_a_fixed_tree(monkeypatch) -> None:
    """Rows cut into PARTS consecutive parts (1,001 rows: uneven), each summed alone, the
    sums added as ((0 + 1) + (2 + 3)): the same bits as each part's sum taken by itself."""
    gen = torch.Generator().manual_seed(6)
    dy, x = torch.randn(1001, 48, generator=gen), torch.randn(1001, 128, generator=gen)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        found = linear_kernels.per_core_row_products(dy, x)
        monkeypatch.setattr(linear_kernels, "PARTS", 1)
        bounds = [1001 * p // 4 for p in range(5)]
        sums = [linear_kernels.per_core_row_products(dy[a:b], x[a:b])
                for a, b in zip(bounds[:-1], bounds[1:], strict=True)]  # fmt: skip
    finally:
        torch.set_num_threads(before)
    assert torch.equal(found, (sums[0] + sums[1]) + (sums[2] + sums[3]))
    assert not torch.equal(found, ((sums[0] + sums[1]) + sums[2]) + sums[3])  # the order shows


@needs_per_core
def test_the_process_engine_sums_the_weight_gradients(monkeypatch) -> None:
    """:func:`row_products` (the projections' and the MLP's) follows
    :func:`use_weight_gradients`; an unknown engine is refused in one line."""
    gen = torch.Generator().manual_seed(7)
    dy, x = torch.randn(300, 48, generator=gen), torch.randn(300, 128, generator=gen)
    try:
        linear_kernels.use_weight_gradients("per-core")
        assert linear_kernels.weight_gradients() == "per-core"
        assert torch.equal(row_products(dy, x), linear_kernels.per_core_row_products(dy, x))
        linear_kernels.use_weight_gradients("onednn")
        assert torch.equal(row_products(dy, x), linear_kernels.onednn_row_products(dy, x))
        with pytest.raises(ValueError, match="weight_gradients='blas' is unknown; choose one"):
            linear_kernels.use_weight_gradients("blas")
        monkeypatch.setattr(linear_kernels, "has_per_core", lambda: False)
        with pytest.raises(ValueError, match="does not export; use 'onednn'"):
            linear_kernels.use_weight_gradients("per-core")
    finally:
        linear_kernels.use_weight_gradients("onednn")
