"""Choosing how a fused run sums its weights' gradients: timed once per machine, cached,
recorded in the run's config and kept on resume."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from latentlens.kernels import linear as linear_kernels
from latentlens.training import weight_gradient_choice as choice
from latentlens.training.step_setup import cpp_compiler


def timings(per_core: float) -> dict[str, float]:
    return {"onednn": 1.0, "per-core": per_core}


@pytest.fixture
def has_both(monkeypatch) -> None:
    monkeypatch.setattr(choice, "has_per_core", lambda: True)
    monkeypatch.setattr(choice, "has_onednn", lambda: True)


def test_per_core_unless_its_sum_is_slower_by_the_margin_or_the_run_is_wide(
    monkeypatch, has_both
) -> None:
    """The Zen 4's 1.06x takes per-core; a sum twice as slow (AVX2 beside full-width
    AVX-512) keeps oneDNN; a run on more threads than the parts keeps oneDNN untimed."""
    monkeypatch.setattr(choice, "machine_timings", lambda: timings(1.06))
    engine, why = choice.choose_weight_gradients(2)
    assert engine == "per-core" and "1.06x oneDNN's time (at most 1.15)" in why
    monkeypatch.setattr(choice, "machine_timings", lambda: timings(2.0))
    assert choice.choose_weight_gradients(2)[0] == "onednn"
    monkeypatch.setattr(choice, "machine_timings", lambda: pytest.fail("timed a wide run"))
    engine, why = choice.choose_weight_gradients(choice.PARTS + 1)
    assert engine == "onednn" and f"uses {choice.PARTS}" in why


def test_a_build_without_one_engine_takes_the_other(monkeypatch) -> None:
    monkeypatch.setattr(choice, "machine_timings", lambda: pytest.fail("timed"))
    monkeypatch.setattr(choice, "has_per_core", lambda: False)
    assert choice.choose_weight_gradients(2)[0] == "onednn"
    monkeypatch.setattr(choice, "has_per_core", lambda: True)
    monkeypatch.setattr(choice, "has_onednn", lambda: False)
    assert choice.choose_weight_gradients(2)[0] == "per-core"


def test_the_timing_is_cached_per_machine_and_a_broken_cache_is_timed_again(
    tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setenv("LATENTLENS_CACHE", str(tmp_path))
    timed: list[int] = []
    monkeypatch.setattr(choice, "time_engines", lambda: timed.append(1) or timings(1.25))
    assert choice.machine_timings() == timings(1.25)
    assert choice.machine_timings() == timings(1.25) and len(timed) == 1
    cached = json.loads(choice.timings_path().read_text())
    assert list(cached.values()) == [timings(1.25)]
    choice.timings_path().write_text("{not json")
    assert choice.machine_timings() == timings(1.25) and len(timed) == 2
    assert list(json.loads(choice.timings_path().read_text()).values()) == [timings(1.25)]


@pytest.mark.skipif(
    not (linear_kernels.has_per_core() and linear_kernels.has_onednn()),
    reason="needs both engines",
)
def test_both_engines_are_timed_on_one_thread_and_the_count_restored() -> None:
    before = torch.get_num_threads()
    found = choice.time_engines()
    assert set(found) == {"onednn", "per-core"} and all(s > 0 for s in found.values())
    assert torch.get_num_threads() == before


def _config(**train) -> dict:
    from latentlens.training import TrainConfig, Trainer, model_for_task

    model = model_for_task("fuzzy-logic", attention="linear", d_model=16)
    config = Trainer.resolve_config("fuzzy-logic", model, TrainConfig.for_task(
        "fuzzy-logic", steps=2, eval_every=2, eval_examples=64))  # fmt: skip
    return {**config, "train": {**config["train"], **train}}


@pytest.mark.skipif(
    cpp_compiler() is None or not linear_kernels.has_per_core(),
    reason="the fused path needs a C compiler, the per-core engine PyTorch's sgemm_",
)
def test_a_fused_run_records_its_engine_and_a_resume_sums_the_same_way(
    tmp_path: Path, monkeypatch
) -> None:
    """A new fused run takes the machine's choice and records it; a resume, and a run whose
    config records an engine, keep theirs without choosing; each step sets its own run's
    engine (another trainer may have set the process's since); an eager run records none."""
    from latentlens.training import Trainer
    from latentlens.training import trainer as trainer_module

    chosen: list[int] = []
    monkeypatch.setattr(trainer_module, "choose_weight_gradients",
                        lambda threads: chosen.append(threads) or ("per-core", "test"))  # fmt: skip
    try:
        run = Trainer.create(tmp_path / "r", _config(), device="cpu", fused=True, quiet=True)
        assert run.weight_gradients == "per-core" and len(chosen) == 1
        stored = json.loads((tmp_path / "r" / "config.json").read_text())["train"]
        assert stored["path"] == "fused" and stored["weight_gradients"] == "per-core"
        run.train()
        assert Trainer.resume(tmp_path / "r", quiet=True).weight_gradients == "per-core"
        kept = Trainer.create(tmp_path / "k", _config(path="fused", weight_gradients="onednn"),
                              device="cpu", quiet=True)  # fmt: skip
        assert kept.weight_gradients == "onednn" and len(chosen) == 1
        # a config naming its path but no engine (as `latentlens train` and the demo start
        # runs) records the engine chosen
        Trainer.create(tmp_path / "p", _config(path="fused"), device="cpu", quiet=True)
        named = json.loads((tmp_path / "p" / "config.json").read_text())["train"]
        assert named["path"] == "fused" and named["weight_gradients"] == "per-core"
        assert len(chosen) == 2
        linear_kernels.use_weight_gradients("per-core")
        kept.train_step()
        assert linear_kernels.weight_gradients() == "onednn"
        eager = Trainer.create(tmp_path / "e", _config(), device="cpu", quiet=True)
        assert json.loads((tmp_path / "e" / "config.json").read_text())["train"][
            "weight_gradients"] is None  # fmt: skip
        assert eager.weight_gradients is None
    finally:
        linear_kernels.use_weight_gradients("onednn")


def test_a_stored_engine_is_the_same_run_as_a_config_yet_to_choose_one() -> None:
    """A command given the stored run's config without its engine (a config file that
    predates it, or names only the path) continues the run; another engine does not."""
    from latentlens.training import TrainConfig

    stored = TrainConfig(path="fused", weight_gradients="per-core")
    assert stored.same_run(TrainConfig(path="fused"))
    assert stored.same_run(TrainConfig())
    assert not stored.same_run(TrainConfig(path="fused", weight_gradients="onednn"))
    assert not stored.same_run(TrainConfig(path="eager"))


def test_an_unknown_engine_in_a_config_is_refused_in_one_line() -> None:
    from latentlens.training import TrainConfig

    with pytest.raises(ValueError, match="weight_gradients='blas'"):
        TrainConfig.from_dict({"weight_gradients": "blas"})
