"""Curves over training: the plotted data are the run's records, files are written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from latentlens.figures import (
    decoding_curves,
    metric_curves,
    metric_curves_plotly,
    save_figure,
    translation_quality_curves,
)
from latentlens.figures.run_figures import run_figures
from latentlens.figures.training import logged_metrics, metric_records


def write_run(path: Path, shift: float, steps: tuple[int, ...] = (10, 20, 30)) -> Path:
    (path / "tracking").mkdir(parents=True)
    metrics = [
        {"step": step, "split": split, "loss": 1.0, "r2": shift + step / 100}
        for step in steps
        for split in ("train", "ood", "control")
    ]
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in metrics))
    decoding = [
        {"step": step, "site": site, "r2_fit": 0.9, "r2_ood": shift + step / 50}
        for step in (10, 20)
        for site in ("blocks.0.hook_resid_post", "blocks.1.hook_resid_post", "hook_task_latent")
    ]
    lines = "".join(json.dumps(r) + "\n" for r in decoding)
    (path / "tracking" / "latent_decoding.jsonl").write_text(lines)
    return path


def test_metric_curves_plot_each_split_and_run(tmp_path: Path) -> None:
    runs = {
        "vanilla": write_run(tmp_path / "a", 0.0),
        "hypernetwork": write_run(tmp_path / "b", 0.5),
    }
    (runs["vanilla"] / "config.json").write_text(json.dumps({"task": {"name": "modular-icl"}}))
    figure = metric_curves(runs, metric="r2")
    axes = figure.axes
    assert [ax.get_title().replace("\n", " ") for ax in axes] == [
        "training support (train)", "held-out module combinations (ood)",
        "random unstructured control (control)",
    ]  # fmt: skip
    line = axes[1].lines[1]
    assert list(line.get_xdata()) == [10, 20, 30]
    assert list(line.get_ydata()) == pytest.approx([0.6, 0.7, 0.8])
    assert [t.get_text() for t in axes[0].get_legend().get_texts()] == ["vanilla", "hypernetwork"]
    assert axes[0].get_ylabel() == "R²" and axes[0].get_xlabel() == "training step"
    paths = save_figure(figure, tmp_path / "figs" / "curves", formats=("png", "svg"))
    assert all(p.is_file() and p.stat().st_size > 1000 for p in paths)


def test_save_figure_cuts_every_file_as_savefig_tight_does_from_one_layout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from matplotlib.figure import Figure  # noqa: PLC0415
    from PIL import Image  # noqa: PLC0415

    figure = metric_curves({"a": write_run(tmp_path / "a", 0.0)}, metric="r2")
    tight = tmp_path / "tight.png"
    figure.savefig(tight, dpi=150, bbox_inches="tight")
    png, svg, page = save_figure(figure, tmp_path / "curves", formats=("png", "svg", "html"))
    # the same box: matplotlib's own tight cut and this one give images of one size
    with Image.open(png) as ours, Image.open(tight) as theirs:
        assert ours.size == theirs.size
    # one SVG drawing serves the .svg and the page, and the figure keeps its layout engine
    drawing = svg.read_text()
    assert drawing[drawing.index("<svg") :] in page.read_text()
    assert type(figure.get_layout_engine()).__name__ == "ConstrainedLayoutEngine"
    # two passes over the figure for two files: the layout drawn to the PNG's pixels, and
    # the SVG (savefig adds a layout pass to each file of a figure that keeps any layout
    # engine, and cuts each to its tight box with one pass more: five)
    draws = []
    original = Figure.draw
    monkeypatch.setattr(Figure, "draw", lambda self, r: draws.append(r) or original(self, r))
    save_figure(figure, tmp_path / "counted", formats=("png", "svg"))
    assert len(draws) == 2
    # a figure without a layout engine is saved too, and left without one
    plain = Figure()
    plain.subplots().plot([0, 1])
    assert save_figure(plain, tmp_path / "plain", formats=("png",))[0].is_file()
    assert plain.get_layout_engine() is None


def test_the_png_is_what_savefig_draws_of_the_same_layout_pixel_for_pixel(tmp_path: Path) -> None:
    """Cut from the drawing that laid the figure out, the PNG is savefig's image of the
    same layout cut to the tight box moved by under a pixel onto the pixel grid, to the
    last pixel, sized as savefig's tight image and with its metadata; a figure that draws
    beyond its edge is drawn again, as savefig draws it, so that nothing is cut off."""
    import matplotlib  # noqa: PLC0415
    import numpy as np  # noqa: PLC0415
    from matplotlib.transforms import Bbox  # noqa: PLC0415
    from PIL import Image  # noqa: PLC0415

    from latentlens.figures.save import draw_pixels, pixel_window, without_layout_engine  # noqa: PLC0415

    def pixels(path: Path) -> np.ndarray:
        with Image.open(path) as image:
            return np.asarray(image.convert("RGBA"))

    def pixel_box(size: Bbox, box: Bbox, dpi: float) -> Bbox:
        """The box save_figure cuts, in inches: ``box`` moved onto the pixel grid."""
        top, left, height, width = pixel_window(size, box, dpi)
        bottom = size.height * dpi - top - height
        return Bbox.from_bounds(left / dpi, bottom / dpi, width / dpi, height / dpi)

    for name, beyond in (("inside", False), ("beyond", True)):
        figure = metric_curves({"a": write_run(tmp_path / name, 0.0)}, metric="r2")
        if beyond:
            figure.text(1.02, 0.5, "a note beyond the right edge", fontsize=14)
        tight = tmp_path / f"{name}-tight.png"
        figure.savefig(tight, dpi=150, bbox_inches="tight")
        (png,) = save_figure(figure, tmp_path / name, formats=("png",))
        assert pixels(png).shape == pixels(tight).shape, name
        with Image.open(png) as ours, Image.open(tight) as theirs:
            assert ours.info["Software"] == theirs.info["Software"]
            assert ours.info["dpi"] == pytest.approx(theirs.info["dpi"])
        # the same layout again, drawn by savefig itself
        _, size, content = draw_pixels(figure, 150)
        without_layout_engine(figure)
        box = content.padded(matplotlib.rcParams["savefig.pad_inches"])
        reference = tmp_path / f"{name}-reference.png"
        figure.savefig(reference, dpi=150, bbox_inches=box if beyond else pixel_box(size, box, 150))
        assert np.array_equal(pixels(png), pixels(reference)), name
    # the note beyond the edge is in the PNG: dark pixels at its right
    assert (pixels(png)[:, -40:, :3].min(axis=2) < 100).any()


def test_every_logged_metric_gets_curves_and_the_loss_a_log_scale(tmp_path: Path) -> None:
    run = write_run(tmp_path / "a", 0.0)
    assert logged_metrics(metric_records(run)) == ["r2", "loss"]
    sraven = [{"accuracy": 0.1, "feature_accuracy": 0.2, "loss": 2.0, "split": "ood", "step": 1}]
    assert logged_metrics(sraven) == ["accuracy", "feature_accuracy", "loss"]
    figure = metric_curves({"x": run}, "loss", log_y=True)
    assert all(ax.get_yscale() == "log" for ax in figure.axes)
    assert list(figure.axes[0].lines[0].get_ydata()) == [1.0, 1.0, 1.0]
    with pytest.raises(ValueError, match="log_y needs positive values; r2 reaches -0.1"):
        metric_curves({"x": write_run(tmp_path / "b", -0.2)}, "r2", log_y=True)
    plotly = metric_curves_plotly({"x": run}, ["r2", "loss"])  # a menu switches them
    assert [(t.name, t.visible) for t in plotly.data] == [
        ("x, train", True), ("x, ood", True), ("x, control", True),
        ("x, train", False), ("x, ood", False), ("x, control", False),
    ]  # fmt: skip
    assert list(plotly.data[4].y) == [1.0, 1.0, 1.0]  # the loss of ood
    r2, loss = plotly.layout.updatemenus[0].buttons
    assert r2.args[0]["visible"] == [True] * 3 + [False] * 3
    assert loss.args == ({"visible": [False] * 3 + [True] * 3},
                         {"yaxis.title.text": "loss", "yaxis.type": "log",
                          "yaxis.autorange": True, "yaxis.range": None})  # fmt: skip
    assert plotly.layout.yaxis.title.text == "R²" and plotly.layout.yaxis.type == "linear"
    assert not metric_curves_plotly({"x": run}).layout.updatemenus  # one metric: no menu
    with pytest.raises(ValueError, match="a run of 'x' has no metric 'accuracy'; it logs"):
        metric_curves_plotly({"x": run}, ["r2", "accuracy"])
    (run / "config.json").write_text(json.dumps({"task": {"name": "modular-icl"}, "train": {}}))
    written = run_figures(run, formats=("png",))
    assert {"metrics", "metrics_loss"} <= set(written)
    assert written["metrics_loss"] == run / "figures" / "metrics_loss.png"


def test_an_accuracy_axis_spans_zero_to_one_and_other_metrics_their_values(
    tmp_path: Path,
) -> None:
    """A flat accuracy of 0 autoscaled would fill the panel with [-0.05, 0.05] as if it
    were noise; an accuracy's axis spans [0, 1] (padded 3%, so a point on 0 or 1 stays in
    the frame), in the figure and in the interactive menu, while R² and the loss keep
    their values' range (an R² below -1 clipped there)."""
    run = tmp_path / "sraven"
    run.mkdir()
    records = [
        {"step": step, "split": "ood", "loss": 2.0 - step / 100, "accuracy": 0.0,
         "feature_accuracy": 0.9 + step / 1000, "r2": -3.0 + step / 10}
        for step in (10, 20, 30)
    ]  # fmt: skip
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    for metric in ("accuracy", "feature_accuracy"):
        low, high = metric_curves({"x": run}, metric).axes[0].get_ylim()
        assert (low, high) == pytest.approx((-0.03, 1.03))
    low, high = metric_curves({"x": run}, "r2").axes[0].get_ylim()
    assert (low, high) == (-1.0, 1.0)  # R² from -3 to 0: below the floor, clipped
    assert metric_curves({"x": run}, "accuracy", ylim=(0.0, 0.5)).axes[0].get_ylim() == (0, 0.5)
    plotly = metric_curves_plotly({"x": run}, ["accuracy", "r2"])
    assert list(plotly.layout.yaxis.range) == pytest.approx([-0.03, 1.03])
    assert plotly.layout.yaxis.autorange is False
    accuracy, r2 = (button.args[1] for button in plotly.layout.updatemenus[0].buttons)
    assert accuracy["yaxis.range"] == pytest.approx([-0.03, 1.03])
    # R² from -3: clipped to [-1, 1] as in the static figure (zoom out for the rest)
    assert r2["yaxis.autorange"] is False and r2["yaxis.range"] == pytest.approx([-1.06, 1.06])


def test_split_titles_come_from_the_runs_task(tmp_path: Path) -> None:
    """``test`` is held-out combinations in fuzzy logic but new puzzles of the training
    rules in SRAVEN: each panel says what its run's task holds there; without a config,
    the bare split name."""
    run = tmp_path / "sraven"
    run.mkdir()
    records = [{"step": 10, "split": s, "loss": 1.0, "accuracy": 0.5} for s in ("test", "ood")]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (run / "config.json").write_text(json.dumps({"task": {"name": "sraven"}}))
    titles = [ax.get_title().replace("\n", " ") for ax in metric_curves({"hyla": run}).axes]
    assert titles == [
        "in-distribution rules, new puzzles (test)",
        "held-out rule combinations (ood)",
    ]
    plotly = metric_curves_plotly({"hyla": run})
    assert [trace.name for trace in plotly.data] == [
        "hyla, in-distribution rules, new puzzles (test)",
        "hyla, held-out rule combinations (ood)",
    ]
    (run / "config.json").unlink()
    assert [ax.get_title() for ax in metric_curves({"hyla": run}).axes] == ["test", "ood"]


def test_decoding_curves_plot_every_site(tmp_path: Path) -> None:
    figure = decoding_curves({"hypernetwork": write_run(tmp_path / "a", 0.0)})
    (ax,) = figure.axes
    assert len(ax.lines) == 6  # OOD and fit per site
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["residual after layer 0", "residual after layer 1", "ẑ (bottleneck)"]
    assert list(ax.lines[0].get_ydata()) == pytest.approx([0.2, 0.4])
    assert save_figure(figure, tmp_path / "dec", formats=("pdf",))[0].is_file()


def test_missing_results_and_bad_formats_are_clear_errors(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no metrics.jsonl records"):
        metric_curves({"x": tmp_path / "empty"})
    with pytest.raises(ValueError, match="no tracking/latent_decoding.jsonl"):
        decoding_curves({"x": tmp_path / "empty"})
    figure = metric_curves({"x": write_run(tmp_path / "a", 0.0)})
    with pytest.raises(ValueError, match=r"formats \['jpg'\]"):
        save_figure(figure, tmp_path / "f", formats=("jpg",))


def test_values_beyond_ylim_are_marked_on_the_edge_not_hidden(tmp_path: Path) -> None:
    figure = metric_curves({"x": write_run(tmp_path / "a", -2.0)}, ylim=(-1.0, 1.0))
    ax = figure.axes[0]
    curve, marks = ax.lines  # values -1.9, -1.8, -1.7: all below the limit
    assert list(curve.get_ydata()) == [-1.0, -1.0, -1.0]
    assert marks.get_marker() == "v" and list(marks.get_xdata()) == [10, 20, 30]
    assert "values outside [-1, 1]" in figure.get_supxlabel()
    unclipped = metric_curves({"x": write_run(tmp_path / "b", 0.0)}, ylim=(-1.0, 1.0))
    assert len(unclipped.axes[0].lines) == 1 and unclipped.get_supxlabel() == ""


def test_a_seed_band_is_drawn_only_where_its_mean_is_within_ylim(tmp_path: Path) -> None:
    """Seeds far apart early (an untrained model's R² far below the axis would otherwise
    paint it): r2 = shift + step/100 with shifts -2.0 and 0.0 has means -0.9, -0.8 and
    -0.7 at steps 10, 20 and 30; with ylim (-0.85, 1) the first lies outside."""
    seeds = [write_run(tmp_path / "a", -2.0), write_run(tmp_path / "b", 0.0)]
    figure = metric_curves({"hyla": seeds}, "r2", ylim=(-0.85, 1.0))
    (band,) = figure.axes[0].collections
    assert band.get_paths()[0].vertices[:, 0].min() == 20  # no band at step 10
    assert "values outside [-0.85, 1]" in figure.get_supxlabel()


def test_the_edge_note_heads_a_legend_drawn_below_the_panels(tmp_path: Path) -> None:
    """Five runs put the legend below the panels; the note on clipped values then heads it
    instead of being a second footer over it."""
    runs = {f"run {i}": write_run(tmp_path / str(i), -2.0 if i == 0 else 0.0) for i in range(5)}
    figure = metric_curves(runs, "r2", ylim=(-1.0, 1.0))
    (legend,) = figure.legends
    assert "values outside [-1, 1]" in legend.get_title().get_text()
    assert figure.get_supxlabel() == ""


def test_translation_quality_curves_plot_cter_and_bleu_of_each_run(tmp_path: Path) -> None:
    runs = {}
    for index, label in enumerate(("baseline", "fusion")):
        tracking = tmp_path / label / "tracking"
        tracking.mkdir(parents=True)
        records = [
            {"step": step, "cter_instance": 0.5 - index / 10, "cter_aggregate": 0.9,
             "bleu_cg": 40.0 + step, "bleu_test": 80.0 + index}
            for step in (10, 20)
        ]  # fmt: skip
        lines = "".join(json.dumps(r) + "\n" for r in records)
        (tracking / "translation_quality.jsonl").write_text(lines)
        runs[label] = tmp_path / label
    cter, bleu = translation_quality_curves(runs).axes
    assert cter.get_ylim() == pytest.approx((0.0, 1.03))
    assert bleu.get_ylim() == pytest.approx((0.0, 103.0))
    # per run: the solid line (instance / compound), then the dashed one (aggregate / test)
    assert [list(line.get_ydata()) for line in cter.lines] == [
        [0.5, 0.5], [0.9, 0.9], [0.4, 0.4], [0.9, 0.9],
    ]  # fmt: skip
    assert list(bleu.lines[0].get_ydata()) == [50.0, 60.0]
    assert list(bleu.lines[3].get_ydata()) == [81.0, 81.0]
    assert [line.get_linestyle() for line in bleu.lines[:2]] == ["-", "--"]
    assert [t.get_text() for t in cter.get_legend().get_texts()] == ["baseline", "fusion"]
    with pytest.raises(ValueError, match="no tracking/translation_quality.jsonl"):
        translation_quality_curves({"empty": tmp_path / "nothing"})


def test_step_axes_tick_whole_steps_only(tmp_path: Path) -> None:
    """A short run's few evaluations (steps 1, 2, 3) would otherwise be ticked at 1.25,
    1.5, ...: training steps are whole numbers."""
    figure = metric_curves({"run": write_run(tmp_path / "a", 0.0, steps=(1, 2, 3))}, metric="r2")
    figure.canvas.draw()
    ticks = [tick for ax in figure.axes for tick in ax.get_xticks()]
    assert len(ticks) > 3 and all(float(tick).is_integer() for tick in ticks)
    assert all(ax.get_xlabel() == "training step" for ax in figure.axes)


def test_the_seeds_of_one_label_are_drawn_as_mean_and_std_band(tmp_path: Path) -> None:
    """Two seeds, r2 = shift + step/100 with shifts 0.0 and 0.2: mean shift 0.1, sample std
    0.2/sqrt(2), at the steps both evaluated (the second stopped at step 20)."""
    seeds = [write_run(tmp_path / "a", 0.0), write_run(tmp_path / "b", 0.2, steps=(10, 20))]
    figure = metric_curves({"hyla": seeds, "softmax": write_run(tmp_path / "c", 0.5)}, "r2")
    ax = figure.axes[1]  # ood
    mean, single = ax.lines
    assert list(mean.get_xdata()) == [10, 20]
    assert list(mean.get_ydata()) == pytest.approx([0.2, 0.3])
    (band,) = ax.collections
    corners = band.get_paths()[0].vertices
    std = 0.2 / 2**0.5
    assert corners[:, 1].min() == pytest.approx(0.2 - std)
    assert corners[:, 1].max() == pytest.approx(0.3 + std)
    assert list(single.get_ydata()) == pytest.approx([0.6, 0.7, 0.8])
    legend = [t.get_text() for t in figure.axes[0].get_legend().get_texts()]
    assert legend == ["hyla (mean ± std, 2 seeds)", "softmax"]
    plotly = metric_curves_plotly({"hyla": seeds}, "r2")
    low, high, line = plotly.data[3:6]  # ood: the band's edges, then the mean
    assert list(low.y) == pytest.approx([0.2 - std, 0.3 - std]) and low.fill is None
    assert list(high.y) == pytest.approx([0.2 + std, 0.3 + std]) and high.fill == "tonexty"
    assert line.name == "hyla (mean ± std, 2 seeds), ood" and list(line.x) == [10, 20]
    with pytest.raises(ValueError, match="'hyla' names no run directory"):
        metric_curves({"hyla": []})


def test_comparisons_group_the_seeds_of_one_configuration(tmp_path: Path) -> None:
    from latentlens.figures.run_figures import seed_groups

    def run(name: str, seed: int, attention: str, parent: str = "") -> Path:
        path = tmp_path / parent / name
        path.mkdir(parents=True)
        config = {"model": {"attention": attention}, "task": {"name": "fuzzy-logic"},
                  "train": {"seed": seed, "steps": 10}}  # fmt: skip
        (path / "config.json").write_text(json.dumps(config))
        return path

    hyla = [run("hyla-s0", 0, "hyla"), run("hyla-s1", 1, "hyla")]
    softmax = run("softmax", 0, "softmax")
    assert seed_groups([hyla[0], softmax, hyla[1]]) == {"hyla": hyla, "softmax": [softmax]}
    # two configurations whose seeds share a stem are told apart by their runs' names
    other = [run("hyla-s2", 2, "linear", "b"), run("hyla-s3", 3, "linear", "b")]
    assert seed_groups([*hyla, *other]) == {"hyla-s0, hyla-s1": hyla, "hyla-s2, hyla-s3": other}
    with pytest.raises(ValueError, match="share the name hyla-s0"):
        seed_groups([*hyla, run("hyla-s0", 0, "hyla", "c")])
