"""The causal check of induction heads (Olsson et al., 2022, "In-context learning and
induction heads"): on sequences of random tokens repeated once, a model with induction heads
predicts the second copy far better than the first; ablating those heads should cost it
that, more than ablating as many other heads of the same layers.

:func:`induction_ablation` zeroes the chosen heads' outputs (``blocks.{l}.attn.hook_z``)
and measures the change in the next-token loss on the second copy, per sequence (paired
with the same sequence unablated), against ``draws`` random choices of as many heads from
the same layers (never the chosen ones).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

from latentlens.probes.interventions import Hook, head_ablation_hook
from latentlens.probes.source import HookedLike


def repeated_random_tokens(
    vocab_size: int,
    sequences: int,
    half: int,
    seed: int = 0,
    bos_token_id: int | None = None,
    exclude: Sequence[int] = (),
) -> torch.Tensor:
    """``[sequences, (1 +) 2 * half]``: ``half`` distinct random tokens (none of
    ``exclude``), then the same tokens again, after ``bos_token_id`` where given."""
    candidates = torch.arange(vocab_size)
    candidates = candidates[
        ~torch.isin(candidates, torch.as_tensor(list(exclude), dtype=torch.long))
    ]
    if len(candidates) < half:
        raise ValueError(f"the vocabulary has {len(candidates)} usable tokens, fewer than {half}")
    generator = torch.Generator().manual_seed(seed)
    chosen = torch.stack([
        candidates[torch.randperm(len(candidates), generator=generator)[:half]]
        for _ in range(sequences)
    ])  # fmt: skip
    tokens = torch.cat([chosen, chosen], dim=1)
    if bos_token_id is not None:
        tokens = torch.cat([torch.full((sequences, 1), bos_token_id), tokens], dim=1)
    return tokens


@torch.no_grad()
def halves_loss(
    model: HookedLike, tokens: torch.Tensor, half: int, hooks: list[Hook], batch_size: int = 16
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per sequence, the mean next-token loss (nats) on the first copy's tokens 2..half and
    on the second copy's tokens 2..half (each predicted from the token before it), with
    ``hooks`` attached: two ``[sequences]`` tensors."""
    first, second = [], []
    start = tokens.shape[1] - 2 * half  # 1 with a BOS token, else 0
    for chunk in tokens.split(batch_size):
        logits = model.run_with_hooks(chunk, fwd_hooks=hooks)
        losses = F.cross_entropy(
            logits[:, :-1].float().transpose(1, 2), chunk[:, 1:].to(logits.device), reduction="none"
        ).cpu()  # [batch, pos - 1]: loss of predicting token p + 1 at p
        first.append(losses[:, start : start + half - 1].mean(1))
        second.append(losses[:, start + half : start + 2 * half - 1].mean(1))
    return torch.cat(first), torch.cat(second)


def _mean_se(values: torch.Tensor) -> dict[str, float]:
    values = values.double()
    error = values.std() / len(values) ** 0.5 if len(values) > 1 else torch.tensor(0.0)
    return {"mean": float(values.mean()), "standard_error": float(error)}


@torch.no_grad()
def induction_ablation(
    model: HookedLike,
    heads: Sequence[tuple[int, int]],
    tokens: torch.Tensor,
    half: int,
    draws: int = 10,
    seed: int = 0,
    batch_size: int = 16,
) -> dict[str, Any]:
    """Ablate ``heads`` (``(layer, head)`` pairs) together on ``tokens`` (from
    :func:`repeated_random_tokens`, copies of ``half`` tokens) and, ``draws`` times, as many
    random other heads of the same layers. Returns the unablated loss on each copy, and per
    condition the change in the second copy's loss: ``targeted`` (mean ± standard error over
    sequences) and ``random`` (mean over draws of each draw's mean change, with the standard
    error over draws, and the mean of the per-draw standard errors over sequences)."""
    if not heads:
        raise ValueError("heads is empty: name at least one (layer, head) to ablate")
    if draws < 1:
        raise ValueError(f"draws={draws} is invalid: give at least 1")
    name = "blocks.0.attn.hook_z"
    _, cache = model.run_with_cache(tokens[:1], names_filter=[name])
    n_heads = cache[name].shape[2]
    chosen = sorted(set(map(tuple, heads)))

    def hooks_of(pairs: Sequence[tuple[int, int]]) -> list[Hook]:
        return [head_ablation_hook(model, layer, head, "zero", "") for layer, head in pairs]

    first, baseline = halves_loss(model, tokens, half, [], batch_size)
    _, targeted = halves_loss(model, tokens, half, hooks_of(chosen), batch_size)
    generator = torch.Generator().manual_seed(seed)
    per_layer: dict[int, list[int]] = {}
    for layer, head in chosen:
        per_layer.setdefault(layer, []).append(head)
    draw_means, draw_errors, drawn = [], [], []
    for _ in range(draws):
        pairs = []
        for layer, taken in per_layer.items():
            others = [h for h in range(n_heads) if h not in taken]
            if len(others) < len(taken):
                raise ValueError(f"layer {layer} has too few other heads to draw a control from")
            pick = torch.randperm(len(others), generator=generator)[: len(taken)].tolist()
            pairs += [(layer, others[i]) for i in pick]
        _, control = halves_loss(model, tokens, half, hooks_of(pairs), batch_size)
        change = _mean_se(control - baseline)
        draw_means.append(change["mean"])
        draw_errors.append(change["standard_error"])
        drawn.append(pairs)
    means = torch.tensor(draw_means)
    return {
        "heads": [list(h) for h in chosen],
        "sequences": len(tokens),
        "half": half,
        "loss_first_copy": _mean_se(first),
        "loss_second_copy": _mean_se(baseline),
        "targeted": _mean_se(targeted - baseline),
        "random": {
            "mean": float(means.mean()),
            "standard_error_over_draws": float(means.std() / draws**0.5) if draws > 1 else 0.0,
            "standard_error_over_sequences": float(torch.tensor(draw_errors).mean()),
            "draws": [
                {"heads": [list(p) for p in d], "change": m}
                for d, m in zip(drawn, draw_means, strict=True)
            ],  # fmt: skip
        },
    }
