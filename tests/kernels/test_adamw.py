"""AdamW's one-call CPU step against the equations in float64 and against PyTorch's fused
AdamW. Tolerances: each step computes a few float32 operations per number, and the
scalars (bias corrections, step size) in double as PyTorch does; over 5 steps the float32
result lies within a few ulps of the float64 one (1e-6 relative, 1e-7 absolute for
the moments of gradients of order 1), and within 1e-5 of PyTorch's after 50 steps of
rounding differences that the normalised update carries on."""

from __future__ import annotations

import copy

import pytest
import torch

from latentlens.kernels.adamw import FusedAdamWStep

SHAPES = [(12, 7), (7,), (3, 4, 5), (1,)]


def parameters(seed: int) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(shape, generator=gen).requires_grad_() for shape in SHAPES]


def adamw(params: list[torch.Tensor], lr: torch.Tensor) -> torch.optim.AdamW:
    """Two groups, as the trainer builds them: decay on matrices, none on vectors."""
    groups = [{"params": [p for p in params if p.ndim >= 2], "weight_decay": 0.1},
              {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0}]  # fmt: skip
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.999), eps=1e-8, fused=True)


def gradients(step: int) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(100 + step)
    return [torch.randn(shape, generator=gen) for shape in SHAPES]


def adamw_float64(params, grads_by_step, rates, decays, beta1=0.9, beta2=0.999, eps=1e-8):
    """The equations, one step at a time, in float64."""
    params = [p.detach().double() for p in params]
    m = [torch.zeros_like(p) for p in params]
    v = [torch.zeros_like(p) for p in params]
    for step, (grads, lr) in enumerate(zip(grads_by_step, rates, strict=True), start=1):
        for i, (g, decay) in enumerate(zip(grads, decays, strict=True)):
            g = g.double()
            params[i] = params[i] * (1 - lr * decay)
            m[i] = beta1 * m[i] + (1 - beta1) * g
            v[i] = beta2 * v[i] + (1 - beta2) * g * g
            m_hat, v_hat = m[i] / (1 - beta1**step), v[i] / (1 - beta2**step)
            params[i] = params[i] - lr * m_hat / (v_hat.sqrt() + eps)
    return params, m, v


@pytest.mark.parametrize("threads", [1, 3])
def test_the_step_computes_the_equations(threads) -> None:
    """5 steps with a learning rate that changes each step (the trainer's schedule fills
    its tensor in place); the first is PyTorch's (it makes the state), the rest the
    kernel's."""
    params, lr = parameters(0), torch.tensor(1e-2)
    start = [p.detach().clone() for p in params]
    optimizer = adamw(params, lr)
    step = FusedAdamWStep(optimizer)
    rates, grads_by_step = [1e-2, 3e-2, 2e-2, 5e-3, 1e-2], [gradients(k) for k in range(5)]
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(threads)
        for rate, grads in zip(rates, grads_by_step, strict=True):
            lr.fill_(rate)
            for p, g in zip(params, grads, strict=True):
                p.grad = g.clone()
            step()
    finally:
        torch.set_num_threads(before)
    decays = [0.1 if p.ndim >= 2 else 0.0 for p in params]
    exact, m, v = adamw_float64(start, grads_by_step, [float(torch.tensor(r)) for r in rates],
                                decays)  # fmt: skip
    for p, p_exact, m_exact, v_exact in zip(params, exact, m, v, strict=True):
        state = optimizer.state[p]
        assert state["step"].item() == 5
        torch.testing.assert_close(p.detach().double(), p_exact, rtol=1e-6, atol=1e-7)
        torch.testing.assert_close(state["exp_avg"].double(), m_exact, rtol=1e-6, atol=1e-7)
        torch.testing.assert_close(state["exp_avg_sq"].double(), v_exact, rtol=1e-6, atol=1e-7)


def test_the_step_follows_pytorchs_fused_adamw_and_its_resumed_state() -> None:
    """50 steps beside torch.optim.AdamW(fused=True) from the same weights; halfway, the
    kernel's optimizer loads a state dict (as a resumed run does) and goes on from it."""
    ours, theirs, lr = parameters(1), parameters(1), torch.tensor(1e-3)
    ours_optimizer, theirs_optimizer = adamw(ours, lr), adamw(theirs, lr)
    step = FusedAdamWStep(ours_optimizer)
    for k in range(50):
        lr.fill_(1e-3 * (1 + k % 3))
        for p, q, g in zip(ours, theirs, gradients(k), strict=True):
            p.grad, q.grad = g.clone(), g.clone()
        step()
        theirs_optimizer.step()
        if k == 25:
            # a copy, as read from a checkpoint (a live state dict shares the step tensors)
            ours_optimizer.load_state_dict(copy.deepcopy(theirs_optimizer.state_dict()))
            for group in ours_optimizer.param_groups:  # the schedule's tensor, as resume does
                group["lr"] = lr
            with torch.no_grad():
                for p, q in zip(ours, theirs, strict=True):
                    p.copy_(q)
    for p, q in zip(ours, theirs, strict=True):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)
        assert ours_optimizer.state[p]["step"].item() == 50


def test_steps_the_kernel_cannot_take_go_to_pytorch(monkeypatch) -> None:
    """The first step (no state yet), a missing or non-contiguous gradient and maximize
    take ``optimizer.step()``; a usable step does not."""
    params = parameters(2)
    optimizer = adamw(params, torch.tensor(1e-3))
    step = FusedAdamWStep(optimizer)
    calls = []
    pytorch_step = optimizer.step
    monkeypatch.setattr(optimizer, "step", lambda: calls.append(1) or pytorch_step())

    def take(grads) -> int:
        for p, g in zip(params, grads, strict=True):
            p.grad = g
        before = len(calls)
        step()
        return len(calls) - before

    grads = gradients(0)
    assert take(grads) == 1  # the state is made
    assert take(grads) == 0
    assert take([None, *grads[1:]]) == 1
    assert take([grads[0].t().contiguous().t(), *grads[1:]]) == 1
    optimizer.param_groups[0]["maximize"] = True
    assert take(grads) == 1


def test_a_changed_weight_decay_is_read_at_the_next_step() -> None:
    """The per-tensor decays are kept between steps and made again when a group's weight
    decay changes (an amended resume): beside PyTorch's fused AdamW, decay 0.1 then 0.4."""
    ours, theirs, lr = parameters(3), parameters(3), torch.tensor(1e-2)
    ours_optimizer, theirs_optimizer = adamw(ours, lr), adamw(theirs, lr)
    step = FusedAdamWStep(ours_optimizer)
    for k in range(6):
        if k == 3:
            for optimizer in (ours_optimizer, theirs_optimizer):
                optimizer.param_groups[0]["weight_decay"] = 0.4
        for p, q, g in zip(ours, theirs, gradients(k), strict=True):
            p.grad, q.grad = g.clone(), g.clone()
        step()
        theirs_optimizer.step()
    for p, q in zip(ours, theirs, strict=True):
        torch.testing.assert_close(p, q, rtol=1e-6, atol=1e-7)
