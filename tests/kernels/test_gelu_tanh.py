"""The fused tanh GELU against the formula in float64 and against PyTorch's float32."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from latentlens.kernels.gelu_tanh import fused_gelu_tanh


def gelu_tanh_float64(x: torch.Tensor) -> torch.Tensor:
    """x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), the formula itself."""
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


def test_the_fused_gelu_and_its_gradient_match_the_formula() -> None:
    """Over the range a network's pre-activations take, tails and zero included: values
    and gradients within 2e-6 absolute of float64, where PyTorch's float32 kernel is too
    (its error on these inputs is ~7e-7, the kernel's ~8e-7; both grow with |x| as
    float32's spacing does)."""
    x = torch.cat([torch.linspace(-12, 12, 20001, dtype=torch.float64),
                   torch.tensor([0.0, 1e-30, -1e-8, 40.0, -40.0, 1e4, -1e4],
                                dtype=torch.float64)])  # fmt: skip
    ours = x.float().requires_grad_()
    exact = x.clone().requires_grad_()
    y = fused_gelu_tanh(ours)
    y_exact = gelu_tanh_float64(exact)
    torch.testing.assert_close(y.double(), y_exact.detach(), rtol=1e-6, atol=2e-6)
    dy = torch.linspace(-1, 1, x.numel())
    y.backward(dy)
    y_exact.backward(dy.double())
    torch.testing.assert_close(ours.grad.double(), exact.grad, rtol=1e-6, atol=2e-6)
    torch_y = F.gelu(x.float(), approximate="tanh")
    torch.testing.assert_close(y, torch_y, rtol=1e-6, atol=2e-6)


def test_the_fused_gelu_takes_any_layout_and_thread_count() -> None:
    x = torch.randn(7, 33, 5).transpose(0, 2)  # not contiguous
    expected = F.gelu(x, approximate="tanh")
    before = torch.get_num_threads()
    try:
        for threads in (1, 3):
            torch.set_num_threads(threads)
            torch.testing.assert_close(fused_gelu_tanh(x), expected, rtol=1e-6, atol=2e-6)
    finally:
        torch.set_num_threads(before)
