"""Causal tests of SRAVEN's latent codes: swap the final queries' codes for a donor's whose
rules differ in one feature, and see whether the model then answers with the donor's rule
applied to its own puzzle (docs/methods/probes.md, "Interventions on the codes").

The code is the vector of attention weights over heads, a(·, q, k); here q runs over the
F query positions (the answer panel's features) and k over every key, in one layer or all.
Puzzles are drawn unpermuted (feature j sits in slot j of every panel, so a query's keys
mean the same in the donor's puzzle as in the model's own).

*Donors.* ``one-rule``: rules that differ from the puzzle's in one feature f, kept in
ascending order (as the task assigns a multiset to features), drawn from the puzzle's own
draws, so that every other feature shows the same panels (the closest SRAVEN has to the
same inputs under another function); ``random-combination``: another rule multiset on the
same draws; ``same-combination``: the same rules on fresh draws (the control: codes of
another instance of the same rules).

*Readings*, over (puzzle, feature) pairs: where the donor's rule differs from the puzzle's
and would answer the puzzle's own last row differently (``rule_answers`` on its panels),
``donor`` is the share of predictions that give the donor rule's answer and ``own`` the
share that still give the puzzle's answer, clean and swapped; where the rules agree,
``kept`` is the share of right answers clean and swapped. Codes that carry the rule move
``donor`` up from 0 while ``kept`` stays; codes that only disrupt lower ``own`` and
``kept`` alike.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from latentlens.probes.code_interventions import final_query_codes, run_with_final_codes
from latentlens.probes.interventions import PARTS, rows_of
from latentlens.tasks.base import Batch
from latentlens.tasks.sraven import RULE_NAMES, rule_answers

if TYPE_CHECKING:
    from collections.abc import Sequence

    from latentlens.probes.source import HookedLike
    from latentlens.tasks.sraven import SRavenTask

DONOR_KINDS = ("one-rule", "random-combination", "same-combination")
SPLITS = ("test_unpermuted", "ood_unpermuted")


def puzzles_of(
    task: SRavenTask, combinations: torch.Tensor, draws: dict[str, torch.Tensor]
) -> Batch:
    """Unpermuted puzzles of the rule multisets ``combinations`` ``[n]`` (indices into
    ``task.rule_multisets``, from either split's pool) made from ``draws`` (the task's
    :meth:`~latentlens.tasks.sraven.SRavenTask.draw` of ``n`` unpermuted puzzles: the panels'
    starting values, symbols and row orders), in order."""
    pools = {"test_unpermuted": task.in_dist_indices, "ood_unpermuted": task.ood_indices}
    parts, order = [], []
    for split, pool in pools.items():
        where = (combinations.cpu()[:, None] == pool[None, :]).nonzero()
        if not len(where):
            continue
        rows = where[:, 0]
        chosen = {key: value[rows.to(value.device)] for key, value in draws.items()}
        chosen["choice"] = where[:, 1].to(draws["choice"].device)
        parts.append(task.assemble(chosen, split))
        order.append(rows)
    rows = torch.cat(order)
    if len(rows) != len(combinations):
        raise ValueError("some combinations are in no pool of the task")
    return rows_of(Batch.cat(parts), rows.argsort().to(parts[0].inputs.device))


def combination_index(task: SRavenTask, rules: torch.Tensor) -> torch.Tensor:
    """The index in ``task.rule_multisets`` of each sorted rule row ``[n, F]``."""
    multisets = task.rule_multisets.to(rules.device)
    return (rules[:, None, :] == multisets[None]).all(-1).int().argmax(-1)


def one_rule_rules(rules: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """For each sorted rule row ``[n, F]``, the same rules with one feature's rule changed,
    ascending order kept (the new rule lies between its neighbours' rules): a feature and
    a rule drawn uniformly among the changes possible. ``[n, F]``."""
    last = len(RULE_NAMES) - 1
    changed = rules.clone()
    for row, values in enumerate(rules.tolist()):
        options = []
        for feature, rule in enumerate(values):
            low = values[feature - 1] if feature else 0
            high = values[feature + 1] if feature + 1 < len(values) else last
            options += [(feature, r) for r in range(low, high + 1) if r != rule]
        feature, rule = options[int(torch.randint(len(options), (1,), generator=generator))]
        changed[row, feature] = rule
    return changed


def donor_puzzles(
    task: SRavenTask,
    batch: Batch,
    draws: dict[str, torch.Tensor],
    kind: str,
    generator: torch.Generator,
) -> Batch:
    """A donor for every puzzle of ``batch``, made from ``draws`` (see the module
    docstring): ``one-rule`` and ``random-combination`` donors from the puzzle's own draws
    (a feature whose rule is kept shows the same panels), ``same-combination`` ones from
    fresh draws."""
    if kind not in DONOR_KINDS:
        raise ValueError(f"kind={kind!r} is unknown; choose one of {list(DONOR_KINDS)}")
    rules, own = batch.labels["rules"].cpu(), batch.labels["combination"].cpu()
    if kind == "one-rule":
        return puzzles_of(task, combination_index(task, one_rule_rules(rules, generator)), draws)
    if kind == "random-combination":
        shift = torch.randint(1, len(task.rule_multisets), own.shape, generator=generator)
        return puzzles_of(task, (own + shift) % len(task.rule_multisets), draws)
    fresh = task.draw(len(batch), "test_unpermuted", generator)
    return puzzles_of(task, own, fresh)


def answers(
    model: HookedLike, batch: Batch, queries: int, replaced: dict[int, torch.Tensor] | None = None
) -> torch.Tensor:
    """The answer panel the model gives ``[batch, F]``, with the last ``queries`` positions'
    codes of each layer in ``replaced`` put in place."""
    return run_with_final_codes(model, batch.inputs, replaced, queries).argmax(-1)


def rule_answer_on(batch: Batch, rules: torch.Tensor, num_values: int) -> torch.Tensor:
    """What rules ``[batch, F]`` would answer on each puzzle's own last row ``[batch, F]``
    (unpermuted puzzles: feature j in slot j)."""
    grid = batch.labels["grid"].permute(0, 3, 1, 2)  # [batch, F, row, column]
    _, every = rule_answers(grid, num_values)  # [batch, F, rule]
    return every.gather(-1, rules[..., None].to(every.device))[..., 0]


def share(hits: torch.Tensor) -> tuple[float, float]:
    """The share of true ``hits`` ``[n]`` and its standard error over
    :data:`~latentlens.probes.interventions.PARTS` parts (as every intervention's)."""
    if not len(hits):
        return float("nan"), float("nan")
    values = hits.double().cpu()
    parts = [float(p.mean()) for p in values.tensor_split(PARTS) if len(p)]
    error = float(np.std(parts, ddof=1) / len(parts) ** 0.5) if len(parts) > 1 else float("nan")
    return float(values.mean()), error


@dataclass(frozen=True)
class RuleSwapResult:
    """One swap: ``donor`` kind, the ``layers`` swapped, ``pairs`` (puzzle, feature) pairs
    whose donor rule answers differently (``changed``) and ``kept_pairs`` whose rule is the
    donor's. Shares (each ± its standard error): the donor rule's answer given clean and
    swapped, the puzzle's own answer there clean and swapped, right answers where the rule
    is kept clean and swapped."""

    donor: str
    layers: tuple[int, ...]
    puzzles: int
    pairs: int
    kept_pairs: int
    donor_clean: float
    donor_swapped: float
    donor_swapped_se: float
    own_clean: float
    own_swapped: float
    own_swapped_se: float
    kept_clean: float
    kept_swapped: float
    kept_swapped_se: float

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def swap_rule_codes(
    model: HookedLike, task: SRavenTask, batch: Batch, donor: Batch, layers: Sequence[int],
    donor_name: str,
) -> RuleSwapResult:  # fmt: skip
    """Swap ``batch``'s final-query codes in ``layers`` for ``donor``'s (same size)."""
    if len(donor) != len(batch):
        raise ValueError(f"donor has {len(donor)} puzzles, batch {len(batch)}: pass equal sizes")
    queries = task.config.num_features
    codes = final_query_codes(model, donor, layers, queries)
    clean = answers(model, batch, queries)
    return read_swap(model, task, batch, donor, clean, codes, tuple(layers), donor_name)


def read_swap(
    model: HookedLike, task: SRavenTask, batch: Batch, donor: Batch, clean: torch.Tensor,
    codes: torch.Tensor, layers: tuple[int, ...], donor_name: str,
) -> RuleSwapResult:  # fmt: skip
    """The swap of ``donor``'s codes ``[batch, layer, head, queries, key]`` (one entry per
    layer of ``layers``) into ``batch``, read against the ``clean`` answers ``[batch, F]``."""
    queries = task.config.num_features
    replaced = {layer: codes[:, i] for i, layer in enumerate(layers)}
    swapped = answers(model, batch, queries, replaced)
    own = batch.targets
    theirs = rule_answer_on(batch, donor.labels["rules"], task.config.num_values)
    same_rule = donor.labels["rules"].to(own.device) == batch.labels["rules"].to(own.device)
    changed = ~same_rule & (theirs != own)
    donor_swapped, donor_se = share((swapped == theirs)[changed])
    own_swapped, own_se = share((swapped == own)[changed])
    kept_swapped, kept_se = share((swapped == own)[same_rule])
    return RuleSwapResult(
        donor_name, layers, len(batch), int(changed.sum()), int(same_rule.sum()),
        share((clean == theirs)[changed])[0], donor_swapped, donor_se,
        share((clean == own)[changed])[0], own_swapped, own_se,
        share((clean == own)[same_rule])[0], kept_swapped, kept_se,
    )  # fmt: skip


def sraven_code_swaps(
    model: HookedLike, task: SRavenTask, examples: int = 1_024, seed: int = 0,
    split: str = "ood_unpermuted",
) -> list[dict[str, object]]:  # fmt: skip
    """Every donor kind, swapped in each layer alone and in all layers, on ``examples``
    unpermuted puzzles of ``split`` (default: the held-out rule combinations)."""
    if split not in SPLITS:
        raise ValueError(f"split={split!r}: swaps need unpermuted puzzles; use one of {SPLITS}")
    generator = torch.Generator(task.device).manual_seed(seed)
    draws = task.draw(examples, split, generator)
    batch = task.assemble(draws, split)
    layers = list(range(len(model.blocks)))
    clean = answers(model, batch, task.config.num_features)  # once for every swap
    results = []
    for kind in DONOR_KINDS:
        donor = donor_puzzles(task, batch, draws, kind, generator)
        codes = final_query_codes(model, donor, layers, task.config.num_features)
        for swapped in [*([layer] for layer in layers), layers]:
            chosen = codes[:, swapped]  # [batch, len(swapped), head, queries, key]
            result = read_swap(model, task, batch, donor, clean, chosen, tuple(swapped), kind)
            results.append(result.to_dict())
    return results
