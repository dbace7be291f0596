"""``latentlens atlas MODEL``: the latent-code atlas of a language model, written as
``results.json``, figures, ``report.md`` and a self-contained ``report.html``.

MODEL is a Hugging Face model TransformerLens's ``TransformerBridge`` supports, by hub name
(``gpt2``: needs internet once) or a folder written with ``save_pretrained``. The pairs are
:func:`latentlens.probes.relations.repeated_token_pairs` over the model's vocabulary (its
special tokens left out, its BOS token first where the model prepends one).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from latentlens.figures.atlas import relation_weights
from latentlens.figures.interactive import code_embedding_plotly
from latentlens.figures.probes import code_embedding, decoding_by_head, head_ablation
from latentlens.figures.save import save_figure
from latentlens.probes.atlas import latent_atlas
from latentlens.probes.relations import repeated_token_pairs
from latentlens.reports.report import Section, write_report
from latentlens.training.checkpoint import atomic_write_bytes


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


def write_atlas(results: dict[str, Any], out_dir: str | Path) -> tuple[Path, Path]:
    """Figures, ``results.json``, ``report.md`` and ``report.html`` of an atlas in
    ``out_dir``."""
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


def run_atlas(
    model_name: str,
    out_dir: str | Path,
    examples: int = 3_000,
    seq_len: int = 32,
    device: str = "auto",
    seed: int = 0,
    random_weights: bool = False,
    ablation: bool = True,
) -> dict[str, Any]:
    """Load ``model_name``, build its repeated-token pairs, compute and write the atlas."""
    from latentlens.pretrained.language_model import load_language_model  # noqa: PLC0415

    model = load_language_model(model_name, device, random_weights=random_weights)
    tokenizer = getattr(model, "tokenizer", None)
    special = list(getattr(tokenizer, "all_special_ids", []) or [])
    bos = getattr(tokenizer, "bos_token_id", None) if model.cfg.default_prepend_bos else None
    pairs = repeated_token_pairs(
        model.cfg.d_vocab, examples, seq_len, seed, bos_token_id=bos, exclude=special
    )
    name = model_name + (" (random weights)" if random_weights else "")
    results = latent_atlas(model, pairs, name, seed=seed, ablation=ablation)
    write_atlas(results, out_dir)
    return results
