"""``--compile`` on the CPU: inductor's C++ kernels train a run as its eager step does, up
to float32 summation order (the tolerance of the CUDA tests: compile may fuse and reorder
float sums). Attention dropout is off: inductor draws its own random numbers, so with
dropout on the two paths train on different masks (measured: losses 40% apart by step 10),
a difference of draws and not of arithmetic."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from latentlens.training import Trainer, step_setup
from tests.training.test_trainer import tiny_config

TOLERANCE = dict(rtol=1e-3, atol=1e-4)


def without_dropout(config: dict) -> dict:
    return {**config, "model": {**config["model"], "attention_dropout": 0.0}}


def losses(step, count: int) -> torch.Tensor:
    return torch.stack([step().detach() for _ in range(count)])


def test_a_compiled_cpu_run_trains_as_the_eager_run(tmp_path: Path) -> None:
    config = without_dropout(tiny_config(steps=20, attention="hyla"))
    eager = Trainer.create(tmp_path / "eager", config, device="cpu", quiet=True)
    compiled = Trainer.create(tmp_path / "compiled", config, device="cpu", compile=True, quiet=True)
    assert compiled.compiled and not eager.compiled
    torch.testing.assert_close(losses(compiled.train_step, 12), losses(eager.train_step, 12),
                               **TOLERANCE)  # fmt: skip
    weights = compiled.model.state_dict()
    for name, weight in eager.model.state_dict().items():
        torch.testing.assert_close(weights[name], weight, **TOLERANCE, msg=name)
    # the metrics a run records: the evaluation reads the (eager) model the step trained
    assert compiled.evaluate("test", examples=64)["r2"] == pytest.approx(
        eager.evaluate("test", examples=64)["r2"], rel=1e-3, abs=1e-4
    )


def test_compile_without_a_cpp_compiler_is_a_one_line_error(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setattr(step_setup.shutil, "which", lambda name: None)
    with pytest.raises(ValueError, match="no C\\+\\+ compiler was found .* or drop --compile"):
        Trainer.create(tmp_path / "run", tiny_config(), device="cpu", compile=True, quiet=True)
    assert not (tmp_path / "run").exists()
