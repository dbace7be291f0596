"""``latentlens demo``: from nothing to a report, on a CPU, in minutes.

Probes the latent codes (docs/methods/probes.md) of converged softmax, linear and HYLA
models, three seeds each, from the zoo (:mod:`latentlens.zoo`: Table A1's fuzzy logic,
50,000 steps; the variants ranked over their seeds) and of one model it trains live at a
small size, to show the training path; draws the figures and writes ``report.md`` and
``report.html`` saying which models came from where and what their codes carry, beside
the paper's numbers, with one copy of plotly.js (``plotly.min.js``) for the report and
every interactive figure of its runs. Without the zoo (``zoo=False``), it
trains all three variants live, as before the zoo existed.
"""

from __future__ import annotations

import platform
import shutil
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from latentlens import __version__
from latentlens.figures import (
    code_embedding_plotly,
    metric_curves,
    save_figure,
    structure_scores,
)
from latentlens.figures.probes import BEYOND_TWO_ERRORS, beyond_noise
from latentlens.figures.run_figures import run_figures
from latentlens.models.config import VARIANTS
from latentlens.probes.run import probe_run
from latentlens.progress import progress_bar
from latentlens.reports.report import Section, write_report
from latentlens.reports.seeds import difference_interval, mean_std
from latentlens.training import (
    RunDirectory,
    TrainConfig,
    Trainer,
    list_checkpoints,
    model_for_task,
)
from latentlens.training.config import same_training
from latentlens.zoo import STAMP as ZOO_STAMP
from latentlens.zoo import card as zoo_card
from latentlens.zoo import run_directory as zoo_run_directory

# The names the report and the figures use: the attention variants' paper names.
VARIANT_NAMES = {v: VARIANTS[v].paper_name for v in ("softmax", "linear", "hyla")}


# One copy of plotly.js for the demo's report and every interactive figure in its runs.
PLOTLY_JS = "plotly.min.js"
EMBEDDING_CAPTION = "2-D embedding of the last layer's codes"


@dataclass(frozen=True)
class DemoSize:
    """Model and training sizes of a demo run; ``zoo_examples``: the examples the zoo's
    models are probed on (codes, and the first ones of their evaluation sets)."""

    model: dict[str, Any]
    train: dict[str, Any]
    examples: int
    zoo_examples: int


SIZES = {
    # The reference's default model (D=128, H=8, MLP 256), ~1 min of training per variant
    # on a 2-core CPU. At half its width (D=64, MLP 128), HYLA's layer-0 value network
    # (2 ReLU units per pair) died at the query for seed 2024 at lr 3e-3 and 1e-3 alike; at
    # this size it lives for every seed tried, and in 3,000 steps lr 3e-3 (one of the
    # paper's sweep values) trains all three variants further than the reference's 1e-3:
    # benchmarks/reproduction/demo_settings.py holds the search and docs/benchmarks.md its numbers.
    "small": DemoSize(
        model=dict(attention_dropout=0.0),
        train=dict(steps=3_000, batch_size=128, lr=3e-3, warmup_steps=100, eval_every=250,
                   eval_examples=2_048),
        examples=2_048,
        # about 25 s a zoo model on 2 cores; test R² then has a standard error near 0.05
        zoo_examples=1_024,
    ),
    # seconds: for tests and a first look
    "tiny": DemoSize(
        model=dict(d_model=16, n_heads=4, qk_dim=8, v_dim=8, d_mlp=32, attention_dropout=0.0),
        train=dict(steps=30, batch_size=32, lr=3e-3, warmup_steps=5, eval_every=15,
                   eval_examples=128),
        examples=256,
        zoo_examples=256,  # two batches: a standard error
    ),
}  # fmt: skip


def train_variant(run: Path, variant: str, size: DemoSize, steps: int | None, device: str,
                  quiet: bool, seed: int) -> None:  # fmt: skip
    """Train one variant into ``run``; a finished run is kept, an interrupted one resumed."""
    train = {**size.train, "seed": seed, **({"steps": steps} if steps else {})}
    config = Trainer.resolve_config(
        "fuzzy-logic",
        model_for_task("fuzzy-logic", attention=variant, **size.model),
        TrainConfig.for_task("fuzzy-logic", **train),
    )
    directory = RunDirectory(run)
    if directory.config_path.is_file():
        stored = directory.read_config()
        same = same_training(stored["train"], config["train"])
        if stored["model"] != config["model"] or not same:
            raise ValueError(f"{run} holds a different run; choose another --out or delete it")
        done = list_checkpoints(directory.checkpoints)
        if not done:
            raise ValueError(f"{run} holds a run without checkpoints; delete it and run again")
        if done[-1][0] < config["train"]["steps"]:
            Trainer.resume(run, device=device, quiet=quiet).train()
        return
    Trainer.create(run, config, device=device, quiet=quiet).train()


def _maybe(value: float | None) -> float | str:
    return "undefined" if value is None else value


def _heads_that_matter(rows: list[dict]) -> str:
    """``"k of n"`` heads whose ablation changes the metric beyond two standard errors."""
    beyond = beyond_noise(rows)
    return "n/a" if beyond is None else f"{beyond} of {len(rows)}"


def constant_code_note(names: list[str]) -> str:
    """Why the variants ``names``, whose codes came out the same for every task (topographic
    ρ undefined), show nothing to decode; empty when there are none."""
    if not names:
        return ""
    which = " and ".join(names)
    return (
        f"{which}: the codes a[:, T−1, T−1] are identical for every task, so neither the "
        "decoder nor the structure scores can read the terms from them. The code of a token "
        "on itself depends on the other tokens only where the normalisation mixes in the "
        "other keys (softmax over keys does; linear attention and RMSHead, which normalises "
        "across heads, do not); without softmax it varies with the task only through that "
        "token's own residual stream, which in this run carries no task into any layer's code."
    )


# The official code's test R² (held-out combinations) at the default model and 50,000
# steps, one seed each (docs/methods/numbers.md): how far the demo is from converged.
OFFICIAL_TEST_R2 = {"softmax": 0.704, "linear": 0.749, "hyla": 0.760}
OFFICIAL_STEPS = 50_000


def _with_error(metrics: dict[str, float], name: str = "r2") -> str:
    return f"{metrics[name]:.3f} ± {metrics[name + '_se']:.3f}"


def _as_text(value: str | float) -> str:
    return value if isinstance(value, str) else f"{value:.3f}"


def _decoded(row: dict[str, Any]) -> str | float:
    """A decoding score with its standard error where the results carry one."""
    error = row.get("test_se")
    return row["test"] if error is None else f"{row['test']:.3f} ± {error:.3f}"


def ranking_sentence(scores: dict[str, tuple[float, float]]) -> str:
    """Which variant is best on new combinations, only where it beats the runner-up by
    more than two standard errors of their difference; ``scores``: name -> (R², SE)."""
    ranked = sorted(scores.items(), key=lambda item: -item[1][0])
    (best, (top, top_se)), rest = ranked[0], ranked[1:]
    if not rest:
        return f"Test R² (new combinations): {best} {top:.3f} ± {top_se:.3f}."
    second, (runner, runner_se) = rest[0]
    gap, gap_se = top - runner, (top_se**2 + runner_se**2) ** 0.5
    if gap > 2 * gap_se:
        return (
            f"Best on new combinations: {best} (test R² {top:.3f} ± {top_se:.3f}), ahead of "
            f"{second} by {gap:.3f} ± {gap_se:.3f} (more than two standard errors)."
        )
    tied = [name for name, (value, se) in ranked
            if top - value <= 2 * (top_se**2 + se**2) ** 0.5]  # fmt: skip
    return (
        f"No variant is best on new combinations: {' and '.join(tied)} lie within two "
        f"standard errors of each other (test R² {top:.3f} ± {top_se:.3f} for {best}, "
        f"{runner:.3f} ± {runner_se:.3f} for {second}); more evaluation or seeds would be "
        "needed to rank them."
    )


@dataclass(frozen=True)
class DemoOutput:
    """What the demo wrote (``report.md``, ``report.html``) and its headline table as text."""

    markdown: Path
    page: Path
    summary: str


# The zoo's models the demo probes: every seed of each variant at Table A1's setting.
ZOO_GROUP = "fuzzy-logic-a1"
ZOO_SEEDS = (0, 1, 2)


@dataclass(frozen=True)
class DemoRun:
    """One model of the demo: trained live into ``path``, or the zoo's ``zoo_name`` copied
    there."""

    variant: str
    path: Path
    zoo_name: str | None = None

    @property
    def figure_label(self) -> str:
        """The label of the group figures, where a variant's zoo seeds are drawn together."""
        name = VARIANT_NAMES[self.variant]
        return f"{name} (zoo)" if self.zoo_name else f"{name} (live)"

    @property
    def label(self) -> str:
        name = VARIANT_NAMES[self.variant]
        if self.zoo_name:
            return f"{name} (zoo {self.zoo_name.rsplit('/', 1)[1]})"  # "HYLA (zoo s0)"
        return f"{name} (live)"


def copy_zoo_run(name: str, run: Path) -> None:
    """The zoo model ``name``'s run directory (config, curve, checkpoint) copied to ``run``,
    where the demo probes and draws it; a copy already there is kept when it is of the same
    weights, and anything else there is refused."""
    source = zoo_run_directory(name)
    if RunDirectory(run).config_path.is_file():
        stamp = run / ZOO_STAMP  # the weights' checksum, as zoo.run_directory writes it
        if stamp.is_file() and stamp.read_text() == (source / ZOO_STAMP).read_text():
            return
        raise ValueError(f"{run} holds a different run; choose another --out or delete it")
    run.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(source, run, ignore=shutil.ignore_patterns("probes", "figures"))


def headline(runs: Sequence[DemoRun], results: dict[Path, dict]) -> str:
    """Per model: test and ood R² (± standard error), decoding R² of the term bits beside
    its shuffled-label control, the heads that matter; a plain-text table."""
    rows = [("model", "test R²", "ood R²", "decoding R²", "shuffled", "heads that matter")]
    for run in runs:
        probe = results[run.path]
        evaluation = probe["evaluation"]
        overall = next(r for r in probe["decoding"] if r["layer"] == "all")
        rows.append((run.label, _with_error(evaluation["test"]),
                     _with_error(evaluation["ood"]), _as_text(_decoded(overall)),
                     f"{overall['shuffled']:.3f}",
                     _heads_that_matter(probe["ablation"])))  # fmt: skip
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
                     for row in rows)  # fmt: skip


def run_demo(
    out: str | Path = "runs/demo",
    size: str = "small",
    steps: int | None = None,
    variants: Sequence[str] = ("softmax", "linear", "hyla"),
    embedding: str = "pca",
    device: str = "auto",
    quiet: bool = False,
    seed: int = 2024,
    zoo: bool = True,
) -> DemoOutput:
    """Probe the zoo's converged ``variants`` and train HYLA live (``zoo=False``: train
    every one of ``variants`` live instead), draw and report; returns the report's paths
    and its headline table."""
    if size not in SIZES:
        raise ValueError(f"size={size!r} is unknown; choose one of {sorted(SIZES)}")
    unknown = [v for v in variants if v not in VARIANT_NAMES]
    if unknown:
        raise ValueError(
            f"variants {unknown} are not in the demo; choose from {list(VARIANT_NAMES)}"
        )
    chosen = SIZES[size]
    root = Path(out)
    root.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    converged = [
        DemoRun(v, root / "zoo" / f"{v}-s{seed}", f"{ZOO_GROUP}/{v}/s{seed}")
        for v in (variants if zoo else ())
        for seed in ZOO_SEEDS
    ]
    live = [DemoRun(v, root / v) for v in (["hyla"] if zoo else variants)]
    runs = [*converged, *live]
    stages = progress_bar(total=3 * len(runs) + 1, desc="demo", disable=quiet)
    results: dict[Path, dict] = {}
    with stages:
        for run in runs:
            stages.set_postfix_str(f"{'copy' if run.zoo_name else 'train'} {run.label}")
            if run.zoo_name:
                copy_zoo_run(run.zoo_name, run.path)
            else:
                train_variant(run.path, run.variant, chosen, steps, device, quiet, seed)
            stages.update(1)
        for run in runs:
            stages.set_postfix_str(f"probe {run.label}")
            examples = chosen.zoo_examples if run.zoo_name else chosen.examples
            results[run.path] = probe_run(
                run.path, examples, embedding, device=device, quiet=quiet,
                evaluation_examples=chosen.zoo_examples if run.zoo_name else None,
            )  # fmt: skip
            stages.update(1)
        figures: dict[Path, dict[str, Path]] = {}
        for run in runs:
            stages.set_postfix_str(f"figures {run.label}")
            figures[run.path] = run_figures(run.path, ("png", "svg", "html"), root / PLOTLY_JS)
            stages.update(1)
        stages.set_postfix_str("report")
        drawn = {}
        for name, group in (("zoo", converged), ("live", live)):
            if group:
                # a variant's zoo seeds as one entry: their mean ± std (one line, one bar)
                by_label: dict[str, list[DemoRun]] = {}
                for run in group:
                    by_label.setdefault(run.figure_label, []).append(run)
                labels = {label: [run.path for run in runs] for label, runs in by_label.items()}
                curves = metric_curves(labels, ylim=(-1.0, 1.0))
                named = {label: [results[run.path] for run in runs]
                         for label, runs in by_label.items()}  # fmt: skip
                drawn[name] = (
                    save_figure(curves, root / "figures" / f"r2_{name}")[0],
                    save_figure(structure_scores(named), root / "figures" / f"structure_{name}")[0],
                )
        wall = time.perf_counter() - start
        command = "latentlens demo" + ("" if size == "small" else f" --size {size}")
        command += (f" --steps {steps}" if steps else "") + ("" if zoo else " --no-zoo")
        paths = write_report(
            root, "latentlens demo: latent codes of softmax, linear and HYLA attention",
            _sections(runs, results, figures, drawn, wall, command),
            plotlyjs=root / PLOTLY_JS,
        )  # fmt: skip
        stages.update(1)
    return DemoOutput(*paths, headline(runs, results))


def _setting(run: DemoRun, seed: bool = True) -> str:
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


def _where_trained(runs: list[DemoRun]) -> str:
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


def _row(run: DemoRun, probe: dict, reference: tuple[str, float]) -> dict[str, Any]:
    evaluation = probe["evaluation"]
    overall = next(r for r in probe["decoding"] if r["layer"] == "all")
    return {
        "model": run.label,
        "train R²": _with_error(evaluation["train"]),
        "test R² (new combinations)": _with_error(evaluation["test"]),
        reference[0]: reference[1],
        "ood R² (new terms)": _with_error(evaluation["ood"]),
        "decoding R² (held out)": _decoded(overall), "shuffled": overall["shuffled"],
        "k-means ARI": _maybe(probe["clustering"]["kmeans"]["ari"]),
        "topographic ρ": _maybe(probe["topography"]["rho"]),
        "p": _maybe(probe["topography"]["p_value"]),
        "heads that matter": _heads_that_matter(probe["ablation"]),
    }  # fmt: skip


def seed_ranking_sentence(values: dict[str, list[float]]) -> str:
    """Which variant is best on new combinations over seeds: the best mean, named only where
    the 95% Welch interval of its lead over the runner-up excludes 0; ``values``: name ->
    test R² of each seed."""
    ranked = sorted(values.items(), key=lambda item: -statistics.mean(item[1]))
    seeds = min(len(v) for v in values.values())
    means = "; ".join(f"{name} {mean_std(v)}" for name, v in ranked)
    summary = f"Test R² (new combinations), mean ± std over {seeds} seeds: {means}."
    if len(ranked) < 2:
        return summary
    (best, top), (second, runner) = ranked[0], ranked[1]
    lead, low, high = difference_interval(top, runner)
    interval = f"{lead:.3f} [{low:+.3f}, {high:+.3f}] (95% Welch interval over seeds)"
    if low > 0:
        return f"Best on new combinations: {best}, ahead of {second} by {interval}. {summary}"
    return (
        f"No variant is best on new combinations: {best} leads {second} by {interval}, an "
        f"interval that holds 0; more seeds would be needed to rank them. {summary}"
    )


def code_verdict_sentence(values: dict[str, dict[str, list[float]]], layer: int) -> str:
    """What the codes carry, causally: ``values`` name -> {"moved", "random", "same",
    "clean"} over seeds, from the swaps of layer ``layer``'s final-query codes
    (:mod:`latentlens.probes.code_interventions`)."""
    moved = "; ".join(f"{name} {mean_std(v['moved'])}" for name, v in values.items())
    other = "; ".join(f"{name} {mean_std(v['random'])}" for name, v in values.items())
    kept = "; ".join(
        f"{name} {mean_std(v['same'])} (unswapped {mean_std(v['clean'])})"
        for name, v in values.items()
    )
    return (
        f"What the codes carry: swapping the final query's codes to every key in layer "
        f"{layer} for those of the same inputs under a function one term away moves the "
        f"prediction this fraction of the way to that function's output (1: all of it, 0: "
        f"none; mean ± std over seeds where there are several): {moved}. For a random other "
        f"combination: {other}. Codes taken from the same function on other inputs leave "
        f"test R² at {kept}: where that stays high and the one-term swap moves far, the "
        "codes select the function; where both fall, the swap only disrupts."
    )


def _code_verdict(group: list[DemoRun], probes: list[dict]) -> str | None:
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


def _curve_examples(group: list[DemoRun]) -> str:
    """The evaluation-set sizes the group's training curves were scored on."""
    sizes = sorted({RunDirectory(r.path).read_config()["train"]["eval_examples"] for r in group})
    return " or ".join(f"{size:,}" for size in sizes)


def _outcome(title: str, group: list[DemoRun], results: dict[Path, dict], figures, intro):
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
        table.append(_row(run, probe, reference))
    return Section(
        title,
        [
            *intro,
            *filter(None, [_code_verdict(group, probes)]),
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
                              f"set, {_curve_examples(group)} examples a split (the table: its "
                              f"first {probes[0]['evaluation_examples']:,})"),
                 (figures[1], f"clustering and topographic similarity of the latent codes"
                              f"{over_seeds}")],
    )  # fmt: skip


def _sections(runs: list[DemoRun], results, figures, drawn, wall: float, command: str):
    converged = [run for run in runs if run.zoo_name]
    live = [run for run in runs if not run.zoo_name]
    origin = []
    if converged:
        variants = ", ".join(dict.fromkeys(VARIANT_NAMES[run.variant] for run in converged))
        origin.append(
            f"From the zoo (converged, not trained here): {variants}, seeds "
            f"{', '.join(map(str, ZOO_SEEDS))} of `{ZOO_GROUP}`: "
            f"{_setting(converged[0], seed=False)}; {_where_trained(converged)}. Probed here "
            f"on {results[converged[0].path]['examples']:,} examples each."
        )
    origin.append(
        f"Trained live by this command: {', '.join(run.label for run in live)}: "
        f"{_setting(live[0])}."
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
        outcomes.append(_outcome(
            "What the converged codes carry", converged, results, drawn["zoo"],
            [f"Converged models from the zoo, {len(ZOO_SEEDS)} seeds of each variant, beside "
             "the paper's Table A1 at the same setting (its numbers are means over 3 seeds)."],
        ))  # fmt: skip
    steps = RunDirectory(live[0].path).read_config()["train"]["steps"]
    outcomes.append(_outcome(
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
