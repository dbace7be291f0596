"""`latentlens probe`, `figures` and `demo` through the real entry point."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from latentlens import zoo
from latentlens.cli import main
from latentlens.reports.demo_runs import SIZES, train_variant
from latentlens.tasks import RULE_NAMES


def latentlens(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "latentlens", *args], capture_output=True, text=True, timeout=600
    )


def test_demo_at_tiny_size_writes_runs_figures_and_reports(
    tmp_path: Path, capsys, monkeypatch
) -> None:
    out = tmp_path / "demo"
    monkeypatch.setenv("LATENTLENS_CACHE", str(tmp_path / "cache"))  # here and in the command
    done = latentlens("demo", "--size", "tiny", "--steps", "10", "--out", str(out), "--quiet")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "report.html" in done.stdout
    # the headline table on stdout: a header, the zoo's converged models (three seeds of
    # each variant) and the HYLA trained live, each with R² ± its error
    table = done.stdout.splitlines()
    assert table[0].split()[:3] == ["model", "test", "R²"]
    names = {"softmax": "softmax attention", "linear": "linear attention", "hyla": "HYLA"}
    labels = [f"{name} (zoo s{seed})" for name in names.values() for seed in range(3)]
    labels.append("HYLA (live)")
    assert [line[: len(label)] for line, label in zip(table[1:11], labels, strict=True)] == labels
    assert re.search(r"^HYLA \(zoo s0\)\s+0\.\d{3} ± \d\.\d{3}", table[7])
    zoo_runs = {out / "zoo" / f"{v}-s{seed}": v for v in names for seed in range(3)}
    runs = {run: (variant, 50_000) for run, variant in zoo_runs.items()}
    runs[out / "hyla"] = ("hyla", 10)
    messages = set()
    for run, (variant, step) in runs.items():
        results = json.loads((run / "probes" / "results.json").read_text())
        messages.update(note["message"] for note in results["health"])
        assert results["attention"] == variant and results["step"] == step
        assert {"decoding", "clustering", "topography", "embedding", "ablation"} <= set(results)
        # a layer whose codes are constant is named, and not patched
        constant = {int(note["where"].rsplit("layer ", 1)[1]) for note in results["health"]
                    if note["kind"] == "constant_codes"}  # fmt: skip
        patched = {row["layer"] for row in results["patching"]}
        assert patched == {0, 1} - constant  # two layers, tiny and zoo alike
        swaps = {(row["donor"], tuple(row["layers"])) for row in results["code_swaps"]}
        kinds = ("one-term", "random-combination", "same-combination")
        assert swaps == {(kind, (layer,)) for kind in kinds for layer in (0, 1)}
        # No empty panel: codes that do not vary are said to, not drawn as one dot.
        embedding = results["embedding"]
        assert "note" in embedding or max(embedding["x"]) - min(embedding["x"]) > 1e-6
        # One evaluation set for the table and the ablations, with standard errors.
        test = results["evaluation"]["test"]
        assert test["r2_se"] > 0 and results["ablation"][0]["baseline"] == pytest.approx(
            test["r2"], abs=1e-5
        )
        for name in ("metrics.png", "decoding_by_head.svg", "code_embedding.html",
                     "code_embedding_interactive.html", "head_ablation.png"):  # fmt: skip
            assert (run / "figures" / name).is_file(), name
    # the zoo's models are probed on the first examples of their fixed evaluation set
    zoo_test = json.loads((out / "zoo" / "hyla-s0" / "probes" / "results.json").read_text())
    assert zoo_test["evaluation_examples"] == SIZES["tiny"].zoo_examples
    assert not (tmp_path / "cache" / "zoo" / "fuzzy-logic-a1" / "hyla" / "s0" / "probes").exists()
    report = (out / "report.md").read_text()
    assert "## What was run" in report and "From the zoo (converged, not trained here)" in report
    for variant in ("softmax", "linear", "hyla"):  # each model's machine, from its own card
        assert zoo.card(f"fuzzy-logic-a1/{variant}/s0")["training"]["machine"] in report
    assert "Trained live by this command: HYLA (live)" in report
    assert "## What the converged codes carry" in report and "## Trained live" in report
    assert re.search(
        r"\| HYLA \(zoo s2\) \| 0\.\d{3} ± \d\.\d{3} \| 0\.\d{3} ± \d\.\d{3} \| 0\.811 \|", report
    )
    # a warning that holds for several runs is given once, naming them
    assert messages and all(report.count(message) == 1 for message in messages)
    # the variants ranked over the zoo's seeds, from the test R² the table holds
    assert "Test R² (new combinations), mean ± std over 3 seeds: " in report
    verdict = re.search(r"What the codes carry: swapping the final query's codes to every key "
                        r"in layer 1 .*?; HYLA (-?\d\.\d{3}) ± \d\.\d{3}\.", report)  # fmt: skip
    assert verdict, "the zoo's section opens with the codes' verdict"
    assert report.index("What the codes carry") < report.index("Test R² (new combinations)")
    sizes = re.findall(r"each point scores the run's whole fixed evaluation set, ([\d,]+) "
                       r"examples a split \(the table: its first ([\d,]+)\)", report)  # fmt: skip
    assert ("4,096", f"{SIZES['tiny'].zoo_examples:,}") in sizes  # every table names its set
    assert "official test R² at 50,000 steps" in report and "far from converged" in report
    # noise alone puts 4.55% of the heads beyond two standard errors: 16 zoo, 8 tiny heads
    assert "noise alone would put 0.7 of 16 heads" in report
    assert "noise alone would put 0.4 of 8 heads" in report
    assert re.search(r"\| [0-8] of 8 \|", report) and re.search(r"\| \d+ of 16 \|", report)
    assert (out / "report.html").stat().st_size > 100_000
    # A second demo keeps the finished runs (each run's files untouched) ...
    written = {path: path.stat().st_mtime_ns for path in out.rglob("*") if path.is_file()}
    train_variant(out / "hyla", "hyla", SIZES["tiny"], 10, "cpu", quiet=True, seed=2024)
    assert {path: path.stat().st_mtime_ns for path in written} == written
    # ... and refuses to mix a different one into them, changing nothing.
    argv = ["demo", "--size", "tiny", "--steps", "12", "--out", str(out), "--quiet"]
    assert main(argv) == 2 and "holds a different run" in capsys.readouterr().err
    assert {path: path.stat().st_mtime_ns for path in written} == written


def test_the_demo_without_the_zoo_trains_every_variant_live(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    argv = ["--size", "tiny", "--steps", "6", "--out", str(out), "--quiet", "--no-zoo"]
    done = latentlens("demo", *argv)
    assert done.returncode == 0, done.stderr[-3000:]
    table = done.stdout.splitlines()
    assert [line.split(" (")[0] for line in table[1:4]] == [
        "softmax attention", "linear attention", "HYLA"
    ]  # fmt: skip
    assert not (out / "zoo").exists()
    report = (out / "report.md").read_text()
    assert "## What came out" in report and "From the zoo" not in report


def test_probe_and_figures_commands_on_a_sraven_run(tmp_path: Path, capsys) -> None:
    run = tmp_path / "raven"
    args = ["train", "--task", "sraven", "--d-model", "16", "--n-heads", "4", "--qk-dim", "8",
            "--v-dim", "8", "--d-mlp", "32", "--n-layers", "2", "--steps", "4", "--eval-every",
            "4", "--batch-size", "16", "--eval-examples", "32", "--run-dir", str(run),
            "--quiet", "--device", "cpu", "--track", "blocks.1.attn.hook_pattern"]  # fmt: skip
    assert main(args) == 0
    assert main(["probe", str(run), "--examples", "128", "--quiet", "--device", "cpu"]) == 0
    printed = capsys.readouterr().out
    assert "decoding (accuracy" in printed and "topographic similarity" in printed
    assert "clustering (k-means, " in printed and "(0 = chance)" in printed
    results = json.loads((run / "probes" / "results.json").read_text())
    assert results["task"] == "sraven" and "rule_swaps" in results
    # every donor kind in each layer and both: 3 x 3 swaps, a printed line per layer set
    assert len(results["rule_code_swaps"]) == 9
    for layers in ("0", "1", "0,1"):
        assert f"final queries' codes swapped for a donor's (layer {layers}): the donor " in printed
    # 2 layers x 4 heads, each change with its standard error; noise alone puts 4.55% of
    # the heads beyond two of them
    assert all(row["standard_error"] >= 0 for row in results["ablation"])
    assert "head ablation (feature accuracy, baseline " in printed
    assert "of 8 heads beyond 2 standard errors, 0.4 expected from noise alone" in printed
    assert results["rule_swaps"]  # 128 OOD examples hold at least one of the swapped pairs
    for swap in results["rule_swaps"]:
        first, second = swap["rules"]
        line = f"codes of {first} and {second} swapped (layer 1): feature accuracy "
        assert line in printed and f"± {swap['standard_error']:.3f}" in printed
    embedding = results["embedding"]
    assert embedding["label_order"] == [r for r in RULE_NAMES if r in set(embedding["label"])]
    assert main(["figures", str(run), "--formats", "png"]) == 0
    assert (run / "figures" / "decoding_by_head.png").is_file()
    assert (run / "figures" / "tracked_blocks.1.attn.hook_pattern.png").is_file()  # --track
    for name in ("metrics", "metrics_feature_accuracy", "metrics_loss"):  # every logged metric
        assert (run / "figures" / f"{name}.png").is_file(), name
    assert main(["figures", str(run), "--formats", "gif"]) == 2
    assert main(["probe", str(tmp_path / "missing")]) == 2


def test_the_demo_report_explains_codes_that_are_the_same_for_every_task() -> None:
    from latentlens.reports.demo_text import constant_code_note

    assert constant_code_note([]) == ""
    note = constant_code_note(["HYLA"])
    assert note.startswith("HYLA: the codes a[:, T−1, T−1] are identical for every task")
    assert "RMSHead" in note and "residual stream" in note
    assert constant_code_note(["linear attention", "HYLA"]).startswith("linear attention and HYLA:")


def test_ablation_summary_names_the_stack_and_counts_against_noise() -> None:
    from latentlens.cli.analysis import ablation_summary

    rows = [
        {"prefix": prefix, "layer": 0, "head": head, "metric": "token_accuracy",
         "baseline": 0.5, "change": change, "standard_error": 0.01}
        for prefix, head, change in (("encoder.", 0, 0.005), ("decoder.", 1, -0.03))
    ]  # fmt: skip
    assert ablation_summary(rows) == (
        "head ablation (token accuracy, baseline 0.500): largest change -0.030 ± 0.010 "
        "(decoder layer 0 head 1); 1 of 2 heads beyond 2 standard errors, 0.1 expected from "
        "noise alone"
    )
    old = [{k: v for k, v in row.items() if k != "standard_error"} for row in rows]
    assert ablation_summary(old).endswith("largest change -0.030 (decoder layer 0 head 1)")


def test_figures_of_several_runs_draw_them_side_by_side(tmp_path: Path, capsys) -> None:
    runs = [tmp_path / "runs" / name for name in ("softmax", "hyla")]
    for run in runs:
        args = ["train", "--attention", run.name, "--d-model", "16", "--n-heads", "4",
                "--qk-dim", "8", "--v-dim", "8", "--d-mlp", "32", "--steps", "4",
                "--eval-every", "2", "--batch-size", "16", "--eval-examples", "32",
                "--tracking-examples", "256", "--run-dir", str(run), "--quiet",
                "--device", "cpu"]  # fmt: skip
        assert main(args) == 0
    # Every run is checked before the first is probed: a missing one changes nothing.
    options = ["--examples", "64", "--quiet", "--device", "cpu"]
    assert main(["probe", *map(str, runs), str(tmp_path / "missing"), *options]) == 2
    assert "missing is not a run directory" in capsys.readouterr().err
    assert not any((run / "probes").exists() for run in runs)
    assert main(["probe", *map(str, runs), *options]) == 0
    table = capsys.readouterr().out.splitlines()[-3:]  # two variants: no mean over them
    assert table[0].split() == ["run", "decoding", "R²", "R²", "chance", "k-means", "ARI",
                                "topographic", "ρ", "heads", ">", "2", "SE"]  # fmt: skip
    for run, line in zip(runs, table[1:], strict=True):
        results = json.loads((run / "probes" / "results.json").read_text())
        decoding = results["decoding"][0]
        assert line.split()[:3] == [
            run.name,
            f"{decoding['test']:.3f}",
            f"{decoding['chance']:.3f}",
        ]

    assert main(["figures", *map(str, runs), "--formats", "png"]) == 0

    comparison = tmp_path / "runs" / "comparison"  # beside the runs by default
    assert f"4 figures in {comparison}: metrics, metrics_interactive, metrics_loss, structure" in (
        capsys.readouterr().out
    )
    assert (comparison / "metrics_loss.png").is_file()
    for run in runs:  # each run's own figures too
        assert (run / "figures" / "head_ablation.png").is_file()
    page = (comparison / "metrics_interactive.html").read_text()
    assert '"name":"softmax' in page and '"name":"hyla' in page
    assert '"updatemenus"' in page and '"yaxis.type":"log"' in page  # R² or the loss
    assert (comparison / "structure.png").stat().st_size > 1_000

    assert main(["figures", str(runs[0]), "--out", str(tmp_path / "x")]) == 2
    assert "give at least two runs" in capsys.readouterr().err
    assert main(["figures", str(runs[0]), str(runs[0])]) == 2
    assert "at least two runs with different names" in capsys.readouterr().err


def test_probe_summary_averages_seeds_and_marks_undefined_and_missing_scores(tmp_path) -> None:
    from latentlens.cli.analysis import probe_summary
    from latentlens.training.run_dir import seeds_of_one_config

    def results(test: float, ari: float | None, changes: list[float]) -> dict:
        return {
            "decoding": [{"metric": "accuracy", "test": test, "chance": 0.25}],
            "clustering": {"kmeans": {"ari": ari}},
            "topography": {"rho": 0.5},
            "ablation": [{"change": c, "standard_error": 0.1} for c in changes],
        }

    probed = {
        Path("a/s0"): results(0.5, 0.1, [0.3, 0.0]),
        Path("a/s1"): results(0.7, 0.3, [0.3, 0.3]),
        Path("a/s2"): results(0.9, None, [0.0, 0.0]),
    }
    rows = [line.split() for line in probe_summary(probed, seeds_only=True).splitlines()]
    assert rows[1] == ["s0", "0.500", "0.250", "0.100", "0.500", "1"]
    assert rows[3] == ["s2", "0.900", "0.250", "undefined", "0.500", "0"]
    # mean ± sample std; the ARI over the two seeds that define it, and says so
    assert rows[4] == ["mean", "±", "std", "(3", "seeds)", "0.700", "±", "0.200", "0.250", "±",
                       "0.000", "0.200", "±", "0.141", "(of", "2)", "0.500", "±", "0.000",
                       "0-2", "(mean", "1.0)"]  # fmt: skip
    # a count of heads is an integer: the same in every seed, it is printed bare
    same = {Path(f"a/s{i}"): results(0.5, 0.1, [0.3, 0.3]) for i in range(3)}
    assert probe_summary(same, seeds_only=True).splitlines()[-1].split()[-1] == "2"
    # Different models are not averaged; a score a task has not is "-"; equal names get paths.
    modular = {"z_decoding": [{"r2_ood": 0.2}, {"r2_ood": 0.6}]}
    lines = probe_summary({Path("a/s0"): probed[Path("a/s0")], Path("b/s0"): modular}, False)
    rows = [line.split() for line in lines.splitlines()]
    assert rows[0][-5:] == ["z", "OOD", "R²", "(best", "site)"] and len(rows) == 3
    assert rows[1][0] == "a/s0" and rows[1][-1] == "-"
    assert rows[2] == ["b/s0", "-", "-", "-", "-", "-", "0.600"]

    def write(run: str, seed: int, attention: str) -> Path:
        config = {"model": {"attention": attention}, "task": {"name": "sraven"},
                  "train": {"seed": seed, "steps": 10}}  # fmt: skip
        (tmp_path / run).mkdir()
        (tmp_path / run / "config.json").write_text(json.dumps(config))
        return tmp_path / run

    seeds = [write("s0", 0, "hyla"), write("s1", 1, "hyla")]
    assert seeds_of_one_config(seeds)
    assert not seeds_of_one_config([*seeds, write("softmax", 0, "softmax")])
