"""Fuzzy logic (docs/methods/tasks.md).

L variables, K terms per task. A *term* is a full conjunction over all L variables, each
literal plain or negated; term ``i`` has polarity bits ``i`` in binary, the first variable
most significant (2^L terms). A task is a set of K distinct terms; its function is the
Zadeh fuzzy DNF f(x) = max_terms min_variables (x_i if bit = 1 else 1 - x_i).

Splits: the last floor(frac_ood_conj 2^L) terms are held out. All K-subsets of the other
terms are in-distribution combinations, shuffled with ``split_seed``; the first
floor(frac_test n) are held out as ``test`` (new combinations of familiar terms, the paper's
compositional split), the rest are ``train``. ``ood`` tasks are K-subsets of held-out terms
only (never-seen parts).

An example is T samples x_t ~ U[0,1]^L with y_t = f(x_t); token t is [x_t, y_t], the last
y is zeroed and is the target.

Batch contents:

- ``inputs`` ``[batch, T, L + 1]``; ``targets`` ``[batch]`` (y at the last position)
- ``labels["term_bits"]`` ``[batch, K, L]`` (long, 0/1), ``labels["term_indices"]``
  ``[batch, K]``, ``labels["combination"]`` ``[batch]`` (index into the split's list),
  ``labels["target_variance"]`` ``[batch]`` (variance of the example's T targets, for R²)

Input variants (``inputs=``): ``uniform``; ``fixed_query`` (one query input shared by all
examples, drawn from ``split_seed``); ``fixed_context`` (one shared context, fresh queries),
as used by the latent-code analysis.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations
from typing import Any

import torch

from latentlens.configs import JsonConfig, require_positive, require_probability
from latentlens.tasks.base import Batch, DrawnTask

INPUT_VARIANTS = ("uniform", "fixed_query", "fixed_context")


@dataclass(frozen=True)
class FuzzyLogicConfig(JsonConfig):
    """Sizes and split of the fuzzy-logic task; defaults are the paper's (L=4, K=2, T=16)."""

    num_variables: int = 4
    num_terms: int = 2
    seq_len: int = 16
    frac_test: float = 0.5
    frac_ood_conj: float = 0.25
    split_seed: int = 2024

    def __post_init__(self) -> None:
        owner = "FuzzyLogicConfig"
        for name in ("num_variables", "num_terms", "seq_len"):
            require_positive(owner, name, getattr(self, name))
        if self.seq_len < 2:
            raise ValueError(
                f"{owner}.seq_len={self.seq_len} is invalid: an example needs at "
                "least one context token and the query (seq_len >= 2)"
            )
        require_probability(owner, "frac_test", self.frac_test, exclude_zero=True)
        require_probability(owner, "frac_ood_conj", self.frac_ood_conj)
        seen = self.num_term_kinds - self.num_heldout_terms
        if seen < self.num_terms + 1:
            raise ValueError(
                f"{owner}.frac_ood_conj={self.frac_ood_conj} holds out {self.num_heldout_terms} "
                f"of {self.num_term_kinds} terms, leaving {seen}: with num_terms="
                f"{self.num_terms} that gives no split into train and test combinations; "
                "lower frac_ood_conj or num_terms"
            )
        if 0 < self.num_heldout_terms < self.num_terms:
            raise ValueError(
                f"{owner}.frac_ood_conj={self.frac_ood_conj} holds out {self.num_heldout_terms} "
                f"terms, fewer than num_terms={self.num_terms}: no ood task can be built; "
                "raise frac_ood_conj or set it to 0"
            )

    @property
    def num_term_kinds(self) -> int:
        return 2**self.num_variables

    @property
    def num_heldout_terms(self) -> int:
        return int(self.num_term_kinds * self.frac_ood_conj)


def term_bits(term_indices: torch.Tensor, num_variables: int) -> torch.Tensor:
    """Polarity bits ``[..., L]`` (long) of term indices ``[...]``, first variable MSB."""
    shifts = torch.arange(num_variables - 1, -1, -1, device=term_indices.device)
    return (term_indices[..., None] >> shifts) & 1


def fuzzy_dnf(bits: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Zadeh DNF. ``bits`` ``[batch, K, L]``, ``x`` ``[batch, T, L]`` -> ``[batch, T]``."""
    literals = torch.where(bits[:, None].bool(), x[:, :, None], 1.0 - x[:, :, None])
    return literals.amin(dim=-1).amax(dim=-1)  # and over variables, or over terms


class FuzzyLogicTask(DrawnTask):
    """The fuzzy-logic regression task; see the module docstring for the batch layout."""

    name = "fuzzy-logic"
    loss_positions = 1
    splits = ("train", "test", "ood")
    headline = ("test", "r2")  # held-out combinations: the paper's OOD
    split_titles = {
        "train": "in-distribution",
        "test": "held-out combinations",
        "ood": "held-out terms",
    }

    def __init__(
        self,
        config: FuzzyLogicConfig | None = None,
        seed: int = 0,
        device: torch.device | str = "cpu",
    ) -> None:
        super().__init__(seed, device)
        self.config = cfg = config or FuzzyLogicConfig()
        num_seen = cfg.num_term_kinds - cfg.num_heldout_terms
        in_dist = torch.tensor(list(combinations(range(num_seen), cfg.num_terms)))
        fixed = torch.Generator().manual_seed(cfg.split_seed)
        in_dist = in_dist[torch.randperm(len(in_dist), generator=fixed)]
        num_test = int(len(in_dist) * cfg.frac_test)
        if num_test == 0 or num_test == len(in_dist):
            raise ValueError(
                f"FuzzyLogicConfig.frac_test={cfg.frac_test} splits {len(in_dist)} "
                f"in-distribution combinations into {len(in_dist) - num_test} train and "
                f"{num_test} test: both must be non-empty; choose frac_test in "
                f"[{1 / len(in_dist):.3f}, {1 - 1 / len(in_dist):.3f}]"
            )
        ood = torch.tensor(
            list(combinations(range(num_seen, cfg.num_term_kinds), cfg.num_terms)),
            dtype=torch.long,
        ).reshape(-1, cfg.num_terms)
        self.combinations = {"train": in_dist[num_test:], "test": in_dist[:num_test], "ood": ood}
        missing = sorted(set(range(num_seen)) - set(self.combinations["train"].unique().tolist()))
        if missing:
            raise ValueError(
                f"FuzzyLogicConfig: with frac_test={cfg.frac_test} and split_seed="
                f"{cfg.split_seed} the terms {missing} occur in no training combination, so "
                "'test' would not be new combinations of familiar terms; lower frac_test or "
                "change split_seed"
            )
        if cfg.frac_ood_conj > 0 and len(ood) == 0:
            raise ValueError("FuzzyLogicConfig: no ood combination; raise frac_ood_conj")
        self._device_combinations = {k: v.to(self.device) for k, v in self.combinations.items()}
        self._fixed_context = torch.rand(1, cfg.seq_len - 1, cfg.num_variables, generator=fixed)
        self._fixed_query = torch.rand(1, 1, cfg.num_variables, generator=fixed)
        self._fixed_context = self._fixed_context.to(self.device)
        self._fixed_query = self._fixed_query.to(self.device)

    @property
    def eval_splits(self) -> tuple[str, ...]:
        """Every split, without ``ood`` when ``frac_ood_conj=0`` holds out no term."""
        return self.splits if len(self.combinations["ood"]) else ("train", "test")

    def sample(
        self,
        batch_size: int,
        split: str = "train",
        generator: torch.Generator | None = None,
        inputs: str = "uniform",
    ) -> Batch:
        """One batch of ``split``; ``inputs``: ``uniform`` (every x drawn), ``fixed_query``
        or ``fixed_context`` (the last x, or all the others, fixed by the split seed)."""
        if inputs not in INPUT_VARIANTS:
            raise ValueError(f"inputs={inputs!r} is unknown; choose one of {list(INPUT_VARIANTS)}")
        return self.assemble(self.draw(batch_size, split, generator), split, inputs)

    def draw(
        self, batch_size: int, split: str = "train", generator: torch.Generator | None = None
    ) -> dict[str, torch.Tensor]:
        """``choice`` ``[batch]`` (a combination of the split) and ``x`` ``[batch, T, L]``."""
        self.check_split(split)
        self.check_batch_size(batch_size)
        if split == "ood" and len(self.combinations["ood"]) == 0:
            raise ValueError("this task has no ood split (frac_ood_conj=0)")
        cfg, gen, dev = self.config, generator or self.generator, self.device
        pool = self._device_combinations[split]
        return {
            "choice": torch.randint(len(pool), (batch_size,), generator=gen, device=dev),
            "x": torch.rand(batch_size, cfg.seq_len, cfg.num_variables, generator=gen, device=dev),
        }

    def assemble(
        self, draws: dict[str, torch.Tensor], split: str = "train", inputs: str = "uniform"
    ) -> Batch:
        choice, x = draws["choice"], draws["x"]
        if inputs == "fixed_query":
            x = torch.cat([x[:, :-1], self._fixed_query.expand(len(x), -1, -1)], dim=1)
        elif inputs == "fixed_context":
            x = torch.cat([self._fixed_context.expand(len(x), -1, -1), x[:, -1:]], dim=1)
        return self.problems(self._device_combinations[split][choice], x, choice)

    def problems(
        self, terms: torch.Tensor, x: torch.Tensor, combination: torch.Tensor | None = None
    ) -> Batch:
        """The batch of the functions of ``terms`` ``[batch, K]`` (any term indices, in or
        out of a split) on inputs ``x`` ``[batch, T, L]``: e.g. the same inputs under
        another function, for counterfactual interventions. ``combination`` ``[batch]``
        is stored as the label (default: -1, no split's index)."""
        if terms.ndim != 2 or x.ndim != 3 or len(terms) != len(x):
            raise ValueError(
                f"terms {tuple(terms.shape)} and x {tuple(x.shape)}: expected [batch, K] "
                "and [batch, T, L] of one batch"
            )
        bits = term_bits(terms, self.config.num_variables)
        y = fuzzy_dnf(bits, x)
        tokens = torch.cat([x, y[..., None]], dim=-1)
        tokens[:, -1, -1] = 0.0
        if combination is None:
            combination = torch.full((len(x),), -1, dtype=torch.long, device=x.device)
        return Batch(
            inputs=tokens,
            targets=y[:, -1],
            labels={
                "term_bits": bits,
                "term_indices": terms,
                "combination": combination,
                "target_variance": y.var(dim=1, unbiased=False),
            },
        )

    def model_io(self) -> dict[str, int]:
        """Tokens ``[x, y]`` of ``num_variables + 1`` floats, one regression output."""
        cfg = self.config
        return {"n_ctx": cfg.seq_len, "d_input": cfg.num_variables + 1, "d_output": 1}

    @staticmethod
    def loss(predictions: torch.Tensor, batch: Batch) -> torch.Tensor:
        """Squared error at the last position. ``predictions`` ``[batch, T, 1]``."""
        return (predictions[:, -1, 0] - batch.targets).square().mean()

    @staticmethod
    def metrics(predictions: torch.Tensor, batch: Batch) -> dict[str, torch.Tensor]:
        """``r2``: mean over examples of 1 - (y_hat - y)^2 / var(y_1..y_T)."""
        error = (predictions[:, -1, 0] - batch.targets).square()
        return {"r2": (1.0 - error / batch.labels["target_variance"]).mean()}

    def describe(self) -> dict[str, Any]:
        cfg = self.config
        seen = cfg.num_term_kinds - cfg.num_heldout_terms
        return {
            "task": self.name,
            "config": cfg.to_dict(),
            "num_terms_total": cfg.num_term_kinds,
            "heldout_terms": list(range(seen, cfg.num_term_kinds)),
            "counts": {split: len(c) for split, c in self.combinations.items()},
            "combinations": {split: c.tolist() for split, c in self.combinations.items()},
        }
