"""Structure of latent codes: clustering against the true groups (rules, term
combinations), 2-D embeddings, and topographic similarity (do codes that are close come
from rules that are close?).

scikit-learn and SciPy are imported where they are used: the training command imports this
module (through its trackers) and needs neither (1.5 s of its start-up)."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from latentlens.probes.linear import ArrayLike, as_classes, as_matrix, check_pair

CLUSTERINGS = ("kmeans", "agglomerative")
CLUSTER_SCORES = ("ari", "ami", "nmi", "nmi_shuffled")
EMBEDDINGS = ("pca", "umap")


# Codes whose spread is below this share of their size differ by float32 rounding alone.
IDENTICAL_RELATIVE = 1e-6


def all_identical(codes: ArrayLike) -> bool:
    """Whether every row of ``codes`` ``[n, d]`` is the same up to float32 rounding (a
    spread under :data:`IDENTICAL_RELATIVE` of their largest magnitude): nothing to
    cluster, rank or embed."""
    x = as_matrix("codes", codes)
    scale = max(float(np.abs(x).max()), 1e-30) if x.size else 1.0
    return bool(np.ptp(x, axis=0).max() <= IDENTICAL_RELATIVE * scale) if x.size else True


def cluster_scores(
    codes: ArrayLike,
    labels: ArrayLike,
    n_clusters: int | None = None,
    methods: tuple[str, ...] = CLUSTERINGS,
    n_shuffles: int = 20,
    seed: int = 0,
) -> dict[str, dict[str, float]]:
    """How well each clustering of ``codes`` ``[n, d]`` recovers ``labels`` ``[n]``;
    ``n_clusters`` defaults to the number of distinct labels. Per method: ``ari`` and
    ``ami`` (adjusted Rand index, adjusted mutual information: 0 at chance, 1 for the
    labels' own grouping); ``nmi`` (normalised mutual information, which is not adjusted
    for chance) with its shuffled-label control ``nmi_shuffled``, the mean NMI of the same
    clusters against the labels shuffled across examples ``n_shuffles`` times: what NMI
    any clustering reaches by chance at this many clusters and examples (0.08 for 33
    groups among 2,048 codes)."""
    x, y = as_matrix("codes", codes), as_classes("labels", labels)
    check_pair(x, y, "codes and labels")
    unknown = sorted(set(methods) - set(CLUSTERINGS))
    if unknown:
        raise ValueError(f"methods {unknown} are unknown; choose from {list(CLUSTERINGS)}")
    k = n_clusters or len(np.unique(y))
    if k < 2:
        raise ValueError("the labels hold a single class: clustering needs at least 2 to score")
    if k > len(x):
        raise ValueError(f"n_clusters={k} exceeds the {len(x)} examples")
    if n_shuffles < 1:
        raise ValueError(f"n_shuffles={n_shuffles} must be at least 1")
    if all_identical(x):
        raise ValueError(
            "all codes are identical: clustering is undefined (any split of identical "
            "points is arbitrary); check that the codes vary with the input"
        )
    from sklearn.cluster import AgglomerativeClustering, KMeans  # noqa: PLC0415 (slow imports)
    from sklearn.exceptions import ConvergenceWarning  # noqa: PLC0415
    from sklearn.metrics import (  # noqa: PLC0415
        adjusted_mutual_info_score,
        adjusted_rand_score,
        normalized_mutual_info_score,
    )

    rng = np.random.default_rng(seed)
    shuffles = [rng.permutation(y) for _ in range(n_shuffles)]
    results = {}
    for method in methods:
        with warnings.catch_warnings():  # duplicate codes: fewer clusters, scored as found
            warnings.simplefilter("ignore", ConvergenceWarning)
            if method == "kmeans":
                found = KMeans(n_clusters=k, n_init=10, random_state=seed).fit_predict(x)
            else:
                found = AgglomerativeClustering(n_clusters=k, linkage="ward").fit_predict(x)
        shuffled = [normalized_mutual_info_score(s, found) for s in shuffles]
        results[method] = {
            "ari": float(adjusted_rand_score(y, found)),
            "ami": float(adjusted_mutual_info_score(y, found)),
            "nmi": float(normalized_mutual_info_score(y, found)),
            "nmi_shuffled": float(np.mean(shuffled)),
            "n_clusters": k,
        }
    return results


def embed_codes(codes: ArrayLike, method: str = "pca", seed: int = 0) -> np.ndarray:
    """A 2-D embedding ``[n, 2]`` of ``codes`` ``[n, d]`` by PCA or UMAP (imported lazily:
    umap-learn compiles with numba on first use)."""
    x = as_matrix("codes", codes)
    if method not in EMBEDDINGS:
        raise ValueError(f"method={method!r} is unknown; choose from {list(EMBEDDINGS)}")
    if len(x) < 3:
        raise ValueError(f"{len(x)} codes are too few to embed; pass at least 3")
    if method == "pca":
        if x.shape[1] == 1:
            return np.concatenate([x - x.mean(), np.zeros_like(x)], axis=1)
        from sklearn.decomposition import PCA  # noqa: PLC0415 (slow import)

        return PCA(n_components=2, random_state=seed).fit_transform(x)
    import umap  # noqa: PLC0415  (slow import, only when asked for)

    neighbours = min(15, len(x) - 1)
    reducer = umap.UMAP(n_components=2, n_neighbors=neighbours, random_state=seed, n_jobs=1)
    return reducer.fit_transform(x)


def _standardised(values: np.ndarray) -> np.ndarray:
    """``values`` centred and scaled to unit norm: their dot product with another such
    vector is Pearson's correlation."""
    centred = values - values.mean()
    return centred / np.linalg.norm(centred)


def topographic_similarity(
    codes: ArrayLike,
    factors: ArrayLike,
    n_permutations: int = 499,
    max_examples: int = 300,
    seed: int = 0,
) -> dict[str, Any]:
    """Spearman correlation between pairwise Euclidean distances of latent codes
    ``[n, d]`` and Hamming distances of the factors that generated them ``[n, f]``
    (e.g. term bits, rule ids), with a one-sided permutation p-value: the factors are
    shuffled across examples ``n_permutations`` times, and
    ``p = (1 + #{rho_perm >= rho}) / (1 + n_permutations)``. At most ``max_examples``
    examples (drawn with ``seed``) enter, as pairs grow quadratically."""
    from scipy.spatial.distance import pdist, squareform  # noqa: PLC0415 (slow imports)
    from scipy.stats import rankdata  # noqa: PLC0415

    x, f = as_matrix("codes", codes), as_matrix("factors", factors)
    check_pair(x, f, "codes and factors")
    rng = np.random.default_rng(seed)
    if len(x) > max_examples:
        keep = rng.choice(len(x), max_examples, replace=False)
        x, f = x[keep], f[keep]
    if len(x) < 4:
        raise ValueError(f"{len(x)} examples are too few for a rank correlation of pairs")
    code_distances = pdist(x, "euclidean")
    factor_square = squareform(pdist(f, "hamming"))
    if np.ptp(code_distances) == 0 or np.ptp(factor_square) == 0:
        raise ValueError("all codes or all factors are identical: the correlation is undefined")
    # Spearman's rho is Pearson's on ranks. Permuting the examples rearranges the factor
    # distances, so their ranks rearrange with them and their mean and spread stay put:
    # each permutation's rho is one dot product with the ranks standardised once.
    upper = np.triu_indices(len(x), k=1)
    code_ranks = _standardised(rankdata(code_distances))
    factor_ranks = np.zeros_like(factor_square)
    factor_ranks[upper] = _standardised(rankdata(factor_square[upper]))
    factor_ranks += factor_ranks.T
    rho = float(code_ranks @ factor_ranks[upper])
    exceed = 0
    for _ in range(n_permutations):
        order = rng.permutation(len(x))
        exceed += float(code_ranks @ factor_ranks[np.ix_(order, order)][upper]) >= rho
    return {
        "rho": rho,
        "p_value": float((1 + exceed) / (1 + n_permutations)),
        "examples": len(x),
        "pairs": len(code_distances),
        "permutations": n_permutations,
    }
