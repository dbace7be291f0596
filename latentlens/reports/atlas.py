"""``latentlens atlas MODEL``: the latent-code atlas of a language model, written as
``results.json``, figures, ``report.md`` and a self-contained ``report.html``.

MODEL is a Hugging Face model TransformerLens's ``TransformerBridge`` supports: a real
model fetched with ``latentlens models fetch`` (``smollm2-135m``, ``minilm-l6``), a hub name
(``gpt2``: needs internet once) or a folder written with ``save_pretrained``. The pairs are
:func:`latentlens.probes.relations.repeated_token_pairs` over the model's vocabulary (its
special tokens left out, its BOS token first where the model prepends one), or with
``relation="text"`` :func:`latentlens.probes.text_relations.text_relation_pairs`: natural
text with a repeated sentence, padded sequences of different lengths.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import torch

from latentlens.figures.atlas import relation_weights
from latentlens.figures.interactive import code_embedding_plotly
from latentlens.figures.probes import code_embedding, decoding_by_head, head_ablation
from latentlens.figures.save import save_figure
from latentlens.figures.token_viewer import TokenViewer, token_attention, with_dictionary
from latentlens.probes.atlas import ABLATION_EXAMPLES, latent_atlas
from latentlens.probes.head_types import HEAD_TYPES, head_type_scores, top_heads
from latentlens.probes.induction import induction_ablation, repeated_random_tokens
from latentlens.probes.pairs import TokenPairs
from latentlens.probes.relations import repeated_token_pairs
from latentlens.probes.text_relations import story_text, text_relation_pairs
from latentlens.reports.report import Section, write_report
from latentlens.training.checkpoint import atomic_write_bytes

RELATION_SOURCES = ("repeated-tokens", "text")


def _with_error(row: dict[str, Any], key: str) -> str:
    """A decoding row's accuracy ``key`` with the standard error the decoder gave it."""
    return f"{row[key]:.3f} ± {row[key + '_se']:.3f}"


def _decoding_section(results: dict[str, Any], figure: Path) -> Section:
    n_id, n_ood = results["pairs"]["id"] - results["pairs"]["id"] // 2, results["pairs"]["ood"]
    rows = results["decoding"]
    table = []
    for layer in ["all", *range(results["layers"])]:
        whole = next(r for r in rows if r["layer"] == layer and r["heads"] == "all")
        singles = [r for r in rows if r["layer"] == layer and r["heads"].startswith("h")]
        best = max(singles, key=lambda r: r["test"]) if singles else None
        table.append({
            "layer": layer,
            "ID held out": _with_error(whole, "id_test"),
            "OOD": _with_error(whole, "test"),
            "OOD chance": whole["chance"],
            "OOD shuffled labels": whole["shuffled"],
            "best head alone (OOD)": f"{best['heads']}: {best['test']:.3f}" if best else "-",
        })  # fmt: skip
    overall = rows[0]
    verdict = (
        "reads the relation out of held-out combinations above chance"
        if overall["test"] - overall["chance"]
        > 2 * math.sqrt(overall["chance"] * (1 - overall["chance"]) / n_ood)
        else "does not beat chance on held-out combinations (by two standard errors)"
    )
    return Section(
        "Decoding the relation from the latent codes",
        [
            "A logistic-regression decoder of the relation is fit on half of the "
            "in-distribution pairs' codes and scored on the other half (ID held out) and on "
            f"the held-out combinations (OOD); ± is the binomial standard error over "
            f"{n_id} and {n_ood} pairs. Chance is the largest relation's share; the "
            "shuffled-label decoder is fit on permuted labels.",
            f"Every code together, the decoder {verdict}: OOD {overall['test']:.3f} against "
            f"chance {overall['chance']:.3f}.",
        ],
        table,
        [(figure, "held-out (OOD) accuracy from each head alone, and per layer")],
    )


def _heads_section(results: dict[str, Any], figure: Path) -> Section:
    rows = results["mean_weight"]
    table = []
    for relation in results["labels"]:
        ranked = sorted((r for r in rows if r["relation"] == relation), key=lambda r: -r["mean"])
        for r in ranked[:3]:
            table.append({
                "relation": relation, "layer": r["layer"], "head": r["head"],
                "mean weight": f"{r['mean']:.3f} ± {r['standard_error']:.3f}",
            })  # fmt: skip
    return Section(
        "Which heads attend to which relation",
        ["The three heads giving each relation's key the most weight on average (± standard "
         "error over pairs). A duplicate-token head stands out under duplicate, an induction "
         "head under induction."],
        table,
        [(figure, "mean attention weight on the key, per relation")],
    )  # fmt: skip


def _groups_text(groups: list[int]) -> str:
    """Which query heads share a key/value head, in words."""
    shared = sorted(set(groups))
    if len(shared) == len(groups):
        return "Every head has its own keys and values (multi-head attention)."
    sets = "; ".join(
        f"h{', h'.join(str(h) for h, g in enumerate(groups) if g == kv)} share key/value head {kv}"
        for kv in shared
    )
    return (
        f"Grouped-query attention: {len(groups)} query heads on {len(shared)} key/value heads "
        f"({sets}). A pair's code is the vector over all {len(groups)} query heads; heads "
        "that share keys and values differ only in their queries."
    )


def _head_types_section(results: dict[str, Any]) -> Section:
    types = results["head_types"]
    singles = {
        (r["layer"], int(r["heads"][1:])): r
        for r in results["decoding"]
        if r["layer"] != "all" and r["heads"].startswith("h")
    }
    table = []
    for kind in HEAD_TYPES:
        for layer, head, score in top_heads(types, kind):
            alone = singles.get((layer, head))
            table.append({
                "head type": kind.replace("_", " "), "layer": layer, "head": head,
                "detector score": f"{score:.2f}",
                "relation decoded from this head alone (OOD)":
                    _with_error(alone, "test") if alone else "-",
            })  # fmt: skip
    return Section(
        "Head types: the detector beside the codes",
        [
            "TransformerLens's head detector (`transformer_lens.head_detector.detect_head`) "
            "scores each head by the share of its attention that falls where a previous-token, "
            "duplicate-token or induction head would put it, on "
            f"{types['stories']} stories with a repeated sentence (0 to 1). The three "
            "highest-scoring heads of each type, beside the relation decoded from that "
            "head's code alone on the held-out combinations.",
            _groups_text(results["key_value_groups"]),
        ],
        table,
    )


def _detector_types(results: dict[str, Any]) -> dict[tuple[int, int], str]:
    """Each head among the detector's top three of a type, with that type's name."""
    if "head_types" not in results:
        return {}
    return {
        (layer, head): kind.replace("_head", "").replace("_", "-")
        for kind in HEAD_TYPES
        for layer, head, _ in top_heads(results["head_types"], kind)
    }


def _dictionary_section(results: dict[str, Any]) -> Section:
    dictionary = results["dictionary"]
    types = _detector_types(results)
    table = []
    for number, feature in enumerate(dictionary["features"]):
        activation = feature["relation_activation"]
        fires = max(activation, key=activation.get)
        table.append({
            "feature": number,
            "share": f"{feature['activation_share']:.2f}",
            "heads for half": feature["heads_for_half"],
            "top heads (share of loading)": ", ".join(
                f"L{layer}H{head} {share:.2f}"
                + (f" ({types[(layer, head)]})" if (layer, head) in types else "")
                for layer, head, share in feature["heads"][:3]
            ),
            "most active on": fires,
            "top pairs (query -> key)": "; ".join(feature["top_tokens"][:3]),
        })  # fmt: skip
    single = sum(f["heads_for_half"] == 1 for f in dictionary["features"])
    return Section(
        "A dictionary of codes",
        [
            f"Non-negative matrix factorisation of every pair's code over all "
            f"{dictionary['layers']} layers x {dictionary['heads']} heads into "
            f"{len(dictionary['features'])} features, which reconstruct "
            f"{dictionary['explained']:.0%} of the codes' variance. A feature loaded by one "
            "head is that head. A feature whose half needs several heads is a pattern they "
            f"form together. {single} of {len(dictionary['features'])} features are single "
            "heads. Each head is marked with the type the head detector gives it (among a "
            "type's top three), and features are ordered by their share of the activation.",
        ],
        table,
    )


def _clustering_section(results: dict[str, Any]) -> Section:
    table = [
        {"layer": r["layer"], **{k: "-" if r[k] is None else r[k] for k in ("ari", "ami", "nmi",
                                                                         "nmi_shuffled")}}
        for r in results["clustering"]
    ]  # fmt: skip
    return Section(
        "Do the codes cluster by relation?",
        ["k-means with one cluster per relation on each layer's codes (every pair), scored "
         "against the relation: ARI and AMI are 0 for clusters that ignore it and 1 for its "
         "own grouping; nmi_shuffled is the NMI the same clusters reach against shuffled "
         "labels."],
        table,
    )  # fmt: skip


def write_atlas(
    results: dict[str, Any], out_dir: str | Path, viewer: TokenViewer | None = None
) -> tuple[Path, Path]:
    """Figures, ``results.json``, ``report.md`` and ``report.html`` of an atlas in
    ``out_dir``; ``viewer``: a token-level attention viewer for the HTML report."""
    root = Path(out_dir)
    figures = root / "figures"
    root.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(root / "results.json", (json.dumps(results, indent=1) + "\n").encode())
    decoding = save_figure(decoding_by_head(results, "relation from the latent codes"),
                           figures / "decoding_by_head")[0]  # fmt: skip
    weights = save_figure(relation_weights(results), figures / "relation_weights")[0]
    embedding = save_figure(
        code_embedding(results, f"latent codes of layer {results['embedding']['layer']} "
                       "(colour: relation; crosses: OOD)", ood_split="ood"),
        figures / "code_embedding",
    )[0]  # fmt: skip
    what = Section(
        "What was measured",
        [
            f"Model: `{results['model']}` ({results['layers']} layers, {results['heads']} "
            f"heads). Pairs: {results['relation']}.",
            f"{results['pairs']['id']} in-distribution and {results['pairs']['ood']} held-out "
            "pairs. The latent code of a pair is the vector of attention weights a(., q, k) "
            "over the heads of a layer, read from `blocks.{l}.attn.hook_pattern`.",
        ],
    )
    sections = [what]
    if results["degenerate"]:
        sections.append(Section("Warnings", results["degenerate"]))
    sections += [
        _decoding_section(results, decoding),
        _heads_section(results, weights),
        *([_head_types_section(results)] if "head_types" in results else []),
        *([_induction_section(results)] if "induction_ablation" in results else []),
        *([_dictionary_section(results)] if "dictionary" in results else []),
        _clustering_section(results),
        Section(
            "The codes in two dimensions",
            [
                f"{results['embedding']['method'].upper()} of the codes of layer "
                f"{results['embedding']['layer']}, the layer decoded best OOD."
            ],
            figures=[(embedding, "latent codes coloured by relation")],
            interactive=[(code_embedding_plotly(results), "latent codes coloured by relation")],
        ),  # fmt: skip
    ]
    if viewer is not None:
        sections.append(Section(
            "Attention token by token",
            [f"The model on one prompt of {len(viewer.view.tokens)} tokens: hover a token to "
             "see where each head of the chosen layer looks from it, then a key in that "
             "pattern to see the pair's latent code over every layer and head (in "
             f"report.html). The prompt: `{''.join(viewer.view.tokens).strip()}`"],
            viewers=[(viewer, f"{results['model']}, every layer and head, token by token")],
        ))  # fmt: skip
    if "ablation" in results:
        ablation = save_figure(head_ablation(results), figures / "head_ablation")[0]
        sections.append(Section(
            "What each head does for the answer",
            ["Each head's output zeroed in turn; the change in the log-probability the model "
             "gives the induction answer (the token after the earlier occurrence) at the "
             "query, on one batch of pairs, with standard errors over its parts."],
            figures=[(ablation, "change in the answer's log-probability per head")],
        ))  # fmt: skip
    return write_report(root, f"Latent-code atlas of {results['model']}", sections)


def _random_token_ends(model: Any) -> tuple[int | None, list[int]]:
    """For random-token sequences of ``model``: the BOS token they start with (where the
    model prepends one) and the special tokens they leave out."""
    tokenizer = getattr(model, "tokenizer", None)
    special = list(getattr(tokenizer, "all_special_ids", []) or [])
    bos = getattr(tokenizer, "bos_token_id", None) if model.cfg.default_prepend_bos else None
    return bos, special


def atlas_pairs(
    model: Any, relation: str, examples: int, seq_len: int, seed: int, padding_side: str
) -> TokenPairs:
    """The labelled pairs of ``relation`` (one of :data:`RELATION_SOURCES`) for ``model``,
    tokenised by its own tokenizer."""
    tokenizer = getattr(model, "tokenizer", None)
    if relation == "text":
        if tokenizer is None:
            raise ValueError("relation 'text' needs the model's tokenizer; this model has none")
        return text_relation_pairs(tokenizer, examples, seed, padding_side)
    if relation != "repeated-tokens":
        raise ValueError(f"relation={relation!r} is unknown; choose one of {RELATION_SOURCES}")
    bos, special = _random_token_ends(model)
    return repeated_token_pairs(
        model.cfg.d_vocab, examples, seq_len, seed, bos_token_id=bos, exclude=special
    )


# The causal check of the detector's induction heads: repeated random sequences.
INDUCTION_HEADS, INDUCTION_SEQUENCES, INDUCTION_HALF, INDUCTION_DRAWS = 3, 32, 20, 5


def _induction_check(
    model: Any, head_types: dict[str, Any], seed: int, sequences: int = INDUCTION_SEQUENCES
) -> dict[str, Any]:
    """Ablate the detector's top induction heads against random heads of the same layers
    (:func:`latentlens.probes.induction.induction_ablation`) on ``sequences`` repeated
    random sequences."""
    bos, special = _random_token_ends(model)
    tokens = repeated_random_tokens(model.cfg.d_vocab, sequences, INDUCTION_HALF,
                                    seed, bos_token_id=bos, exclude=special)  # fmt: skip
    heads = [(layer, head) for layer, head, _ in top_heads(head_types, "induction_head",
                                                            INDUCTION_HEADS)]  # fmt: skip
    return induction_ablation(model, heads, tokens, INDUCTION_HALF, INDUCTION_DRAWS, seed)


def _induction_section(results: dict[str, Any]) -> Section:
    check = results["induction_ablation"]
    heads = ", ".join(f"L{layer}H{head}" for layer, head in check["heads"])
    random = check["random"]

    def change(row: dict[str, float]) -> str:
        return f"{row['mean']:+.3f} ± {row['standard_error']:.3f}"

    table = [
        {"heads zeroed": f"the detector's induction heads ({heads})",
         "change in the second copy's loss (nats)": change(check["targeted"])},
        {"heads zeroed": f"as many random heads of the same layers ({len(random['draws'])} draws)",
         "change in the second copy's loss (nats)": f"{random['mean']:+.3f} ± "
         f"{random['standard_error_over_draws']:.3f} over draws, ± "
         f"{random['standard_error_over_sequences']:.3f} over sequences"},
    ]  # fmt: skip
    return Section(
        "Do the induction heads cause in-context copying?",
        [
            f"{check['sequences']} sequences of {check['half']} random tokens repeated once. "
            "A model with induction heads predicts the second copy far better than the first "
            "(Olsson et al., 2022, 'In-context learning and induction heads'). The heads the "
            "detector scores highest as induction heads are zeroed together "
            "(`blocks.{l}.attn.hook_z`), and, as a control, as many random other heads of "
            "the same layers; ± is the standard error over sequences (paired with the same "
            "sequence unablated) or over draws.",
            f"Unablated, the loss is {check['loss_first_copy']['mean']:.3f} ± "
            f"{check['loss_first_copy']['standard_error']:.3f} nats on the first copy and "
            f"{check['loss_second_copy']['mean']:.3f} ± "
            f"{check['loss_second_copy']['standard_error']:.3f} on the second.",
        ],
        table,
    )


def run_atlas(
    model_name: str,
    out_dir: str | Path,
    examples: int = 3_000,
    seq_len: int = 32,
    device: str = "auto",
    seed: int = 0,
    random_weights: bool = False,
    ablation: bool = True,
    relation: str = "repeated-tokens",
    padding_side: str = "right",
    detector_stories: int = 8,
    ablation_examples: int = ABLATION_EXAMPLES,
    prompt: str | None = None,
    batch_size: int = 128,
    induction_sequences: int = INDUCTION_SEQUENCES,
) -> dict[str, Any]:
    """Load ``model_name``, build its pairs of ``relation``, compute and write the atlas,
    with which query heads share key/value heads and the head detector's head types
    (``detector_stories`` stories; 0 skips the detector). The head ablations (``ablation``:
    one forward pass of ``ablation_examples`` pairs per head) and the causal check of the
    detector's induction heads (``2 + INDUCTION_DRAWS`` forward passes of
    ``induction_sequences`` repeated random sequences) score the next token, so they run on
    causal language models only. The report's attention viewer shows ``prompt`` (default:
    a story of the text relations' grammar with its second sentence repeated); a model
    without a tokenizer gets none. ``batch_size``: pairs per forward pass reading codes."""
    from latentlens.pretrained.language_model import (  # noqa: PLC0415
        key_value_groups,
        load_language_model,
    )

    model = load_language_model(model_name, device, random_weights=random_weights)
    pairs = atlas_pairs(model, relation, examples, seq_len, seed, padding_side)
    name = model_name + (" (random weights)" if random_weights else "")
    causal = type(model.original_model).__name__.endswith(("ForCausalLM", "LMHeadModel"))
    results = latent_atlas(
        model, pairs, name, seed=seed, ablation=ablation and causal,
        ablation_examples=ablation_examples, causal=causal, batch_size=batch_size,
    )  # fmt: skip
    results["key_value_groups"] = key_value_groups(model)
    if detector_stories:
        results["head_types"] = head_type_scores(model, detector_stories, seed)
        if causal:
            results["induction_ablation"] = _induction_check(
                model, results["head_types"], seed, induction_sequences
            )
    viewer = None
    if getattr(model, "tokenizer", None) is not None:
        text = prompt if prompt is not None else default_prompt(seed)
        view = token_attention(model, text, name=name)
        viewer = TokenViewer(with_dictionary(view, results["dictionary"]))
    write_atlas(results, out_dir, viewer)
    return results


def default_prompt(seed: int = 0) -> str:
    """The atlas viewer's prompt: a story of :mod:`latentlens.probes.text_relations`'s
    grammar, ``A R R B`` (its second sentence repeated at once)."""
    generator = torch.Generator().manual_seed(seed)
    return story_text(generator, gap=0)
