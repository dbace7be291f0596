"""Symbolic Raven, SRAVEN (docs/methods/tasks.md).

A 3x3 grid of panels, each with F features valued in [0, V). Every feature follows one of
eight rules, each producing a 3x3 grid (rows independent examples of the rule, columns the
sequence within a row):

====  ==================  =============================================================
id    rule                row
====  ==================  =============================================================
0     constant            c, c, c
1-4   progression         s, s+d, s+2d (mod V) for d = +1, +2, -1, -2
5     addition            a, b, (a + b) mod V
6     subtraction         a, b, (a - b) mod V
7     distribute-three    a permutation of 3 distinct values shared by all rows
====  ==================  =============================================================

A task is a multiset of F rules (C(8 + F - 1, F) = 330 for F = 4), assigned to features in
sorted order; a ``split_seed`` shuffle holds out ``frac_ood`` of them as ``ood``. ``train`` and
``test`` draw fresh instances of the in-distribution multisets. With ``permute_features`` the
features of every panel in grid column c are permuted by one permutation per example and
column, the same for all three rows; the ``*_unpermuted`` splits switch it off.

Tokens: the 9 panels row-major, each feature of a panel a one-hot token over V; the first
8 panels give 8F tokens, then F all-zero query tokens (T = 9F = 36). The last F positions
predict the final panel's features.

Batch contents:

- ``inputs`` ``[batch, 9F, V]``; ``targets`` ``[batch, F]`` (the answer panel, long)
- ``labels["rules"]`` ``[batch, F]``: rule of each feature before permutation;
  ``labels["answer_rules"]`` ``[batch, F]``: rule of each feature slot of the answer panel;
  ``labels["permutations"]`` ``[batch, 3, F]``: shown slot j of column c holds feature
  ``permutations[b, c, j]``; ``labels["grid"]`` ``[batch, 3, 3, F]``: the shown values;
  ``labels["answer"]`` ``[batch, F]``; ``labels["combination"]`` ``[batch]``: index of the
  rule multiset in :attr:`SRavenTask.rule_multisets`.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations_with_replacement
from typing import Any

import torch
import torch.nn.functional as F

from latentlens.configs import JsonConfig, require_positive, require_probability
from latentlens.tasks.base import Batch, DrawnTask

RULE_NAMES = (
    "constant",
    "progression+1",
    "progression+2",
    "progression-1",
    "progression-2",
    "addition",
    "subtraction",
    "distribute-three",
)
PROGRESSION_STEPS = {1: 1, 2: 2, 3: -1, 4: -2}
GRID = 3
DISTRIBUTE_THREE = RULE_NAMES.index("distribute-three")


def arithmetic_coefficients() -> torch.Tensor:
    """``[rule, (A, B, C), column]``: rules 0-6 set column c of a row with draws s, t to
    ``(s A[c] + t B[c] + C[c]) mod V``; distribute-three's row is all zeros (unused)."""
    table = torch.zeros(len(RULE_NAMES), 3, GRID, dtype=torch.long)
    columns = torch.arange(GRID)
    table[0, 0] = 1  # constant: s, s, s
    for rule, step in PROGRESSION_STEPS.items():  # s, s + d, s + 2d
        table[rule, 0], table[rule, 2] = 1, step * columns
    table[5] = torch.tensor([[1, 0, 1], [0, 1, 1], [0, 0, 0]])  # addition: s, t, s + t
    table[6] = torch.tensor([[1, 0, 1], [0, 1, -1], [0, 0, 0]])  # subtraction: s, t, s - t
    return table


@dataclass(frozen=True)
class SRavenConfig(JsonConfig):
    """Sizes and split of SRAVEN; defaults are the paper's (F=4, V=8, 25% held out)."""

    num_features: int = 4
    num_values: int = 8
    frac_ood: float = 0.25
    permute_features: bool = True
    split_seed: int = 2024

    def __post_init__(self) -> None:
        owner = "SRavenConfig"
        require_positive(owner, "num_features", self.num_features)
        require_positive(owner, "num_values", self.num_values)
        if self.num_values < GRID:
            raise ValueError(
                f"{owner}.num_values={self.num_values} is invalid: distribute-three needs "
                f"{GRID} distinct values per row, so num_values must be >= {GRID}"
            )
        require_probability(owner, "frac_ood", self.frac_ood)
        total = len(rule_multisets(self.num_features))
        if total - int(total * self.frac_ood) <= 0:
            raise ValueError(f"{owner}.frac_ood={self.frac_ood} leaves no training combination")

    @property
    def seq_len(self) -> int:
        return GRID * GRID * self.num_features


def rule_multisets(num_features: int) -> torch.Tensor:
    """All multisets of ``num_features`` rules, sorted: ``[count, num_features]``."""
    return torch.tensor(list(combinations_with_replacement(range(len(RULE_NAMES)), num_features)))


def rule_answers(grid: torch.Tensor, num_values: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Which rules fit the first 8 panels of each feature grid, and what each would answer.

    ``grid`` ``[..., 3, 3]`` (rows, columns; the last cell is ignored). Returns ``fits``
    ``[..., 8]`` bool and ``answers`` ``[..., 8]`` long.
    """
    v = num_values
    full, last = grid[..., :2, :], grid[..., 2, :2]
    fits, answers = [], []
    row_const = (full == full[..., :1]).all(-1).all(-1)
    fits.append(row_const & (last[..., 0] == last[..., 1]))
    answers.append(last[..., 1])
    for step in PROGRESSION_STEPS.values():
        rows_ok = ((full[..., 1:] - full[..., :-1] - step) % v == 0).all(-1).all(-1)
        fits.append(rows_ok & ((last[..., 1] - last[..., 0] - step) % v == 0))
        answers.append((last[..., 1] + step) % v)
    fits.append(((full[..., 0] + full[..., 1] - full[..., 2]) % v == 0).all(-1))
    answers.append((last[..., 0] + last[..., 1]) % v)
    fits.append(((full[..., 0] - full[..., 1] - full[..., 2]) % v == 0).all(-1))
    answers.append((last[..., 0] - last[..., 1]) % v)
    sorted_rows = full.sort(dim=-1).values
    distinct = (sorted_rows[..., 1:] != sorted_rows[..., :-1]).all(-1).all(-1)
    same_set = (sorted_rows[..., 0, :] == sorted_rows[..., 1, :]).all(-1)
    symbols = sorted_rows[..., 0, :]  # [..., 3]
    in_set = (last[..., :, None] == symbols[..., None, :]).any(-1).all(-1)
    fits.append(distinct & same_set & in_set & (last[..., 0] != last[..., 1]))
    used = (last[..., :, None] == symbols[..., None, :]).any(-2)  # [..., 3]
    answers.append(symbols.gather(-1, (~used).long().argmax(-1, keepdim=True))[..., 0])
    return torch.stack(fits, -1), torch.stack(answers, -1)


class SRavenTask(DrawnTask):
    """Symbolic Raven; see the module docstring for the rules and the batch layout."""

    name = "sraven"
    splits = ("train", "test", "ood", "test_unpermuted", "ood_unpermuted")
    headline = ("ood", "accuracy")  # held-out rule multisets
    split_titles = {
        "train": "in-distribution rules",
        "test": "in-distribution rules, new puzzles",
        "ood": "held-out rule combinations",
        "test_unpermuted": "in-distribution rules, features unpermuted",
        "ood_unpermuted": "held-out rule combinations, features unpermuted",
    }

    def __init__(
        self,
        config: SRavenConfig | None = None,
        seed: int = 0,
        device: torch.device | str = "cpu",
    ) -> None:
        super().__init__(seed, device)
        self.config = cfg = config or SRavenConfig()
        self.rule_multisets = rule_multisets(cfg.num_features)
        order = torch.randperm(
            len(self.rule_multisets), generator=torch.Generator().manual_seed(cfg.split_seed)
        )
        num_ood = int(len(order) * cfg.frac_ood)
        self.ood_indices, self.in_dist_indices = order[:num_ood], order[num_ood:]
        trained_rules = set(self.rule_multisets[self.in_dist_indices].unique().tolist())
        if len(trained_rules) < len(RULE_NAMES):
            raise ValueError(
                f"SRavenConfig: with frac_ood={cfg.frac_ood} and split_seed={cfg.split_seed} "
                f"the rules {sorted(set(range(len(RULE_NAMES))) - trained_rules)} never occur "
                "in training; lower frac_ood or change split_seed"
            )
        self._pools = {
            "in": self.in_dist_indices.to(self.device),
            "ood": self.ood_indices.to(self.device),
        }
        self._multisets = self.rule_multisets.to(self.device)
        self._coefficients = arithmetic_coefficients().to(self.device)
        self._values = torch.arange(cfg.num_values, device=self.device)

    @property
    def loss_positions(self) -> int:  # type: ignore[override]
        """The F query positions at the end, which the loss and the metrics read."""
        return self.config.num_features

    def _pool(self, split: str) -> torch.Tensor:
        """The rule combinations ``split`` draws from (indices into the multisets)."""
        return self._pools["ood" if split.startswith("ood") else "in"]

    def _permuted(self, split: str) -> bool:
        return self.config.permute_features and not split.endswith("unpermuted")

    def draw(
        self, batch_size: int, split: str = "train", generator: torch.Generator | None = None
    ) -> dict[str, torch.Tensor]:
        """``choice`` ``[batch]`` (a combination of the split's pool); per example, feature
        and row: ``start``, ``second`` (values), ``symbols`` (noise ranking the V symbols),
        ``row_order`` (noise ranking the three columns); ``feature_order`` ``[batch, 3, F]``
        (noise ranking the features of each column) when the split permutes them."""
        self.check_split(split)
        self.check_batch_size(batch_size)
        if split.startswith("ood") and len(self.ood_indices) == 0:
            raise ValueError("this task has no ood split (frac_ood=0)")
        cfg, gen, dev = self.config, generator or self.generator, self.device
        nf, v = cfg.num_features, cfg.num_values
        shape = (batch_size, nf, GRID)
        draws = {
            "choice": torch.randint(
                len(self._pool(split)), (batch_size,), generator=gen, device=dev
            ),
            "start": torch.randint(v, shape, generator=gen, device=dev),
            "second": torch.randint(v, shape, generator=gen, device=dev),
            "symbols": torch.rand(batch_size, nf, v, generator=gen, device=dev),
            "row_order": torch.rand(*shape, GRID, generator=gen, device=dev),
        }
        if self._permuted(split):
            draws["feature_order"] = torch.rand(batch_size, GRID, nf, generator=gen, device=dev)
        return draws

    def assemble(self, draws: dict[str, torch.Tensor], split: str = "train") -> Batch:
        cfg, dev = self.config, self.device
        nf, v = cfg.num_features, cfg.num_values
        combination = self._pool(split)[draws["choice"]]
        batch_size = len(combination)
        rules = self._multisets[combination]  # [batch, F]
        grid = self._rule_grids(rules, draws).permute(0, 2, 3, 1)  # [batch, row, column, F]
        if self._permuted(split):
            perms = draws["feature_order"].argsort(dim=-1)
        else:
            perms = torch.arange(nf, device=dev).expand(batch_size, GRID, nf)
        shown = grid.gather(-1, perms[:, None].expand(-1, GRID, -1, -1))

        panels = shown.reshape(batch_size, GRID * GRID, nf)
        # One-hot by comparison: F.one_hot checks the value range on the host on a CPU.
        context = (panels[:, :-1].reshape(batch_size, -1, 1) == self._values).float()
        queries = torch.zeros(batch_size, nf, v, device=dev)
        answer = panels[:, -1]
        return Batch(
            inputs=torch.cat([context, queries], dim=1),
            targets=answer,
            labels={
                "rules": rules,
                "answer_rules": rules.gather(1, perms[:, -1]),
                "permutations": perms,
                "grid": shown,
                "answer": answer,
                "combination": combination,
            },
        )

    def _rule_grids(self, rules: torch.Tensor, draws: dict[str, torch.Tensor]) -> torch.Tensor:
        """One 3x3 grid per (example, feature) following its rule: ``[batch, F, 3, 3]``.

        Every row has two values s and t (``start``, ``second``); the arithmetic rules
        (0-6) set column c to ``(s A[c] + t B[c] + C[c]) mod V`` with the rule's
        coefficients (see :func:`arithmetic_coefficients`), distribute-three permutes three
        distinct symbols.
        """
        v = self.config.num_values
        shape = (*rules.shape, GRID)
        start, second = draws["start"][..., None], draws["second"][..., None]  # [b, F, row, 1]
        symbols = draws["symbols"].argsort(-1)[..., :GRID]
        row_order = draws["row_order"].argsort(-1)
        coefficients = self._coefficients[rules][..., None, :, :]  # [b, F, 1, (A, B, C), 3]
        arithmetic = (
            start * coefficients[..., 0, :]
            + second * coefficients[..., 1, :]
            + coefficients[..., 2, :]
        ) % v
        distribute = symbols[..., None, :].expand(*shape, GRID).gather(-1, row_order)
        is_distribute = (rules == DISTRIBUTE_THREE)[..., None, None]
        return torch.where(is_distribute, distribute, arithmetic)

    def ambiguous(self, batch: Batch) -> torch.Tensor:
        """``[batch]`` bool: some feature admits another rule that fits its first 8 panels
        but answers differently (features matched across panels by the true permutation)."""
        perms = batch.labels["permutations"]
        inverse = perms.argsort(dim=-1)
        grid = batch.labels["grid"].gather(-1, inverse[:, None].expand(-1, GRID, -1, -1))
        fits, answers = rule_answers(grid.permute(0, 3, 1, 2), self.config.num_values)
        truth = grid[:, 2, 2, :]  # [batch, F]
        return (fits & (answers != truth[..., None])).any(-1).any(-1)

    def model_io(self) -> dict[str, int]:
        """One-hot feature values in, logits over the values out, ``9 F`` tokens."""
        cfg = self.config
        return {"n_ctx": cfg.seq_len, "d_input": cfg.num_values, "d_output": cfg.num_values}

    @staticmethod
    def loss(predictions: torch.Tensor, batch: Batch) -> torch.Tensor:
        """Cross-entropy of the last F positions, mean over features.
        ``predictions`` ``[batch, 9F, V]``."""
        nf = batch.targets.shape[1]
        logits = predictions[:, -nf:]
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch.targets.reshape(-1))

    @staticmethod
    def metrics(predictions: torch.Tensor, batch: Batch) -> dict[str, torch.Tensor]:
        """``accuracy``: all F features of the answer panel right; ``feature_accuracy``."""
        nf = batch.targets.shape[1]
        correct = predictions[:, -nf:].argmax(-1) == batch.targets
        return {
            "accuracy": correct.all(-1).float().mean(),
            "feature_accuracy": correct.float().mean(),
        }

    def describe(self) -> dict[str, Any]:
        ms = self.rule_multisets
        return {
            "task": self.name,
            "config": self.config.to_dict(),
            "rules": list(RULE_NAMES),
            "counts": {"in_distribution": len(self.in_dist_indices), "ood": len(self.ood_indices)},
            "in_distribution_multisets": ms[self.in_dist_indices.sort().values].tolist(),
            "ood_multisets": ms[self.ood_indices.sort().values].tolist(),
        }
