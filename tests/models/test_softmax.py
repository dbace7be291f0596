"""latentlens.models.softmax: torch.softmax's function with a gradient that is the same on
any number of CPU threads, checked against torch.softmax, the float64 formula, gradcheck,
vmap (a seed group's step) and one thread against two."""

from __future__ import annotations

import pytest
import torch

from latentlens.models.softmax import softmax

# SRAVEN's scores (36 keys) and a translation-like shape (20 keys): rows whose length is
# no multiple of a vector width, where PyTorch's own backward took a tail path that moved
# with the thread split; and fuzzy logic's 32 keys.
SHAPES = [(128, 16, 36, 36), (64, 8, 20, 20), (8, 8, 32, 32), (3, 5, 7, 9)]


@pytest.mark.parametrize("shape", SHAPES)
def test_the_function_is_torch_softmax_and_the_gradient_its_formula(shape) -> None:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(*shape, generator=generator, requires_grad=True)
    grad = torch.randn(*shape, generator=generator)
    y = softmax(x)
    assert torch.equal(y, torch.softmax(x.detach(), dim=-1))
    y.backward(grad)
    exact = x.detach().double().requires_grad_()
    torch.softmax(exact, dim=-1).backward(grad.double())
    # float32 rounding of y (g - Σ g y): |g| and |Σ g y| stay below ~6 for these draws,
    # a few float32 ulps of that; PyTorch's own kernel lands as far from float64
    scale = float(grad.abs().max()) * 2
    assert (x.grad.double() - exact.grad).abs().max() <= 4 * scale * torch.finfo().eps


def test_the_gradient_is_the_same_on_one_and_two_threads() -> None:
    before = torch.get_num_threads()
    try:
        for shape in SHAPES:
            generator = torch.Generator().manual_seed(1)
            x = torch.randn(*shape, generator=generator, requires_grad=True)
            grad = torch.randn(*shape, generator=generator)
            grads = []
            for threads in (1, 2):
                torch.set_num_threads(threads)
                x.grad = None
                softmax(x).backward(grad)
                grads.append(x.grad.clone())
            assert torch.equal(grads[0], grads[1]), shape
    finally:
        torch.set_num_threads(before)


def test_gradcheck_vmap_and_the_plain_paths() -> None:
    x = torch.randn(2, 3, 5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(softmax, (x,))
    weights = torch.randn(4, 3, 5)
    inputs = torch.randn(4, 3, 5)

    def loss(w: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return (softmax(v) * w).sum()

    batched = torch.func.vmap(torch.func.grad(loss, argnums=1))(weights, inputs)
    for i in range(4):
        one = torch.func.grad(loss, argnums=1)(weights[i], inputs[i])
        assert torch.allclose(batched[i], one, rtol=0, atol=1e-7)
    with torch.no_grad():
        assert torch.equal(softmax(inputs), torch.softmax(inputs, dim=-1))
