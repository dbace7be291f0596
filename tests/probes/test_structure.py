"""Clustering, embeddings and topographic similarity on codes with a known answer."""

from __future__ import annotations

import numpy as np
import pytest

from latentlens.probes.structure import cluster_scores, embed_codes, topographic_similarity


def test_planted_clusters_are_found_and_random_codes_are_not() -> None:
    rng = np.random.default_rng(0)
    rules = rng.integers(0, 5, size=500)
    codes = rng.normal(size=(5, 6))[rules] * 5 + 0.1 * rng.normal(size=(500, 6))
    found = cluster_scores(codes, rules)
    for method in ("kmeans", "agglomerative"):
        assert found[method]["ari"] > 0.99 and found[method]["ami"] > 0.99
        assert found[method]["nmi"] > 0.99
        assert found[method]["n_clusters"] == 5
    random = cluster_scores(rng.normal(size=(500, 6)), rules)
    assert all(abs(random[m]["ari"]) < 0.05 for m in random)


def test_nmi_comes_with_its_chance_level_and_ami_is_adjusted_for_it() -> None:
    # 33 groups among 2,048 codes, as the fuzzy-logic protocol has: clusters that ignore
    # the groups still reach an NMI well above 0, which the shuffled control measures.
    rng = np.random.default_rng(1)
    groups = rng.integers(0, 33, size=2048)
    noise = cluster_scores(rng.normal(size=(2048, 4)), groups, methods=("kmeans",))["kmeans"]
    assert noise["nmi_shuffled"] > 0.05
    assert noise["nmi"] == pytest.approx(noise["nmi_shuffled"], abs=0.01)
    assert abs(noise["ami"]) < 0.01 and abs(noise["ari"]) < 0.01
    planted = rng.normal(size=(33, 4))[groups] * 10 + 0.01 * rng.normal(size=(2048, 4))
    found = cluster_scores(planted, groups, methods=("kmeans",))["kmeans"]
    assert found["ami"] > 0.99 and found["nmi"] > 0.99 and found["nmi_shuffled"] < 0.1


def test_identical_codes_cannot_be_clustered() -> None:
    # Agglomerative clustering splits identical points arbitrarily, which scored an NMI of
    # 0.03 against the groups: a score for nothing. It is refused instead.
    labels = np.arange(40) % 4
    with pytest.raises(ValueError, match="all codes are identical: clustering is undefined"):
        cluster_scores(np.ones((40, 3)), labels)
    with pytest.raises(ValueError, match="n_shuffles=0"):
        cluster_scores(np.eye(40)[:, :5], labels, n_shuffles=0)


def test_topographic_similarity_of_a_compositional_code_and_of_noise() -> None:
    rng = np.random.default_rng(0)
    bits = rng.integers(0, 2, size=(200, 8))
    # each bit moves the code along its own direction: code distance grows with Hamming
    compositional = bits @ rng.normal(size=(8, 16)) + 0.05 * rng.normal(size=(200, 16))
    result = topographic_similarity(compositional, bits, n_permutations=99)
    assert result["rho"] > 0.5 and result["p_value"] == pytest.approx(0.01)
    noise = topographic_similarity(rng.normal(size=(200, 16)), bits, n_permutations=99)
    assert abs(noise["rho"]) < 0.05 and noise["p_value"] > 0.05
    assert result["pairs"] == 200 * 199 // 2


def slow_topographic_similarity(codes, factors, n_permutations, max_examples, seed):
    """The definition, one scipy Spearman correlation per permutation."""
    from scipy.spatial.distance import pdist, squareform
    from scipy.stats import spearmanr

    rng = np.random.default_rng(seed)
    if len(codes) > max_examples:
        keep = rng.choice(len(codes), max_examples, replace=False)
        codes, factors = codes[keep], factors[keep]
    distances, hamming = pdist(codes), squareform(pdist(factors, "hamming"))
    upper = np.triu_indices(len(codes), k=1)
    rho = spearmanr(distances, hamming[upper]).statistic
    rhos = []
    for _ in range(n_permutations):
        order = rng.permutation(len(codes))
        rhos.append(spearmanr(distances, hamming[np.ix_(order, order)][upper]).statistic)
    return rho, np.asarray(rhos)


@pytest.mark.parametrize("signal", [0.0, 0.02, 1.0])
def test_topographic_similarity_is_the_permutation_test_of_spearmans_rho(signal: float) -> None:
    """Ranked once and permuted, against scipy's rho re-ranked for every permutation: the
    same rho to rounding, and the same count of permutations reaching it (ties in the
    Hamming distances and codes that repeat, as the probes' factors and codes have)."""
    rng = np.random.default_rng(3)
    bits = rng.integers(0, 2, size=(260, 4))
    codes = signal * bits @ rng.normal(size=(4, 6)) + rng.normal(size=(260, 6))
    codes[:20] = codes[20:40]  # repeated codes: tied distances
    got = topographic_similarity(codes, bits, n_permutations=199, max_examples=240, seed=7)
    rho, rhos = slow_topographic_similarity(codes, bits, 199, 240, seed=7)
    assert got["rho"] == pytest.approx(rho, abs=1e-12)
    # a permutation within 1e-12 of rho would be a rounding tie: none is
    assert np.abs(rhos - rho).min() > 1e-12
    assert got["p_value"] == (1 + int((rhos >= rho).sum())) / 200


def test_embeddings_and_errors() -> None:
    rng = np.random.default_rng(0)
    codes = rng.normal(size=(50, 4))
    points = embed_codes(codes, "pca")
    assert points.shape == (50, 2)
    assert np.var(points[:, 0]) >= np.var(points[:, 1])  # first component: most variance
    assert embed_codes(codes[:, :1], "pca").shape == (50, 2)
    with pytest.raises(ValueError, match="method='tsne'"):
        embed_codes(codes, "tsne")
    with pytest.raises(ValueError, match="single class"):
        cluster_scores(codes, np.zeros(50, dtype=int))
    with pytest.raises(ValueError, match="50 feature rows but 49"):
        cluster_scores(codes, np.zeros(49, dtype=int))
    with pytest.raises(ValueError, match="identical"):
        topographic_similarity(np.ones((10, 2)), rng.integers(0, 2, size=(10, 3)))


def test_umap_is_imported_only_when_asked_for_and_separates_planted_clusters() -> None:
    import subprocess
    import sys

    probe = (
        "import sys, latentlens.probes.atlas, latentlens.probes.structure, latentlens.figures; "
        "print('umap' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.stdout.strip() == "False", done.stderr
    rng = np.random.default_rng(0)
    rules = np.repeat([0, 1], 40)
    codes = np.array([[0.0] * 4, [8.0] * 4])[rules] + rng.normal(size=(80, 4))
    points = embed_codes(codes, "umap")  # numba compiles here: ~40 s on 2 cores
    assert points.shape == (80, 2)
    found = cluster_scores(points, rules)
    assert found["kmeans"]["ari"] > 0.95


def test_a_probe_run_records_constant_codes_as_undefined_instead_of_scoring_them() -> None:
    import torch

    from latentlens.probes.codes import CodeSet
    from latentlens.probes.run import _structure

    groups = torch.arange(64) % 4
    bits = torch.stack([groups // 2, groups % 2], dim=1).float()

    def codes(values: torch.Tensor) -> CodeSet:  # values: [64, layer, head, key]
        return CodeSet(values, bits, bits, groups, "test", "regression")

    constant = _structure(codes(torch.full((64, 2, 4, 1), 0.3)))
    assert constant["topography"]["rho"] is None
    assert "identical" in constant["clustering"]["note"]
    for method in ("kmeans", "agglomerative"):
        assert set(constant["clustering"][method].values()) == {None}
    torch.manual_seed(0)  # each bit moves the code along its own direction
    planted = (bits @ torch.randn(2, 8)).reshape(64, 2, 4, 1) + 0.01 * torch.randn(64, 2, 4, 1)
    scored = _structure(codes(planted))
    assert scored["clustering"]["kmeans"]["ari"] > 0.99 and scored["topography"]["rho"] > 0.5
