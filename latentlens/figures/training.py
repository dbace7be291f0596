"""Curves over training, read from run directories: task metrics per split, and the
decoding of a task latent per layer."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from latentlens.figures.axes import (
    default_ylim,
    metric_label,
    metric_range,
    padded,
    step_axis,
    wrap_label,
)
from latentlens.tasks import TASKS
from latentlens.training.run_dir import RunDirectory, read_jsonl


def metric_records(run: str | Path) -> list[dict]:
    """A run's metrics.jsonl records; an error naming the fix where it has none."""
    records = RunDirectory(run).read_metrics()
    if not records:
        raise ValueError(f"{run} has no metrics.jsonl records: train the run first")
    return records


def split_titles(run: str | Path) -> dict[str, str]:
    """What each split of ``run``'s task holds (the task's ``split_titles``: ``test`` is
    held-out combinations in fuzzy logic but new puzzles of the training rules in SRAVEN);
    empty for a run without config.json or of a task this version does not know."""
    directory = RunDirectory(run)
    if not directory.config_path.is_file():
        return {}
    task = directory.read_config(sections=("task",))["task"]
    entry = TASKS.get(task.get("name")) if isinstance(task, dict) else None
    return dict(entry[0].split_titles) if entry else {}


def split_title(split: str, titles: Mapping[str, str]) -> str:
    """``"held-out terms (ood)"``; the bare split name where ``titles`` lacks it."""
    return f"{titles[split]} ({split})" if split in titles else split


def default_metric(records: Sequence[dict]) -> str:
    """The task metric a run logs (R² or accuracy): its first key besides step, split, loss."""
    return next((k for k in records[0] if k not in ("step", "split", "loss")), "loss")


def logged_metrics(records: Sequence[dict]) -> list[str]:
    """Every metric a run logs, its task metric first (``["accuracy", "feature_accuracy",
    "loss"]`` for SRAVEN)."""
    first = default_metric(records)
    return [first, *(k for k in records[0] if k not in ("step", "split", first))]


RunOrSeeds = str | Path | Sequence[str | Path]


def as_run_list(runs: RunOrSeeds) -> list[Path]:
    """One run directory, or the runs of one configuration's seeds, as a list."""
    return [Path(runs)] if isinstance(runs, str | Path) else [Path(run) for run in runs]


def metric_curve(records: Sequence[dict], split: str, metric: str) -> dict[int, float]:
    """``{step: value}`` of ``metric`` on ``split`` in one run's metric records."""
    return {r["step"]: r[metric] for r in records if r.get("split") == split and metric in r}


def seed_curve(
    seeds: Sequence[Sequence[dict]], split: str, metric: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(steps, mean, std)`` of ``metric`` on ``split`` over ``seeds`` (each run's metric
    records, the seeds of one configuration) at the steps every one of them evaluated; std
    is the sample standard deviation (ddof 1), zeros for a single run. Empty arrays where
    no step is shared."""
    curves = [metric_curve(records, split, metric) for records in seeds]
    steps = sorted(set.intersection(*(set(curve) for curve in curves)))
    values = np.array([[curve[step] for step in steps] for curve in curves], dtype=float)
    std = values.std(axis=0, ddof=1) if len(seeds) > 1 else np.zeros(len(steps))
    return np.array(steps), values.mean(axis=0), std


def metric_curves(
    runs: Mapping[str, RunOrSeeds],
    metric: str | None = None,
    splits: Sequence[str] | None = None,
    ylim: tuple[float, float] | None = None,
    log_y: bool = False,
) -> Figure:
    """One panel per split, one line per run: ``metric`` against the training step.

    ``runs`` maps a legend label (e.g. ``"HYLA"``) to a run directory, or to the run
    directories of one configuration's seeds: those are drawn as their mean with a band of
    ± one sample standard deviation, at the steps all of them evaluated, labelled with
    their number. ``metric`` defaults to the task's (R² or accuracy). ``splits`` defaults
    to every split the first run evaluated; panels are titled as the first run's task
    describes its splits. ``ylim`` fixes the y-axis; without it an R² that dives below
    :data:`~latentlens.figures.axes.R2_FLOOR` (an untrained model's) is clipped there
    (:func:`~latentlens.figures.axes.default_ylim`), an accuracy's axis spans [0, 1]
    (:func:`~latentlens.figures.axes.metric_range`), anything else its values. Values
    beyond the limits are drawn on the edge as open triangles, and a seed band only where
    the mean lies within them. Long legend labels go below the panels, wrapped between
    words. ``log_y``
    draws a positive metric (a loss) on a log scale, where its late fall stays visible.
    """
    if not runs:
        raise ValueError("metric_curves needs at least one run")
    groups = {label: as_run_list(paths) for label, paths in runs.items()}
    loaded: dict[str, list[list[dict]]] = {}
    for label, paths in groups.items():
        if not paths:
            raise ValueError(f"{label!r} names no run directory")
        loaded[label] = [metric_records(path) for path in paths]
        for path, records in zip(paths, loaded[label], strict=True):
            metric = metric or default_metric(records)
            if metric not in records[0]:
                raise ValueError(
                    f"the run {label!r} ({path}) has no metric {metric!r}; it logs "
                    f"{sorted(records[0])}"
                )
    first = next(iter(loaded.values()))[0]
    splits = list(splits or dict.fromkeys(r["split"] for r in first))
    if ylim is None and not log_y:
        lowest = min(r[metric] for seeds in loaded.values() for run in seeds for r in run)
        ylim = default_ylim(metric, lowest)
    titles = split_titles(next(iter(groups.values()))[0])
    figure = Figure(figsize=(4.2 * len(splits), 3.4), layout="constrained")
    clipped = False
    axes = figure.subplots(1, len(splits), sharey=True, squeeze=False)[0]
    for ax, split in zip(axes, splits, strict=True):
        for label, seeds in loaded.items():
            steps, values, std = seed_curve(seeds, split, metric)
            if not len(steps):
                continue
            name = label if len(seeds) == 1 else f"{label} (mean ± std, {len(seeds)} seeds)"
            shown = values if ylim is None else np.clip(values, *ylim)
            (line,) = ax.plot(steps, shown, marker="o", markersize=3, label=name)
            if len(seeds) > 1:
                low, high = values - std, values + std
                inside = np.ones(len(values), dtype=bool)
                if ylim is not None:
                    low, high = np.clip(low, *ylim), np.clip(high, *ylim)
                    # no band around a mean drawn on the edge: an untrained model's R² of
                    # -50 ± 40 would paint the whole axis
                    inside = (values >= ylim[0]) & (values <= ylim[1])
                ax.fill_between(steps, low, high, where=inside, color=line.get_color(),
                                alpha=0.2, lw=0)  # fmt: skip
            if ylim is None:
                continue
            # Values beyond ylim are drawn on its edge as open triangles, not hidden.
            for outside, marker in ((values < ylim[0], "v"), (values > ylim[1], "^")):
                if outside.any():
                    ax.plot(steps[outside], shown[outside], linestyle="none",
                            marker=marker, markersize=7, markerfacecolor="white",
                            color=line.get_color(), clip_on=False, zorder=3)  # fmt: skip
                    clipped = True
        ax.set_title(textwrap.fill(split_title(split, titles), 34), fontsize="medium")
        step_axis(ax)
        ax.grid(alpha=0.3)
        if ylim is not None:
            ax.set_ylim(*ylim)
        elif (bounds := metric_range(metric)) is not None and not log_y:
            ax.set_ylim(*padded(bounds))
    if log_y:
        lowest = min(r[metric] for seeds in loaded.values() for run in seeds for r in run)
        if not lowest > 0:
            raise ValueError(f"log_y needs positive values; {metric} reaches {lowest}")
        axes[0].set_yscale("log")  # shared by every panel
    axes[0].set_ylabel(metric_label(metric))
    handles, names = axes[0].get_legend_handles_labels()
    note = (
        f"open triangles: values outside [{ylim[0]:g}, {ylim[1]:g}], drawn at the edge"
        if clipped
        else None
    )
    if max(map(len, names), default=0) > 32 or len(names) > 4:  # long names: below, wrapped
        # the note heads the legend there: as a second footer it would overlap it
        figure.legend(handles, [wrap_label(n, 40) for n in names], loc="outside lower center",
                      ncols=min(len(names), 3), frameon=False, fontsize="small",
                      title=note, title_fontsize="small")  # fmt: skip
    else:
        axes[0].legend(frameon=False)
        if note:
            figure.supxlabel(note, fontsize="small")
    return figure


def _site_label(site: str) -> str:
    if site == "hook_task_latent":
        return "ẑ (bottleneck)"
    layer = site.split("blocks.")[1].split(".")[0]
    return f"residual after layer {layer}"


def decoding_curves(
    runs: Mapping[str, str | Path], file_name: str = "latent_decoding.jsonl"
) -> Figure:
    """One panel per run: R² of the linear decoding of the task latent from each site
    against the training step; solid lines out-of-distribution, dashed in-distribution (the
    set the decoder was fit on)."""
    if not runs:
        raise ValueError("decoding_curves needs at least one run")
    figure = Figure(figsize=(4.4 * len(runs), 3.4), layout="constrained")
    axes = figure.subplots(1, len(runs), sharey=True, squeeze=False)[0]
    for ax, (label, path) in zip(axes, runs.items(), strict=True):
        records = read_jsonl(RunDirectory(path).tracking / file_name)
        if not records:
            raise ValueError(f"{path} has no tracking/{file_name}: train it with the tracker")
        sites = list(dict.fromkeys(r["site"] for r in records))
        for index, site in enumerate(sites):
            rows = [r for r in records if r["site"] == site]
            steps = [r["step"] for r in rows]
            color = f"C{index}"
            ax.plot(steps, [r["r2_ood"] for r in rows], color=color, label=_site_label(site))
            ax.plot(steps, [r["r2_fit"] for r in rows], color=color, linestyle="--", alpha=0.6)
        ax.set_title(label)
        step_axis(ax)
        ax.grid(alpha=0.3)
        ax.legend(frameon=False, fontsize="small", title="solid: OOD, dashed: fit (ID)")
    axes[0].set_ylabel("decoding R² of z")
    return figure


def logic_latents_curves(
    runs: Mapping[str, str | Path], file_name: str = "logic_latents.jsonl"
) -> Figure:
    """The official code's ``r2_attn_latent`` over training, one line per run (what
    :class:`~latentlens.probes.official.LogicLatentsTracker` records at every evaluation)."""
    if not runs:
        raise ValueError("logic_latents_curves needs at least one run")
    figure = Figure(figsize=(5.0, 3.4), layout="constrained")
    ax = figure.subplots()
    for label, path in runs.items():
        records = read_jsonl(RunDirectory(path).tracking / file_name)
        if not records:
            raise ValueError(f"{path} has no tracking/{file_name}: train it with the tracker")
        ax.plot([r["step"] for r in records], [r["r2_attn_latent"] for r in records], label=label)
    ax.axhline(0.0, color="k", linewidth=0.8)
    step_axis(ax)
    ax.set_ylabel("r2_attn_latent (official protocol)")
    ax.set_title("term bits from the last self-codes, training combinations")
    ax.grid(alpha=0.3)
    ax.legend(frameon=False, fontsize="small")
    return figure


def translation_quality_curves(
    runs: Mapping[str, str | Path], file_name: str = "translation_quality.jsonl"
) -> Figure:
    """Two panels, one colour per run, against the training step: CTER on the held-out
    compounds (solid: instance, dashed: aggregate; lower is better) and BLEU (solid: the
    CG test, dashed: the random test set), read from ``tracking/file_name``
    (what :class:`~latentlens.probes.translation.TranslationQualityTracker` records)."""
    if not runs:
        raise ValueError("translation_quality_curves needs at least one run")
    figure = Figure(figsize=(9.0, 3.4), layout="constrained")
    cter, bleu = figure.subplots(1, 2)
    panels = (
        (cter, ("cter_instance", "cter_aggregate"), "CTER (lower is better)", 1.0,
         "CG test (novel compounds)\nsolid: instance, dashed: aggregate"),
        (bleu, ("bleu_cg", "bleu_test"), "BLEU", 100.0,
         "solid: CG test, dashed: random test"),
    )  # fmt: skip
    for index, (label, path) in enumerate(runs.items()):
        records = read_jsonl(RunDirectory(path).tracking / file_name)
        if not records:
            raise ValueError(
                f"{path} has no tracking/{file_name}: a translation run records it while it "
                "trains (latentlens train --task translation)"
            )
        steps = [r["step"] for r in records]
        for ax, (solid, dashed), *_ in panels:
            ax.plot(steps, [r[solid] for r in records], color=f"C{index}", label=label)
            ax.plot(steps, [r[dashed] for r in records], color=f"C{index}", linestyle="--")
    for ax, _, ylabel, top, title in panels:
        ax.set_ylim(0, 1.03 * top)  # a score at its maximum stays visible above the frame
        ax.set_ylabel(ylabel)
        step_axis(ax)
        ax.grid(alpha=0.3)
        ax.set_title(title, fontsize="medium")
    cter.legend(frameon=False, fontsize="small")
    return figure
