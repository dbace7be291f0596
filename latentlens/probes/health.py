"""Is there anything to probe? Named checks for models whose probe panels would be empty
or meaningless: a dead value network, codes that do not vary, a task not learned.

Each check returns :class:`HealthNote` s (none when healthy); ``latentlens probe`` prints
them and the demo's report shows them in place of empty panels.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch

from latentlens.probes.source import HookedLike, LabelledSource
from latentlens.probes.structure import all_identical
from latentlens.tasks import Batch

# A layer's value network is dead where at least this share of its outputs at the query
# (every key, every example) is exactly zero: the ReLU units pass nothing.
DEAD_SHARE = 0.99
# Below this test R², a model explains under a tenth of the target's variance.
LEARNED_R2 = 0.1
# Above chance by this much (accuracy), a model has learned something of the task.
LEARNED_MARGIN = 0.05


@dataclass(frozen=True)
class HealthNote:
    """``kind`` (``dead_value_network``, ``constant_codes``, ``not_learned``), ``where``
    (a hook or split), and ``message``: what was found, its likely cause and what to do."""

    kind: str
    where: str
    message: str

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


@torch.no_grad()
def dead_value_networks(
    model: HookedLike, source: LabelledSource, batch: Batch
) -> list[HealthNote]:
    """HYLA's value networks (``blocks.{l}.attn.hook_vnet_post``, ``[batch, query, key,
    hidden]``) whose outputs at the last query are (almost) all exactly zero on ``batch``."""
    names = [name for name in model.hook_dict if name.endswith("hook_vnet_post")]
    if not names:
        return []
    was_training = model.training
    model.eval()
    try:
        _, cache = model.run_with_cache(*source.model_inputs(batch), names_filter=names)
    finally:
        model.train(was_training)
    notes = []
    for name in names:
        at_query = cache[name][:, -1]  # [batch, key, hidden]
        share = float((at_query == 0).float().mean())
        if share >= DEAD_SHARE:
            notes.append(HealthNote("dead_value_network", name, (
                f"{name} is dead at the query: {share:.1%} of its ReLU outputs are exactly 0 "
                "for every key and input, so this layer passes (almost) nothing from the keys "
                "to the query and the codes above it cannot vary with the task. Likely cause: "
                "the value network's few hidden units (v_dim per head) died in training (a "
                "high learning rate, or this seed); retrain at a lower learning rate, another "
                "seed or a larger v_dim."
            )))  # fmt: skip
    return notes


def constant_codes(codes: torch.Tensor, where: str) -> list[HealthNote]:
    """Layers whose codes ``[examples, layer, head, key]`` are the same for every example."""
    notes = []
    for layer in range(codes.shape[1]):
        flat = codes[:, layer].reshape(len(codes), -1)
        if all_identical(flat):
            cause = (
                "in the first layer a code sees only the two tokens it joins, and a "
                "normalisation that does not mix in the other keys (linear attention, HYLA's "
                "RMSHead; softmax does) leaves it the same for every input with a fixed query"
                if layer == 0
                else "the query's residual stream does not vary with the input at this layer "
                "(a dead value network below it?)"
            )
            notes.append(HealthNote("constant_codes", f"{where}, layer {layer}", (
                f"the latent codes of layer {layer} ({where}) are identical for every example: "
                f"decoding, clustering and embeddings have nothing to read there. Likely cause: "
                f"{cause}."
            )))  # fmt: skip
    return notes


def not_learned(task_name: str, metrics: dict[str, Any], split: str, chance: float = 0.0,
                ) -> list[HealthNote]:  # fmt: skip
    """A model whose ``metrics`` on ``split`` (``r2`` or ``feature_accuracy`` /
    ``accuracy``, with ``_se``) are near what predicting nothing reaches: its probe scores
    describe an untrained model."""
    if "r2" in metrics:
        value, name, floor = metrics["r2"], "R²", LEARNED_R2
    else:
        name = "feature_accuracy" if "feature_accuracy" in metrics else "accuracy"
        value, floor = metrics[name], chance + LEARNED_MARGIN
    if value >= floor:
        return []
    return [HealthNote("not_learned", split, (
        f"the model has not learned {task_name}: {split} {name} {value:.3f}, under {floor:.2f}"
        + (f" (chance {chance:.3f})" if chance else "") + ". Its heads and codes describe a "
        "model that does not do the task, and effects read off them say little about one "
        "that does; train longer or at another learning rate before reading them."
    ))]  # fmt: skip
