"""Head types from TransformerLens's head detector, beside what the latent codes carry.

:func:`head_type_scores` runs ``transformer_lens.head_detector.detect_head`` for the
previous-token, duplicate-token and induction detection patterns on stories with a repeated
sentence (:func:`latentlens.probes.text_relations.story_text`): per head, the share of its
attention that falls where the pattern says (0 to 1), averaged over the stories. One forward
pass per story serves all three (the detector reads the cache of ``hook_pattern`` alone).
"""

from __future__ import annotations

from typing import Any

import torch

from latentlens.probes.source import HookedLike, pattern_hooks
from latentlens.probes.text_relations import story_text

HEAD_TYPES = ("previous_token_head", "duplicate_token_head", "induction_head")


@torch.no_grad()
def head_type_scores(model: HookedLike, stories: int = 8, seed: int = 0) -> dict[str, Any]:
    """``{kind: [[score per head] per layer]}`` for each of :data:`HEAD_TYPES`, the mean
    over ``stories`` generated stories (the same ``seed``, the same stories), and
    ``stories``: how many. ``model`` must take text (a TransformerLens bridge does)."""
    from transformer_lens.head_detector import detect_head  # noqa: PLC0415

    if stories < 1:
        raise ValueError(f"stories={stories} is invalid: give at least 1")
    names = set(pattern_hooks(model))
    generator = torch.Generator().manual_seed(seed)
    total: dict[str, torch.Tensor] = {}
    for _ in range(stories):
        text = story_text(generator)
        _, cache = model.run_with_cache(
            text, names_filter=lambda name: name in names, remove_batch_dim=True
        )
        for kind in HEAD_TYPES:
            score = detect_head(model, text, kind, cache=cache).float().cpu()
            total[kind] = total.get(kind, torch.zeros_like(score)) + score
    return {
        "stories": stories,
        **{kind: (total[kind] / stories).tolist() for kind in HEAD_TYPES},
    }


def top_heads(scores: dict[str, Any], kind: str, count: int = 3) -> list[tuple[int, int, float]]:
    """The ``count`` heads of highest ``kind`` score: ``(layer, head, score)``."""
    table = torch.tensor(scores[kind])
    best = torch.topk(table.flatten(), min(count, table.numel()))
    heads = table.shape[1]
    pairs = zip(best.values.tolist(), best.indices.tolist(), strict=True)
    return [(index // heads, index % heads, value) for value, index in pairs]
