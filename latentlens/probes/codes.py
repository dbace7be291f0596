"""Latent codes of the analyses of docs/methods/probes.md, with their labels.

The latent code of a query-key pair is ``pattern[b, :, q, k]``, a vector over heads. A
:class:`CodeSet` holds codes ``[examples, layer, head, key]`` for a fixed query and a list
of keys, with the labels the protocols decode:

- fuzzy logic: the last token on itself, ``a[:, T-1, T-1]``, with a fixed query input
  shared by all tasks (``inputs="fixed_query"``); target: the K·L term bits.
- SRAVEN: the final query token (the answer panel's last feature slot) towards the keys
  holding the same feature in the first two panels of the last row; target: that
  feature's rule.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from latentlens.models import HookedModel, pattern_hook_name
from latentlens.probes.extraction import extract
from latentlens.probes.source import last_positions_kwargs
from latentlens.probes.structure import all_identical, embed_codes
from latentlens.tasks import Batch, Task
from latentlens.tasks.sraven import GRID

# Fuzzy logic's codes are read from forward passes of this many positions (examples x
# seq_len; the examples are drawn 256 at a time, so they do not depend on it): the
# over-training tracker reads 16,000 examples at every evaluation. Alternating turns on a
# 2-core Zen 4, T = 16, 5-6 turns each (the last block's query at the last position alone
# too, below): 0.48-0.53 s against 0.62-0.78 s in passes of 256 examples with every query;
# 2,000 and 4,000 examples gained nothing more. A pass's patterns grow as seq_len squared,
# so longer sequences take fewer examples a pass.
FUZZY_LOGIC_FORWARD_POSITIONS = 16_384


@dataclass
class CodeSet:
    """``codes`` ``[examples, layer, head, key]``; ``target`` the decoded label
    (``[examples]`` class ids or ``[examples, k]`` values); ``factors`` ``[examples, f]``
    the generating factors for topographic similarity; ``groups`` ``[examples]`` ids of
    the generating combination (for clustering); ``split`` where they came from."""

    codes: torch.Tensor
    target: torch.Tensor
    factors: torch.Tensor
    groups: torch.Tensor
    split: str
    target_kind: str  # "regression" or "classification"

    def __len__(self) -> int:
        return self.codes.shape[0]

    def features(
        self, layers: list[int] | None = None, heads: list[int] | None = None
    ) -> torch.Tensor:
        """Codes flattened to ``[examples, features]`` over the chosen layers and heads."""
        codes = self.codes
        if layers is not None:
            codes = codes[:, layers]
        if heads is not None:
            codes = codes[:, :, heads]
        return codes.reshape(len(codes), -1)


def _layers(model: HookedModel) -> int:
    return sum(1 for name in model.hook_dict if name.endswith("attn.hook_pattern"))


def _stack(extraction_codes: dict[str, torch.Tensor], layers: int) -> torch.Tensor:
    return torch.stack([extraction_codes[pattern_hook_name(i)] for i in range(layers)], dim=1)


def fuzzy_logic_codes(
    model: HookedModel, task: Task, split: str = "test", examples: int = 2_048, seed: int = 0
) -> CodeSet:
    """The last token's self-code per layer with the fixed query; target: term bits
    ``[examples, K*L]``; factors: the same bits; groups: the term combination. The last
    block computes its last query alone where the model can (``last_positions``), in
    passes of :data:`FUZZY_LOGIC_FORWARD_POSITIONS` positions: the codes equal to float
    rounding."""
    layers = _layers(model)
    names = [pattern_hook_name(i) for i in range(layers)]
    select = {name: lambda act, batch: act[:, :, -1, -1:] for name in names}
    got = extract(
        model, task, split, names, examples, seed=seed, select=select,
        sample_options={"inputs": "fixed_query"},
        forward_options=last_positions_kwargs(model, 1),
        forward_examples=max(1, FUZZY_LOGIC_FORWARD_POSITIONS // task.config.seq_len),
    )  # fmt: skip
    bits = got.labels["term_bits"].reshape(len(got), -1).float()
    return CodeSet(
        codes=_stack(got.activations, layers),
        target=bits,
        factors=bits,
        groups=got.labels["combination"],
        split=split,
        target_kind="regression",
    )


def sraven_key_positions(batch: Batch, num_features: int) -> torch.Tensor:
    """Token positions ``[batch, 2]`` of the answer panel's last feature in panels 6 and 7
    (the first two of the last row), following the feature through the permutations."""
    perms = batch.labels["permutations"]  # [batch, column, slot] -> feature
    feature = perms[:, GRID - 1, num_features - 1]  # the feature in the answer's last slot
    slots = (perms[:, : GRID - 1] == feature[:, None, None]).int().argmax(dim=-1)  # [batch, 2]
    panels = torch.tensor([GRID * (GRID - 1), GRID * (GRID - 1) + 1], device=slots.device)
    return panels * num_features + slots


def sraven_codes(
    model: HookedModel,
    task: Task,
    split: str = "test_unpermuted",
    examples: int = 2_048,
    seed: int = 0,
) -> CodeSet:
    """The final query's codes towards the same feature in panels 6 and 7, per layer:
    ``[examples, layer, head, 2]``; target: that feature's rule (class ids).

    As in the official code, a task's multiset of rules goes to the features in ascending
    order, so the last feature's rule is the largest of its multiset and the targets are
    far from uniform: of 4,096 unpermuted test examples, 37% distribute-three and 0.4%
    constant (only the multiset of four constants gives it). The decoders' chance level is
    the largest class's share, and each score is reported beside it."""
    layers = _layers(model)
    num_features = task.config.num_features
    names = [pattern_hook_name(i) for i in range(layers)]

    def select(act: torch.Tensor, batch: Batch) -> torch.Tensor:
        keys = sraven_key_positions(batch, num_features)  # [batch, 2]
        last = act[:, :, -1, :]  # [batch, head, key]
        return last.gather(2, keys[:, None, :].expand(-1, act.shape[1], -1))

    got = extract(
        model, task, split, names, examples, seed=seed, select=dict.fromkeys(names, select)
    )
    rule = got.labels["answer_rules"][:, -1]
    return CodeSet(
        codes=_stack(got.activations, layers),
        target=rule,
        factors=rule[:, None],
        groups=rule,
        split=split,
        target_kind="classification",
    )


def embedding_of(
    sets: list[CodeSet], method: str, names: list[str] | None, kind: str = "class"
) -> dict[str, Any]:
    """2-D embedding of the last layer's codes of every set, with label and split, and the
    labels in their natural order (``names``' or numeric) for legends; ``kind`` says what
    a label is (``"rule"``, ``"term combination"``, ``"relation"``), for legend titles."""
    codes = torch.cat([s.codes[:, -1].reshape(len(s), -1) for s in sets])
    identical = all_identical(codes)
    points = np.zeros((len(codes), 2)) if identical else embed_codes(codes, method)
    labels = torch.cat([s.groups for s in sets]).tolist()
    order = sorted(set(labels))
    note = {"note": "the codes are identical for every example: nothing to embed"}
    return {
        **(note if identical else {}),
        "method": method,
        "label_kind": kind,
        "layer": int(sets[0].codes.shape[1] - 1),
        "x": points[:, 0].tolist(),
        "y": points[:, 1].tolist(),
        "label": [names[i] if names else str(i) for i in labels],
        "label_order": [names[i] if names else str(i) for i in order],
        "split": [s.split for s in sets for _ in range(len(s))],
    }
