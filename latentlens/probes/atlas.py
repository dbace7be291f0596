"""The latent-code atlas of any hooked model on labelled query-key pairs.

The questions of "Attention as a Hypernetwork" asked of one model: per layer and head, can
a linear decoder read the pair's relation out of its latent code ``a(., q, k)`` (fit in
distribution, scored on a held-out part of it and on held-out combinations), beside chance
and a shuffled-label control? Do the codes cluster by relation? What does each head give
each relation on average, and what does zeroing it cost the model's answer?

Everything lands in one JSON-ready dict; :mod:`latentlens.reports.atlas` draws it.
"""

from __future__ import annotations

from typing import Any

import torch

from latentlens.probes.code_dictionary import FEATURES, code_dictionary
from latentlens.probes.codes import CodeSet, embedding_of
from latentlens.probes.decoding import decoding_table
from latentlens.probes.interventions import head_ablation_table
from latentlens.probes.pairs import TokenPairs, pair_codes
from latentlens.probes.source import HookedLike, pattern_hooks
from latentlens.probes.structure import all_identical, cluster_scores

# Pairs of one batch scored with and without each head (the ablation table), by default.
ABLATION_EXAMPLES = 256
SCORES = ("ari", "ami", "nmi", "nmi_shuffled")


def _rows(codes: CodeSet, index: torch.Tensor) -> CodeSet:
    return CodeSet(codes.codes[index], codes.target[index], codes.factors[index],
                   codes.groups[index], codes.split, codes.target_kind)  # fmt: skip


def _halves(codes: CodeSet) -> tuple[CodeSet, CodeSet]:
    """The first half (to fit decoders) and the second (to score them in distribution);
    the examples come in a seeded random order, so the halves are random halves."""
    half = len(codes) // 2
    fit = _rows(codes, torch.arange(half))
    held = _rows(codes, torch.arange(half, len(codes)))
    return fit, CodeSet(held.codes, held.target, held.factors, held.groups, "id (held out)",
                        held.target_kind)  # fmt: skip


def _by_relation(codes: CodeSet, layer: int) -> CodeSet:
    """``layer``'s codes alone, grouped by relation (the embedding's colours)."""
    return CodeSet(codes.codes[:, layer : layer + 1], codes.target, codes.factors, codes.target,
                   codes.split, codes.target_kind)  # fmt: skip


def _clustering(codes: CodeSet, seed: int) -> list[dict[str, Any]]:
    """Per layer, k-means (k = number of relations) on the codes against the relation."""
    rows = []
    for layer in range(codes.codes.shape[1]):
        features = codes.features([layer])
        if all_identical(features):
            note = "codes identical for every pair"
            rows.append({"layer": layer, **dict.fromkeys(SCORES), "note": note})
            continue
        score = cluster_scores(features, codes.target, methods=("kmeans",), seed=seed)["kmeans"]
        rows.append({"layer": layer, **{k: score[k] for k in SCORES}})
    return rows


def _mean_weights(codes: CodeSet, names: tuple[str, ...]) -> list[dict[str, Any]]:
    """Per layer, head and relation: the mean attention weight on the key (over the pair's
    keys), with its standard error over pairs."""
    weight = codes.codes.mean(dim=-1)  # [examples, layer, head]
    rows = []
    for label, name in enumerate(names):
        chosen = weight[codes.target == label]
        if not len(chosen):
            continue
        mean = chosen.mean(0)
        error = chosen.std(0) / len(chosen) ** 0.5 if len(chosen) > 1 else torch.zeros_like(mean)
        rows += [
            {"layer": layer, "head": head, "relation": name, "mean": float(mean[layer, head]),
             "standard_error": float(error[layer, head]), "pairs": len(chosen)}
            for layer in range(mean.shape[0])
            for head in range(mean.shape[1])
        ]  # fmt: skip
    return rows


def _best_layer(decoding: list[dict[str, Any]]) -> int:
    per_layer = [r for r in decoding if r["layer"] != "all" and r["heads"] == "all"]
    return max(per_layer, key=lambda r: r["test"])["layer"]


def _degenerate(codes: CodeSet, decoding: list[dict[str, Any]]) -> list[str]:
    """Named problems that make panels meaningless."""
    notes = []
    for layer in range(codes.codes.shape[1]):
        if all_identical(codes.features([layer])):
            notes.append(
                f"layer {layer}: the codes are identical for every pair (a constant attention "
                "pattern at the query, e.g. a hook that overwrites it): nothing to decode"
            )
    overall = decoding[0]
    if overall["fit"] <= overall["chance"] + 0.02:
        notes.append(
            f"even fit in sample, the decoder of every code together reaches only "
            f"{overall['fit']:.2f} against chance {overall['chance']:.2f}: the codes carry "
            "no linear trace of the relation (an untrained or random model?)"
        )
    return notes


@torch.no_grad()
def _dictionary(model: HookedLike, pairs: TokenPairs, both: CodeSet, seed: int) -> dict:
    """:func:`~latentlens.probes.code_dictionary.code_dictionary` of every pair's code
    (its first key), each feature's top pairs named by their query and key tokens."""
    order = torch.cat(
        [
            batch.labels["index"]
            for split in ("id", "ood")
            for batch in pairs.labelled_batches(split, seed=seed)
        ]
    )  # fmt: skip  (the rows pair_codes read, in its order)
    features = min(FEATURES, len(both), both.codes.shape[1] * both.codes.shape[2])
    result = code_dictionary(both.codes[..., 0], both.target, pairs.label_names, features, seed)
    tokenizer = getattr(model, "tokenizer", None)

    def text(token: int) -> str:
        return tokenizer.decode([token]) if tokenizer is not None else str(token)

    for feature in result["features"]:
        rows = order[feature["top_pairs"]]
        feature["top_tokens"] = [
            f"{text(int(pairs.tokens[r, pairs.query[r]]))!r} -> "
            f"{text(int(pairs.tokens[r, pairs.keys[r, 0]]))!r}"
            for r in rows.tolist()
        ]
    return result


def latent_atlas(
    model: HookedLike,
    pairs: TokenPairs,
    name: str = "model",
    seed: int = 0,
    embedding: str = "pca",
    ablation: bool = True,
    batch_size: int = 128,
    ablation_examples: int = ABLATION_EXAMPLES,
    causal: bool = False,
) -> dict[str, Any]:
    """The atlas of ``model`` on ``pairs`` (see the module's docstring): a dict with
    ``decoding`` (rows of :func:`~latentlens.probes.decoding.decoding_table`, fit on half
    the ID pairs; ``test``: accuracy on the OOD pairs, ``id_test``: on the other ID half,
    each with its binomial standard error ``_se``),
    ``clustering`` (per layer), ``mean_weight`` (per layer, head and relation),
    ``embedding`` (2-D, of the layer decoded best OOD), ``dictionary`` (a non-negative
    factorisation of every pair's code over all layers and heads,
    :mod:`~latentlens.probes.code_dictionary`), ``ablation`` (zeroing each head's
    output, change in the log-probability of the answer on ``ablation_examples`` pairs;
    where the pairs have answers) and ``degenerate`` (named problems). ``causal``: the
    model is a decoder, so the codes are read without the tokens after each batch's last
    query (see :func:`~latentlens.probes.pairs.pair_codes`)."""
    layers = pattern_hooks(model)
    ident = pair_codes(model, pairs, "id", batch_size=batch_size, seed=seed, causal=causal)
    ood = pair_codes(model, pairs, "ood", batch_size=batch_size, seed=seed, causal=causal)
    fit, id_test = _halves(ident)
    by_ood = decoding_table(fit, ood, seed=seed, also={"id_test": id_test})
    for row in by_ood:
        row["id_chance"] = row.pop("id_test_chance")
    both = CodeSet(torch.cat([ident.codes, ood.codes]), torch.cat([ident.target, ood.target]),
                   torch.cat([ident.factors, ood.factors]), torch.cat([ident.groups, ood.groups]),
                   "all", "classification")  # fmt: skip
    best = _best_layer(by_ood)
    results: dict[str, Any] = {
        "model": name,
        "relation": pairs.description,
        "labels": list(pairs.label_names),
        "factors": list(pairs.factor_names),
        "pairs": {"id": len(ident), "ood": len(ood)},
        "layers": len(layers),
        "heads": int(ident.codes.shape[2]),
        "decoding": by_ood,
        "clustering": _clustering(both, seed),
        "mean_weight": _mean_weights(both, pairs.label_names),
        "embedding": embedding_of(
            [_by_relation(ident, best), _by_relation(ood, best)],
            embedding,
            list(pairs.label_names),
            "relation",
        ),
        "degenerate": _degenerate(both, by_ood),
    }
    results["embedding"]["layer"] = best
    results["dictionary"] = _dictionary(model, pairs, both, seed)
    if ablation and bool((pairs.answer >= 0).any()):
        index = torch.arange(len(pairs))[pairs.answer >= 0][:ablation_examples]
        results["ablation"] = head_ablation_table(
            model, pairs, pairs.batch(index), metric="answer_logprob"
        )
    return results
