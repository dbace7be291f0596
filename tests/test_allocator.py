"""glibc's malloc set to keep freed memory (latentlens.allocator): set by a CPU training run
unless the process chose its own settings, and a run computes the same numbers either way
(its speed is benchmarks/speed/allocator.py's to measure)."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

GLIBC = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"
CONFIG = {
    "model": {"d_model": 32, "n_heads": 4, "qk_dim": 8, "v_dim": 8, "d_mlp": 64},
    "train": {"steps": 30, "eval_every": 15, "batch_size": 64, "eval_examples": 64,
              "warmup_steps": 2, "threads": 1},
}  # fmt: skip
# trains CONFIG into the folder argv[1] and prints what keep_freed_memory() said there
TRAIN = """
import json, sys
from latentlens import allocator
from latentlens.sweep import SweepSpec
from latentlens.training import Trainer
base = json.loads(sys.argv[2])
cell = SweepSpec.from_dict({"task": "fuzzy-logic", "base": base,
                            "axes": {"model.attention": ["hyla"]}}).cells()[0]
Trainer.create(sys.argv[1], cell.config, quiet=True).train()
print(json.dumps(allocator._kept))
"""


def train_in_process(run: Path, env: dict[str, str]) -> bool:
    done = subprocess.run([sys.executable, "-c", TRAIN, str(run), json.dumps(CONFIG)],
                          capture_output=True, text=True, env=env, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not GLIBC, reason="mallopt's settings are glibc's")
def test_a_cpu_run_keeps_freed_memory_and_computes_the_same_numbers(tmp_path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    assert train_in_process(tmp_path / "kept", env) is True
    # a process with its own malloc setting keeps it (this one: glibc's default top pad)
    own = {**env, "MALLOC_TOP_PAD_": "131072"}
    assert train_in_process(tmp_path / "own", own) is False
    kept, default = ((tmp_path / name / "metrics.jsonl").read_text() for name in ("kept", "own"))
    assert kept == default and len(kept.splitlines()) == 9  # 3 evaluations x 3 splits


def test_another_c_library_is_left_alone(monkeypatch) -> None:
    from latentlens import allocator

    monkeypatch.setattr(allocator, "_kept", False)
    monkeypatch.setattr(allocator.platform, "libc_ver", lambda: ("", ""))
    assert allocator.keep_freed_memory() is False
