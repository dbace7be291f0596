"""benchmarks/reproduction/reproduce.py end to end at the tiny size: every number it writes is
measured."""

from __future__ import annotations

import datetime
import importlib.util
import json
import re
import shutil
import sys
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from latentlens.training.config import same_training

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
SCRIPT = BENCHMARKS / "reproduction" / "reproduce.py"


@pytest.fixture(scope="module")
def reproduce():
    spec = importlib.util.spec_from_file_location("reproduce", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["reproduce"] = module
    spec.loader.exec_module(module)  # puts benchmarks/ on sys.path for its experiments
    return module


def table_row(text: str, first_cells: str) -> str:
    return next(line for line in text.splitlines() if line.startswith(f"| {first_cells} |"))


def tables(markdown: str) -> list[str]:
    return [line for line in markdown.splitlines() if line.startswith("|")]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, reproduce) -> tuple[Path, Path, str]:
    root = tmp_path_factory.mktemp("reproduce")
    results = root / "docs" / "RESULTS.md"
    args = ["--size", "tiny", "--seeds", "1", "--device", "cpu", "--jobs", "1"]
    reproduce.main([*args, "--out", str(root / "runs"), "--results", str(results)])
    return root / "runs", results, results.read_text()


def test_every_experiment_is_written_with_its_figures(tiny, reproduce) -> None:
    runs, results, text = tiny
    assert "python benchmarks/reproduction/reproduce.py --size tiny" in text
    for module in reproduce.EXPERIMENTS.values():
        assert f"## {module.TITLE}" in text
    for figure in ("fuzzy-logic-sweep", "sraven-accuracy", "sraven-codes-hyla",
                   "hyperteacher-decoding", "translation-fuse-weights",
                   "connection-routing-gca"):  # fmt: skip
        assert (results.parent / "figures" / f"{figure}.png").stat().st_size > 1_000
        assert f"(figures/{figure}.png)" in text
    timings = json.loads((runs / "timings.json").read_text())
    planned = {spec.path for n, m in reproduce.EXPERIMENTS.items()
               for spec in m.plan("tiny", 1, runs / n)}  # fmt: skip
    assert len(timings) == len(planned) and all(seconds > 0 for seconds in timings.values())


def test_each_section_opens_with_its_finding_and_ends_with_where_it_came_from(tiny, reproduce):
    """For readers: the finding (read from the section's first table), the tables, then
    one provenance line: command, machine, dates, wall time and commit."""
    _, _, text = tiny
    today = datetime.date.today().isoformat()
    for module in reproduce.EXPERIMENTS.values():
        section = text[text.index(f"## {module.TITLE}") :].split("\n## ")[0]
        assert section.splitlines()[2].startswith("**Finding.** "), module.TITLE
        assert "one seed each, so no interval" in section.splitlines()[2]
        provenance = section.rstrip().splitlines()[-1]
        assert re.fullmatch(
            r"\*Made by `python benchmarks/reproduction/reproduce\.py --size tiny .*` on "
            + today
            + r": \d+ runs trained "
            + today
            + r", [\d.]+ minutes of training summed over runs; analysis [\d.]+ minutes\. "
            r"Trained on .+ \(\S+ \S+\), \d+ CPU thread\(s\) per run, torch "
            r"\S+\. Code: commit [0-9a-f]{12}( \+ uncommitted changes)?\.\*",
            provenance,
        ), provenance


def test_the_tables_hold_each_runs_own_measurements(tiny) -> None:
    from reproduction import (
        fusion_gca,
        fuzzy_logic_section,
        hyperteacher,
        hyperteacher_section,
        translation_section,
    )
    from reproduction.runs import metrics_at_end

    runs, _, text = tiny
    for variant, label in fuzzy_logic_section.VARIANTS.items():
        measured = fuzzy_logic_section.final_r2(runs / "fuzzy-logic" / f"{variant}-frac0.5-s0")
        row = table_row(text, label)
        assert f"| {measured['test']:.3f} |" in row and f"| {measured['ood']:.3f} |" in row
    hyla = metrics_at_end(runs / "sraven" / "hyla-s0")
    row = table_row(text, "HYLA | multi")
    assert f"| {100 * hyla['ood']['accuracy']:.1f} |" in row
    assert f"| {100 * hyla['ood']['feature_accuracy']:.1f} |" in row
    tanh = metrics_at_end(runs / "sraven" / "hyla-tanh-s0")["ood"]["feature_accuracy"]
    assert f"| {100 * tanh:.1f} |" in table_row(text, "tanh")
    run = hyperteacher_section.run_path(runs / "hyperteacher", "hypernetwork", "connected", 0)
    connected = hyperteacher.final_numbers(run)["ood_r2"]
    assert f"| {connected:.3f} |" in table_row(text, "OOD R², Connected")
    quality = fusion_gca.final_quality(
        translation_section.run_path(runs / "translation", "fusion-both", 0)
    )
    row = table_row(text, "fusion-both")
    assert f"| {quality['bleu_test']:.1f} |" in row and f"| {quality['cter_instance']:.3f} |" in row
    from latentlens import connect

    for condition in ("original", "gca"):
        run = runs / "layer-connection" / f"{condition}-s0"
        measured = connect.run_result(connect.ConditionRun(condition, 0, Path(), run))
        row = table_row(text, f"{condition}: {connect.CONDITIONS[condition].label}")
        assert f"| {measured['bleu_cg']:.2f} |" in row
        assert f"| {measured['test_loss']:.3f} |" in row
    stored = json.loads((runs / "layer-connection" / "gca-s0" / "config.json").read_text())
    assert stored["init_from"]["run"] == str(runs / "translation" / "baseline-s0")


def test_only_replaces_its_own_sections(reproduce) -> None:
    """``--only`` keeps the other experiments' sections of an existing results file."""
    text = "# Results\n\nheader\n\n## A\n\nold a\n\n## B\n\nold b\n"
    updated = reproduce.replace_sections(text, ["## B\n\nnew b", "## C\n\nnew c"])
    assert updated == "# Results\n\nheader\n\n## A\n\nold a\n\n## B\n\nnew b\n\n## C\n\nnew c\n"


def test_a_second_call_reuses_the_runs(tiny, reproduce, tmp_path: Path, monkeypatch) -> None:
    from reproduction import runs as runs_module

    runs, _, text = tiny
    before = (runs / "timings.json").read_text()
    again = tmp_path / "again.md"

    def no_workers(*args, **kwargs):
        raise AssertionError("Ray was started for runs that were all finished and probed")

    # finished runs are read where they lie: no Ray instance, no worker's imports
    monkeypatch.setattr(runs_module, "ray_map", no_workers)
    # one experiment: the reuse is the same for each, and each one's analysis costs seconds
    args = ["--size", "tiny", "--seeds", "1", "--device", "cpu", "--jobs", "2", "--only", "sraven"]
    reproduce.main([*args, "--out", str(runs), "--results", str(again)])
    assert (runs / "timings.json").read_text() == before  # nothing was trained again
    section = text[text.index("## SRAVEN") :].split("\n## ")[0]
    assert tables(again.read_text()) == tables(section) != []


def test_only_units_with_work_go_to_workers_and_the_rest_keep_their_order(
    reproduce, tmp_path: Path, monkeypatch
) -> None:
    """A unit has work while a run of it is unfinished or unprobed and the deadline leaves a
    slice; the others are decided in the calling process, and the results keep the units'
    order, the workers' generator run to its end (where Ray's instance stops)."""
    import time

    from reproduction import runs

    def spec(name: str, probe: int = 0) -> runs.RunSpec:
        return runs.RunSpec(tmp_path / name, {"train": {"steps": 10}}, probe_examples=probe)

    done = {"finished", "probed"}  # run directories: trained, and trained and probed
    monkeypatch.setattr(runs, "finished", lambda s: s.path.name in done)
    monkeypatch.setattr(runs, "_probed", lambda s: s.path.name == "probed")
    now = runs.Runtime("cpu", 1)
    assert not runs.has_work([spec("finished"), spec("probed", probe=8)], now)
    assert runs.has_work([spec("finished", probe=8)], now)  # trained, not yet probed
    assert runs.has_work([spec("finished"), spec("new")], now)
    late = runs.Runtime("cpu", 1, deadline=time.time() + runs.MINIMUM_SLICE / 2)
    assert not runs.has_work([spec("new")], late)

    units = [[spec("a")], [spec("b")], [spec("c")], [spec("d")]]
    ended = []

    def workers():  # the workers' results for units b and d, in that order
        yield "from a worker: b"
        yield "from a worker: d"
        ended.append(True)

    monkeypatch.setattr(runs, "train_unit", lambda unit, runtime: f"here: {unit[0].path.name}")
    results = list(runs.in_order(units, [units[1], units[3]], workers(), now))
    assert results == ["here: a", "from a worker: b", "here: c", "from a worker: d"]
    assert ended == [True]


@pytest.mark.usefixtures("one_ray_instance")  # --jobs 2: Ray workers
def test_worker_processes_train_what_one_process_would(reproduce, tmp_path: Path) -> None:
    from reproduction import fuzzy_logic_section

    args = ["--size", "tiny", "--seeds", "1", "--device", "cpu", "--only", "fuzzy-logic"]
    for jobs in ("1", "2"):
        out, results = tmp_path / f"runs{jobs}", tmp_path / f"jobs{jobs}" / "RESULTS.md"
        reproduce.main([*args, "--jobs", jobs, "--out", str(out), "--results", str(results)])
    for variant in fuzzy_logic_section.VARIANTS:
        name = Path("fuzzy-logic") / f"{variant}-frac0.5-s0"
        one = fuzzy_logic_section.final_r2(tmp_path / "runs1" / name)
        two = fuzzy_logic_section.final_r2(tmp_path / "runs2" / name)
        # same seed and data; the workers run one thread each, so only the order of float
        # sums inside the kernels may differ
        assert two == pytest.approx(one, abs=1e-4)


def test_bad_arguments(reproduce) -> None:
    with pytest.raises(SystemExit):
        reproduce.main(["--seeds", "0"])
    with pytest.raises(SystemExit):
        reproduce.main(["--only", "chess"])
    with pytest.raises(SystemExit):
        reproduce.main(["--jobs", "-1"])


def test_the_gpu_plan_is_printed_without_training(reproduce, tmp_path: Path, capsys) -> None:
    args = ["--size", "gpu", "--plan", "--seeds", "3", "--out", str(tmp_path / "runs")]
    assert reproduce.main(args) == 0
    printed = capsys.readouterr().out
    for name in reproduce.EXPERIMENTS:
        assert f"  {name}: " in printed
    assert "sraven: 45 runs, 7,031,250 steps, about 268 device minutes" in printed
    assert not (tmp_path / "runs").exists()


def test_a_time_budget_leaves_runs_for_the_next_call(reproduce, tmp_path: Path, capsys) -> None:
    out, results = tmp_path / "runs", tmp_path / "RESULTS.md"
    args = ["--size", "tiny", "--seeds", "1", "--device", "cpu", "--jobs", "1", "--only",
            "fuzzy-logic", "--out", str(out), "--results", str(results)]  # fmt: skip
    assert reproduce.main([*args, "--time-budget", "1"]) == 3  # too little to start a run
    assert "run the same command again" in capsys.readouterr().err
    assert not results.exists()
    assert reproduce.main(args) == 0 and results.is_file()


def test_the_gpu_sections_plan_in_seed_groups(reproduce, tmp_path: Path, capsys) -> None:
    args = ["--size", "gpu", "--plan", "--seeds", "3", "--out", str(tmp_path / "runs"),
            "--only", *reproduce.SECTIONS]  # fmt: skip
    assert reproduce.main(args) == 0
    printed = capsys.readouterr().out
    # 3 groups of 156,250 SRAVEN steps at 438 steps/s: 17.8 minutes if a group step costs
    # one run's step, 53.5 if grouping gains nothing
    assert "sraven-main: 9 runs (9 in 3 seed groups), 1,406,250 steps, about 18-54" in printed
    assert "fuzzy-logic-a1: 9 runs (9 in 3 seed groups), 450,000 steps, about 2-5" in printed
    assert "fuzzy-logic-a1-ablations: 15 runs (15 in 5 seed groups), 750,000 steps" in printed
    assert "fuzzy-logic-a1-one-head: 9 runs (9 in 3 seed groups), 450,000 steps" in printed
    assert "hyperteacher-connected-plus: 6 runs (6 in 2 seed groups)" in printed
    assert not (tmp_path / "runs").exists()
    default = reproduce.main(["--size", "gpu", "--plan", "--out", str(tmp_path / "runs")])
    assert default == 0 and "sraven-main" not in capsys.readouterr().out  # named only


def test_every_gpu_section_dry_runs_in_seed_groups(reproduce, tmp_path: Path, capsys) -> None:
    out, results = tmp_path / "runs", tmp_path / "docs" / "RESULTS.md"
    args = ["--size", "tiny", "--seeds", "2", "--device", "cpu", "--jobs", "1", "--out",
            str(out), "--results", str(results), "--only", *reproduce.SECTIONS]  # fmt: skip
    assert reproduce.main([*args, "--time-budget", "1"]) == 3  # nothing started
    assert reproduce.main(args) == 0
    text = results.read_text()
    timings = json.loads((out / "timings.json").read_text())
    for name, module in reproduce.SECTIONS.items():
        assert f"## {module.TITLE}" in text
        specs = module.plan("tiny", 2, out / name)
        groups = {spec.group for spec in specs}
        if name == "fuzzy-logic-a1-cpu":  # its runs train each alone, as the sweep trains them
            assert groups == {""}
            assert all(timings[str(s.path.relative_to(out))] > 0 for s in specs)
        else:
            assert len(groups) == len(specs) // 2 and "" not in groups
            for group in groups:  # one group's wall time, shared equally by its runs
                shares = {timings[str(s.path.relative_to(out))] for s in specs if s.group == group}
                assert len(shares) == 1 and shares.pop() > 0
        for spec in specs:
            assert (spec.path / "checkpoints").is_dir()
            stored = json.loads((spec.path / "config.json").read_text())["train"]
            assert same_training(stored, spec.config["train"])  # path and threads recorded
    assert "| HYLA |" in text and "| 81.1 |" not in text  # fuzzy A1 prints 0.811
    # fuzzy A1's runs are probed: a latent-code row per run, differences with intervals
    assert table_row(text, "HYLA s1").count("|") == 10
    assert "Differences in decoding R² (95% Welch interval over seeds): HYLA − softmax" in text
    # the ablations beside the full variants trained in the same folder
    assert table_row(text, "HYLA − both s1").count("|") == 10
    assert "| linear (fuzzy-logic-a1) |" in text and "HYLA − (HYLA − nonlinearity) " in text
    # full variants trained on another machine than the ablations are labelled with it
    (out / "fuzzy-logic-a1" / "TRAINED_ON.txt").write_text("NVIDIA H100, torch 2.11. Code: x\n")
    ablations = reproduce.SECTIONS["fuzzy-logic-a1-ablations"]
    again = ablations.report(out / "fuzzy-logic-a1-ablations", "tiny", 2, "cpu", tmp_path)
    assert "| linear (fuzzy-logic-a1, NVIDIA H100) |" in again
    # one head beside the 8-head runs: each variant's difference, and the section's finding
    one_head = text[text.index("## One head at Table A1") :].split("\n## ")[0]
    assert one_head.splitlines()[2].startswith("**Finding.** One head instead of eight")
    assert table_row(one_head, "HYLA").count("[") == 1
    for figure in ("sraven-main-codes-hyla", "fuzzy-logic-a1-curves", "hyperteacher-plus-r2"):
        assert (results.parent / "figures" / f"{figure}.png").stat().st_size > 1_000
    # without them, beside the 8-head runs each trained alone (the CPU section's); the one-head
    # runs trained by a sweep say so
    shutil.rmtree(out / "fuzzy-logic-a1")
    (out / "fuzzy-logic-a1-one-head" / "sweep.json").write_text('{"cells": {}}')
    one_head = reproduce.SECTIONS["fuzzy-logic-a1-one-head"]
    again = one_head.report(out / "fuzzy-logic-a1-one-head", "tiny", 2, "cpu", tmp_path)
    assert "8 heads: the fuzzy-logic-a1-cpu section's runs" in again
    assert "each run alone by `latentlens sweep`, path eager" in again
    assert table_row(again, "HYLA").count("[") == 1


def test_the_one_head_runs_differ_from_table_a1s_in_their_heads_alone(reproduce, tmp_path) -> None:
    from reproduction import fuzzy_logic_a1_one_head_section as one_head
    from reproduction import fuzzy_logic_a1_section as a1

    full = {spec.path.name: spec.config for spec in a1.plan("gpu", 3, tmp_path / "a1")}
    for spec in one_head.plan("gpu", 3, tmp_path / "one-head"):
        eight = full[spec.path.name]
        assert spec.config["model"]["n_heads"] == 1 and eight["model"]["n_heads"] == 8
        assert {**spec.config["model"], "n_heads": 8} == eight["model"]  # widths kept
        assert spec.config["train"] == eight["train"] and spec.config["task"] == eight["task"]


def test_the_ablations_differ_from_table_a1s_runs_in_attention_alone(reproduce, tmp_path) -> None:
    from reproduction import fuzzy_logic_a1_ablations_section as ablations
    from reproduction import fuzzy_logic_a1_section as a1

    full = {spec.path.name: spec.config for spec in a1.plan("gpu", 3, tmp_path / "a1")}
    reference = full["hyla-s1"]
    for spec in ablations.plan("gpu", 3, tmp_path / "ablations"):
        variant, seed = spec.path.name.rsplit("-", 1)
        assert spec.group == variant and spec.config["model"]["attention"] == variant
        assert spec.config["train"] == full[f"hyla-{seed}"]["train"]
        assert spec.config["task"] == reference["task"]
        assert {**spec.config["model"], "attention": "hyla"} == reference["model"]
    # the full runs are read only when every one evaluated at its last step
    assert ablations.full_results(tmp_path / "ablations", "gpu", 3) == {}
    committed = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
    full = ablations.full_results(committed / "h200_2026-11-25" / "ablations", "gpu", 3)
    assert full == {}  # no fuzzy-logic-a1 beside it there
    full = ablations.full_results(committed / "h100_2026-11-25" / "ablations", "gpu", 3)
    assert [len(runs) for runs in full.values()] == [3, 3, 3]
    assert round(sum(r["test"] for r in full["hyla"]) / 3, 3) == 0.915  # docs/RESULTS.md


def test_a_run_resumes_with_the_thread_count_it_started_with(reproduce, tmp_path: Path) -> None:
    # A seed group started by one invocation (a worker's share: 1 thread), resumed by another
    # whose plan and share say 7 and 5: before, the resume called it "a different run".
    from reproduction import fuzzy_logic_a1_section
    from reproduction.runs import FOUND, TRAINED, Runtime, train_unit, units_of

    def with_train(spec, **changes):
        return replace(spec, config={**spec.config, "train": {**spec.config["train"], **changes}})

    tiny = units_of(fuzzy_logic_a1_section.plan("tiny", 2, tmp_path / "a1"))[0]
    unit = [with_train(spec, eval_every=5) for spec in tiny]  # a checkpoint every 5 steps
    assert [fate for fate, _ in train_unit(unit, Runtime("cpu", 1))] == [TRAINED] * 2
    for spec in unit:  # back to an earlier checkpoint: resumable, not finished
        checkpoints = sorted((spec.path / "checkpoints").iterdir())
        assert len(checkpoints) >= 2
        checkpoints[-1].unlink()
    planned = [with_train(spec, threads=7) for spec in unit]
    assert [fate for fate, _ in train_unit(planned, Runtime("cpu", 5))] == [TRAINED] * 2
    assert train_unit(planned, Runtime("cpu", 5)) == [(FOUND, None)] * 2
    for spec in unit:
        assert json.loads((spec.path / "config.json").read_text())["train"]["threads"] == 1


def test_gpu_sections_trains_every_group_at_once_and_names_the_machine(
    reproduce, tmp_path: Path, monkeypatch
) -> None:
    script = BENCHMARKS / "gpu" / "gpu_sections.py"
    spec = importlib.util.spec_from_file_location("gpu_sections", script)
    gpu_sections = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_sections)
    out = tmp_path / "runs"
    args = ["--out", str(out), "--size", "tiny", "--seeds", "2", "--device", "cpu",
            "--threads", "1", "fuzzy-logic-a1"]  # fmt: skip

    def no_workers(method: str):
        raise AssertionError("worker processes were started with too little time to train")

    with monkeypatch.context() as patched:  # too little time: none started, none spawned
        patched.setattr(gpu_sections, "multiprocessing", SimpleNamespace(get_context=no_workers))
        assert gpu_sections.main([*args, "--time-budget", "1"]) == 3
    assert gpu_sections.main([*args, "--time-budget", "600"]) == 0
    timings = json.loads((out / "timings.json").read_text())
    assert sorted(timings) == [f"fuzzy-logic-a1/{v}-s{s}" for v in ("hyla", "linear", "softmax")
                               for s in (0, 1)]  # fmt: skip
    text = (out / "results-fuzzy-logic-a1" / "RESULTS.md").read_text()
    assert "Trained on CPU, torch " in text and "by benchmarks/gpu/gpu_sections.py" in text
    # the date is the TRAINED_ON line's: the files' dates would be those of a copy
    assert "2 runs trained" not in text and ": 6 runs, " in text


def test_the_a1_section_sets_each_eager_check_beside_its_fast_run(reproduce, tmp_path) -> None:
    from reproduction.fuzzy_logic_a1_section import EAGER_CHECK, eager_check_lines

    def run(path: Path, r2: dict[int, float]) -> None:
        path.mkdir(parents=True)
        rows = [{"step": s, "split": split, "r2": v} for s, v in r2.items()
                for split in ("train", "test")]  # fmt: skip
        (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    assert eager_check_lines(tmp_path) == []  # none made: nothing said
    run(tmp_path / "hyla-s0", {0: -3.0, 5000: 0.70, 10000: 0.75, 15000: 0.83})
    run(tmp_path / EAGER_CHECK / "hyla-s0", {0: -3.0, 5000: 0.73, 10000: 0.80})
    lines = eager_check_lines(tmp_path)
    assert "| hyla-s0 | step 5,000 | step 10,000 |" in lines
    assert "| compiled + graphed, GPU | 0.700 | 0.750 |" in lines
    assert "| eager, CPU | 0.730 | 0.800 |" in lines


@pytest.mark.parametrize(
    "section, heads",
    [("fuzzy-logic-a1", 8), ("fuzzy-logic-a1-one-head", 1)],  # Table A1; Fig. 5C's one head
)
def test_a_sweep_spec_holds_its_sections_runs(reproduce, tmp_path: Path, section, heads) -> None:
    # benchmarks/reproduction/sweeps/<section>.yaml trains the section's runs through
    # `latentlens sweep` (on a cluster or one run per core): the same configs in the folders
    # the section reads, so that reproduce.py finds them finished; the sweep gives each its
    # one thread
    import importlib

    from latentlens.sweep import SweepSpec

    module = importlib.import_module(f"reproduction.{section.replace('-', '_')}_section")
    sweep = SCRIPT.parent / "sweeps" / f"{section}.yaml"
    cells = {cell.name: cell.config for cell in SweepSpec.read(sweep).cells()}
    planned = {spec.path.name: spec.config for spec in module.plan("gpu", 3, tmp_path)}
    assert sorted(cells) == sorted(planned) and len(cells) == 9
    for name, config in planned.items():
        assert config["model"]["n_heads"] == heads
        assert cells[name] == {**config, "train": {**config["train"], "threads": 1}}, name


def test_the_a1_section_sets_the_same_configs_trained_elsewhere_beside_its_own(
    reproduce, tmp_path
) -> None:
    from reproduction.fuzzy_logic_a1_section import ELSEWHERE, elsewhere_lines
    from reproduction.runs import TRAINED_ON

    from latentlens.reports.seeds import difference_interval

    def run(path: Path, test_r2: float) -> None:
        path.mkdir(parents=True)
        rows = [{"step": 50_000, "split": split, "r2": test_r2 if split == "test" else 0.0}
                for split in ("train", "test", "ood")]  # fmt: skip
        (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    here = {"softmax": [0.60, 0.64, 0.62], "linear": [0.55, 0.58, 0.61],
            "hyla": [0.90, 0.93, 0.92]}  # fmt: skip
    there = {"softmax": [0.62, 0.60, 0.66], "linear": [0.50, 0.59, 0.57],
             "hyla": [0.92, 0.91, 0.93]}  # fmt: skip
    for variant in here:
        for seed in range(3):
            run(tmp_path / f"{variant}-s{seed}", here[variant][seed])
            if (variant, seed) != ("hyla", 2):
                run(tmp_path / ELSEWHERE / f"{variant}-s{seed}", there[variant][seed])
    assert elsewhere_lines(tmp_path, 3) == []  # a run missing there: no half comparison
    run(tmp_path / ELSEWHERE / "hyla-s2", there["hyla"][2])
    (tmp_path / ELSEWHERE / TRAINED_ON).write_text("an H100, compiled and graphed.\n")
    lines = elsewhere_lines(tmp_path, 3)
    assert "(an H100, compiled and graphed)" in lines[1]
    diff, low, high = difference_interval(here["hyla"], there["hyla"])
    assert f"| HYLA | 0.900 / 0.930 / 0.920 | 0.920 / 0.910 / 0.930 | {diff:+.3f} " \
        f"[{low:+.3f}, {high:+.3f}] |" in lines  # fmt: skip
    assert f"{diff:+.3f}" == "-0.003"  # (0.90 + 0.93 + 0.92 - 0.92 - 0.91 - 0.93) / 3


def test_reproduce_reads_the_seconds_a_sweep_recorded(reproduce, tmp_path) -> None:
    from reproduction.runs import TIMINGS, recorded_seconds

    (tmp_path / "fuzzy-logic-a1").mkdir()
    cells = {"hyla-s0": {"state": "done", "seconds": 2900.5},
             "hyla-s1": {"state": "paused", "seconds": 100.0}}  # fmt: skip
    (tmp_path / "fuzzy-logic-a1" / "sweep.json").write_text(json.dumps({"cells": cells}))
    assert recorded_seconds(tmp_path) == {"fuzzy-logic-a1/hyla-s0": 2900.5}
    (tmp_path / TIMINGS).write_text(json.dumps({"fuzzy-logic-a1/hyla-s0": 10.0, "x/y": 1.0}))
    assert recorded_seconds(tmp_path) == {"fuzzy-logic-a1/hyla-s0": 10.0, "x/y": 1.0}


def test_the_a1_section_says_how_its_runs_were_trained(reproduce, tmp_path) -> None:
    from reproduction.fuzzy_logic_a1_section import how_trained

    assert how_trained(tmp_path) == "trained as one seed group per variant"
    (tmp_path / "sweep.json").write_text('{"cells": {}}')  # latentlens sweep trained them
    assert how_trained(tmp_path) == "per variant, each run trained alone by `latentlens sweep`"


@pytest.mark.usefixtures("one_ray_instance")
def test_a_sections_runs_trained_by_a_sweep_are_probed_and_reported_not_retrained(
    reproduce, tmp_path: Path
) -> None:
    """The path of Table A1's CPU runs: `latentlens sweep` trains the section's configs
    into its folder (as benchmarks/reproduction/sweeps/fuzzy-logic-a1.yaml does at paper size), then
    reproduce.py finds them finished, probes them and reports each run's training time as
    the run recorded it; the probes' time is no training time."""
    from reproduction import fuzzy_logic_a1_section as a1
    from reproduction.fuzzy_logic_section import VARIANTS

    from latentlens.sweep import SweepSpec, run_sweep
    from latentlens.training import RunDirectory

    size = a1.SIZES["tiny"]
    spec = SweepSpec.from_dict({
        "task": "fuzzy-logic",
        "base": {"task": a1.task(), "model": size["model"], "train": size["train"]},
        "axes": {"model.attention": list(VARIANTS), "train.seed": [0]},
        "name": "{attention}-s{seed}",
    })  # fmt: skip
    out = tmp_path / "runs"
    states = run_sweep(spec, out / "fuzzy-logic-a1", num_cpus=2)
    assert [state["state"] for state in states.values()] == ["done"] * 3
    metrics = {v: (out / "fuzzy-logic-a1" / f"{v}-s0" / "metrics.jsonl").read_text()
               for v in VARIANTS}  # fmt: skip
    results = tmp_path / "RESULTS.md"
    args = ["--size", "tiny", "--seeds", "1", "--device", "cpu", "--jobs", "1",
            "--only", "fuzzy-logic-a1", "--out", str(out), "--results", str(results)]  # fmt: skip
    assert reproduce.main(args) == 0
    for variant in VARIANTS:  # not trained again
        run = out / "fuzzy-logic-a1" / f"{variant}-s0"
        assert (run / "metrics.jsonl").read_text() == metrics[variant]
        assert (run / "probes" / "results.json").is_file()
    assert not (out / "timings.json").exists()  # probing recorded no training time
    text = results.read_text()
    assert "each run trained alone by `latentlens sweep`" in text
    seconds = RunDirectory(out / "fuzzy-logic-a1" / "hyla-s0").train_seconds()
    assert f"| {round(seconds, 1):.0f} |" in table_row(text, "HYLA s0")


def test_the_cpu_a1_section_is_written_from_committed_raw_output_alone(
    reproduce, tmp_path: Path
) -> None:
    """benchmarks/results/ keeps a run's config.json and metrics.jsonl, not its weights:
    the eager Table A1 section is written from those and the sweep's sweep.json, training
    nothing, with each run's wall time and rate and the same configs trained elsewhere."""
    from reproduction import fuzzy_logic_a1_cpu_section as cpu
    from reproduction.fuzzy_logic_a1_section import ELSEWHERE
    from reproduction.runs import TRAINED_ON

    from latentlens.reports.seeds import difference_interval

    out = tmp_path / "runs"
    section = out / "fuzzy-logic-a1-cpu"
    specs = cpu.plan("tiny", 3, section)
    assert {spec.probe_examples for spec in specs} == {0} and {s.group for s in specs} == {""}
    test_r2 = {"softmax": [0.50, 0.55, 0.53], "linear": [0.60, 0.62, 0.58],
               "hyla": [0.90, 0.88, 0.93]}  # fmt: skip
    steps = specs[0].config["train"]["steps"]

    def raw_output(run: Path, r2: float) -> None:
        run.mkdir(parents=True)
        rows = [{"step": step, "split": split, "r2": r2 if split == "test" else -0.5}
                for step in (0, steps) for split in ("train", "test", "ood")]  # fmt: skip
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    cells = {}
    for variant, values in test_r2.items():
        for seed, r2 in enumerate(values):
            raw_output(section / f"{variant}-s{seed}", r2)
            raw_output(section / ELSEWHERE / f"{variant}-s{seed}", r2 - 0.1)
            cells[f"{variant}-s{seed}"] = {"state": "done", "seconds": 4.0 * (seed + 1)}
    (section / "sweep.json").write_text(json.dumps({"cells": cells}))
    (section / TRAINED_ON).write_text("a 2-core CPU, eagerly, 2026-11-26. Code: commit abc\n")
    (section / ELSEWHERE / TRAINED_ON).write_text("an H100, compiled and graphed.\n")
    results = tmp_path / "RESULTS.md"
    args = ["--size", "tiny", "--device", "cpu", "--only", "fuzzy-logic-a1-cpu",
            "--out", str(out), "--results", str(results)]  # fmt: skip
    assert reproduce.main(args) == 0
    assert not list(section.glob("*/checkpoints"))  # nothing trained
    text = results.read_text()
    assert f"## {cpu.TITLE}" in text and "Trained on a 2-core CPU, eagerly, 2026-11-26" in text
    assert ": 9 runs, 1.2 minutes of training summed over runs" in text  # 3 × (4 + 8 + 12) s
    assert table_row(text, "HYLA").startswith("| HYLA | 0.903 ± 0.025 | 0.811 | -0.500 ± 0.000 |")
    diff, low, high = difference_interval(test_r2["hyla"], test_r2["softmax"])
    assert f"HYLA − softmax {diff:+.3f} [{low:+.3f}, {high:+.3f}]" in text
    assert table_row(text, "linear s2") == f"| linear s2 | 0.580 | -0.500 | 12 | {steps / 12:.1f} |"
    assert "(an H100, compiled and graphed)" in text
    there = [r2 - 0.1 for r2 in test_r2["softmax"]]
    diff, low, high = difference_interval(test_r2["softmax"], there)
    row = f"| softmax | 0.500 / 0.550 / 0.530 | 0.400 / 0.450 / 0.430 | {diff:+.3f} [{low:+.3f}, "
    assert row + f"{high:+.3f}] |" in tables(text)
