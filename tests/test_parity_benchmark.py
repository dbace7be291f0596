"""benchmarks/parity/parity.py's statistics and reporting, on planted curves (the official code
itself is not in CI: it needs JAX and a checkout of its repository)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
from scipy import stats

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def load(name: str):
    (script,) = BENCHMARKS.glob(f"*/{name}.py")  # in its room: benchmarks/<room>/<name>.py
    spec = importlib.util.spec_from_file_location(f"benchmark_{name}", script)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module's annotations
    spec.loader.exec_module(module)
    return module


parity = load("parity")


def test_welch_matches_scipy_and_its_interval_covers_the_difference() -> None:
    a, b = [0.15, 0.21, 0.12, 0.18, 0.16], [0.09, 0.06, 0.11, 0.08, 0.12]
    diff, half, p = parity.welch(a, b)
    expected = stats.ttest_ind(b, a, equal_var=False)
    assert p == pytest.approx(expected.pvalue, rel=1e-10)
    assert diff == pytest.approx(sum(b) / 5 - sum(a) / 5, abs=1e-15)
    low, high = expected.confidence_interval(0.95)
    assert (diff - half, diff + half) == pytest.approx((low, high), rel=1e-10)
    assert parity.welch([1.0, 1.0], [1.0, 1.0]) == (0.0, 0.0, 1.0)


def planted(shift: float) -> tuple[dict, dict]:
    """Official and latentlens records of two variants, 5 seeds, latentlens's hyla
    accuracy shifted by ``shift``."""
    official, ours = {}, {}
    for seed in range(5):
        noise = 0.01 * (seed - 2)
        for variant in ("softmax", "hyla"):
            value = 0.2 + noise
            official[(variant, seed)] = {"records": [
                {"step": step, "split": split, "acc": value * step / 100, "loss": 1.0}
                for step in (0, 100) for split in ("test", "ood", "train_loss")
            ]}  # fmt: skip
            mine = value + (shift if variant == "hyla" else 0.0) - 0.5 * noise
            ours[(variant, seed)] = [
                {"step": step, "split": split, "accuracy": mine * step / 100, "loss": 1.0}
                for step in (0, 100) for split in ("train", "test", "ood")
            ]  # fmt: skip
    return official, ours


def test_a_planted_difference_is_found_and_equal_curves_pass() -> None:
    cfg = parity.ParityConfig(
        data={}, model={}, batch_size=8, lr=1e-3, warmup_steps=10, steps=100, output_dim=2,
        metrics={"acc": "accuracy", "loss": "loss"},
    )  # fmt: skip
    for shift, differs in ((-0.08, True), (0.0, False)):
        table = parity.curves("sraven", cfg, *planted(shift))
        assert set(table["official"]["hyla"]) == {"test", "ood"}  # train splits left out
        rows = parity.summary_rows(cfg, table)
        assert len(rows) == 2 * 2 * 2  # variants x splits x metrics, at the last step
        hyla = [r for r in rows if r["variant"] == "hyla" and r["metric"] == "accuracy"]
        assert all(r["step"] == 100 for r in hyla)
        assert all((r["p"] < 0.05) == differs for r in hyla)
        softmax = [r for r in rows if r["variant"] == "softmax" and r["metric"] == "accuracy"]
        assert all(r["p"] > 0.05 for r in softmax)
        text = parity.markdown("sraven", cfg, rows, 5, "python benchmarks/parity/parity.py", None)
        assert f"{2 if differs else 0} of 8 comparisons differ" in text


def test_refusals_name_the_fix(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit):
        parity.main(["--official", str(tmp_path)])
    assert "not a checkout of smonsays/hypernetwork-attention" in capsys.readouterr().err
    short = parity.ParityConfig(**{**parity.CONFIGS["sraven"].__dict__, "steps": 200})
    with pytest.raises(SystemExit, match="must exceed twice warmup_steps"):
        parity.official_spec("sraven", short, "hyla", 0)
    driver = load("parity_official")
    with pytest.raises(SystemExit, match="not a checkout"):
        driver.import_official(tmp_path)


def test_results_section_sets_each_comparison_beside_its_earlier_version(tmp_path: Path) -> None:
    cfg = parity.ParityConfig(
        data={}, model={}, batch_size=8, lr=1e-3, warmup_steps=10, steps=100, output_dim=2,
        metrics={"acc": "accuracy", "loss": "loss"},
    )  # fmt: skip

    for name, shift in (("parity_sraven.json", 0.0), ("parity_sraven-before.json", -0.08)):
        rows = parity.summary_rows(cfg, parity.curves("sraven", cfg, *planted(shift)))
        lock = [
            {"variant": "hyla", "steps": 30, "max_abs_difference": 1e-3,
             "control_difference": 2e-3, "last_official": 1.0, "last_latentlens": 1.0}
        ]  # fmt: skip
        result = {"task": "sraven", "config": cfg.__dict__, "seeds": 5, "summary": rows,
                  "lockstep": lock}  # fmt: skip
        (tmp_path / name).write_text(json.dumps(result))
    text = parity.results_section(tmp_path)
    assert text.startswith(parity.SECTION_TITLE)
    # for readers, the finding first: the comparisons beyond p <= 0.05 beside chance's share
    assert text.splitlines()[2] == (
        "**Finding.** latentlens and the official code train alike on sraven: 0 of 8 "
        "comparisons of final metrics differ at p <= 0.05 (Welch's test, 5 seeds a side), "
        "where chance alone would put about 0.4 there."
    )
    table = [line for line in text.splitlines() if line.startswith("| hyla | ood | accuracy")]
    assert len(table) == 1
    cells = [c.strip() for c in table[0].strip("|").split("|")]
    assert cells[6] == "1.000" and float(cells[8]) < 0.05  # now equal; before, it differed
    assert "0 of 8 comparisons at p <= 0.05" in text
    assert "control 2.0e-03" in text and "figures/parity-sraven.png" in text


def test_the_side_by_side_builds_both_sides_from_one_spec() -> None:
    """benchmarks/speed/cpu_side_by_side.py: latentlens's config is the spec the official code is
    given (sizes, batch, optimiser), and its reference SRAVEN is latentlens's own default."""
    from latentlens.training import TrainConfig, model_for_task

    side = load("cpu_side_by_side")
    for task in side.TASKS:
        spec = side.task_spec(task, "hyla")
        config = side.latentlens_config(spec, "fp32", threads=1)
        assert {k: config["model"][k] for k in spec["model"]} == spec["model"], task
        train = config["train"]
        assert (train["batch_size"], train["lr"], train["warmup_steps"], train["threads"]) == (
            spec["batch_size"], spec["lr"], spec["warmup_steps"], 1
        )  # fmt: skip
        assert {k: config["task"]["config"][k] for k in spec["data"]} == spec["data"], task
    assert side.task_spec("fuzzy-logic-a1", "hyla")["data"]["seq_len"] == 32
    default = side.task_spec("sraven-default", "hyla")
    model = model_for_task("sraven", attention="hyla")
    assert {k: getattr(model, k) for k in default["model"]} == default["model"]
    train = TrainConfig.for_task("sraven")
    assert (train.batch_size, train.lr, train.warmup_steps) == (
        default["batch_size"], default["lr"], default["warmup_steps"]
    )  # fmt: skip
    with pytest.raises(SystemExit):  # not a checkout: a one-line argparse error
        side.main(["--official", str(BENCHMARKS)])


def test_the_bf16_effect_pairs_each_seed_and_sets_the_official_mean_beside() -> None:
    """benchmarks/reproduction/bf16_effect.py: the paired interval is scipy's; a shift planted
    in every seed's bf16 run is found even under a seed spread larger than the shift."""
    effect = load("bf16_effect")
    a, b = [0.31, 0.12, 0.45, 0.22, 0.38], [0.30, 0.10, 0.43, 0.22, 0.35]
    diff, half = effect.paired(a, b)
    low, high = stats.ttest_rel(b, a).confidence_interval(0.95)
    assert (diff - half, diff + half) == pytest.approx((low, high), rel=1e-10)

    def records(value: float) -> list[dict]:
        return [{"step": step, "split": split, "r2": value * step / 100, "loss": 1.0}
                for step in (0, 100) for split in ("test", "ood")]  # fmt: skip

    runs = {}
    for seed in range(5):
        runs[("fp32", "hyla", seed)] = records(0.2 + 0.1 * seed)
        runs[("bf16", "hyla", seed)] = records(0.2 + 0.1 * seed - 0.02)
    rates = {"fp32": [30.0, 32.0], "bf16": [10.0, 12.0]}
    official = {("hyla", "test", "r2"): 0.5}
    lines = effect.table("fuzzy-logic", runs, official, 5, rates)
    row = next(line for line in lines if line.startswith("| hyla | test | r2 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[3:] == ["0.400 ± 0.158", "0.380 ± 0.158", "-0.020 [-0.020, -0.020]", "0.500"]
    assert next(line for line in lines if line.startswith("| hyla | ood | r2 |")).endswith(
        "| n/a |"
    )
    assert "- bf16: 11.0 ± 1.4 over 2 runs" in lines


def test_the_a1_projection_prints_the_median_and_each_rounds_hours(capsys) -> None:
    """The hours are the sum over the three variants of 3 runs x 50,000 steps / rate: at
    the median rate of the rounds, and at each single round's rates."""
    side = load("cpu_side_by_side")
    rates = {"official": [10.0, 20.0, 30.0], "cores": [100.0, 50.0, 150.0]}
    rows = [{"task": "fuzzy-logic-a1", "variant": v, "gflop": 1.0, "rates": rates}
            for v in side.VARIANTS]  # fmt: skip
    side.projection_lines(rows, ["cores"], cores_gflops=100.0)
    lines = capsys.readouterr().out.splitlines()
    # median 20 steps/s for each variant: 3 x 150,000 / 20 s; rounds 10 and 30 steps/s
    official = next(line for line in lines if line.strip().startswith("official"))
    assert official.split() == ["official", "6.25", "h", "(rounds", "4.17-12.50", "h)"]
    cores = next(line for line in lines if line.strip().startswith("cores"))
    assert cores.split()[1] == "1.25" and "(rounds 0.83-2.50 h)" in cores
    # 9 x 50,000 steps of 1 GFLOP at 100 GFLOP/s
    assert lines[-1].endswith("(100 GFLOP/s): 1.25 h")
