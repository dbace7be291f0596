"""Run directories a user tampered with (issue #42): nothing written outside the run,
nothing deleted that a resume still needs, no setting silently ignored."""

from __future__ import annotations

import json
import math
import shutil
import warnings
from pathlib import Path

import pytest
from safetensors import safe_open
from safetensors.torch import save

from latentlens.training import (
    RunDirectory,
    Trainer,
    TrainingDiverged,
    list_checkpoints,
    load_checkpoint,
)
from latentlens.training.run_lock import RunLock, RunLocked
from tests.training.test_trainer import tiny_config


def trained(run: Path, steps: int = 40) -> Path:
    Trainer.create(run, tiny_config(steps), quiet=True).train()
    return run


def snapshot(run: Path) -> dict[str, bytes]:
    """Every file of the run but the lock's holder record (each writer rewrites it)."""
    return {str(p.relative_to(run)): p.read_bytes() for p in run.rglob("*")
            if p.is_file() and p.name != ".lock"}  # fmt: skip


def computed(run: Path) -> dict[str, object]:
    """What a run computed: every file's bytes, but of each checkpoint its metadata less the
    training seconds (a wall time; the metadata's sha256 stands for the tensors)."""
    found: dict[str, object] = {}
    for path in sorted(run.rglob("*")):
        if path.suffix == ".safetensors":
            with safe_open(str(path), framework="pt") as handle:
                metadata = dict(handle.metadata())
            metadata.pop("train_seconds")
            found[str(path.relative_to(run))] = metadata
        elif path.is_file() and path.name != ".lock":
            found[str(path.relative_to(run))] = path.read_bytes()
    return found


def test_deleting_the_lock_file_does_not_let_a_second_writer_in(tmp_path) -> None:
    run = tmp_path / "run"
    first = RunLock(run).acquire()
    (run / ".lock").unlink()  # the lock is on the directory, not on this file
    with pytest.raises(RunLocked, match="is being written by"):
        RunLock(run).acquire()
    first.release()
    RunLock(run).acquire().release()


def test_links_placed_in_a_run_are_refused_not_followed(tmp_path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    run = tmp_path / "run"
    run.mkdir()
    (run / ".lock").symlink_to(victim)
    with pytest.raises(ValueError, match=r"\.lock is a symbolic link"):
        RunLock(run).acquire()
    assert victim.read_text() == "precious"
    other = trained(tmp_path / "other")
    (other / "metrics.jsonl").rename(tmp_path / "moved.jsonl")
    (other / "metrics.jsonl").symlink_to(tmp_path / "moved.jsonl")
    before = (tmp_path / "moved.jsonl").read_bytes()
    with pytest.raises(ValueError, match=r"metrics\.jsonl is a symbolic link"):
        RunDirectory(other).append_metrics([{"step": 99, "split": "train"}])
    assert (tmp_path / "moved.jsonl").read_bytes() == before
    # the run directory itself a link (round three, #71): refused, the folder untouched
    linked = tmp_path / "linked"
    linked.symlink_to(other)
    before = snapshot(other)
    with pytest.raises(ValueError, match=rf"--run-dir {linked} is a symbolic link .* the "
                       "folder itself"):  # fmt: skip
        Trainer.resume(linked, quiet=True)
    assert snapshot(other) == before


@pytest.mark.parametrize("damage", ["emptied", "removed", "a link to nowhere", "a file"])
def test_lost_checkpoints_are_refused_and_nothing_is_deleted(tmp_path, damage) -> None:
    run = trained(tmp_path / "run")
    checkpoints = run / "checkpoints"
    shutil.rmtree(checkpoints)
    if damage == "emptied":
        checkpoints.mkdir()
    elif damage == "a link to nowhere":  # an unmounted folder
        checkpoints.symlink_to(tmp_path / "unmounted")
    elif damage == "a file":
        checkpoints.write_text("")
    before = snapshot(run)
    expected = "is a file" if damage == "a file" else "its checkpoints were lost"
    if damage == "a link to nowhere":
        expected = "is a symbolic link"
    with pytest.raises(ValueError, match=expected):
        Trainer.resume(run, quiet=True)
    assert snapshot(run) == before


def test_a_run_killed_in_its_first_checkpointed_evaluation_starts_again(tmp_path) -> None:
    """Records are appended before the checkpoint is written (the callbacks run between):
    a kill there leaves the first evaluation's records without a checkpoint. The resume
    starts again and ends as the uninterrupted run, not refused as lost checkpoints (a
    translation run stopped in its decoding was refused so)."""
    whole = trained(tmp_path / "whole")
    run = trained(tmp_path / "run")
    shutil.rmtree(run / "checkpoints")
    (run / "checkpoints").mkdir()
    first = [line for line in (run / "metrics.jsonl").read_text().splitlines()
             if json.loads(line)["step"] <= 20]  # fmt: skip
    (run / "metrics.jsonl").write_text("\n".join(first) + "\n")
    Trainer.resume(run, quiet=True).train()
    assert computed(run) == computed(whole)


def test_a_tracking_link_is_not_emptied(tmp_path) -> None:
    run = tmp_path / "run"
    Trainer.create(run, tiny_config(), quiet=True)  # no checkpoint yet: a resume restarts
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / "keep.txt").write_text("kept")
    (run / "tracking").rmdir()
    (run / "tracking").symlink_to(target)
    with pytest.raises(ValueError, match="tracking is a symbolic link"):
        Trainer.resume(run, quiet=True)
    assert (target / "keep.txt").read_text() == "kept"


def test_a_new_run_beside_another_runs_files_is_refused(tmp_path) -> None:
    run = trained(tmp_path / "run")
    (run / "config.json").unlink()  # "restore it, or start a new run"
    before = snapshot(run)
    with pytest.raises(ValueError, match="holds another run's files .* but no config.json"):
        Trainer.create(run, tiny_config(), quiet=True)
    assert snapshot(run) == before


def test_a_resume_applies_a_new_weight_decay_and_ignores_damaged_settings(tmp_path) -> None:
    run = trained(tmp_path / "run", steps=20)
    step, path = list_checkpoints(run / "checkpoints")[-1]
    with safe_open(str(path), framework="pt") as handle:
        metadata, tensors = handle.metadata(), {k: handle.get_tensor(k) for k in handle.keys()}  # noqa: SIM118
    groups = json.loads(metadata["param_groups"])
    for group in groups:  # one flipped byte: 0.999 -> 0.499, and the weight decay doubled
        group["betas"], group["weight_decay"] = [0.9, 0.499], 2 * group["weight_decay"]
    path.write_bytes(save(tensors, metadata={**metadata, "param_groups": json.dumps(groups)}))
    config = json.loads((run / "config.json").read_text())["train"]
    flipped = r"records weight_decay=.*, betas=\[0.9, 0.499\], which .* config.json is followed"
    with pytest.warns(UserWarning, match=flipped):  # round three: it was silent
        trainer = Trainer.resume(run, quiet=True)
    decays = {g["weight_decay"] for g in trainer.optimizer.param_groups}
    assert decays == {0.0, config["weight_decay"]}  # the config's, not the metadata's
    assert all(g["betas"] == (0.9, 0.999) for g in trainer.optimizer.param_groups)
    trainer.close()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer = Trainer.resume(run, {"weight_decay": 0.5}, quiet=True)
    # a weight decay the resume itself changes is no flip; the betas still are
    flipped = [str(w.message) for w in caught if "config.json is followed" in str(w.message)]
    assert len(flipped) == 1 and "betas" in flipped[0] and "weight_decay" not in flipped[0]
    assert {g["weight_decay"] for g in trainer.optimizer.param_groups} == {0.0, 0.5}
    trainer.close()


def test_a_checkpoint_without_its_checksum_is_named(tmp_path) -> None:
    run = trained(tmp_path / "run", steps=20)
    _, path = list_checkpoints(run / "checkpoints")[-1]
    with safe_open(str(path), framework="pt") as handle:
        metadata, tensors = handle.metadata(), {k: handle.get_tensor(k) for k in handle.keys()}  # noqa: SIM118
    metadata["sha25x"] = metadata.pop("sha256")  # a damaged key
    path.write_bytes(save(tensors, metadata=metadata))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        load_checkpoint(path)
    assert any("carries no checksum" in str(w.message) for w in caught)


def test_a_diverged_evaluation_is_stored_as_json_and_read_back_as_nan(tmp_path) -> None:
    run = RunDirectory(tmp_path / "run")
    run.append_metrics([{"step": 5, "split": "test", "loss": math.nan, "r2": -math.inf}])
    line = run.metrics_path.read_text()

    def refuse(constant: str) -> None:
        raise AssertionError(f"{constant} is not JSON")

    assert json.loads(line, parse_constant=refuse) == {
        "loss": None,
        "r2": None,
        "split": "test",
        "step": 5,
    }
    (record,) = run.read_metrics()
    assert math.isnan(record["loss"]) and math.isnan(record["r2"]) and record["step"] == 5


@pytest.mark.parametrize("bad", [{"split": "test", "loss": 1.0}, {"step": "60", "split": "test"}])
def test_a_metrics_row_without_a_whole_step_is_named(tmp_path, bad) -> None:
    run = trained(tmp_path / "run", steps=20)
    with open(run / "metrics.jsonl", "a") as handle:
        handle.write(json.dumps(bad) + "\n")
    before = snapshot(run)
    with pytest.raises(ValueError, match=r"metrics\.jsonl record \d+ has no whole 'step'"):
        Trainer.resume(run, quiet=True)
    assert snapshot(run) == before
    with pytest.raises(ValueError, match="restore the file or delete that line"):
        RunDirectory(run).read_metrics()


def test_a_nan_evaluation_of_finite_weights_leaves_the_last_good_checkpoint(
    tmp_path, monkeypatch
) -> None:
    # #42 item 6: a divergence whose weights stay finite but whose evaluation is NaN was
    # checkpointed as the "last good" one, so every advised resume failed at once
    run = tmp_path / "run"
    trainer = Trainer.create(run, tiny_config(steps=40), quiet=True)
    evaluate = trainer.evaluate

    def overflowing(split, *args, **kwargs):
        metrics = evaluate(split, *args, **kwargs)
        return {**metrics, "loss": math.nan} if trainer.step == 40 else metrics

    monkeypatch.setattr(trainer, "evaluate", overflowing)
    with pytest.raises(TrainingDiverged, match=r"the train loss at step 40 became NaN") as err:
        trainer.train()
    message = str(err.value)
    assert "the last good checkpoint is step 20" in message and "--lr 0.0001" in message
    assert [step for step, _ in list_checkpoints(run / "checkpoints")][-1] == 20  # none at 40
    trainer.close()
    # the advised resume continues from step 20 and its metrics stay JSON
    resumed = Trainer.resume(run, {"lr": 1e-4}, quiet=True)
    assert resumed.step == 20
    resumed.train()
    assert [step for step, _ in list_checkpoints(run / "checkpoints")][-1] == 40
    last = RunDirectory(run).last_evaluation()
    assert all(math.isfinite(record["loss"]) for record in last.values())


def test_a_full_disk_is_named_by_the_file_it_stopped(tmp_path, monkeypatch) -> None:
    # #42's message list: ENOSPC came without the path ("No space left on device")
    import errno as errnos
    import os

    from latentlens.training.checkpoint import atomic_write_bytes

    def full(*args):  # what a write or flush of a full disk raises: no file named
        raise OSError(errnos.ENOSPC, "No space left on device")

    class FullFile:
        def __init__(self, fd, mode):
            os.close(fd)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        write = flush = staticmethod(full)

    monkeypatch.setattr(os, "fsync", full)
    target = tmp_path / "file.bin"
    with pytest.raises(OSError) as err:
        atomic_write_bytes(target, b"x" * 100)
    assert err.value.errno == errnos.ENOSPC and err.value.filename == str(target)
    assert list(tmp_path.iterdir()) == []  # the temporary file is gone, nothing half-written
    monkeypatch.setattr(os, "fdopen", FullFile)
    run = RunDirectory(tmp_path / "run")
    with pytest.raises(OSError) as err:
        run.append_metrics([{"step": 0, "split": "test", "loss": 1.0}])
    assert err.value.errno == errnos.ENOSPC and err.value.filename == str(run.metrics_path)


def test_temporary_files_of_a_killed_writer_are_removed_by_the_next(tmp_path) -> None:
    """A writer killed inside atomic_write_bytes leaves ".NAME.tmp-PID" behind (#42); the
    next writer to take the run's lock removes them, and nothing else."""
    run = trained(tmp_path / "run")
    left = [run / ".metrics.jsonl.tmp-4242", run / "checkpoints/.step_00000060.safetensors.tmp-7",
            run / "tracking/.x.safetensors.tmp-99"]  # fmt: skip
    for path in left:
        path.write_bytes(b"half a file")
    kept = [run / "notes.tmp-1", run / "checkpoints/.hidden", run / ".tmp-5"]
    for path in kept:
        path.write_bytes(b"a user's")
    (run / ".linked.tmp-3").symlink_to(tmp_path / "elsewhere")
    RunLock(run).acquire().release()
    assert not any(path.exists() for path in left)
    assert all(path.read_bytes() == b"a user's" for path in kept)
    assert (run / ".linked.tmp-3").is_symlink()
