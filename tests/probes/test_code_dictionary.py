"""The dictionary of codes (latentlens.probes.code_dictionary) on planted codes: a part
of one head and a part spread over three heads of two layers are found as such, with the
relation each fires on, and the reconstruction is scored against the obvious formula."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from latentlens.probes.code_dictionary import code_dictionary, heads_for_share


def planted(n: int = 600, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Codes [n, 3 layers, 4 heads]: relation 0 lights head (1, 2) alone; relation 1 lights
    heads (0, 1), (2, 0) and (2, 3) together; a little noise everywhere."""
    generator = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 2, (n,), generator=generator)
    codes = 0.01 * torch.rand(n, 3, 4, generator=generator)
    strength = 0.5 + torch.rand(n, generator=generator)
    single = labels == 0
    codes[single, 1, 2] += strength[single]
    for layer, head in ((0, 1), (2, 0), (2, 3)):
        codes[~single, layer, head] += strength[~single] / 3
    return codes, labels


def test_heads_for_share_counts_the_fewest_heads_that_carry_half() -> None:
    assert heads_for_share(np.array([0.6, 0.2, 0.2])) == 1
    assert heads_for_share(np.array([1.0, 1.0, 1.0, 1.0])) == 2
    assert heads_for_share(np.array([0.1, 0.45, 0.45])) == 2
    assert heads_for_share(np.zeros(3)) == 0


def test_a_single_head_part_and_a_shared_part_are_told_apart() -> None:
    codes, labels = planted()
    result = code_dictionary(codes, labels, ("single", "shared"), features=2)
    by_relation = {max(f["relation_activation"], key=f["relation_activation"].get): f
                   for f in result["features"]}  # fmt: skip
    single, shared = by_relation["single"], by_relation["shared"]
    assert single["heads"][0][:2] == [1, 2] and single["heads_for_half"] == 1
    assert single["heads"][0][2] > 0.9
    assert {tuple(h[:2]) for h in shared["heads"][:3]} == {(0, 1), (2, 0), (2, 3)}
    assert shared["heads_for_half"] == 2 and all(h[2] > 0.25 for h in shared["heads"][:3])
    assert set(single["top_relations"]) == {"single"} and set(shared["top_relations"]) == {"shared"}
    assert result["explained"] > 0.95
    assert sum(f["activation_share"] for f in result["features"]) == pytest.approx(1.0)


def test_the_explained_share_is_one_minus_residual_over_spread() -> None:
    from sklearn.decomposition import NMF

    codes, labels = planted(200, seed=1)
    result = code_dictionary(codes, labels, ("single", "shared"), features=3, seed=2)
    x = codes.reshape(len(codes), -1).double().numpy()
    model = NMF(n_components=3, init="nndsvda", max_iter=1_000, random_state=2)
    w = model.fit_transform(x)
    expected = 1 - ((x - w @ model.components_) ** 2).sum() / ((x - x.mean(0)) ** 2).sum()
    assert result["explained"] == pytest.approx(expected, abs=1e-12)


def test_bad_codes_are_named() -> None:
    codes, labels = planted(50)
    with pytest.raises(ValueError, match="expected \\[pairs, layer, head\\]"):
        code_dictionary(codes.flatten(1), labels, ("a", "b"))
    with pytest.raises(ValueError, match="negative weights"):
        code_dictionary(codes - 1, labels, ("a", "b"))
    with pytest.raises(ValueError, match="features=13 is invalid: choose 1 to 12"):
        code_dictionary(codes, labels, ("a", "b"), features=13)
