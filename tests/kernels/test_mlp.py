"""The MLP (each engine here: oneDNN's matmuls, the sgemm kernel's blocks) against the formula in
float64 and PyTorch's float32 ops."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from latentlens.kernels import mlp
from latentlens.kernels.mlp import fused_mlp

pytestmark = pytest.mark.skipif(not mlp.available(), reason="no MLP engine runs here")
ENGINES = [e for e, here in (("sgemm", mlp.sgemm_address() is not None),
                             ("onednn", mlp.has_onednn())) if here]  # fmt: skip


def mlp_of(x, w_in, b_in, w_out):
    """gelu_tanh(x w_in^T + b_in) w_out^T, the formula itself."""
    return F.linear(F.gelu(F.linear(x, w_in, b_in), approximate="tanh"), w_out)


def parameters(d_model: int, d_mlp: int, generator: torch.Generator) -> list[torch.Tensor]:
    return [
        torch.randn(d_mlp, d_model, generator=generator, dtype=torch.float64) / d_model**0.5,
        torch.randn(d_mlp, generator=generator, dtype=torch.float64) * 0.3,
        torch.randn(d_model, d_mlp, generator=generator, dtype=torch.float64) / d_mlp**0.5,
    ]


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize(
    "shape, d_mlp, threads",
    [((2, 300, 32), 96, 1), ((2, 300, 32), 96, 3), ((5, 1, 16), 64, 2), ((3, 7, 8), 8, 1)],
)
def test_the_mlp_and_its_gradients_match_the_formula(
    engine, shape, d_mlp, threads, monkeypatch
) -> None:
    """Values and gradients within float32 rounding of float64 (2e-6 of each tensor's
    norm), as PyTorch's float32 ops are, across block edges (600 rows are three blocks
    of 256 rows at d_mlp 96, and less than one thread's share), threads and a last block
    of few rows. Only the weights' gradients sum over rows, in blocks: PyTorch's float32
    ops differ from them by about 4e-7 of their norm. Both engines: oneDNN's matmuls and
    the sgemm kernel's blocks."""
    monkeypatch.setattr(mlp, "engine", lambda: engine)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(*shape, generator=gen, dtype=torch.float64)
    exact = [x, *parameters(shape[-1], d_mlp, gen)]
    dout = torch.randn(*shape, generator=gen, dtype=torch.float64)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        ours = [t.float().requires_grad_() for t in exact]
        theirs = [t.float().requires_grad_() for t in exact]
        out = fused_mlp(*ours)
        out.backward(dout.float())
        torch_out = mlp_of(*theirs)
        torch_out.backward(dout.float())
    finally:
        torch.set_num_threads(before)
    exact = [t.requires_grad_() for t in exact]
    exact_out = mlp_of(*exact)
    exact_out.backward(dout)
    gradients = zip(ours, theirs, exact, strict=True)
    rows = [(f"grad {i}", p.grad, q.grad, r.grad) for i, (p, q, r) in enumerate(gradients)]
    for name, a, b, c in [("out", out, torch_out, exact_out), *rows]:
        a, b, c = a.detach(), b.detach(), c.detach()
        scale = float(c.norm())
        assert float((a.double() - c).norm()) <= 2e-6 * scale, name
        assert float((b.double() - c).norm()) <= 2e-6 * scale, name  # PyTorch's, as a bar
        assert float((a - b).norm()) <= 1e-6 * scale, name


@pytest.mark.parametrize("engine", ENGINES)
def test_no_rows_give_zero_weight_gradients(engine, monkeypatch) -> None:
    monkeypatch.setattr(mlp, "engine", lambda: engine)
    gen = torch.Generator().manual_seed(1)
    w_in, b_in, w_out = (t.float().requires_grad_() for t in parameters(8, 16, gen))
    x = torch.zeros(0, 3, 8, requires_grad=True)
    out = fused_mlp(x, w_in, b_in, w_out)
    assert out.shape == (0, 3, 8)
    out.sum().backward()
    for p in (w_in, b_in, w_out):
        assert torch.equal(p.grad, torch.zeros_like(p))


def test_mismatched_shapes_and_dtypes_are_refused_in_one_line() -> None:
    gen = torch.Generator().manual_seed(2)
    w_in, b_in, w_out = (t.float() for t in parameters(8, 16, gen))
    x = torch.randn(2, 3, 8)
    with pytest.raises(ValueError, match=r"x \[\.\.\., D\].*got \[2, 3, 9\]"):
        fused_mlp(torch.randn(2, 3, 9), w_in, b_in, w_out)
    with pytest.raises(ValueError, match="w_out \\[D, F\\]"):
        fused_mlp(x, w_in, b_in, w_out.T.contiguous())
    with pytest.raises(ValueError, match="float32 CPU tensors"):
        fused_mlp(x.double(), w_in, b_in, w_out)
