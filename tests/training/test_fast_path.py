"""Choosing a run's path: measured per machine and model, cached, recorded, kept on resume."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from latentlens.cli.main import main
from latentlens.threads import ENVIRONMENT as THREADS_ENVIRONMENT
from latentlens.threads import available_cpus
from latentlens.training import fast_path
from latentlens.training.fast_path import (
    CALIBRATE_FROM,
    CALIBRATE_UNCOMPILED_FROM,
    Calibration,
    calibrate,
    candidates,
    choose_path,
    options_of,
    path_of,
    pick,
)
from latentlens.training.step_setup import cpp_compiler

CPU, CUDA = torch.device("cpu"), torch.device("cuda")


def test_paths_and_options_round_trip() -> None:
    for path in fast_path.PATHS:
        assert path_of(**options_of(path)) == path
    with pytest.raises(ValueError, match="path='jit' is unknown"):
        options_of("jit")
    # graphs without compiling resume uncompiled
    assert path_of(compile=False, fused=False, cuda_graphs=True) == "graphs"
    with pytest.raises(ValueError, match="drop one of them"):
        path_of(compile=False, fused=True, cuda_graphs=True)


def test_candidates_follow_the_device_the_compiler_and_the_task() -> None:
    assert candidates(CPU, True, compiler=False) == ["eager"]
    assert candidates(CPU, True, compiler=True) == ["eager", "compile", "fused", "fused-compile"]
    assert candidates(CUDA, True, compiler=False) == ["eager", "compile", "compile-graphs"]
    assert candidates(CUDA, False, compiler=True) == ["eager", "compile"]


def test_the_pick_weighs_speed_start_up_and_the_devices_margin() -> None:
    # on the CPU compile 1.2x as fast stays eager: its numbers depend on the thread count,
    # so it cannot follow the load; the fused paths can, and 1.2x is enough for them
    rates = {"eager": 70.0, "compile": 84.0, "fused": 80.0, "fused-compile": 84.0}
    starts = {"eager": 0.0, "compile": 3.0, "fused": 0.0, "fused-compile": 3.0}
    assert pick(Calibration(rates, starts), 50_000, CPU).path == "fused-compile"
    plain = ("eager", "compile")
    found = Calibration({p: rates[p] for p in plain}, {p: starts[p] for p in plain})
    assert pick(found, 50_000, CPU).path == "eager"
    # within 5% of eager, eager
    found = Calibration({"eager": 70.0, "fused": 72.0}, {"eager": 0.0, "fused": 0.0})
    assert pick(found, 50_000, CPU).path == "eager"
    # 2x as fast pays where the run is long enough to repay its start-up
    found = Calibration({"eager": 40.0, "fused": 80.0}, {"eager": 0.0, "fused": 100.0})
    assert pick(found, 50_000, CPU).path == "fused"  # 725 s against 1,250 s
    assert pick(found, 6_000, CPU).path == "eager"  # 175 s against 150 s
    # on CUDA 5% is enough
    found = Calibration({"eager": 120.0, "compile-graphs": 2000.0}, {"eager": 0.0,
                        "compile-graphs": 40.0})  # fmt: skip
    choice = pick(found, 50_000, CUDA)
    assert choice.path == "compile-graphs" and "compile-graphs 2000" in choice.reason


class FakeClock:
    """perf_counter advanced only by the fake steps: rates exact, independent of load."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_calibration_times_each_path_and_leaves_out_those_that_do_not_apply(monkeypatch) -> None:
    clock = FakeClock()
    monkeypatch.setattr(fast_path.time, "perf_counter", clock)
    costs = {"eager": 0.02, "compile": 0.01}

    def make_step(path: str):
        if path == "fused":
            raise ValueError("--fused has no kernel for this model")
        clock.now += 5.0 if path == "compile" else 0.0  # building costs its start

        def step() -> None:
            clock.now += costs[path]

        return step

    found = calibrate(["eager", "compile", "fused"], make_step, lambda: None)
    assert set(found.rates) == {"eager", "compile"}
    assert found.rates["eager"] == pytest.approx(50.0) and found.rates["compile"] == pytest.approx(
        100.0
    )
    assert found.start_seconds["compile"] == pytest.approx(5.0)
    assert found.start_seconds["eager"] == pytest.approx(0.0, abs=1e-9)


def test_a_burst_of_other_work_does_not_rank_the_path_it_falls_on_last(monkeypatch) -> None:
    """Other work makes every step 3x as slow for the calibration's first 0.9 s. Timed one
    path after another, eager (first) measured 2.1x slower than it is and compile, 1.25x
    as fast, was chosen (2.7x; the CPU's margin for compile is 1.5x). Timed in turns, each
    path's fastest round is its own speed, and eager is kept."""
    clock = FakeClock()
    monkeypatch.setattr(fast_path.time, "perf_counter", clock)
    costs = {"eager": 0.015, "compile": 0.012}
    busy_until = 0.0

    def make_step(path: str):
        def step() -> None:
            clock.now += costs[path] * (3.0 if clock.now < busy_until else 1.0)

        return step

    busy_until = fast_path.ROUND_STEPS * costs["eager"] * 3.0 * 2  # eager's first rounds' time
    found = calibrate(["eager", "compile"], make_step, lambda: None)
    assert found.rates["eager"] == pytest.approx(1 / 0.015)
    assert found.rates["compile"] == pytest.approx(1 / 0.012)
    assert pick(found, 50_000, CPU).path == "eager"


def _config(steps: int) -> dict:
    return {"model_kind": "transformer", "model": {"d_model": 8}, "task": {"name": "x"},
            "train": {"steps": steps, "batch_size": 4, "precision": "fp32"}}  # fmt: skip


def test_short_runs_are_eager_without_calibrating_and_long_ones_are_cached(
    tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setenv("LATENTLENS_CACHE", str(tmp_path))
    monkeypatch.setattr(fast_path, "busy_elsewhere", lambda cpus: 0)
    built: list[str] = []

    def make_step(path: str):
        built.append(path)
        return lambda: None

    choice = choose_path(_config(CALIBRATE_FROM - 1), CPU, ["eager", "compile"], make_step)
    assert choice.path == "eager" and "would not repay" in choice.reason and built == []
    choose_path(_config(CALIBRATE_FROM), CPU, ["eager", "compile"], make_step)
    assert built == ["eager", "compile"]
    assert len(json.loads((tmp_path / "fast_paths.json").read_text())) == 1
    # the same shapes on the same machine: read from the cache, nothing timed again
    choose_path(_config(2 * CALIBRATE_FROM), CPU, ["eager", "compile"], make_step)
    assert built == ["eager", "compile"]
    # a damaged cache is only a cache: measured again
    (tmp_path / "fast_paths.json").write_text("{not json")
    choose_path(_config(CALIBRATE_FROM), CPU, ["eager", "compile"], make_step)
    assert built == ["eager", "compile"] * 2
    # other kernels or models (a faster kernel after an upgrade): measured again
    monkeypatch.setattr(fast_path, "code_digest", lambda: "another version")
    choose_path(_config(CALIBRATE_FROM), CPU, ["eager", "compile"], make_step)
    assert built == ["eager", "compile"] * 3


def test_mid_length_runs_time_the_paths_that_compile_nothing(tmp_path: Path, monkeypatch) -> None:
    """From CALIBRATE_UNCOMPILED_FROM steps a run times eager and the fused kernels (built
    once per machine) but no compiled path; a long run of the same shapes then times every
    path, and a mid-length run after it reads those rates."""
    monkeypatch.setenv("LATENTLENS_CACHE", str(tmp_path))
    monkeypatch.setattr(fast_path, "busy_elsewhere", lambda cpus: 0)
    clock = FakeClock()
    monkeypatch.setattr(fast_path.time, "perf_counter", clock)
    costs = {"eager": 0.04, "fused": 0.03, "compile": 0.035, "fused-compile": 0.01}
    built: list[str] = []

    def make_step(path: str):
        built.append(path)

        def step() -> None:
            clock.now += costs[path]

        return step

    paths = ["eager", "compile", "fused", "fused-compile"]
    short = choose_path(_config(CALIBRATE_UNCOMPILED_FROM - 1), CPU, paths, make_step)
    assert short.path == "eager" and "would not repay timing the paths" in short.reason
    assert built == []
    middle = choose_path(_config(CALIBRATE_UNCOMPILED_FROM), CPU, paths, make_step)
    assert built == ["eager", "fused"] and middle.path == "fused"  # 1.33x, over 1.05x
    assert set(middle.calibration.rates) == {"eager", "fused"}
    long = choose_path(_config(CALIBRATE_FROM), CPU, paths, make_step)
    assert built == ["eager", "fused", *paths] and long.path == "fused-compile"
    again = choose_path(_config(CALIBRATE_FROM - 1), CPU, paths, make_step)
    assert len(built) == 6 and again.path == "fused"  # the long run's rates, no compiling
    # without a C compiler (no fused path) only eager is left: nothing timed
    built.clear()
    assert choose_path(_config(CALIBRATE_FROM - 1), CPU, ["eager", "compile"],
                       make_step).path == "eager" and built == []  # fmt: skip


def test_the_code_digest_follows_the_kernels_and_the_models(tmp_path: Path) -> None:
    sources = (("kernels", "mlp.c"), ("kernels", "gelu.h"), ("models", "attention.py"),
               ("training", "traced_step.py"))  # fmt: skip
    for folder, name in sources:
        (tmp_path / folder).mkdir(exist_ok=True)
        (tmp_path / folder / name).write_text(f"// {name}\n")
    (tmp_path / "kernels" / "notes.txt").write_text("not code")

    def digest() -> str:
        fast_path.code_digest.cache_clear()
        return fast_path.code_digest(tmp_path)

    first = digest()
    (tmp_path / "kernels" / "notes.txt").write_text("other notes")
    assert digest() == first
    for folder, name in sources:
        before = digest()
        (tmp_path / folder / name).write_text(f"// {name}, faster\n")
        assert digest() != before, name
    fast_path.code_digest.cache_clear()
    assert fast_path.code_digest() != first  # the package's own sources


FLAGS = ["train", "--task", "fuzzy-logic", "--attention", "linear", "--d-model", "16",
         "--eval-every", "3", "--device", "cpu", "--quiet"]  # fmt: skip


def test_the_command_records_its_path_and_a_resume_keeps_it(tmp_path: Path, capsys) -> None:
    run = tmp_path / "r"
    assert main([*FLAGS, "--steps", "3", "--run-dir", str(run)]) == 0
    assert json.loads((run / "config.json").read_text())["train"]["path"] == "eager"
    assert main(["train", "--resume", str(run), "--compile", "--quiet"]) == 0
    assert "computes its step the way it was started (eager" in capsys.readouterr().err
    assert (
        main([*FLAGS, "--steps", "3", "--eager", "--fused", "--run-dir", str(tmp_path / "x")]) == 2
    )
    assert "--eager computes the step eagerly" in capsys.readouterr().err


@pytest.mark.skipif(cpp_compiler() is None, reason="the fused path needs a C compiler")
def test_a_long_run_takes_the_cached_measurement(tmp_path: Path, monkeypatch, capsys) -> None:
    """A cached calibration where fused is 3x as fast: the run takes it, says why, and
    records it with the thread counts its step agrees on (a fused step follows the load
    as eager does) where the CPUs are more than one."""
    monkeypatch.setenv("LATENTLENS_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv(fast_path.ENVIRONMENT)
    monkeypatch.delenv(THREADS_ENVIRONMENT)  # the run settles its own threads
    monkeypatch.setattr(fast_path, "busy_elsewhere", lambda cpus: 0)
    written: list[dict] = []
    monkeypatch.setattr(fast_path, "calibrate", lambda paths, make, sync: written.append(
        {}) or Calibration({p: (3.0 if p == "fused" else 1.0) for p in paths},
                           {p: 0.0 for p in paths}))  # fmt: skip
    run = tmp_path / "r"
    args = [
        *FLAGS,
        "--steps",
        str(CALIBRATE_FROM),
        "--time-budget",
        "1",
        "--run-dir",
        str(run),
        "--d-model",
        "32",
    ]  # 128 x 16 x 32: a step worth more than one thread
    code = main(args)
    assert code in (0, 3)
    train = json.loads((run / "config.json").read_text())["train"]
    assert train["path"] == "fused"
    if available_cpus() > 1:
        assert train["threads"] is None and train["thread_counts"][:2] == [1, 2]
    else:
        assert train["threads"] == 1 and not train["thread_counts"]
    assert "path: fused (steps/s eager 1, compile 1, fused 3" in capsys.readouterr().err
    assert len(written) == 1


def test_the_environment_names_a_path_or_is_refused(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv(fast_path.ENVIRONMENT, "compile")
    assert fast_path.requested_path() == "compile"
    monkeypatch.setenv(fast_path.ENVIRONMENT, "jit")
    assert main([*FLAGS, "--steps", "3", "--run-dir", str(tmp_path / "r")]) == 2
    assert "LATENTLENS_PATH='jit' is invalid: choose one of" in capsys.readouterr().err


def test_a_busy_cpu_is_not_timed_and_nothing_is_cached(tmp_path: Path, monkeypatch) -> None:
    """Timed beside a neighbour, a fused step once ranked 1.6x eager and ran slower than it
    on an idle machine: the paths are timed only where no other work is running."""
    monkeypatch.setenv("LATENTLENS_CACHE", str(tmp_path))
    monkeypatch.setattr(fast_path, "busy_elsewhere", lambda cpus: 1)
    built: list[str] = []
    choice = choose_path(_config(CALIBRATE_FROM), CPU, ["eager", "compile"],
                         lambda path: built.append(path) or (lambda: None))  # fmt: skip
    assert choice.path == "eager" and "other work keeps a CPU busy" in choice.reason
    assert built == [] and not (tmp_path / "fast_paths.json").exists()


def test_a_one_thread_run_is_timed_beside_work_on_the_other_cpu(tmp_path, monkeypatch) -> None:
    """A sweep's runs, one thread each, start together on a 2-core machine: each finds the
    other CPU busy, and timed nothing (eager) though its own CPU was free."""
    monkeypatch.setenv("LATENTLENS_CACHE", str(tmp_path))
    monkeypatch.setattr(fast_path, "available_cpus", lambda: 2)
    monkeypatch.setattr(fast_path, "busy_elsewhere", lambda cpus: 1)
    config = _config(CALIBRATE_FROM)
    config["train"]["threads"] = 1
    built: list[str] = []
    choose_path(
        config, CPU, ["eager", "compile"], lambda path: built.append(path) or (lambda: None)
    )
    assert built == ["eager", "compile"]
    monkeypatch.setattr(fast_path, "busy_elsewhere", lambda cpus: 2)  # both taken: not timed
    config["train"]["batch_size"] = 8  # another shape, not cached
    built.clear()
    choice = choose_path(
        config, CPU, ["eager", "compile"], lambda p: built.append(p) or (lambda: None)
    )
    assert choice.path == "eager" and built == []


def test_a_run_that_cannot_start_is_named_not_hidden(monkeypatch) -> None:
    def make_step(path: str):
        raise ValueError("the model does not fit the task")

    with pytest.raises(ValueError, match="does not fit"):
        calibrate(["eager", "compile"], make_step, lambda: None)


def test_a_slowdown_that_begins_mid_round_does_not_rank_the_paths_after_it_last(
    monkeypatch,
) -> None:
    """The machine slows every step 1.5x from just after the first round's ``fused`` turn
    to the end (a host's phase, another run compiling beside this one). Each path's
    fastest round would give ``fused-compile`` 0.018 s a step, behind ``fused``'s clean
    0.015, and choose ``fused``; against eager in the same rounds, every path is timed at
    its own speed and ``fused-compile`` is chosen."""
    clock = FakeClock()
    monkeypatch.setattr(fast_path.time, "perf_counter", clock)
    costs = {"eager": 0.02, "fused": 0.015, "fused-compile": 0.012}
    warm_up = fast_path.WARM_UP_STEPS * sum(costs.values())
    slow_from = warm_up + fast_path.ROUND_STEPS * (costs["eager"] + costs["fused"])

    def make_step(path: str):
        def step() -> None:
            clock.now += costs[path] * (1.5 if clock.now >= slow_from - 1e-12 else 1.0)

        return step

    found = calibrate(list(costs), make_step, lambda: None)
    for path, cost in costs.items():
        assert found.rates[path] == pytest.approx(1 / cost), path
    assert pick(found, 50_000, CPU).path == "fused-compile"


def _python_config(steps: int) -> dict:
    from latentlens.training import TrainConfig, Trainer, model_for_task

    model = model_for_task("fuzzy-logic", attention="linear", d_model=16)
    return Trainer.resolve_config("fuzzy-logic", model, TrainConfig.for_task(
        "fuzzy-logic", steps=steps, eval_every=steps, eval_examples=64))  # fmt: skip


@pytest.mark.skipif(cpp_compiler() is None, reason="the fused path needs a C compiler")
def test_trainer_create_takes_the_commands_path_when_asked(tmp_path: Path, monkeypatch, capsys):
    """``path="auto"`` in Python chooses as ``latentlens train`` does: a long run is timed
    (here a cached calibration where fused is 3x eager), the choice said on stderr with
    how to name one instead, and recorded; a run the environment names a path for takes
    it quietly, through ``train_or_resume`` too; a path the config records stays; eager,
    the Python default, without ``path``."""
    from latentlens.training import Trainer, train_or_resume

    monkeypatch.setenv("LATENTLENS_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv(fast_path.ENVIRONMENT)
    monkeypatch.setattr(fast_path, "busy_elsewhere", lambda cpus: 0)
    monkeypatch.setattr(fast_path, "calibrate", lambda paths, make, sync: Calibration(
        {p: (3.0 if p == "fused" else 1.0) for p in paths}, {p: 0.0 for p in paths}))  # fmt: skip
    long = _python_config(CALIBRATE_FROM)
    trainer = Trainer.create(tmp_path / "auto", long, device="cpu", path="auto")
    assert trainer.fused and not trainer.compiled and trainer.train_cfg.path == "fused"
    assert json.loads((tmp_path / "auto" / "config.json").read_text())["train"]["path"] == "fused"
    said = capsys.readouterr().err
    assert "path: fused (steps/s eager 1, compile 1, fused 3" in said
    assert 'path="eager" or another names one' in said
    assert Trainer.create(tmp_path / "plain", long, device="cpu").train_cfg.path == "eager"
    monkeypatch.setenv(fast_path.ENVIRONMENT, "fused")
    short = _python_config(2)
    train_or_resume(tmp_path / "named", short, device="cpu", quiet=True, path="auto")
    assert json.loads((tmp_path / "named" / "config.json").read_text())["train"]["path"] == "fused"
    assert capsys.readouterr().err == ""
    recorded = {**short, "train": {**short["train"], "path": "eager"}}
    kept = Trainer.create(tmp_path / "kept", recorded, device="cpu", path="auto")
    assert kept.train_cfg.path == "eager"  # the environment names fused: the config wins


def test_trainer_create_refuses_a_path_it_cannot_take(tmp_path: Path) -> None:
    from latentlens.training import Trainer

    config = _python_config(2)
    with pytest.raises(ValueError, match="path='jit' is unknown; choose one of"):
        Trainer.create(tmp_path / "a", config, device="cpu", path="jit")
    with pytest.raises(ValueError, match="path='eager' and compile=True both choose"):
        Trainer.create(tmp_path / "b", config, device="cpu", path="eager", compile=True)
    recorded = {**config, "train": {**config["train"], "path": "fused"}}
    with pytest.raises(ValueError, match="train.path is 'fused' but path='eager'"):
        Trainer.create(tmp_path / "c", recorded, device="cpu", path="eager")
    assert not any((tmp_path / name).exists() for name in "abc")  # refused before writing
