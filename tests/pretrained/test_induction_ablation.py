"""The induction-head ablation on a config-built GQA Llama (offline): its losses and
changes are what the definitions give, computed here by hand, and the control heads are
other heads of the same layers."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from latentlens.pretrained import load_language_model
from latentlens.probes.induction import induction_ablation, repeated_random_tokens

from .tiny_models import write_tiny_llama


def test_repeated_random_tokens_repeat_distinct_tokens_after_bos() -> None:
    tokens = repeated_random_tokens(50, 8, 10, seed=1, bos_token_id=2, exclude=[0, 1, 2])
    assert tokens.shape == (8, 21) and bool((tokens[:, 0] == 2).all())
    assert torch.equal(tokens[:, 1:11], tokens[:, 11:])
    assert all(len(set(row[1:11].tolist())) == 10 for row in tokens)
    assert not bool(torch.isin(tokens[:, 1:], torch.tensor([0, 1, 2])).any())
    with pytest.raises(ValueError, match="fewer than 10"):
        repeated_random_tokens(12, 2, 10, exclude=[0, 1, 2])


def test_the_ablation_changes_are_the_definitions(tmp_path: Path) -> None:
    bridge = load_language_model(str(write_tiny_llama(tmp_path / "llama", heads=6)), "cpu")
    half = 8
    tokens = repeated_random_tokens(bridge.cfg.d_vocab, 6, half, seed=0, bos_token_id=2,
                                    exclude=range(5))  # fmt: skip
    result = induction_ablation(bridge, [(1, 4), (0, 2)], tokens, half, draws=3, batch_size=4)

    def second_copy_loss(ablated: list[tuple[int, int]]) -> torch.Tensor:
        def zero(heads: list[int]):
            def hook(z: torch.Tensor, hook: object) -> torch.Tensor:
                z = z.clone()
                z[:, :, heads] = 0.0
                return z

            return hook

        hooks = [(f"blocks.{layer}.attn.hook_z", zero([h for l2, h in ablated if l2 == layer]))
                 for layer in {layer for layer, _ in ablated}]  # fmt: skip
        with torch.no_grad():
            logits = bridge.run_with_hooks(tokens, fwd_hooks=hooks)
        loss = F.cross_entropy(logits[:, :-1].transpose(1, 2), tokens[:, 1:], reduction="none")
        return loss[:, 1 + half : 2 * half].mean(1)  # predicting the second copy's tokens 2..

    baseline = second_copy_loss([])
    targeted = second_copy_loss([(0, 2), (1, 4)]) - baseline
    assert result["heads"] == [[0, 2], [1, 4]]
    assert result["loss_second_copy"]["mean"] == pytest.approx(float(baseline.mean()), abs=1e-5)
    assert result["targeted"]["mean"] == pytest.approx(float(targeted.mean()), abs=1e-5)
    assert result["targeted"]["standard_error"] == pytest.approx(
        float(targeted.std() / len(targeted) ** 0.5), abs=1e-5
    )
    changes = []
    for draw in result["random"]["draws"]:
        heads = [tuple(h) for h in draw["heads"]]
        assert sorted(layer for layer, _ in heads) == [0, 1]
        assert (0, 2) not in heads and (1, 4) not in heads
        change = float((second_copy_loss(heads) - baseline).mean())
        assert draw["change"] == pytest.approx(change, abs=1e-5)
        changes.append(change)
    assert result["random"]["mean"] == pytest.approx(sum(changes) / 3, abs=1e-5)
    with pytest.raises(ValueError, match="heads is empty"):
        induction_ablation(bridge, [], tokens, half)
