"""AdamW's step for every parameter tensor in one fused CPU call (``adamw.c``).

PyTorch's fused CPU AdamW runs one kernel per parameter tensor after a Python pass over
them: at Table A1's fuzzy-logic sizes (40 tensors, 151k numbers) its step took 1.2-1.7 ms
of a 30 ms training step, several times what reading and writing the weights and moments
costs. :class:`FusedAdamWStep` takes the step of a :class:`torch.optim.AdamW` on its own
state (``exp_avg``, ``exp_avg_sq``, ``step``), so its state dict, checkpoints and resumes
are unchanged; the numbers are PyTorch's to float32 rounding (the same formula, the scalars
in double).
"""

from __future__ import annotations

import ctypes
from functools import cache

import torch

from latentlens.kernels.build import load, threads

POINTERS = 5  # params, grads, exp_avgs, exp_avg_sqs, steps


@cache
def library() -> ctypes.CDLL:
    lib = load("adamw")
    pointer, number = ctypes.c_void_p, ctypes.c_double
    lib.adamw_step.argtypes = [ctypes.c_int] * 2 + [pointer] * (POINTERS + 2) + [number] * 4
    return lib


class FusedAdamWStep:
    """``optimizer.step()`` (a :class:`torch.optim.AdamW`) as one kernel call where every
    parameter is a contiguous float32 CPU tensor with a gradient of the same kind and its
    state made, and the groups share learning rate, betas and eps. Other steps go to
    ``optimizer.step()``: the first (which makes the state), amsgrad, maximize, a
    differentiable optimizer, a missing gradient, any other tensor."""

    def __init__(self, optimizer: torch.optim.AdamW) -> None:
        self.optimizer = optimizer
        self.params = [p for group in optimizer.param_groups for p in group["params"]]
        self.sizes = (ctypes.c_long * len(self.params))(*(p.numel() for p in self.params))
        self.moments: tuple | None = None  # exp_avg, exp_avg_sq and step arrays, kept
        self.state_of: object = None  # the optimizer.state they were read from
        self.decays: ctypes.Array | None = None  # each tensor's weight decay
        self.decay_key: tuple[float, ...] | None = None  # each group's, when last read
        library()  # built now: a missing compiler fails here

    def __call__(self) -> None:
        grads = [p.grad for p in self.params]
        if not self._takes(grads):
            self.optimizer.step()
            return
        count, group = len(self.params), self.optimizer.param_groups[0]
        params = (ctypes.c_void_p * count)(*[p.data_ptr() for p in self.params])
        grad_data = (ctypes.c_void_p * count)(*[g.data_ptr() for g in grads])
        library().adamw_step(
            threads(), count, params, grad_data, *self.moments, self.sizes, self._decays(),
            float(group["lr"]), *group["betas"], group["eps"],
        )  # fmt: skip

    def _decays(self) -> ctypes.Array:
        """Every parameter's weight decay, read each step (a resume may change them); the
        array is made again only where they changed."""
        groups = self.optimizer.param_groups
        key = tuple(float(g["weight_decay"]) for g in groups)
        if key != self.decay_key:
            per_tensor = [decay for decay, g in zip(key, groups, strict=True) for _ in g["params"]]
            self.decays, self.decay_key = (ctypes.c_double * len(per_tensor))(*per_tensor), key
        return self.decays

    def _takes(self, grads: list[torch.Tensor | None]) -> bool:
        """Whether the kernel takes this step (reading the state's arrays where the
        optimizer's state is new: made by its first step or a load_state_dict)."""
        groups = self.optimizer.param_groups
        shared = {(float(g["lr"]), g["betas"], g["eps"]) for g in groups}
        if len(shared) != 1 or any(g["amsgrad"] or g["maximize"] or g["differentiable"]
                                   for g in groups):  # fmt: skip
            return False
        if any(g is None for g in grads) or not all(map(usable, grads)):
            return False
        if self.state_of is not self.optimizer.state or self.moments is None:
            self.moments = self._moments()
            self.state_of = self.optimizer.state if self.moments is not None else None
        return self.moments is not None and all(map(usable, self.params))

    def _moments(self) -> tuple | None:
        """Pointer arrays of every parameter's exp_avg, exp_avg_sq and step; None where a
        state is missing or not float32 on the CPU."""
        states = [self.optimizer.state.get(p) for p in self.params]
        if not all(states):
            return None
        columns = [[state[key] for state in states] for key in ("exp_avg", "exp_avg_sq", "step")]
        if not all(usable(t) for column in columns for t in column):
            return None
        count = len(self.params)
        return tuple((ctypes.c_void_p * count)(*(t.data_ptr() for t in c)) for c in columns)


def usable(tensor: torch.Tensor) -> bool:
    """A contiguous float32 CPU tensor (checked for 80 tensors a step: ``is_cpu`` and
    identities, a third of the time of ``device.type`` and equalities)."""
    return (
        tensor.is_cpu
        and tensor.dtype is torch.float32
        and tensor.layout is torch.strided
        and tensor.is_contiguous()
    )
