"""Every figure a run's results allow, written to ``runs/NAME/figures/``."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

from latentlens.figures.axes import log_scaled
from latentlens.figures.interactive import code_embedding_plotly, metric_curves_plotly
from latentlens.figures.probes import (
    code_embedding,
    decoding_by_head,
    head_ablation,
    structure_scores,
)
from latentlens.figures.routing import fuse_weight_curves, routing_evolution
from latentlens.figures.save import save_figure, save_plotly
from latentlens.figures.tracking import tracked_array
from latentlens.figures.training import (
    decoding_curves,
    logged_metrics,
    logic_latents_curves,
    metric_curves,
    metric_records,
    translation_quality_curves,
)
from latentlens.models.config import VARIANTS
from latentlens.training.run_dir import RunDirectory, group_by_config, read_jsonl
from latentlens.training.tracked_file import load_tracked

PROBE_RESULTS = Path("probes") / "results.json"
# How run names carry the seed: "hyla-s1" (train --seeds), "attention=hyla,seed=1" (a
# sweep's cells)
SEED_SUFFIX = re.compile(r"-s\d+$|,seed=\d+(?=,|$)|^seed=\d+(,|$)")


def _probe_results(run: Path) -> dict | None:
    path = run / PROBE_RESULTS
    return json.loads(path.read_text()) if path.is_file() else None


def run_title(run: Path, config: dict) -> str:
    """A run's figure title: its attention's paper name (the name the report uses, e.g.
    "linear attention") with the run's directory name, or the name alone."""
    attention = (config.get("model") or {}).get("attention")
    if attention in VARIANTS and VARIANTS[attention].paper_name != run.name:
        return f"{VARIANTS[attention].paper_name} ({run.name})"
    return run.name


def run_figures(
    run_dir: str | Path,
    formats: Sequence[str] = ("png", "svg"),
    plotlyjs: str | Path | None = None,
) -> dict[str, Path]:
    """Draw what ``run_dir`` holds: the curves of every metric it logs (always; the task's
    as ``metrics``, the others as ``metrics_{name}``, the loss on a log scale), decoding
    over training (``tracking/latent_decoding.jsonl``), the official code's
    ``r2_attn_latent`` over training (``tracking/logic_latents.jsonl``), CTER and BLEU over training
    (``tracking/translation_quality.jsonl``), tracked arrays (``tracking/*.safetensors``)
    and, after ``latentlens probe``, decoding per head, code embeddings (also interactive
    HTML), head ablations and structure scores. Returns ``{figure name: first file
    written}``. The interactive pages load plotly.js from ``plotlyjs`` (default:
    ``figures/plotly.min.js``, one copy for the folder; see
    :func:`~latentlens.figures.save_plotly`)."""
    run = Path(run_dir)
    directory = RunDirectory(run)
    config = directory.read_config(sections=())  # a clear error if this is not a run directory
    out = run / "figures"
    bundle = Path(plotlyjs) if plotlyjs is not None else out / "plotly.min.js"
    label = run.name
    title = run_title(run, config)
    written: dict[str, Path] = {}

    def keep(name: str, figure) -> None:
        written[name] = save_figure(figure, out / name, formats)[0]

    keep("metrics", metric_curves({label: run}, ylim=None))
    logged = logged_metrics(metric_records(run))
    for metric in logged[1:]:
        keep(f"metrics_{metric}", metric_curves({label: run}, metric, log_y=log_scaled(metric)))
    written["metrics_interactive"] = save_plotly(
        metric_curves_plotly({label: run}, logged), out / "metrics_interactive.html", bundle
    )
    if read_jsonl(directory.tracking / "latent_decoding.jsonl"):
        keep("decoding_over_training", decoding_curves({label: run}))
    if read_jsonl(directory.tracking / "logic_latents.jsonl"):
        keep("logic_latents_over_training", logic_latents_curves({label: run}))
    if read_jsonl(directory.tracking / "translation_quality.jsonl"):
        keep("translation_quality", translation_quality_curves({label: run}))
    for path in sorted(directory.tracking.glob("*.safetensors")):
        name = path.name.removesuffix(".safetensors")
        tracked = load_tracked(path)
        keep(f"tracked_{name}", tracked_array(tracked.steps, tracked.values, name, tracked.axes))
    if any(directory.tracking.glob("*.fuse.hook_pattern.safetensors")):
        keep("fuse_weights", fuse_weight_curves(run))
        keep("fuse_weights_heatmap", fuse_weight_curves(run, heatmaps=True))
    if (directory.tracking / "routing_matrix.safetensors").is_file():
        keep("routing", routing_evolution(run))
    results = _probe_results(run)
    if results is not None:
        if "decoding" in results:
            keep("decoding_by_head", decoding_by_head(results, title=title))
        if "embedding" in results:
            keep("code_embedding", code_embedding(results))
            written["code_embedding_interactive"] = save_plotly(
                code_embedding_plotly(results, title=title),
                out / "code_embedding_interactive.html",
                bundle,
            )
        if results.get("ablation"):
            keep("head_ablation", head_ablation(results))
        if "clustering" in results:
            keep("structure", structure_scores({label: results}))
    return written


def comparison_figures(
    run_dirs: Sequence[str | Path], out: str | Path, formats: Sequence[str] = ("png", "svg")
) -> dict[str, Path]:
    """Runs side by side, each labelled by its directory's name, into ``out``: the curves of
    each metric they all log (the task's also as interactive HTML) and, where at least two
    were probed, their clustering and topographic similarity; the seeds of one
    configuration (:func:`seed_groups`) are drawn as their mean ± std. Returns ``{figure
    name: first file written}``."""
    runs = [Path(run) for run in run_dirs]
    if len({run.name for run in runs}) < 2:
        raise ValueError(
            f"a comparison needs at least two runs with different names, got {list(runs)}"
        )
    groups = seed_groups(runs)  # a clear error if one is not a run directory
    out = Path(out)
    logged = [logged_metrics(metric_records(run)) for run in runs]
    shared = [m for m in logged[0] if all(m in other for other in logged)]
    written = {
        "metrics": save_figure(metric_curves(groups), out / "metrics", formats)[0],
        "metrics_interactive": save_plotly(
            metric_curves_plotly(groups, shared),
            out / "metrics_interactive.html",
            out / "plotly.min.js",
        ),
    }
    for metric in shared[1:]:
        figure = metric_curves(groups, metric, log_y=log_scaled(metric))
        written[f"metrics_{metric}"] = save_figure(figure, out / f"metrics_{metric}", formats)[0]
    probed = {run: r for run in runs if "clustering" in (r := _probe_results(run) or {})}
    scored = {
        label: [probed[run] for run in group if run in probed]
        for label, group in groups.items()
        if any(run in probed for run in group)
    }
    if len(probed) >= 2:
        written["structure"] = save_figure(structure_scores(scored), out / "structure", formats)[0]
    return written


def seed_groups(runs: Sequence[Path]) -> dict[str, list[Path]]:
    """The runs grouped by their config less the seed (the seeds of one configuration go
    together), in the order first met. A group is labelled by its runs' common name less
    the ``-sSEED`` suffix ``train --seeds`` gives (``hyla`` for ``hyla-s0``, ``hyla-s1``),
    a lone run by its name, and where that stem is not unique by its runs' names. Figures
    label runs by name, so two runs of one name are an error."""
    for index, run in enumerate(runs):
        if twin := next((other for other in runs[:index] if other.name == run.name), None):
            raise ValueError(
                f"{twin} and {run} share the name {run.name}: runs are labelled by name in a "
                "comparison; compare runs of different names"
            )
    grouped = group_by_config(list(runs))
    labels = [_group_label(paths) for paths in grouped]
    names = [", ".join(p.name for p in paths) for paths in grouped]  # unique: names differ
    labels = [a if labels.count(a) == 1 else b for a, b in zip(labels, names, strict=True)]
    return dict(zip(labels, grouped, strict=True))


def _group_label(paths: Sequence[Path]) -> str:
    """``hyla`` for ``hyla-s0``, ``hyla-s1``; the names themselves otherwise."""
    stems = {SEED_SUFFIX.sub("", path.name) for path in paths}
    if len(paths) > 1 and len(stems) == 1:
        return stems.pop()
    return ", ".join(path.name for path in paths)
