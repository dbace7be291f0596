"""Compositional in-context regression with a modular teacher (docs/methods/tasks.md).

A teacher has ``M`` modules ``theta_m`` ``[h, d]`` and a readout ``a`` ``[h]``, drawn once from
``teacher_seed``. A task is a latent ``z`` ``[M]``: ``W(z) = sum_m z_m theta_m``, divided by
its operator norm (largest singular value), and ``y = a^T GELU(W(z) x)`` with
``x ~ U(-sqrt 3, sqrt 3)^d``. Latents come from binary masks by the reference's Algorithm 1:
``e ~ Exp(1)^M``, ``e <- e * m / sum(e * m)``, ``z = (e + m) / 2``, so active entries lie in
``(0.5, 1]`` and the others are 0.

An episode is ``N`` tokens ``[x_i, y_i]`` of width ``d + 1``; the last is the query
``[x_N, 0]`` whose ``y_N`` is the target. Splits:

- ``train``: masks of the training support (Connected+, Connected, Disconnected or custom);
  evaluating it on fresh sequences gives the in-distribution R².
- ``ood``: every 2-hot mask the support does not train.
- ``control``: the random unstructured control, a second teacher (``control_seed``) with
  latents from every 2-hot mask; nothing is shared with the trained tasks.

Batch: ``inputs`` ``[batch, N, d + 1]``; ``targets`` ``[batch]`` (``y_N``); labels ``z``
``[batch, M]``, ``mask`` ``[batch, M]`` (bool), ``mask_index`` ``[batch]`` (into the split's
mask list), ``context_mean`` ``[batch]`` (mean of ``y_1..y_{N-1}``, the R² baseline).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import combinations
from typing import Any

import torch
import torch.nn.functional as F

from latentlens.configs import JsonConfig, require_choice, require_non_negative, require_positive
from latentlens.models.init import truncated_normal_
from latentlens.tasks.base import Batch, Task

SUPPORTS = ("connected-plus", "connected", "disconnected", "custom")
Mask = tuple[int, ...]


def two_hot_masks(num_modules: int) -> list[Mask]:
    """Every pair of modules, sorted: ``(0, 1), (0, 2), ...``."""
    return list(combinations(range(num_modules), 2))


def support_masks(support: str, num_modules: int) -> list[Mask]:
    """The training masks of a named support (0-based modules), as in the reference's
    Table 1 for ``M = 6``; for other ``M`` the same construction:

    - ``connected``: the cyclic neighbours ``{i, i+1 mod M}``;
    - ``connected-plus``: those and the distance-2 pairs ``{i, i+2 mod M}``;
    - ``disconnected``: every pair inside the first half of the modules and every pair
      inside the second half (two triangles for ``M = 6``).
    """
    m = num_modules
    cyclic = {tuple(sorted((i, (i + 1) % m))) for i in range(m)}
    if support == "connected":
        chosen = cyclic
    elif support == "connected-plus":
        chosen = cyclic | {tuple(sorted((i, (i + 2) % m))) for i in range(m)}
    elif support == "disconnected":
        half = m // 2
        chosen = set(combinations(range(half), 2)) | set(combinations(range(half, m), 2))
    else:
        raise ValueError(f"support={support!r} has no built-in masks; choose one of {SUPPORTS}")
    return sorted(mask for mask in chosen if len(set(mask)) == len(mask))


def is_compositional(masks: list[Mask], num_modules: int) -> bool:
    """Compositional support (Def. 3.1 of the ICLR paper): every module appears in a mask."""
    used = {module for mask in masks for module in mask}
    return used == set(range(num_modules))


def is_connected(masks: list[Mask]) -> bool:
    """Connected support (Def. 3.2): the graph whose nodes are the masks, adjacent when
    they share a module, is connected."""
    if not masks:
        return False
    groups = [set(mask) for mask in masks]
    reached, frontier = {0}, [0]
    while frontier:
        current = groups[frontier.pop()]
        for index, group in enumerate(groups):
            if index not in reached and current & group:
                reached.add(index)
                frontier.append(index)
    return len(reached) == len(groups)


@dataclass(frozen=True)
class ModularICLConfig(JsonConfig):
    """The task of docs/methods/tasks.md; defaults are the paper's (``M = 6``,
    ``d = h = 16``, Connected+) and ours where it is silent (``num_examples = 32``, seeds).

    ``custom_masks`` (with ``support="custom"``): the training masks as tuples of 0-based
    module indices; the ``ood`` split is then every 2-hot mask not among them.
    """

    num_modules: int = 6
    x_dim: int = 16
    hidden_dim: int = 16
    num_examples: int = 32
    support: str = "connected-plus"
    custom_masks: tuple[Mask, ...] = ()
    teacher_seed: int = 2024
    control_seed: int = 2025

    def __post_init__(self) -> None:
        owner = "ModularICLConfig"
        for name in ("num_modules", "x_dim", "hidden_dim", "num_examples"):
            require_positive(owner, name, getattr(self, name))
        if self.num_modules < 2:
            raise ValueError(
                f"{owner}.num_modules={self.num_modules} is invalid: 2-hot tasks need at "
                "least 2 modules"
            )
        if self.num_examples < 2:
            raise ValueError(
                f"{owner}.num_examples={self.num_examples} is invalid: an episode needs at "
                "least one context pair and the query (num_examples >= 2)"
            )
        for name in ("teacher_seed", "control_seed"):
            require_non_negative(owner, name, getattr(self, name), integer=True)
        require_choice(owner, "support", self.support, SUPPORTS)
        masks = tuple(tuple(int(i) for i in mask) for mask in self.custom_masks)
        object.__setattr__(self, "custom_masks", masks)
        if (self.support == "custom") != bool(masks):
            raise ValueError(
                f"{owner}.custom_masks={list(masks)} does not fit support={self.support!r}: "
                "give custom_masks exactly when support='custom'"
            )
        for mask in masks:
            if not mask or len(set(mask)) != len(mask):
                raise ValueError(
                    f"{owner}.custom_masks has {mask}: a mask is a non-empty tuple of "
                    "distinct module indices"
                )
            if not all(0 <= i < self.num_modules for i in mask):
                raise ValueError(
                    f"{owner}.custom_masks has {mask}: module indices run from 0 to "
                    f"{self.num_modules - 1}"
                )
        if not is_compositional(self.train_masks, self.num_modules):
            field = "custom_masks" if masks else "support"
            missing = sorted(
                set(range(self.num_modules)) - {i for m in self.train_masks for i in m}
            )
            raise ValueError(
                f"{owner}.{field}: the training masks {self.train_masks} are not a "
                f"compositional support (modules {missing} never appear); every module must "
                "occur in some training mask"
            )

    @property
    def train_masks(self) -> list[Mask]:
        if self.support == "custom":
            return sorted({tuple(sorted(mask)) for mask in self.custom_masks})
        return support_masks(self.support, self.num_modules)

    @property
    def ood_masks(self) -> list[Mask]:
        trained = set(self.train_masks)
        return [mask for mask in two_hot_masks(self.num_modules) if mask not in trained]


def make_teacher(
    num_modules: int, hidden_dim: int, x_dim: int, seed: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Modules ``[M, h, d]`` (truncated normal, std ``1/sqrt M``) and readout ``[h]``
    (std ``1/sqrt h``), drawn on the CPU from ``seed`` so every device gets the same."""
    generator = torch.Generator().manual_seed(seed)
    modules = torch.empty(num_modules, hidden_dim, x_dim)
    readout = torch.empty(hidden_dim)
    truncated_normal_(modules, std=1.0 / math.sqrt(num_modules), generator=generator)
    truncated_normal_(readout, std=1.0 / math.sqrt(hidden_dim), generator=generator)
    return modules, readout


def teacher_weights(modules: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """``W(z) = sum_m z_m theta_m / ||sum_m z_m theta_m||_2``: ``[batch, h, d]``."""
    weights = torch.einsum("bm,mhd->bhd", z, modules)
    return weights / torch.linalg.matrix_norm(weights, ord=2)[:, None, None]


def teacher_outputs(
    modules: torch.Tensor, readout: torch.Tensor, z: torch.Tensor, x: torch.Tensor
) -> torch.Tensor:
    """``y = a^T GELU(W(z) x)`` (GELU's tanh form): ``x`` ``[batch, n, d]`` -> ``[batch, n]``."""
    hidden = torch.einsum("bnd,bhd->bnh", x, teacher_weights(modules, z))
    return F.gelu(hidden, approximate="tanh") @ readout


def sample_latents(
    masks: torch.Tensor, batch_size: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Algorithm 1: a mask per sequence, uniform over ``masks`` ``[K, M]``; ``e ~ Exp(1)``
    on its active modules, normalised to sum 1; ``z = (e + m) / 2``.

    Returns ``z`` ``[batch, M]`` and the chosen mask indices ``[batch]``.
    """
    index = torch.randint(len(masks), (batch_size,), generator=generator, device=masks.device)
    mask = masks[index]
    e = torch.empty(mask.shape, device=masks.device).exponential_(generator=generator) * mask
    e = e / e.sum(dim=-1, keepdim=True)
    return 0.5 * (e + mask), index


class ModularICLTask(Task):
    """In-context regression of a composed teacher; see the module docstring."""

    name = "modular-icl"
    splits = ("train", "ood", "control")
    headline = ("ood", "r2")  # the masks not trained on
    split_titles = {
        "train": "training support",
        "ood": "held-out module combinations",
        "control": "random unstructured control",
    }
    # The teacher's operator norm is an SVD, which synchronises with the host on CUDA.
    graph_capturable = False

    def __init__(
        self,
        config: ModularICLConfig | None = None,
        seed: int = 0,
        device: torch.device | str = "cpu",
    ) -> None:
        super().__init__(seed, device)
        cfg = self.config = config or ModularICLConfig()
        teacher = make_teacher(cfg.num_modules, cfg.hidden_dim, cfg.x_dim, cfg.teacher_seed)
        control = make_teacher(cfg.num_modules, cfg.hidden_dim, cfg.x_dim, cfg.control_seed)
        self.teacher = tuple(t.to(self.device) for t in teacher)
        self.control_teacher = tuple(t.to(self.device) for t in control)
        self.masks = {
            "train": self._mask_tensor(cfg.train_masks),
            "ood": self._mask_tensor(cfg.ood_masks),
            "control": self._mask_tensor(two_hot_masks(cfg.num_modules)),
        }

    def _mask_tensor(self, masks: list[Mask]) -> torch.Tensor:
        tensor = torch.zeros(len(masks), self.config.num_modules, device=self.device)
        for row, mask in enumerate(masks):
            tensor[row, list(mask)] = 1.0
        return tensor

    @property
    def eval_splits(self) -> tuple[str, ...]:
        return self.splits if len(self.masks["ood"]) else ("train", "control")

    def sample(
        self, batch_size: int, split: str = "train", generator: torch.Generator | None = None
    ) -> Batch:
        self.check_batch_size(batch_size)
        self.check_split(split)
        masks = self.masks[split]
        if not len(masks):
            raise ValueError(
                "this task has no ood split: the training support holds every 2-hot mask"
            )
        cfg, gen = self.config, generator or self.generator
        z, index = sample_latents(masks, batch_size, gen)
        shape = (batch_size, cfg.num_examples, cfg.x_dim)
        x = (torch.rand(shape, generator=gen, device=self.device) * 2.0 - 1.0) * math.sqrt(3.0)
        modules, readout = self.control_teacher if split == "control" else self.teacher
        y = teacher_outputs(modules, readout, z, x)
        tokens = torch.cat([x, y[..., None]], dim=-1)
        tokens[:, -1, -1] = 0.0
        return Batch(
            inputs=tokens,
            targets=y[:, -1],
            labels={
                "z": z,
                "mask": masks[index].bool(),
                "mask_index": index,
                "context_mean": y[:, :-1].mean(dim=1),
            },
        )

    def model_io(self) -> dict[str, int]:
        """Tokens ``[x, y]`` of ``x_dim + 1`` floats, one output read at the query."""
        cfg = self.config
        return {"n_ctx": cfg.num_examples, "d_input": cfg.x_dim + 1, "d_output": 1}

    @staticmethod
    def loss(predictions: torch.Tensor, batch: Batch) -> torch.Tensor:
        """Squared error on the query. ``predictions`` ``[batch, pos, 1]`` (last read)."""
        return (predictions[:, -1, 0] - batch.targets).square().mean()

    def metrics(self, predictions: torch.Tensor, batch: Batch) -> dict[str, torch.Tensor]:
        """``r2`` of this batch (see :meth:`finish_metrics`)."""
        sums = self.metric_sums(predictions, batch)
        return {"r2": 1.0 - sums["sse"] / sums["sse_context_mean"]}

    def metric_sums(self, predictions: torch.Tensor, batch: Batch) -> dict[str, torch.Tensor]:
        """Squared errors of the model and of the context-mean baseline, summed."""
        return {
            "sse": (predictions[:, -1, 0] - batch.targets).square().sum(),
            "sse_context_mean": (batch.labels["context_mean"] - batch.targets).square().sum(),
        }

    def finish_metrics(self, sums: dict[str, float], count: int) -> dict[str, float]:  # noqa: ARG002
        """``r2 = 1 - MSE(y_N, y_hat) / MSE(y_N, mean of the context's y)``, a ratio of sums
        over the evaluation set (per-sequence ratios are heavy-tailed)."""
        return {"r2": 1.0 - sums["sse"] / sums["sse_context_mean"]}

    def describe(self) -> dict[str, Any]:
        cfg = self.config
        return {
            "support": cfg.support,
            "train_masks": [list(m) for m in cfg.train_masks],
            "ood_masks": [list(m) for m in cfg.ood_masks],
            "connected": is_connected(cfg.train_masks),
            "num_examples": cfg.num_examples,
        }
