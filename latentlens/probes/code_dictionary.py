"""A dictionary of codes: the code vectors of many query-key pairs (every layer and head:
``[pairs, layer x head]``, non-negative softmax weights) factored by non-negative matrix
factorisation, X ≈ W H, into ``features`` parts (rows of H, over the layers and heads) and
each pair's activations (W). A feature that loads one head is that head; one spread over
several heads and layers is a pattern they form together, which no per-head view shows.

Per feature: its heads by loading, how many heads carry half of it, the relation of the
pairs it is most active on, and its top pairs; overall, the share of the codes' variance
the dictionary reconstructs (docs/methods/probes.md, "A dictionary of codes")."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

FEATURES = 12
TOP_PAIRS = 8
TOP_HEADS = 5


def heads_for_share(loading: np.ndarray, share: float = 0.5) -> int:
    """The fewest entries of ``loading`` (non-negative) whose sum reaches ``share`` of its
    total."""
    ordered = np.sort(loading)[::-1]
    total = ordered.sum()
    if total <= 0:
        return 0
    return int(np.searchsorted(np.cumsum(ordered), share * total - 1e-12) + 1)


def code_dictionary(
    codes: torch.Tensor,
    labels: torch.Tensor,
    label_names: tuple[str, ...] | list[str],
    features: int = FEATURES,
    seed: int = 0,
) -> dict[str, Any]:
    """NMF of ``codes`` ``[pairs, layer, head]`` (non-negative) into ``features`` parts;
    ``labels`` ``[pairs]`` name each pair's relation (``label_names``). Returns
    ``{"features": [...], "components": H [features][layer x head] (in the features'
    order), "explained": R², "layers", "heads"}``. Each feature holds its ``name`` (number,
    the relation it fires on most, its top head), ``heads`` (top :data:`TOP_HEADS` as
    ``[layer, head, share of the loading]``), ``heads_for_half``, ``relation_activation``
    (mean activation per relation), ``top_pairs`` (indices of the :data:`TOP_PAIRS` most
    active pairs), ``top_relations`` (their relations) and ``activation_share`` (its share
    of all activation × loading)."""
    from sklearn.decomposition import NMF  # noqa: PLC0415 (scikit-learn loads slowly)

    if codes.ndim != 3:
        raise ValueError(f"codes {tuple(codes.shape)}: expected [pairs, layer, head]")
    if (codes < 0).any():
        raise ValueError("codes hold negative weights: the dictionary needs softmax weights")
    n, layers, heads = codes.shape
    if not 1 <= features <= min(n, layers * heads):
        raise ValueError(
            f"features={features} is invalid: choose 1 to {min(n, layers * heads)} (the "
            "pairs and the layers x heads bound it)"
        )
    x = codes.reshape(n, -1).double().numpy()
    model = NMF(n_components=features, init="nndsvda", max_iter=1_000, random_state=seed)
    activation = model.fit_transform(x)  # [pairs, features]
    parts = model.components_  # [features, layer x head]
    residual = ((x - activation @ parts) ** 2).sum()
    spread = ((x - x.mean(0)) ** 2).sum()
    mass = activation.sum(0) * parts.sum(1)
    labels = labels.cpu().numpy()
    rows, components = [], []
    for number, f in enumerate(np.argsort(-mass)):
        loading = parts[f]
        top = np.argsort(-loading)[:TOP_HEADS]
        best = np.argsort(-activation[:, f])[:TOP_PAIRS]
        fires = {name: float(activation[labels == k, f].mean()) if (labels == k).any() else 0.0
                 for k, name in enumerate(label_names)}  # fmt: skip
        components.append(loading.tolist())
        rows.append({
            "name": f"#{number} {max(fires, key=fires.get)} "
                    f"(L{top[0] // heads}H{top[0] % heads})",
            "heads": [[int(i // heads), int(i % heads), float(loading[i] / loading.sum())]
                      for i in top],
            "heads_for_half": heads_for_share(loading),
            "relation_activation": fires,
            "top_pairs": best.tolist(),
            "top_relations": [label_names[labels[i]] for i in best],
            "activation_share": float(mass[f] / mass.sum()),
        })  # fmt: skip
    return {
        "features": rows,
        "components": components,
        "explained": float(1.0 - residual / spread),
        "layers": layers,
        "heads": heads,
    }
