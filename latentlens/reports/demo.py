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

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from latentlens.figures import metric_curves, save_figure, structure_scores
from latentlens.figures.run_figures import run_figures
from latentlens.probes.run import probe_run
from latentlens.progress import progress_bar
from latentlens.reports.demo_runs import (
    SIZES,
    VARIANT_NAMES,
    ZOO_GROUP,
    ZOO_SEEDS,
    DemoRun,
    DemoSize,
    check_live_run,
    copy_zoo_run,
    leave_a_cpu,
    live_config,
    live_trainer,
)
from latentlens.reports.demo_sections import report_sections
from latentlens.reports.demo_text import headline
from latentlens.reports.report import write_report
from latentlens.side_process import SideProcess, worth_a_side_process

# One copy of plotly.js for the demo's report and every interactive figure in its runs.
PLOTLY_JS = "plotly.min.js"


@dataclass(frozen=True)
class DemoOutput:
    """What the demo wrote (``report.md``, ``report.html``) and its headline table as text."""

    markdown: Path
    page: Path
    summary: str


def probe_and_draw(
    run: DemoRun, size: DemoSize, embedding: str, device: str, plotlyjs: Path, quiet: bool
) -> tuple[dict, dict[str, Path]]:
    """Probe one demo model (a zoo model on the first ``size.zoo_examples`` examples of its
    evaluation set) and draw its figures; its probe results and figure paths."""
    examples = size.zoo_examples if run.zoo_name else size.examples
    results = probe_run(
        run.path, examples, embedding, device=device, quiet=quiet,
        evaluation_examples=size.zoo_examples if run.zoo_name else None,
    )  # fmt: skip
    return results, run_figures(run.path, ("png", "svg", "html"), plotlyjs)


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
    figures: dict[Path, dict[str, Path]] = {}
    with stages:
        for run in converged:
            stages.set_postfix_str(f"copy {run.label}")
            copy_zoo_run(run.zoo_name, run.path)
            stages.update(1)
        for run in live:  # refused before anything is probed or trained
            check_live_run(run.path, live_config(run.variant, chosen, steps, seed))
        args = (chosen, embedding, device, root / PLOTLY_JS)
        # The zoo's models are probed and drawn in a second process while the live model
        # trains, when the machine has a CPU to spare for it (the same numbers either
        # way). The live run chooses its path first, undisturbed, and leaves that CPU free.
        beside: dict[Path, Any] = {}
        with SideProcess() as side:
            for index, run in enumerate(live):
                stages.set_postfix_str(f"train {run.label}")
                trainer = live_trainer(run.path, run.variant, chosen, steps, device, quiet, seed)
                if index == 0 and worth_a_side_process() and leave_a_cpu(trainer):
                    beside = {
                        zoo_run.path: side.submit(probe_and_draw, (zoo_run, *args, True),
                                                  callback=lambda _: stages.update(2))
                        for zoo_run in converged
                    }  # fmt: skip
                if trainer is not None:
                    trainer.train()
                stages.update(1)
            for run in [*live, *(run for run in converged if run.path not in beside)]:
                stages.set_postfix_str(f"probe and draw {run.label}")
                results[run.path], figures[run.path] = probe_and_draw(run, *args, quiet)
                stages.update(2)
            if beside:
                stages.set_postfix_str("probe and draw the zoo's models")
            for path, job in beside.items():
                results[path], figures[path] = side.result(job)
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
            report_sections(runs, results, figures, drawn, wall, command),
            plotlyjs=root / PLOTLY_JS,
        )  # fmt: skip
        stages.update(1)
    return DemoOutput(*paths, headline(runs, results))
