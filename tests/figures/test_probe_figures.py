"""Probe figures and the report: every function writes its files; the HTML is
self-contained and, where Chromium is installed, loads without console errors."""

from __future__ import annotations

import re
import shutil
import subprocess
from html.parser import HTMLParser
from itertools import pairwise
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
import pytest
from matplotlib.colors import to_rgba_array
from matplotlib.container import BarContainer

from latentlens.figures import (
    code_embedding,
    code_embedding_plotly,
    decoding_by_head,
    head_ablation,
    save_figure,
    save_plotly,
    structure_scores,
    tracked_heatmap,
)
from latentlens.reports.report import Section, write_report


def fake_results(layers: int = 2, heads: int = 3) -> dict:
    rng = np.random.default_rng(0)
    decoding = [{"layer": "all", "heads": "all", "metric": "accuracy", "fit": 1.0, "test": 0.9,
                 "chance": 0.2, "shuffled": 0.21}]  # fmt: skip
    for layer in range(layers):
        for heads_label in [
            "all",
            *[f"h{h}" for h in range(heads)],
            *[f"-h{h}" for h in range(heads)],
        ]:
            decoding.append({"layer": layer, "heads": heads_label, "metric": "accuracy",
                             "fit": 0.9, "test": float(rng.uniform()), "chance": 0.2,
                             "shuffled": 0.2})  # fmt: skip
    n = 60
    return {
        "decoding": decoding,
        "embedding": {
            "method": "pca",
            "layer": 1,
            "x": rng.normal(size=n).tolist(),
            "y": rng.normal(size=n).tolist(),
            "label": [["constant", "addition", "subtraction"][i % 3] for i in range(n)],
            "split": ["test_unpermuted"] * 30 + ["ood_unpermuted"] * 30,
        },  # fmt: skip
        "ablation": [
            {
                "layer": l_,
                "head": h,
                "metric": "accuracy",
                "baseline": 0.5,
                "intervened": 0.4,
                "change": -0.1 * h,
            }
            for l_ in range(layers)
            for h in range(heads)
        ],  # fmt: skip
        "clustering": {
            m: {"ari": 0.5, "ami": 0.4, "nmi": 0.6, "nmi_shuffled": 0.1, "n_clusters": 3}
            for m in ("kmeans", "agglomerative")
        },  # fmt: skip
        "topography": {"rho": 0.3, "p_value": 0.002},
    }


def test_each_probe_figure_writes_png_svg_and_html(tmp_path: Path) -> None:
    results = fake_results()
    figures = {
        "decoding": decoding_by_head(results, title="run"),
        "embedding": code_embedding(results),
        "ablation": head_ablation(results),
        "structure": structure_scores({"softmax": results, "HYLA": results}),
        "tracked": tracked_heatmap([1, 2, 3], np.ones((3, 4)), ["a", "b", "c", "d"], "x"),
    }
    for name, figure in figures.items():
        paths = save_figure(figure, tmp_path / name, formats=("png", "svg", "html"))
        assert [p.suffix for p in paths] == [".png", ".svg", ".html"]
        assert all(p.stat().st_size > 500 for p in paths)
        assert "<svg" in paths[2].read_text()
    heat = figures["decoding"].axes[0]
    assert heat.get_xlabel() == "head" and heat.get_ylabel() == "layer"
    emb = figures["embedding"].axes[0]
    legend = [t.get_text() for t in emb.get_legend().get_texts()]
    assert "out-of-distribution" in legend and "constant (20)" in legend
    path = save_plotly(code_embedding_plotly(results), tmp_path / "embedding.html")
    assert "plotly" in path.read_text()[:100_000]
    with pytest.raises(ValueError, match=r"\.html"):
        save_plotly(code_embedding_plotly(results), tmp_path / "embedding.png")
    with pytest.raises(ValueError, match="no 'decoding'"):
        decoding_by_head({})
    with pytest.raises(ValueError, match=r"values must be \[steps, features\]"):
        tracked_heatmap([1, 2], np.ones((3, 4)), ["a"] * 4, "x")


def test_embedding_legends_follow_the_probes_label_order() -> None:
    results = fake_results()
    order = ["subtraction", "progression+1", "constant", "addition"]  # not first appearance
    results["embedding"]["label_order"] = order
    legend = [t.get_text() for t in code_embedding(results).axes[0].get_legend().get_texts()]
    # absent labels (progression+1) are skipped; "out-of-distribution" marks the crosses
    assert legend == [
        "subtraction (20)",
        "constant (20)",
        "addition (20)",
        "out-of-distribution",
    ]
    traces = code_embedding_plotly(results).data
    assert [t.name for t in traces] == [
        "subtraction (10)", "subtraction (OOD, 10)", "constant (10)", "constant (OOD, 10)",
        "addition (10)", "addition (OOD, 10)"]  # fmt: skip
    # a rule's crosses wear its dots' colour (plotly would give each trace the next one)
    colours = [t.marker.color for t in traces]
    assert colours[0::2] == colours[1::2] and len(set(colours)) == 3
    # results written before label_order existed: order of first appearance
    results["embedding"]["label"] = ["b", "a", "b"] * 20
    del results["embedding"]["label_order"]
    assert [t.legendgroup for t in code_embedding_plotly(results).data][::2] == ["b", "a"]


def test_embedding_mixes_the_rules_draw_order_and_keeps_its_legend_off_the_points() -> None:
    """Rules drawn one after another would bury the earlier ones under the later; the
    points are drawn in one shuffled order instead, every point exactly once. The legend
    stands right of the axes, and its out-of-distribution cross is black, a colour no
    rule has (grey is the eighth rule's)."""
    results = fake_results()
    results["embedding"]["label"].sort()  # grouped: unshuffled, each rule would be one run
    figure = code_embedding(results)
    ax = figure.axes[0]
    dots, crosses = ax.collections
    data = results["embedding"]
    points = {
        (x, y): label for x, y, label in zip(data["x"], data["y"], data["label"], strict=True)
    }
    drawn = [points[tuple(xy)] for c in (dots, crosses) for xy in c.get_offsets().tolist()]
    assert sorted(drawn) == sorted(data["label"])  # every point once
    colour_of = {"addition": "C0", "constant": "C1", "subtraction": "C2"}  # first seen
    for collection in (dots, crosses):
        labels = [points[tuple(xy)] for xy in collection.get_offsets().tolist()]
        expected = to_rgba_array([colour_of[label] for label in labels])
        assert np.allclose(collection.get_facecolors()[:, :3], expected[:, :3])
        runs = 1 + sum(a != b for a, b in pairwise(labels))
        assert runs > 10, "the rules are drawn one after another, not mixed"
    figure.canvas.draw()
    legend = ax.get_legend()
    assert legend.get_window_extent().x0 >= ax.get_window_extent().x1
    cross = legend.legend_handles[-1]
    assert cross.get_marker() == "x" and cross.get_color() == "black"


def test_decoding_axes_show_a_null_result_as_near_zero_with_readable_cells() -> None:
    results = fake_results()
    for row in results["decoding"]:  # codes that carry nothing: R² a hair below 0
        row.update(metric="r2", test=-0.002, chance=0.0, shuffled=-0.002)
    bars = decoding_by_head(results).axes[1]  # heads, layers, then the colour bar
    low, high = bars.get_ylim()
    assert low == pytest.approx(-0.052) and high == 1.0
    # dark cells get white numbers, light cells black ones
    results["decoding"][2]["test"] = 0.95  # layer 0, head 0 alone: yellow in viridis
    heat = decoding_by_head(results).axes[0]
    colours = {text.get_text(): text.get_color() for text in heat.texts}
    assert colours["0.95"] == "black" and colours["0.00"] == "white"
    assert "-0.00" not in colours  # -0.002 rounds to nothing: no sign on a zero
    bar_labels = {text.get_text() for text in bars.texts}
    assert bar_labels == {"0.00"}  # every bar is labelled, a zero-height one included
    accuracy = decoding_by_head(fake_results()).axes[1]
    assert accuracy.get_ylim() == (0.0, 1.0)
    # a head's cell is read against chance: 0.34 is nothing on SRAVEN's majority rule
    assert heat.get_title() == "one head alone (chance 0.00)"
    results["decoding"] = [dict(row, metric="accuracy", chance=0.34) for row in results["decoding"]]
    assert decoding_by_head(results).axes[0].get_title() == "one head alone (chance 0.34)"


def test_structure_axes_span_the_scores_ranges_so_near_zero_looks_near_zero() -> None:
    weak = fake_results()
    weak["topography"] = {"rho": -0.016, "p_value": 0.93}
    weak["clustering"]["kmeans"]["ari"] = -0.1
    figure = structure_scores({"untrained": weak, "trained": fake_results()})
    clustering, topography = figure.axes
    assert topography.get_ylim() == (-1.0, 1.0)
    assert [bar.get_height() for bar in topography.patches] == [-0.016, 0.3]
    low, high = clustering.get_ylim()
    assert low == pytest.approx(-0.15) and high == 1.0
    assert clustering.patches[0].get_height() == -0.1
    # Non-negative scores keep the axis at [0, 1].
    assert structure_scores({"trained": fake_results()}).axes[0].get_ylim() == (0.0, 1.0)


def test_structure_draws_chance_adjusted_scores_and_marks_undefined_ones() -> None:
    constant = fake_results()
    note = "all codes are identical: clustering and topographic similarity are undefined"
    constant["clustering"] = {
        m: dict.fromkeys(("ari", "ami", "nmi", "nmi_shuffled")) for m in ("kmeans", "agglomerative")
    } | {"note": note}  # fmt: skip
    constant["topography"] = {"rho": None, "p_value": None, "note": note}
    figure = structure_scores({"trained": fake_results(), "constant": constant})
    clustering = figure.axes[0]
    legend = [t.get_text() for t in clustering.get_legend().get_texts()]
    assert legend == ["k-means ARI", "k-means AMI", "agglomerative ARI", "agglomerative AMI"]
    heights = [bar.get_height() for bar in clustering.patches]  # per score: both runs
    assert heights == [0.5, 0.0, 0.4, 0.0, 0.5, 0.0, 0.4, 0.0]
    assert "0 = chance" in clustering.get_ylabel()
    marks = [t.get_text() for t in clustering.texts]
    assert marks == ["undefined:\nconstant codes"]
    assert clustering.texts[0].xy == (1, 0.0)  # over the second run's bars


class _Sources(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.sources: list[str] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self.sources += [v for k, v in attrs if k in ("src", "href") and v]


def chromium() -> str | None:
    return next(
        (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")
         if shutil.which(n)), None,
    )  # fmt: skip


def make_report(tmp_path: Path) -> tuple[Path, Path]:
    figure_path = save_figure(head_ablation(fake_results()), tmp_path / "figures" / "ablation")[0]
    interactive = go.Figure(go.Scatter(x=[1, 2], y=[3, 4]))
    markdown, page = write_report(
        tmp_path, "a report",
        [Section("What was run", ["Command: `latentlens demo`"], table=[{"a": 1.0, "b": "x"}],
                 figures=[(figure_path, "head ablation")],
                 interactive=[(interactive, "a scatter")])],
    )  # fmt: skip
    return markdown, page


def test_report_is_self_contained(tmp_path: Path) -> None:
    markdown, page = make_report(tmp_path)
    text = markdown.read_text()
    assert "![head ablation](figures/ablation.png)" in text and "| 1.000 | x |" in text
    html = page.read_text()
    parser = _Sources()
    parser.feed(html)
    assert parser.sources and all(s.startswith("data:") for s in parser.sources)
    assert "<code>latentlens demo</code>" in html
    assert len(re.findall(r"<script>", html)) >= 1  # plotly.js inline, no CDN
    with pytest.raises(ValueError, match="does not exist"):
        write_report(tmp_path, "x", [Section("s", figures=[(tmp_path / "none.png", "c")])])


def test_report_opens_in_headless_chromium_without_console_errors(tmp_path: Path) -> None:
    browser = chromium()
    if browser is None:
        pytest.skip(
            "no Chromium installed (Debian's chromium package): the console check is skipped"
        )
    _, page = make_report(tmp_path)
    done = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr",
         "--v=0", "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    console = [line for line in done.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    assert done.returncode == 0 and not console, console


def test_head_ablation_cells_show_small_changes_with_enough_decimals() -> None:
    """SRAVEN's 64 heads change feature accuracy by at most 0.02 early in training: at two
    decimals most cells read "+0.00" or "-0.00" while their colour shows a change. Two
    significant digits of the largest change, and a figure wide enough for 16 heads."""
    changes = [-0.019, -0.004, 0.0102, 0.0]
    rows = [
        {"layer": 0, "head": head, "metric": "feature_accuracy", "baseline": 0.137,
         "intervened": 0.137 + change, "change": change}
        for head, change in enumerate(changes * 4)
    ]  # fmt: skip
    ax = head_ablation({"ablation": rows}).axes[0]
    assert [t.get_text() for t in ax.texts[:4]] == ["-0.019", "-0.004", "+0.010", "+0.000"]
    assert ax.figure.get_figwidth() > 9  # 16 columns of six characters
    tiny = [dict(row, change=row["change"] / 100) for row in rows]
    assert head_ablation({"ablation": tiny}).axes[0].texts[0].get_text() == "-0.0002"
    large = [dict(row, change=row["change"] * 20) for row in rows]
    assert head_ablation({"ablation": large}).axes[0].texts[0].get_text() == "-0.38"
    assert "standard error" not in ax.get_title()  # results written before they were kept


def test_head_ablation_sets_changes_beyond_two_standard_errors_in_bold() -> None:
    rows = [
        {"layer": 0, "head": head, "metric": "feature_accuracy", "baseline": 0.137,
         "intervened": 0.137 + change, "change": change, "standard_error": 0.004}
        for head, change in enumerate([-0.019, -0.004, 0.0102, 0.008])
    ]  # fmt: skip
    ax = head_ablation({"ablation": rows}).axes[0]
    weights = [text.get_fontweight() for text in ax.texts]
    assert weights == ["bold", "normal", "bold", "normal"]  # 0.008 is exactly 2 errors
    assert ax.get_title().endswith(
        "bold: beyond 2 standard errors (median 0.0040; noise alone puts 0.2 of 4 there)"
    )


def test_head_ablation_gives_each_stack_of_an_encoder_decoder_its_own_rows() -> None:
    """An encoder-decoder's ablation rows hold layer 0 twice (encoder and decoder): each
    gets its own labelled row, where one grid by layer number drew one over the other."""
    rows = [
        {"prefix": prefix, "layer": layer, "head": head, "metric": "token_accuracy",
         "baseline": 0.5, "intervened": 0.5, "change": value}
        for prefix, offset in (("encoder.", 0.0), ("decoder.", 0.5))
        for layer in (0, 1)
        for head, value in ((0, -offset - 0.1 * layer), (1, -offset - 0.1 * layer - 0.01))
    ]  # fmt: skip
    ax = head_ablation({"ablation": rows}).axes[0]
    labels = [tick.get_text() for tick in ax.get_yticklabels()]
    assert labels == ["encoder 0", "encoder 1", "decoder 0", "decoder 1"]
    grid = ax.images[0].get_array()
    assert grid.shape == (4, 2)
    assert grid[2, 0] == pytest.approx(-0.5) and grid[3, 1] == pytest.approx(-0.61)
    texts = [text.get_text() for text in ax.texts]
    assert texts[0] == "+0.00" and "-0.00" not in texts  # encoder 0, head 0 changed by -0.0
    assert "token accuracy" in ax.get_title()
    one_stack = head_ablation(fake_results()).axes[0]
    assert [t.get_text() for t in one_stack.get_yticklabels()] == ["0", "1"]


def test_structure_of_seeds_is_their_mean_with_a_std_error_bar() -> None:
    """Two seeds with k-means ARI 0.2 and 0.6 and ρ 0.1 and 0.5: bars at 0.4 and 0.3, error
    bars of one sample std (0.4/sqrt(2) = 0.283); a seed with constant codes is left out
    of its group's mean and counted."""
    seeds = [fake_results(), fake_results()]
    for results, ari, rho in zip(seeds, (0.2, 0.6), (0.1, 0.5), strict=True):
        results["clustering"]["kmeans"]["ari"] = ari
        results["topography"] = {"rho": rho, "p_value": 0.01}
    constant = fake_results()
    constant["clustering"]["kmeans"] = dict.fromkeys(("ari", "ami", "nmi", "nmi_shuffled"))
    figure = structure_scores({"hyla": seeds, "mixed": [fake_results(), constant]})
    clustering, topography = figure.axes
    kmeans_ari = next(c for c in clustering.containers if isinstance(c, BarContainer))
    assert [bar.get_height() for bar in kmeans_ari] == pytest.approx([0.4, 0.5])
    (bounds,) = kmeans_ari.errorbar.lines[2]  # the vertical error segments
    low, high = bounds.get_segments()[0][:, 1]
    std = 0.4 / 2**0.5
    assert (low, high) == pytest.approx((0.4 - std, 0.4 + std))
    # the mixed group: one defined ARI, so no spread; its undefined seed is named
    assert bounds.get_segments()[1][:, 1] == pytest.approx([0.5, 0.5])
    assert [t.get_text() for t in clustering.texts] == ["undefined:\n1 of 2"]
    assert topography.patches[0].get_height() == pytest.approx(0.3)
    assert [t.get_text() for t in topography.get_xticklabels()][0] == "hyla\n(2 seeds)"


def test_many_labels_get_distinct_marks_and_a_task_legend_title() -> None:
    from latentlens.figures import code_embedding_plotly
    from latentlens.figures.probes import label_marks

    names = [f"terms {i}+{i + 1}" for i in range(33)]
    assert len(set(label_marks(names).values())) == 33  # 33 combinations, 33 marks
    results = fake_results()
    results["embedding"]["label"] = [names[i % 33] for i in range(60)]
    results["embedding"]["label_kind"] = "term combination"
    ax = code_embedding(results).axes[0]
    assert ax.get_title().endswith("(colour: term combination)")
    assert ax.get_legend().get_title().get_text() == "term combination"
    few = fake_results()
    few["embedding"]["label_kind"] = "rule"
    legend = code_embedding(few).axes[0].get_legend()
    assert legend.get_title().get_text() == "rule"
    assert code_embedding_plotly(results).layout.legend.title.text == "term combination"


def test_codes_that_do_not_vary_give_a_note_not_a_dot() -> None:
    results = fake_results()
    results["embedding"]["note"] = "the codes are identical for every example: nothing to embed"
    ax = code_embedding(results).axes[0]
    assert not ax.collections and "nothing to embed" in ax.texts[0].get_text().replace("\n", " ")


def test_one_outlying_ablation_does_not_blank_the_other_cells() -> None:
    results = fake_results(layers=2, heads=8)
    for index, row in enumerate(results["ablation"]):
        row["change"] = -0.01 * (index % 5)
    results["ablation"][3]["change"] = -10.5
    figure = head_ablation(results)
    image = figure.axes[0].images[0]
    low, high = image.get_clim()
    assert high < 1.0 and low == -high  # set by the other heads, not by -10.5
    outlined = [p for p in figure.axes[0].patches if not p.get_fill()]
    assert len(outlined) == 1 and outlined[0].get_xy() == (3 - 0.5, 0 - 0.5)
    assert "colour clipped at" in figure.axes[0].get_title()
    assert "-10.50" in {t.get_text() for t in figure.axes[0].texts}  # its number is shown
