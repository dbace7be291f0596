"""The sections of the demo's report: what was run, what the converged and live codes carry
(tables, rankings, verdict, figures), each run's own figures, and the warnings."""

from __future__ import annotations

import platform
from pathlib import Path
from typing import Any

import torch

from latentlens import __version__
from latentlens.figures import code_embedding_plotly
from latentlens.figures.probes import BEYOND_TWO_ERRORS
from latentlens.reports.demo_runs import VARIANT_NAMES, ZOO_GROUP, ZOO_SEEDS, DemoRun
from latentlens.reports.demo_text import (
    OFFICIAL_STEPS,
    OFFICIAL_TEST_R2,
    code_verdict_sentence,
    constant_code_note,
    decoded,
    heads_that_matter,
    maybe_undefined,
    ranking_sentence,
    seed_ranking_sentence,
    with_error,
)
from latentlens.reports.report import Section
from latentlens.training import RunDirectory
from latentlens.zoo import card as zoo_card

EMBEDDING_CAPTION = "2-D embedding of the last layer's codes"


def setting_text(run: DemoRun, seed: bool = True) -> str:
    """The task and model of ``run``, from its config (with its training seed)."""
    config = RunDirectory(run.path).read_config()
    task, model, train = config["task"]["config"], config["model"], config["train"]
    return (
        f"fuzzy logic with T={task['seq_len']} tokens and {task['frac_test']:.0%} of the term "
        f"combinations held out; {model['n_layers']} layers, d_model {model['d_model']}, "
        f"{model['n_heads']} heads, MLP {model['d_mlp']}; {train['steps']:,} steps of batch "
        f"{train['batch_size']}, AdamW lr {train['lr']}"
        + (f", seed {train['seed']}" if seed else "")
    )


def where_trained(runs: list[DemoRun]) -> str:
    """Where and when the zoo's ``runs`` were trained, from their cards: one clause per
    machine and date, naming its variants when the runs differ."""
    places: dict[tuple[str, str], dict[str, None]] = {}
    for run in runs:
        info = zoo_card(run.zoo_name)["training"]
        places.setdefault((info["machine"], info["date"]), {})[VARIANT_NAMES[run.variant]] = None
    if len(places) == 1:
        (machine, date), _ = places.popitem()
        return f"trained on {machine} on {date}"
    return "; ".join(
        f"{' and '.join(names)} trained on {machine} on {date}"
        for (machine, date), names in places.items()
    )


def table_row(run: DemoRun, probe: dict, reference: tuple[str, float]) -> dict[str, Any]:
    """One model's row: its R² per split, the ``reference`` (column, value) beside test R²,
    decoding, clustering, topography and the heads that matter."""
    evaluation = probe["evaluation"]
    overall = next(r for r in probe["decoding"] if r["layer"] == "all")
    return {
        "model": run.label,
        "train R²": with_error(evaluation["train"]),
        "test R² (new combinations)": with_error(evaluation["test"]),
        reference[0]: reference[1],
        "ood R² (new terms)": with_error(evaluation["ood"]),
        "decoding R² (held out)": decoded(overall), "shuffled": overall["shuffled"],
        "k-means ARI": maybe_undefined(probe["clustering"]["kmeans"]["ari"]),
        "topographic ρ": maybe_undefined(probe["topography"]["rho"]),
        "p": maybe_undefined(probe["topography"]["p_value"]),
        "heads that matter": heads_that_matter(probe["ablation"]),
    }  # fmt: skip


def code_verdict(group: list[DemoRun], probes: list[dict]) -> str | None:
    """:func:`code_verdict_sentence` from the group's code swaps at their last layer; None
    where the probes made no swaps."""
    values: dict[str, dict[str, list[float]]] = {}
    layers = {tuple(s["layers"]) for p in probes for s in p.get("code_swaps", [])}
    if not layers:
        return None
    last = max(layers)
    for run, probe in zip(group, probes, strict=True):
        swaps = {s["donor"]: s for s in probe["code_swaps"] if tuple(s["layers"]) == last}
        name = VARIANT_NAMES[run.variant] if run.zoo_name else run.label
        entry = values.setdefault(name, {"moved": [], "random": [], "same": [], "clean": []})
        entry["moved"].append(swaps["one-term"]["moved"])
        entry["random"].append(swaps["random-combination"]["moved"])
        entry["same"].append(swaps["same-combination"]["r2_own"])
        entry["clean"].append(swaps["same-combination"]["r2_own_clean"])
    return code_verdict_sentence(values, last[0])


def curve_examples(group: list[DemoRun]) -> str:
    """The evaluation-set sizes the group's training curves were scored on."""
    sizes = sorted({RunDirectory(r.path).read_config()["train"]["eval_examples"] for r in group})
    return " or ".join(f"{size:,}" for size in sizes)


def outcome_section(title: str, group: list[DemoRun], results: dict[Path, dict], figures, intro):
    """One group's table (zoo or live), its ranking (over seeds for the zoo's models), the
    notes and its two figures."""
    probes = [results[run.path] for run in group]
    if group[0].zoo_name:
        over_seeds = f", mean ± std over {len(ZOO_SEEDS)} seeds"
        by_variant: dict[str, list[float]] = {}
        for run, probe in zip(group, probes, strict=True):
            name = VARIANT_NAMES[run.variant]
            by_variant.setdefault(name, []).append(probe["evaluation"]["test"]["r2"])
        ranking = seed_ranking_sentence(by_variant)
    else:
        over_seeds = ""
        ranking = ranking_sentence(
            {run.label: (p["evaluation"]["test"]["r2"], p["evaluation"]["test"]["r2_se"])
             for run, p in zip(group, probes, strict=True)}
        )  # fmt: skip
    n_heads = len(probes[0]["ablation"])
    constant = [run.label for run, p in zip(group, probes, strict=True)
                if p["topography"]["rho"] is None]  # fmt: skip
    table = []
    for run, probe in zip(group, probes, strict=True):
        if run.zoo_name:
            paper = zoo_card(run.zoo_name)["paper"]["test_r2"]
            reference = ("paper test R² (Table A1, 3 seeds)", paper)
        else:
            reference = (
                f"official test R² at {OFFICIAL_STEPS:,} steps",
                OFFICIAL_TEST_R2[run.variant],
            )
        table.append(table_row(run, probe, reference))
    return Section(
        title,
        [
            *intro,
            *filter(None, [code_verdict(group, probes)]),
            ranking,
            "± is the standard error over the evaluation batches "
            f"({probes[0]['evaluation_examples']:,} examples a split of each run's fixed "
            "evaluation set); the head ablations are measured on the same test examples, so "
            "their baseline is the table's test R². Decoding R² is to be read against the "
            "shuffled-label control beside it (chance is 0). A head matters where zeroing its "
            "output changes test R² by more than two standard errors; noise alone would put "
            f"{n_heads * BEYOND_TWO_ERRORS:.1f} of {n_heads} heads there.",
            *filter(None, [constant_code_note(constant)]),
        ],
        table=table,
        figures=[(figures[0], f"R² over training per split{over_seeds} (y-axis clipped to "
                              f"[-1, 1]); each point scores the run's whole fixed evaluation "
                              f"set, {curve_examples(group)} examples a split (the table: its "
                              f"first {probes[0]['evaluation_examples']:,})"),
                 (figures[1], f"clustering and topographic similarity of the latent codes"
                              f"{over_seeds}")],
    )  # fmt: skip


def report_sections(runs: list[DemoRun], results, figures, drawn, wall: float, command: str):
    """The report's sections in order: what was run, warnings, the converged and live
    outcomes, then each run's own figures."""
    converged = [run for run in runs if run.zoo_name]
    live = [run for run in runs if not run.zoo_name]
    origin = []
    if converged:
        variants = ", ".join(dict.fromkeys(VARIANT_NAMES[run.variant] for run in converged))
        origin.append(
            f"From the zoo (converged, not trained here): {variants}, seeds "
            f"{', '.join(map(str, ZOO_SEEDS))} of `{ZOO_GROUP}`: "
            f"{setting_text(converged[0], seed=False)}; {where_trained(converged)}. Probed here "
            f"on {results[converged[0].path]['examples']:,} examples each."
        )
    origin.append(
        f"Trained live by this command: {', '.join(run.label for run in live)}: "
        f"{setting_text(live[0])}."
    )
    threads = torch.get_num_threads()
    what = Section(
        "What was run",
        [
            f"Command: `{command}` (latentlens {__version__}, torch {torch.__version__}, "
            f"{platform.machine()} {platform.system()}, {threads} thread"
            f"{'' if threads == 1 else 's'}), "
            f"{wall / 60:.1f} minutes in all.",
            *origin,
            "Task: fuzzy logic ('test' holds new combinations of seen terms, the paper's OOD "
            "split, and 'ood' never-seen terms).",
            "Probes (docs/methods/probes.md): the latent code of the last token attending "
            "to itself, with a query input shared by all tasks, per layer and head; a ridge "
            "decoder of the 8 term bits fit on one half of the held-out-combination examples "
            "and scored on the other; clustering against the term combinations; topographic "
            "similarity (Spearman ρ between code distances and term-bit Hamming distances, "
            "permutation p-value); zeroing each head's output.",
        ],
    )
    outcomes = []
    if converged:
        outcomes.append(outcome_section(
            "What the converged codes carry", converged, results, drawn["zoo"],
            [f"Converged models from the zoo, {len(ZOO_SEEDS)} seeds of each variant, beside "
             "the paper's Table A1 at the same setting (its numbers are means over 3 seeds)."],
        ))  # fmt: skip
    steps = RunDirectory(live[0].path).read_config()["train"]["steps"]
    outcomes.append(outcome_section(
        "Trained live" if converged else "What came out", live, results, drawn["live"],
        [f"These models are far from converged: {steps:,} steps, against the "
         f"{OFFICIAL_STEPS:,} at which the official code reaches the test R² in the table "
         "(one seed each, docs/methods/numbers.md)."],
    ))  # fmt: skip
    per_run = []
    for run in runs:
        shown = figures[run.path]
        pictures = [
            (shown[key], caption)
            for key, caption in (
                ("decoding_by_head", "term-bit decoding from each head alone, and all heads"),
                ("code_embedding", EMBEDDING_CAPTION),
                ("head_ablation", "change in R² when one head's output is zeroed"),
            )
            if key in shown
        ]
        live_plot = code_embedding_plotly(results[run.path], title=run.label)
        interactive = [(live_plot, EMBEDDING_CAPTION)] if "code_embedding" in shown else []
        per_run.append(
            Section(run.label, [f"Run directory: {run.path}"],
                    figures=pictures, interactive=interactive)
        )  # fmt: skip
    # one paragraph per message, naming every run it holds for (seeds share most of them)
    holders: dict[str, list[str]] = {}
    for run in runs:
        for note in results[run.path].get("health", []):
            holders.setdefault(note["message"], []).append(run.label)
    warnings = [f"{', '.join(labels)}: {message}" for message, labels in holders.items()]
    health = [Section("Warnings", warnings)] if warnings else []
    return [what, *health, *outcomes, *per_run]
