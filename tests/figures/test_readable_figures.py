"""Figures that read right (#47): colour limits from the data, marks a reader can tell
apart, views that one outlier cannot squash, no bold zero, colours that saturate only
beyond the noise, clipped R² axes, legends and labels that fit, one copy of plotly.js."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
import pytest

from latentlens.figures import (
    code_embedding,
    code_embedding_plotly,
    decoding_by_head,
    head_ablation,
    metric_curves,
    metric_curves_plotly,
    save_plotly,
    structure_scores,
)
from latentlens.figures.axes import R2_FLOOR, step_label, wrap_label
from latentlens.figures.probes import cell_text, label_marks, robust_view
from latentlens.figures.run_figures import seed_groups
from latentlens.reports.report import Section, write_report
from tests.figures.test_probe_figures import fake_results

from ..browser import chromium, page  # noqa: F401 (fixtures)


def small_decoding(top: float) -> list[dict]:
    rows = [{"layer": "all", "heads": "all", "metric": "r2", "fit": 0.1, "test": top,
             "chance": 0.0, "shuffled": 0.0}]  # fmt: skip
    for layer in (0, 1):
        for heads, value in (("all", top), ("h0", top / 2), ("h1", top), ("-h0", top / 3)):
            rows.append({"layer": layer, "heads": heads, "metric": "r2", "fit": 0.1,
                         "test": value, "chance": 0.0, "shuffled": 0.0})  # fmt: skip
    return rows


def test_decoding_colours_span_the_data_not_zero_to_one() -> None:
    figure = decoding_by_head({"decoding": small_decoding(0.08)})
    image = figure.axes[0].images[0]
    assert image.norm.vmin == 0.0 and image.norm.vmax == 0.08  # was 1.0: one dark colour
    assert decoding_by_head({"decoding": small_decoding(0.02)}).axes[0].images[0].norm.vmax == (
        0.05  # a floor: noise at 0.01 is not stretched over every colour
    )


def embedding_results(labels: int, outlier: float = 0.0) -> dict:
    rng = np.random.default_rng(0)
    n = 40 * labels
    x, y = rng.normal(size=n), rng.normal(size=n)
    x[0] += outlier
    names = [f"t{i}+t{i + 1}" for i in range(labels)]
    return {"embedding": {"method": "pca", "layer": 1, "x": x.tolist(), "y": y.tolist(),
                          "label": [names[i % labels] for i in range(n)],
                          "split": ["test"] * n, "label_kind": "term combination"}}  # fmt: skip


def test_33_term_combinations_get_distinct_marks_and_a_legend() -> None:
    results = embedding_results(33)
    names = list(dict.fromkeys(results["embedding"]["label"]))
    marks = label_marks(names)
    assert len(set(marks.values())) == 33  # (marker, colour) pairs, none shared
    figure = code_embedding(results)
    legend = figure.axes[0].get_legend()
    assert legend is not None and len(legend.get_texts()) == 33
    live = code_embedding_plotly(results)
    symbols = {(t.marker.symbol, t.marker.color) for t in live.data}
    assert len(symbols) == 33


def test_one_outlier_does_not_squash_the_embedding() -> None:
    figure = code_embedding(embedding_results(3, outlier=500.0))
    low, high = figure.axes[0].get_xlim()
    assert high - low < 20  # the cloud's spread, not 500
    assert "1 outlying points beyond the view" in figure.axes[0].get_ylabel()
    assert robust_view(np.arange(101.0)) == (-23.5, 123.5)


def ablation_rows(changes: list[float], error: float) -> dict:
    return {"ablation": [{"layer": 0, "head": h, "metric": "r2", "baseline": 0.5,
                          "intervened": 0.5 + c, "change": c, "standard_error": error}
                         for h, c in enumerate(changes)]}  # fmt: skip


def test_no_bold_cell_reads_zero() -> None:
    # beyond 2 standard errors, but only 0.0004: it must print with enough decimals
    figure = head_ablation(ablation_rows([0.0004, 0.3, -0.2, 0.1], error=0.0001))
    for text in figure.axes[0].texts:
        if text.get_fontweight() == "bold":
            assert float(text.get_text()) != 0, text.get_text()
    assert cell_text(-0.0001, "+.2f") == "+0.00"  # the rounding the check guards against


def test_changes_within_the_noise_do_not_saturate() -> None:
    """SRAVEN and atlas runs: changes of ±0.001 with standard errors of 0.01 were drawn in
    fully saturated colours; now the scale reaches at least 3 standard errors."""
    figure = head_ablation(ablation_rows([0.001, -0.001, 0.0005, 0.0], error=0.01))
    norm = figure.axes[0].images[0].norm
    assert norm.vmax >= 0.03 and norm.vmin <= -0.03


def write_run(run: Path, values: list[float], name_seed: int) -> None:
    run.mkdir(parents=True)
    config = {"model_kind": "transformer", "model": {"attention": "hyla"},
              "task": {"name": "fuzzy-logic", "config": {}},
              "train": {"seed": name_seed, "steps": 30}}  # fmt: skip
    (run / "config.json").write_text(json.dumps(config))
    rows = [{"step": 10 * i, "split": "test", "r2": v, "loss": 0.1} for i, v in enumerate(values)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_every_r2_axis_clips_an_untrained_start(tmp_path: Path) -> None:
    write_run(tmp_path / "r", [-30.0, 0.2, 0.5, 0.6], 0)
    ax = metric_curves({"r": tmp_path / "r"}).axes[0]
    assert ax.get_ylim() == (R2_FLOOR, 1.0)  # not -30: training is not a flat line
    live = metric_curves_plotly({"r": tmp_path / "r"})
    assert list(live.layout.yaxis.range) == pytest.approx([-1.06, 1.06])  # the same clip
    write_run(tmp_path / "good", [0.1, 0.2, 0.5, 0.6], 0)
    assert metric_curves({"g": tmp_path / "good"}).axes[0].get_ylim()[0] > -0.5
    assert metric_curves_plotly({"g": tmp_path / "good"}).layout.yaxis.autorange is True


def test_sweep_cells_of_one_config_get_one_short_label_that_wraps_between_words(
    tmp_path: Path,
) -> None:
    runs = [tmp_path / "attention=hyla,seed=0", tmp_path / "attention=hyla,seed=1"]
    for seed, run in enumerate(runs):
        write_run(run, [0.1, 0.3, 0.5], seed)
    groups = seed_groups(runs)
    assert list(groups) == ["attention=hyla"]  # not the two names glued together
    assert wrap_label("attention=hyla,seed=1", 10) == "attention=hyla,\nseed=1"
    assert wrap_label("linear attention (hyla-s0)", 12) == "linear\nattention\n(hyla-s0)"
    results = fake_results()
    names = ["attention=softmax,lr=0.001", "attention=hyla"]
    figure = structure_scores({name: results for name in names})
    for axis in figure.axes[:2]:
        shown = [label.get_text() for label in axis.get_xticklabels()]
        assert [text.replace("\n", "") for text in shown] == names  # nothing cut or lost
        assert all(line.endswith(",") or line in {n.split(",")[-1] for n in names}
                   for text in shown for line in text.split("\n")[:-1]), shown  # fmt: skip


def test_a_report_and_its_figures_share_one_plotly_bundle(tmp_path: Path) -> None:
    bundle = tmp_path / "plotly.min.js"
    live = go.Figure(go.Scatter(x=[1, 2], y=[3, 4]))
    figure_page = save_plotly(live, tmp_path / "run" / "figures" / "live.html", bundle)
    _, report = write_report(tmp_path, "r", [Section("s", interactive=[(live, "a scatter")])],
                             plotlyjs=bundle)  # fmt: skip
    assert bundle.is_file() and bundle.stat().st_size > 1_000_000
    for html, source in ((figure_page, "../../plotly.min.js"), (report, "plotly.min.js")):
        text = html.read_text()
        assert f"src='{source}'" in text or f'src="{source}"' in text, html
        assert len(text) < 100_000  # no inline copy of plotly.js
    assert "a scatter (interactive" in report.read_text()  # captioned


def test_step_ticks_of_a_long_run_are_few_and_short(tmp_path: Path) -> None:
    # 50,000 steps on a panel a third of a page wide once read "6000120001800024000..."
    run = tmp_path / "long"
    write_run(run, [0.1] * 11, 0)
    rows = [{"step": 5_000 * i, "split": "test", "r2": 0.1, "loss": 0.1} for i in range(11)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    figure = metric_curves({"r": run})
    figure.canvas.draw()
    ax = figure.axes[0]
    labels = [t.get_text() for t in ax.get_xticklabels() if 0 <= t.get_position()[0] <= 50_000]
    assert len(labels) <= 6 and all(len(label) <= 4 for label in labels), labels
    assert step_label(50_000) == "50k" and step_label(1_500_000) == "1.5M"
    assert step_label(250) == "250" and step_label(0) == "0"


def deep_decoding(layers: int, heads: int) -> list[dict]:
    """Decoding rows of a ``layers`` x ``heads`` model, with their permutation bands."""
    control = {"chance": 0.25, "shuffled": 0.3, "shuffled_band": [0.22, 0.38], "p_value": 0.05,
               "permutations": 20}  # fmt: skip
    rows = [{"layer": "all", "heads": "all", "metric": "accuracy", "test": 0.9, **control}]
    for layer in range(layers):
        rows.append({"layer": layer, "heads": "all", "metric": "accuracy", "test": 0.8, **control})
        for head in range(heads):
            for name in (f"h{head}", f"-h{head}"):
                rows.append({"layer": layer, "heads": name, "metric": "accuracy",
                             "test": 0.5, **control})  # fmt: skip
    return rows


def test_a_thirty_layer_decoding_figure_writes_no_cell_numbers_and_few_ticks() -> None:
    """SmolLM2's 30 layers of 9 heads overprinted 270 cell labels and every layer's tick
    (#67): beyond 128 cells the heatmap is read off its colour bar, and each axis shows at
    most 16 layer labels; the permutation band is drawn for every layer."""
    figure = decoding_by_head({"decoding": deep_decoding(30, 9)})
    heatmap, bars = figure.axes[0], figure.axes[1]  # the colour bar comes last
    assert len(heatmap.texts) == 0
    assert len(heatmap.get_yticklabels()) <= 16 and len(bars.get_xticklabels()) <= 16
    assert len(bars.texts) == 0  # no value over 30 pairs of bars
    [band] = [c for c in bars.collections if type(c).__name__ == "LineCollection"]
    assert len(band.get_segments()) == 30
    skewed = deep_decoding(2, 4)  # a mean below its 5th percentile (an outlying permutation)
    skewed[1] |= {"shuffled": -3.0, "shuffled_band": [-0.1, 0.4]}
    decoding_by_head({"decoding": skewed})  # drawn: once an error ("yerr" negative)
    small = decoding_by_head({"decoding": deep_decoding(2, 4)})
    assert len(small.axes[0].texts) == 8  # a small grid keeps its numbers
    assert "p=0.05" in small.axes[1].get_xticklabels()[0].get_text()


def test_a_run_named_with_dollar_signs_is_drawn_as_written(tmp_path: Path) -> None:
    """Round three (#71): a run named r$\\frac{a}{$ stopped `latentlens figures` with
    matplotlib's mathtext ParseSyntaxException; labels are drawn as written."""
    from latentlens.cli import main

    run = tmp_path / r"r$\frac{a}{$"
    assert main(["train", "--task", "fuzzy-logic", "--d-model", "16", "--steps", "2",
                 "--eval-every", "1", "--warmup-steps", "0", "--device", "cpu", "--quiet",
                 "--tracking-examples", "256", "--run-dir", str(run)]) == 0  # fmt: skip
    assert main(["figures", str(run), "--formats", "png,svg"]) == 0
    assert r"r$\frac{a}{$" in (run / "figures" / "metrics.svg").read_text()


def test_a_report_of_many_embeddings_draws_every_one(tmp_path: Path, page) -> None:  # noqa: F811
    """#67: ten WebGL scatter plots on the demo's report.html passed Chromium's WebGL
    contexts ("Too many active WebGL contexts") and the first embedding was blank. Clouds
    of the demo's size are SVG now: every plot on the page draws all its points."""
    from latentlens.figures.interactive import WEBGL_FROM, code_embedding_plotly

    results = fake_results()
    points = len(results["embedding"]["x"])
    assert points < WEBGL_FROM
    figures = [(code_embedding_plotly(results, title=f"run {i}"), f"run {i}") for i in range(20)]
    bundle = tmp_path / "plotly.min.js"
    _, html = write_report(tmp_path, "many", [Section("s", interactive=figures)], plotlyjs=bundle)
    warnings: list[str] = []
    page.on("console", lambda message: warnings.append(message.text))
    page.goto(html.as_uri())
    page.wait_for_function("document.querySelectorAll('.js-plotly-plot').length == 20")
    drawn = page.evaluate(
        "[...document.querySelectorAll('.js-plotly-plot')]"
        ".map(plot => plot.querySelectorAll('.scatterlayer .point').length)"
    )
    assert drawn == [points] * 20  # no blank plot, every point of each
    assert not [w for w in warnings if "WebGL" in w] and page.errors == []


def test_a_log_axis_keeps_its_powers_of_ten_beside_labels_drawn_as_written(tmp_path: Path) -> None:
    """Drawing every text as written (the test above) drew a log axis's tick labels as
    written too: the loss curves showed $\\mathdefault{10^{-2}}$ for 10⁻². A numeric
    formatter's tick labels keep their mathtext; titles, labels, legends and tick labels
    given as strings are words."""
    from matplotlib.figure import Figure

    from latentlens.figures.save import save_figure

    figure = Figure()
    axes = figure.subplots()
    axes.plot([1, 2, 3], [1e-2, 1e-1, 1.0], label="r$")
    axes.set_yscale("log")
    axes.set_title(r"r$\frac{a}{$")
    axes.set_xticks([1, 2, 3], ["a$", "b", "c"])
    axes.legend()
    save_figure(figure, tmp_path / "log", ("png", "svg"))
    powers = [label for label in axes.get_yticklabels() if label.get_text()]
    assert powers and all("10^" in label.get_text() for label in powers)
    assert all(label.get_parse_math() for label in powers)
    words = [axes.title, *axes.get_xticklabels(), *axes.get_legend().get_texts()]
    assert not any(text.get_parse_math() for text in words)
