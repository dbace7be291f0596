"""Starting, resuming and loading a run directory: a new run refuses a directory that holds
one, a resume continues from the newest good checkpoint (or from step 0 where the run died
before its first), and nothing already written is lost on a refusal."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from latentlens.training.trainer import Trainer

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from latentlens.training.checkpoint import (
    CheckpointError,
    list_checkpoints,
    load_checkpoint,
    newest_good_checkpoint,
    select_checkpoint,
)
from latentlens.training.config import RESUME_CHANGEABLE, TrainConfig
from latentlens.training.init_from import initial_weights, load_initial_weights
from latentlens.training.run_dir import RunDirectory
from latentlens.training.run_lock import RunLock


class RunStart:
    """The constructors of :class:`~latentlens.training.trainer.Trainer` on a run directory:
    :meth:`create`, :meth:`resume` and :meth:`load`."""

    @classmethod
    def create(
        cls,
        run_dir: str | Path,
        config: dict[str, Any],
        init_from: str | Path | None = None,
        record_path: bool = True,
        path: str | None = None,
        **kwargs: Any,
    ) -> Trainer:
        """Start a new run in ``run_dir``; refuses a directory that already holds a run.
        ``init_from``: a run whose newest weights the model starts from (fine-tuning; it
        may add a layer connection), recorded in ``config.json`` as ``init_from``.
        ``record_path``: record the step's path (``compile``, ``fused``, ``cuda_graphs``)
        and the fused path's weight-gradient engine in the config, kept on resume (not
        for a seed group's members, whose group computes the step). ``path``: the step's
        path by name (``"eager"``, ``"fused-compile"``, ...;
        ``latentlens.training.fast_path.PATHS``) or ``"auto"``, the fastest here as
        ``latentlens train`` chooses it (timed for runs of 1,000 steps or more, cached per
        machine and model shape; ``$LATENTLENS_PATH`` names one); None: the ``compile``,
        ``fused`` and ``cuda_graphs`` flags, eager by default."""
        if path is not None:
            # the trainer's module imports this one: its functions are reached at call time
            from latentlens.training.trainer import config_with_path  # noqa: PLC0415

            flags = [flag for flag in ("compile", "fused", "cuda_graphs") if kwargs.get(flag)]
            if flags:
                raise ValueError(
                    f"path={path!r} and {flags[0]}=True both choose the step's path; give one"
                )
            device, quiet = kwargs.get("device", "auto"), kwargs.get("quiet", False)
            config = config_with_path(config, path, device, quiet)
        directory = RunDirectory(run_dir)
        with writing(directory, remove_if_new=True) as lock:
            # a config, or another run's files whose config.json was lost
            taken = directory.config_path.exists() or bool(leftover_files(directory))
            if init_from is not None:
                weights, record = initial_weights(init_from, config)
                config = {**config, "init_from": record}
            trainer = cls(directory, config, **kwargs)
            trainer.lock = lock
            if trainer.train_cfg.threads is None and not trainer.train_cfg.thread_counts:
                trainer.settle_threads()
            if record_path:
                trainer.record_path()
            config = trainer.config
            if init_from is not None:
                load_initial_weights(trainer.model, weights)
            if any(trainer.dist.gather(taken)):
                raise ValueError(taken_message(directory))
        if trainer.dist.is_main:
            directory.write_config(config)
            directory.checkpoints.mkdir(parents=True, exist_ok=True)
            directory.tracking.mkdir(parents=True, exist_ok=True)
        trainer.dist.barrier()
        return trainer

    @classmethod
    def resume(
        cls,
        run_dir: str | Path,
        train_changes: dict[str, Any] | None = None,
        rewind_to: int | None = None,
        **kwargs: Any,
    ) -> Trainer:
        """Continue the run in ``run_dir`` from its newest checkpoint, with its stored
        config; a run killed before its first checkpoint starts again from step 0.
        ``train_changes``: new values of optimiser settings (:data:`RESUME_CHANGEABLE`,
        e.g. a lower ``lr`` after a divergence), recorded in the config's ``history``.
        ``rewind_to``: continue from the checkpoint of that step instead, deleting the newer
        ones (a seed group killed between its seeds' checkpoint writes rewinds the seeds
        that got ahead: the group recomputes their newer steps exactly); 0 starts the run
        again from its initial weights (the group was killed between its first writes)."""
        directory = RunDirectory(run_dir)
        with writing(directory) as lock:
            stored = directory.read_config()
            found = list_checkpoints(directory.checkpoints)
            if rewind_to is not None:
                target = dict(found).get(rewind_to)
                if target is None and rewind_to != 0:
                    raise CheckpointError(
                        f"{directory.checkpoints} has no checkpoint of step {rewind_to} to "
                        "rewind to; resume this run on its own"
                    )
                if target is not None:
                    load_checkpoint(target)  # verified before anything newer is deleted
                for step, path in found:
                    if step > rewind_to and lock is not None:
                        path.unlink()
                found = [(step, path) for step, path in found if step <= rewind_to]
            if train_changes:
                stored = amended_config(stored, train_changes, found[-1][0] if found else 0)
                if lock is not None:
                    directory.write_config(stored)
            trainer = cls(directory, stored, **kwargs)
            trainer.lock = lock
            checkpoint = newest_good_checkpoint(directory.checkpoints) if found else None
            if checkpoint is None:
                refuse_lost_checkpoints(directory, trainer.train_cfg)
                # killed before its first checkpoint: what it logged before dying goes too
                if "init_from" in stored:
                    base = stored["init_from"]
                    weights, _ = initial_weights(base["run"], stored, base["step"])
                    load_initial_weights(trainer.model, weights)
                if trainer.dist.is_main:
                    directory.metrics_path.unlink(missing_ok=True)
                    tracked = directory.tracking.glob("*") if directory.tracking.is_dir() else []
                    for stale in tracked:
                        stale.unlink()
                    directory.checkpoints.mkdir(parents=True, exist_ok=True)
                    directory.tracking.mkdir(parents=True, exist_ok=True)
                return trainer
            trainer.restore(checkpoint)
        if trainer.dist.is_main:
            directory.truncate_metrics(checkpoint.step)
        for callback in trainer.callbacks:
            callback.on_resume(trainer, checkpoint.step)
        return trainer

    @classmethod
    def load(
        cls, run_dir: str | Path, checkpoint: int | None = None, device: str = "auto"
    ) -> Trainer:
        """A trained run for analysis: its model, task and config at the checkpoint of
        step ``checkpoint`` (default: the newest); nothing on disk changes. The trainer
        cannot train (``trains=False``: no optimiser, no compiled step); continue a run
        with :meth:`resume`."""
        directory = RunDirectory(run_dir)
        config = directory.read_config()
        _, path = select_checkpoint(directory.checkpoints, checkpoint)
        trainer = cls(directory, config, device=device, quiet=True, trains=False)
        # weights alone: the optimiser and RNG states serve training, and a data generator's
        # state is the device's own (a CUDA run's is read on a CPU too)
        trainer.restore_weights(load_checkpoint(path))
        trainer.model.eval()
        return trainer


def refuse_lost_checkpoints(directory: RunDirectory, train: TrainConfig) -> None:
    """Before a resume without a checkpoint starts the run again (and deletes what it
    logged): a one-line error, nothing deleted, where checkpoints must have existed or
    where ``checkpoints/`` or ``tracking/`` is not a plain folder of the run.

    Each evaluation's records are appended before its checkpoint is written (the
    callbacks run in between: a translation run's decoding takes seconds), so a run killed
    in its first checkpointed evaluation has records of that step and no checkpoint: it
    starts again (those records are rewritten as they were). Records of a later step
    prove that checkpoints were written and lost."""
    for folder in (directory.checkpoints, directory.tracking):
        if folder.is_symlink():
            raise ValueError(
                f"{folder} is a symbolic link; latentlens writes only inside the run directory: "
                "replace it by the folder it points to"
            )
        if folder.exists() and not folder.is_dir():
            raise ValueError(f"{folder} is a file, not a folder; move it away and resume again")
    first_checkpoint = min(train.eval_every, train.steps)
    logged = [r["step"] for r in directory.read_metrics() if r.get("step", 0) > 0]
    if any(step != first_checkpoint for step in logged):
        raise ValueError(
            f"{directory.checkpoints} holds no checkpoint, but {directory.metrics_path.name} "
            f"records evaluations up to step {max(logged):,}: its checkpoints were lost "
            "(deleted, or a folder not mounted). Nothing was changed; restore them, or start a "
            "new run in another --run-dir"
        )


def amended_config(config: dict[str, Any], changes: dict[str, Any], step: int) -> dict[str, Any]:
    """``config`` with the optimiser settings ``changes`` from ``step`` on, the change
    appended to its ``history``; other training settings are refused."""
    changed = {k: v for k, v in changes.items() if config["train"].get(k) != v}
    if fixed := sorted(set(changed) - set(RESUME_CHANGEABLE)):
        raise ValueError(
            f"a resumed run keeps its {', '.join(fixed)}; only {', '.join(RESUME_CHANGEABLE)} "
            "may change (start a new run for the others)"
        )
    if not changed:
        return config
    train = TrainConfig.from_dict({**config["train"], **changed}).to_dict()
    entry = {"step": step, "train": {k: [config["train"].get(k), v] for k, v in changed.items()}}
    return {**config, "train": train, "history": [*config.get("history", []), entry]}


@contextlib.contextmanager
def writing(directory: RunDirectory, remove_if_new: bool = False) -> Iterator[RunLock | None]:
    """The run directory's writer lock (held by rank 0, ``None`` on the other ranks) while
    a trainer is built on it: released if building fails, which then (``remove_if_new``)
    also removes a directory that did not exist before; kept by the trainer otherwise."""
    existed = directory.path.exists()
    lock = None if int(os.environ.get("RANK", "0")) != 0 else RunLock(directory.path).acquire()
    try:
        yield lock
    except BaseException:
        if lock is not None:
            lock.release()
            if remove_if_new and not existed:  # a refused start leaves nothing behind
                shutil.rmtree(directory.path, ignore_errors=True)
        raise


def leftover_files(directory: RunDirectory) -> list[str]:
    """The files of a run in ``directory`` besides its config: a new run there would mix
    its records and checkpoints with them."""
    found = [directory.metrics_path.name] if directory.metrics_path.exists() else []
    if list_checkpoints(directory.checkpoints):
        found.append(f"{directory.checkpoints.name}/")
    return found


def taken_message(directory: RunDirectory) -> str:
    """Why a new run cannot start in ``directory``, and the one thing to do instead."""
    if not directory.config_path.exists():
        return (
            f"{directory.path} holds another run's files ({', '.join(leftover_files(directory))}) "
            "but no config.json: restore its config.json to continue that run, or choose "
            "another --run-dir for a new one"
        )
    if not list_checkpoints(directory.checkpoints):
        return (
            f"{directory.path} holds a run killed before its first checkpoint; "
            f"`latentlens train --resume {directory.path}` starts it again from step 0 "
            "(or delete the directory)"
        )
    return (
        f"{directory.path} already holds a run (config.json); continue it with "
        f"--resume {directory.path} or choose another --run-dir"
    )
