"""Figures of probe results (``probes/results.json`` of one or several runs)."""

from __future__ import annotations

import math
import textwrap
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from matplotlib import colormaps
from matplotlib.colors import to_hex, to_rgba_array
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Rectangle

from latentlens.figures.axes import metric_label, wrap_label


def require_key(results: Mapping[str, Any], key: str) -> Any:
    if key not in results:
        raise ValueError(f"the probe results have no {key!r}; run `latentlens probe` on the run")
    return results[key]


def _head_grid(rows: Sequence[dict], value: str) -> tuple[np.ndarray, list[str]]:
    """``value`` per layer and head, ``[line, head]``, with each line's label. Rows of
    several stacks (their ``prefix``: an encoder-decoder's ``encoder.`` and ``decoder.``)
    get a line per stack and layer, in the order they come, labelled ``encoder 0``, ...;
    one stack's lines are its layers, labelled by number."""
    lines = list(dict.fromkeys((r.get("prefix", ""), r["layer"]) for r in rows))
    if len({prefix for prefix, _ in lines}) > 1:
        labels = [f"{prefix.rstrip('.')} {layer}" for prefix, layer in lines]
    else:
        lines = [(lines[0][0], layer) for layer in range(1 + max(layer for _, layer in lines))]
        labels = [str(layer) for _, layer in lines]
    grid = np.full((len(lines), 1 + max(r["head"] for r in rows)), np.nan)
    index = {line: i for i, line in enumerate(lines)}
    for r in rows:
        grid[index[(r.get("prefix", ""), r["layer"])], r["head"]] = r[value]
    return grid, labels


def cell_text(value: float, fmt: str) -> str:
    """``value`` formatted, where a value that rounds to zero reads "0.00" (or "+0.00"),
    never "-0.00"."""
    text = format(value, fmt)
    return text.replace("-", "+" if "+" in fmt else "") if float(text) == 0 else text


# A heatmap writes its numbers in its cells up to this many cells (16 lines of 8 heads);
# beyond, the numbers would overprint each other at a figure's size.
MAX_CELL_LABELS = 128
# Line labels an axis shows at most (a 30-layer model's layers would overprint).
MAX_TICKS = 16


def spaced_ticks(count: int, most: int = MAX_TICKS) -> list[int]:
    """Indices of at most ``most`` of ``count`` ticks at a regular step, from the first."""
    return list(range(0, count, -(-count // most)))


def annotated_heatmap(
    ax,
    grid: np.ndarray,
    labels: Sequence[str],
    cmap: str,
    vmin: float,
    vmax: float,
    fmt: str,
    bold: np.ndarray | None = None,
):
    """``grid`` ``[line, head]`` coloured and, up to :data:`MAX_CELL_LABELS` cells, written
    in each cell (a larger grid, e.g. 30 layers of 9 heads, is read off its colour bar);
    ``bold`` ``[line, head]`` marks the cells whose number is set in bold. At most
    :data:`MAX_TICKS` line labels are shown, evenly spaced."""
    image = ax.imshow(grid, cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto")
    written = grid.size <= MAX_CELL_LABELS
    for (i, j), value in np.ndenumerate(grid):
        if written and np.isfinite(value):
            red, green, blue, _ = image.cmap(image.norm(value))
            dark = 0.299 * red + 0.587 * green + 0.114 * blue < 0.5  # perceived luminance
            ax.text(j, i, cell_text(value, fmt), ha="center", va="center", fontsize=7,
                    color="white" if dark else "black",
                    fontweight="bold" if bold is not None and bold[i, j] else "normal")  # fmt: skip
    ax.set_xticks(range(grid.shape[1]))
    shown = spaced_ticks(len(labels))
    ax.set_yticks(shown, [labels[i] for i in shown])
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    return image


def _score_axis(ax, values: Sequence[float]) -> None:
    """Span a score's own range on ``ax``'s y-axis: up to 1, and below 0 (with a zero line)
    only as far as the lowest of ``values`` goes, so a score near 0 looks near 0."""
    lowest = min(0.0, float(np.nanmin(values)))
    if lowest < 0:
        ax.axhline(0, color="k", linewidth=0.8)
    ax.set_ylim(lowest - 0.05 if lowest < 0 else 0.0, 1.0)


def legend_order(embedding: Mapping[str, Any]) -> list[str]:
    """The labels of an embedding in the order its probe gives (``label_order``: rule
    order, or numeric), else in order of first appearance (results written before it)."""
    present = dict.fromkeys(embedding["label"])
    order = [name for name in embedding.get("label_order", []) if name in present]
    return order + [name for name in present if name not in order]


# Beyond 10 labels: the 10 qualitative colours again, each round with another marker, so
# that no two labels share a mark (a rainbow of 33 hues cannot be told apart).
MARKERS = ("o", "s", "^", "D", "v", "P", "*", "h")


def label_colours(names: Sequence[str]) -> dict[str, str]:
    """A colour (hex) per label from matplotlib's qualitative ``tab10``, repeating every 10
    labels (:func:`label_marks` gives each round its own marker)."""
    return {name: to_hex(colormaps["tab10"](i % 10)) for i, name in enumerate(names)}


def label_marks(names: Sequence[str]) -> dict[str, tuple[str, str]]:
    """A distinct (marker, colour) per label: ``tab10``'s colours with a marker per round
    of 10 labels, up to 80 labels; raises beyond (group the labels first)."""
    if len(names) > 10 * len(MARKERS):
        raise ValueError(f"{len(names)} labels are too many to tell apart; group them first")
    colours = label_colours(names)
    return {name: (MARKERS[i // 10], colours[name]) for i, name in enumerate(names)}


def robust_view(values: np.ndarray, share: float = 0.01) -> tuple[float, float]:
    """Axis limits holding all but the ``share`` most extreme values at each end, padded by
    a quarter of that range (a normal cloud's tails stay in view): one outlier cannot
    squash the cloud into a band."""
    low, high = np.quantile(values, [share, 1 - share])
    pad = 0.25 * (high - low) if high > low else 1.0
    return float(low - pad), float(high + pad)


def score_limits(grid: np.ndarray, metric: str) -> tuple[float, float]:
    """Colour limits of a score heatmap from its values: from 0 (or the lowest R², when
    negative) to the highest value, at least 0.05 above the low end, so that scores of at
    most 0.08 spread over the colours instead of all reading as the darkest of [0, 1]."""
    finite = grid[np.isfinite(grid)]
    if not len(finite):
        return 0.0, 1.0
    low = min(0.0, float(finite.min())) if metric == "r2" else 0.0
    return low, max(float(finite.max()), low + 0.05)


def decoding_by_head(results: Mapping[str, Any], title: str = "") -> Figure:
    """Left: the decoder's held-out score from each head alone (layer x head). Right: per
    layer, every head together, the drop when one head is left out, beside chance and
    the permutation control (the band of 20 decoders fit on permuted labels, 5th to 95th
    percentile, its p-value under each layer). Scales to deep models: taller with more
    layers, numbers in the cells and on the bars only where they fit."""
    rows = require_key(results, "decoding")
    metric = rows[0]["metric"]
    label = metric_label(metric)
    alone = [
        {"layer": r["layer"], "head": int(r["heads"][1:]), "test": r["test"]}
        for r in rows
        if r["layer"] != "all" and r["heads"].startswith("h")
    ]
    per_layer = [r for r in rows if r["layer"] != "all" and r["heads"] == "all"]
    height = max(3.4, 1.4 + 0.13 * len(per_layer))
    figure = Figure(figsize=(10, height), layout="constrained")
    left, right = figure.subplots(1, 2, width_ratios=[1.3, 1])
    grid, labels = _head_grid(alone, "test")
    low, high = score_limits(grid, metric)
    image = annotated_heatmap(left, grid, labels, "viridis", low, high, ".2f")
    figure.colorbar(image, ax=left, label=f"held-out {label}")
    chances = {round(r["chance"], 2) for r in rows if r["layer"] != "all"}
    chance = f"chance {chances.pop():.2f}" if len(chances) == 1 else "chance: right panel"
    left.set_title(f"one head alone ({chance})")
    _per_layer_bars(right, rows, per_layer)
    right.set_title(f"all heads, and without one (held-out {label})")
    if title:
        figure.suptitle(title)
    return figure


def _per_layer_bars(ax, rows: Sequence[dict], per_layer: Sequence[dict]) -> None:
    """Per layer: every head together and the worst head left out, chance, and the
    permutation band (results from before permutations: their one shuffled decoder)."""
    layers = [r["layer"] for r in per_layer]
    x = np.arange(len(layers))
    scores = [r["test"] for r in per_layer]
    ax.bar(x - 0.2, scores, 0.4, label="all heads (held out)")
    drops = [
        [r["test"] for r in rows if r["layer"] == layer and r["heads"].startswith("-")]
        for layer in layers
    ]
    worst = [min(d) if d else np.nan for d in drops]
    ax.bar(x + 0.2, worst, 0.4, label="worst head left out")
    width = max(4, 28 * min(1.0, 12 / len(layers)))  # the chance marks fit their slots
    ax.plot(x, [r["chance"] for r in per_layer], "k_", markersize=width, label="chance")
    bands = [r.get("shuffled_band") for r in per_layer]
    if all(band is not None for band in bands):
        label = f"{per_layer[0]['permutations']} label permutations: mean, 5th–95th %"
        # a band and its mean apart: a skewed band (one permutation's R² far below the
        # others) can put the mean outside its 5th-95th percentiles
        ax.vlines(x, [b[0] for b in bands], [b[1] for b in bands], color="r", lw=1.5)
        ax.plot(x, [r["shuffled"] for r in per_layer], "r_", markersize=width, label=label)
        # each layer's p-value under it where they fit (else in the probe's table)
        ticks = [
            f"{layer}\np={r['p_value']:.2f}" if len(layers) <= 12 else str(layer)
            for layer, r in zip(layers, per_layer, strict=True)
        ]
    else:
        ax.plot(x, [r["shuffled"] for r in per_layer], "r_", markersize=width,
                label="shuffled labels")  # fmt: skip
        ticks = [str(layer) for layer in layers]
    if len(layers) <= 12:  # a value on every bar where they fit
        for position, value in [*zip(x - 0.2, scores, strict=True),
                                *zip(x + 0.2, worst, strict=True)]:  # fmt: skip
            if np.isfinite(value):  # a bar of height 0 is not "missing"
                ax.annotate(
                    cell_text(value, ".2f"), (position, max(value, 0.0)), ha="center",
                    va="bottom", fontsize=7, xytext=(0, 2), textcoords="offset points",
                )  # fmt: skip
    shown = spaced_ticks(len(layers))
    ax.set_xticks(x[shown], [ticks[i] for i in shown], fontsize="small")
    ax.set_xlabel("layer")
    bounds = [b[0] for b in bands if b is not None]
    _score_axis(ax, [*scores, *(r["chance"] for r in per_layer), *worst, *bounds])
    # below the axes: over them it would hide the bars of some layer
    ax.legend(frameon=False, fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.2),
              ncol=2)  # fmt: skip
    ax.grid(axis="y", alpha=0.3)


def code_embedding(
    results: Mapping[str, Any], title: str = "", ood_split: str | None = None
) -> Figure:
    """The 2-D embedding of latent codes coloured by label (a rule, a term combination, a
    relation: the embedding's ``label_kind``; :func:`label_colours`); points of ``ood_split``
    (default: any split whose name contains "ood") are drawn as crosses, over the dots.
    Each kind of mark is drawn in one seeded random order, so that no rule's points hide
    another's by being drawn later, and the legend stands beside the axes, off the points
    (a cloud of thousands of codes leaves no empty corner for it), each rule's entry with
    its number of points: rules can be far from equally frequent (the labels of
    ``latentlens.probes.sraven_codes`` are the largest rule of each multiset). Beyond 10
    labels each round of 10 colours gets its own marker (:func:`label_marks`) and the
    legend its columns; the view holds all but the 1% most extreme points at each end
    (:func:`robust_view`), the rest counted in the axis label."""
    data = require_key(results, "embedding")
    if "note" in data:  # codes that do not vary: say so rather than draw one dot
        figure = Figure(figsize=(6.4, 3.2), layout="constrained")
        ax = figure.subplots()
        ax.text(0.5, 0.5, textwrap.fill(data["note"], 50), ha="center", va="center",
                transform=ax.transAxes)  # fmt: skip
        ax.set_axis_off()
        ax.set_title(title or f"latent codes, layer {data['layer']}")
        return figure
    labels = np.array(data["label"])
    splits = np.array(data["split"])
    ood = splits == ood_split if ood_split else np.char.find(splits.astype(str), "ood") >= 0
    names = legend_order(data)
    kind = data.get("label_kind", "rule")
    marks = label_marks(names)
    columns = max(1, math.ceil(len(names) / 18))
    figure = Figure(figsize=(6.4 + 1.6 * columns, 4.8), layout="constrained")
    ax = figure.subplots()
    x, y = np.array(data["x"]), np.array(data["y"])
    order = np.random.default_rng(0).permutation(len(labels))
    marker_of = np.array([marks[label][0] for label in labels])
    colours = to_rgba_array([marks[label][1] for label in labels])
    for marker in dict.fromkeys(m for m, _ in marks.values()):  # up to 10 labels: one call
        chosen = order[((marker_of == marker) & ~ood)[order]]
        ax.scatter(x[chosen], y[chosen], s=8, marker=marker, c=colours[chosen], alpha=0.6)
    crosses = order[ood[order]]
    ax.scatter(x[crosses], y[crosses], s=14, marker="x", c=colours[crosses], alpha=0.8)
    counts = Counter(labels.tolist())
    handles = [_legend_mark(f"{n} ({counts[n]})", m, c) for n, (m, c) in marks.items()]
    if ood.any():  # black: no rule's colour, so the cross cannot be read as one rule's
        handles.append(_legend_mark("out-of-distribution", "x", "black"))
    ax.legend(handles=handles, title=kind, frameon=False, fontsize="x-small" if columns > 1
              else "small", ncols=columns, loc="upper left", bbox_to_anchor=(1.01, 1))  # fmt: skip
    (x_low, x_high), (y_low, y_high) = robust_view(x), robust_view(y)
    ax.set_xlim(x_low, x_high)
    ax.set_ylim(y_low, y_high)
    outside = int(np.sum((x < x_low) | (x > x_high) | (y < y_low) | (y > y_high)))
    method = data["method"].upper()
    ax.set_xlabel(f"{method} 1")
    ax.set_ylabel(f"{method} 2" + (f"\n({outside} outlying points beyond the view)"
                                    if outside else ""))  # fmt: skip
    ax.set_title(title or f"latent codes, layer {data['layer']} (colour: {kind})")
    return figure


def _legend_mark(label: str, marker: str, colour: str) -> Line2D:
    """A legend entry: ``marker`` in ``colour``, no line."""
    return Line2D([], [], linestyle="", marker=marker, markersize=5, color=colour, label=label)


ResultsOrSeeds = Mapping[str, Any] | Sequence[Mapping[str, Any]]


def seed_score(values: Sequence[float | None]) -> tuple[float | None, float | None, int]:
    """``(mean, sample std, how many defined)`` of one score over a group's runs, ``None``
    where no run defines it (constant codes), std ``None`` under two defined values."""
    defined = [v for v in values if v is not None]
    if not defined:
        return None, None, 0
    std = float(np.std(defined, ddof=1)) if len(defined) > 1 else None
    return float(np.mean(defined)), std, len(defined)


def structure_scores(runs: Mapping[str, ResultsOrSeeds]) -> Figure:
    """Clustering (ARI and AMI, both adjusted for chance: 0 is what clusters that ignore the
    groups reach) and topographic similarity (Spearman ρ, with its permutation p-value) per
    run; scores left undefined (codes identical for every example) are marked so. A label
    mapped to a list of results (one configuration's seeds) is drawn as their mean with a
    ± one sample standard deviation error bar, over the seeds that define the score. The
    axes span the scores' ranges (ρ in [-1, 1]; ARI and AMI down to their lowest value when
    negative), so a score near 0 looks near 0."""
    if not runs:
        raise ValueError("structure_scores needs at least one run's results")
    groups = {
        label: [results] if isinstance(results, Mapping) else list(results)
        for label, results in runs.items()
    }
    labels = [label if len(g) == 1 else f"{label}\n({len(g)} seeds)" for label, g in groups.items()]
    figure = Figure(figsize=(10, 3.4), layout="constrained")
    left, right = figure.subplots(1, 2, width_ratios=[2, 1])
    x = np.arange(len(labels))
    bars = [
        ("kmeans", "ari", "k-means ARI"),
        ("kmeans", "ami", "k-means AMI"),
        ("agglomerative", "ari", "agglomerative ARI"),
        ("agglomerative", "ami", "agglomerative AMI"),
    ]
    width = 0.8 / len(bars)
    clustering = [[require_key(r, "clustering") for r in group] for group in groups.values()]
    scores = []
    for index, (method, score, name) in enumerate(bars):
        summaries = [seed_score([c[method][score] for c in group]) for group in clustering]
        heights = [0.0 if mean is None else mean for mean, _, _ in summaries]
        errors = [0.0 if std is None else std for _, std, _ in summaries]
        shown = any(std is not None for _, std, _ in summaries)
        left.bar(x + (index - 1.5) * width, heights, width, label=name,
                 yerr=errors if shown else None, capsize=2)  # fmt: skip
        scores += [h - e for h, e in zip(heights, errors, strict=True)]
    for i, group in enumerate(clustering):
        undefined = sum(c["kmeans"]["ari"] is None for c in group)
        if undefined:
            note = "constant codes" if undefined == len(group) else f"{undefined} of {len(group)}"
            left.annotate(f"undefined:\n{note}", (i, 0.0), ha="center", va="bottom", fontsize=8)
    left.set_xticks(x, [wrap_label(label, 24) for label in labels])
    left.set_ylabel("agreement with the true groups\n(0 = chance, 1 = exact)")
    _score_axis(left, scores)  # negative: worse-than-chance agreement
    left.legend(frameon=False, fontsize="small", ncols=2)
    left.set_title("clustering of latent codes")
    for i, group in enumerate(groups.values()):
        topography = [require_key(r, "topography") for r in group]
        mean, std, defined = seed_score([t["rho"] for t in topography])
        height = 0.0 if mean is None else mean
        right.bar(i, height, color="C4", yerr=std, capsize=3)
        if mean is None:
            note = "undefined:\nconstant codes"
        elif len(group) == 1:
            note = f"p={topography[0]['p_value']:.3g}"
        else:
            note = f"{defined} of {len(group)} defined" if defined < len(group) else ""
        top = height + (std or 0.0)
        right.annotate(note, (i, max(top, 0.0)), ha="center", va="bottom", fontsize=8)
    right.axhline(0, color="k", linewidth=0.8)
    right.set_ylim(-1, 1)
    right.set_xticks(x, [wrap_label(label, 12) for label in labels])  # a narrow panel
    right.set_ylabel("Spearman ρ")
    right.set_title("topographic similarity")
    return figure


# P(|Z| > 2) for a standard normal Z: the share of changes that noise alone puts beyond
# two standard errors.
BEYOND_TWO_ERRORS = math.erfc(2 / math.sqrt(2))


def beyond_noise(rows: Sequence[Mapping[str, Any]]) -> int | None:
    """How many intervention ``rows`` change their metric by more than two standard errors
    (``None`` where a row has none: results written before they were kept); noise alone
    puts ``len(rows) * BEYOND_TWO_ERRORS`` there."""
    if any(row.get("standard_error") is None for row in rows):
        return None
    return sum(abs(row["change"]) > 2 * row["standard_error"] for row in rows)


def _change_format(largest: float, sign: str = "+") -> str:
    """Enough decimals for two significant digits of ``largest`` (2 to 4), ``sign``-ed:
    changes of a hundredth must not read "+0.00" in cells the colour shows changed."""
    decimals = 2 if largest == 0.0 else min(4, max(2, 1 - math.floor(math.log10(largest))))
    return f"{sign}.{decimals}f"


def robust_bound(magnitudes: np.ndarray, spread: float = 3.0) -> float:
    """A colour limit for ``magnitudes`` (absolute values) that one outlier cannot set:
    the largest, unless it exceeds ``spread`` times the 90th percentile, then that."""
    if not len(magnitudes):
        return 1e-6
    largest = float(magnitudes.max())
    typical = float(np.quantile(magnitudes, 0.9))
    bound = spread * typical if typical > 0 and largest > spread * typical else largest
    return max(bound, 1e-6)


def head_ablation(results: Mapping[str, Any], title: str = "") -> Figure:
    """Change in the task metric when each head's output is zeroed (layer x head). Where
    the rows carry standard errors, changes beyond two of them are set in bold and the
    title gives the median standard error."""
    rows = require_key(results, "ablation")
    if not rows:
        raise ValueError("the probe results hold no ablation rows")
    grid, labels = _head_grid(rows, "change")
    largest = float(np.nanmax(np.abs(grid)))
    bound = robust_bound(np.abs(grid[np.isfinite(grid)]))
    width = max(6.0, 1.6 + 0.55 * grid.shape[1])  # room for "+0.012" in every cell
    figure = Figure(figsize=(width, max(3.2, 1.2 + 0.5 * len(labels))), layout="constrained")
    ax = figure.subplots()
    bold, noise, fmt = None, "", _change_format(min(largest, bound))
    if beyond_noise(rows) is not None:  # results written before errors were kept have none
        errors, _ = _head_grid(rows, "standard_error")
        bold = np.abs(grid) > 2 * errors
        if bold.any():  # enough decimals that a change beyond the noise never reads 0
            fmt = _change_format(min(float(np.nanmin(np.abs(grid[bold]))), largest, bound))
            bold &= np.array([[float(cell_text(v, fmt)) != 0 for v in row] for row in grid])
        median = float(np.nanmedian(errors))
        # colours saturate only beyond the noise: a change of 3 standard errors at least
        largest, bound = max(largest, 3 * median), max(bound, 3 * median)
        noise = (
            f"\nbold: beyond 2 standard errors (median {median:{_change_format(median, '')}}; "
            f"noise alone puts {len(rows) * BEYOND_TWO_ERRORS:.1f} of {len(rows)} there)"
        )
    image = annotated_heatmap(ax, grid, labels, "RdBu", -bound, bound, fmt, bold)
    clipped = ""
    if bound < largest:  # outliers: outlined, so the scale can show the other heads
        for i, j in zip(*np.nonzero(np.abs(np.nan_to_num(grid)) > bound), strict=True):
            ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="black",
                                   linewidth=1.5))  # fmt: skip
        clipped = f"\ncolour clipped at ±{bound:.3g}: outlined cells lie beyond it"
    metric = metric_label(rows[0]["metric"])
    extend = "both" if clipped else "neither"
    figure.colorbar(image, ax=ax, label=f"change in {metric}", extend=extend)
    baseline = f"zeroing one head (baseline {metric} {rows[0]['baseline']:.3f})"
    ax.set_title((title or baseline) + noise + clipped)
    return figure


def tracked_heatmap(
    steps: Sequence[int], values: np.ndarray, names: Sequence[str], title: str
) -> Figure:
    """A quantity tracked over training: ``values`` ``[steps, features]`` as a heatmap with
    the training step on the x-axis and one row per named feature."""
    values = np.asarray(values, dtype=float)
    if values.ndim != 2 or values.shape != (len(steps), len(names)):
        raise ValueError(
            f"values must be [steps, features] = [{len(steps)}, {len(names)}], "
            f"got {list(values.shape)}"
        )
    figure = Figure(figsize=(7, 0.35 * len(names) + 1.6), layout="constrained")
    ax = figure.subplots()
    image = ax.imshow(values.T, aspect="auto", cmap="magma", interpolation="nearest")
    ax.set_yticks(range(len(names)), names, fontsize=8)
    ticks = np.linspace(0, len(steps) - 1, min(len(steps), 6)).round().astype(int)
    ax.set_xticks(ticks, [str(steps[i]) for i in ticks])
    ax.set_xlabel("training step")
    figure.colorbar(image, ax=ax)
    ax.set_title(title)
    return figure
