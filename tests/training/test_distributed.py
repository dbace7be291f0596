"""Data parallelism: 2 gloo processes under torchrun follow the 1-process run's curve."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import weakref
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist
from safetensors.torch import load_file

from latentlens.tasks import make_task
from latentlens.training import Trainer
from latentlens.training.distributed import DistributedContext, shutdown_distributed

FLAGS = ["train", "--task", "fuzzy-logic", "--attention", "hyla", "--d-model", "32",
         "--n-heads", "4", "--qk-dim", "8", "--v-dim", "8", "--d-mlp", "64",
         "--attention-dropout", "0", "--batch-size", "32", "--steps", "30",
         "--eval-every", "10", "--eval-examples", "64", "--tracking-examples", "256",
         "--warmup-steps", "5",
         "--lr", "3e-3", "--device", "cpu", "--quiet"]  # fmt: skip


def launch(run_dir: Path, processes: int) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    if processes == 1:
        command = [sys.executable, "-m", "latentlens"]
    else:
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                   f"--nproc_per_node={processes}", "-m", "latentlens"]  # fmt: skip
    result = subprocess.run(
        [*command, *FLAGS, "--run-dir", str(run_dir)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not built in")
def test_two_gloo_processes_match_one_process(tmp_path: Path) -> None:
    single, double = tmp_path / "single", tmp_path / "double"
    launch(single, 1)
    out = launch(double, 2)
    assert out.stdout.count("run directory:") == 1, "only rank 0 may print the summary"

    expected, got = metrics(single), metrics(double)
    # Only rank 0 writes: the same records, once each (a second writer would duplicate).
    assert [(r["step"], r["split"]) for r in got] == [(r["step"], r["split"]) for r in expected]
    assert len(got) == 12  # the initialisation (step 0) and 3 evaluations, 3 splits each
    for a, b in zip(expected, got, strict=True):
        for key in ("loss", "r2"):
            # The 2-process gradient is the mean of two half-batch means: equal to the
            # global mean up to float32 rounding; measured differences after 30 Adam steps are
            # below 3e-7 relative (loss) and 2e-6 absolute (R²).
            assert b[key] == pytest.approx(a[key], rel=1e-5, abs=2e-5), (a, b)
    assert expected[-1]["loss"] < expected[0]["loss"] * 0.9  # the curve being compared moves

    files = lambda d: sorted(str(p.relative_to(d)) for p in d.rglob("*"))  # noqa: E731
    assert files(single) == files(double)
    w1 = load_file(str(single / "checkpoints" / "step_00000030.safetensors"))
    w2 = load_file(str(double / "checkpoints" / "step_00000030.safetensors"))
    assert "rng.torch@1" in w2 and "rng.torch@1" not in w1  # each rank's dropout stream
    for name, value in w1.items():
        if name.startswith("model."):
            torch.testing.assert_close(w2[name], value, rtol=1e-4, atol=1e-5)


def test_rows_split_every_batch_tensor_in_rank_order() -> None:
    task = make_task("sraven", None, seed=0)
    batch = task.sample(6, "train")
    parts = [DistributedContext(rank, 3).rows(batch) for rank in range(3)]
    assert torch.equal(torch.cat([p.inputs for p in parts]), batch.inputs)
    assert torch.equal(torch.cat([p.targets for p in parts]), batch.targets)
    for name, label in batch.labels.items():
        if label.ndim and label.shape[0] == 6:
            assert torch.equal(torch.cat([p.labels[name] for p in parts]), label), name
    with pytest.raises(ValueError, match="multiple of 4"):
        DistributedContext(0, 4).rows(batch)


@pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not built in")
def test_the_ddp_reducer_is_freed_before_the_process_group(tmp_path: Path) -> None:
    """The run's DDP wrapper (and its reducer, which holds the gloo group) goes before the
    group is destroyed, so the group's destructor runs from Python's reference, with the
    GIL released, not from the reducer's while a worker thread waits for the GIL."""
    dist.init_process_group(
        "gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1
    )
    try:
        model = torch.nn.Linear(4, 2)
        run = SimpleNamespace(objective=torch.nn.parallel.DistributedDataParallel(model))
        run.objective(torch.ones(3, 4)).sum().backward()  # the reducer has worked
        wrapper = weakref.ref(run.objective)
        Trainer.leave_data_parallel(run)
        assert run.objective is model
        gc.collect()
        assert wrapper() is None, "something still holds the DDP wrapper and its reducer"
    finally:
        shutdown_distributed(finished=True)
    assert not dist.is_initialized()
