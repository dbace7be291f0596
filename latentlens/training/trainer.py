"""The training loop: seeded data on the device, AdamW, evaluation, checkpoints, exact resume.

A :class:`Trainer` owns one run directory. ``Trainer.create`` starts a run (refusing a
directory that already holds one); ``Trainer.resume`` continues the run from its newest
checkpoint with the model, optimiser, torch RNG and data-generator states restored, so that a
killed and resumed run ends, on the CPU, with the same metrics and weights bit for bit as an
uninterrupted one.
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import time
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from latentlens import __version__
from latentlens.allocator import keep_freed_memory
from latentlens.devices import resolve_device
from latentlens.kernels.adamw import FusedAdamWStep
from latentlens.models import (
    MODEL_KINDS,
    HookedModel,
    build_model,
    model_config,
    model_preset,
    resolve_model_kind,
    use_fused_kernels,
)
from latentlens.progress import progress_bar
from latentlens.tasks import TASKS, Batch, Task, make_task
from latentlens.threads import (
    SMALL_WORK,
    compute_with_threads,
    requested_threads,
    run_threads,
    work_of,
)
from latentlens.training.callbacks import (
    ActivationRecorder,
    Callback,
    TrackedArrays,
    matching_hooks,
)
from latentlens.training.checkpoint import (
    CheckpointError,
    list_checkpoints,
    load_checkpoint,
    newest_good_checkpoint,
    save_checkpoint,
    select_checkpoint,
)
from latentlens.training.config import (
    RESUME_CHANGEABLE,
    TrainConfig,
    check_eval_examples,
    same_training,
)
from latentlens.training.distributed import init_distributed
from latentlens.training.fast_path import (
    Choice,
    candidates,
    choose_path,
    options_of,
    path_of,
)
from latentlens.training.graphs import GraphedStep
from latentlens.training.init_from import initial_weights, load_initial_weights
from latentlens.training.memory import check_fits
from latentlens.training.objective import TrainingObjective, inductor_options, predict
from latentlens.training.run_dir import RunDirectory
from latentlens.training.run_lock import RunLock
from latentlens.training.thread_choice import (
    agreeing_thread_counts,
    candidate_counts,
    start_threads,
)

LOG_EVERY = 25
NO_BAD_STEP = 2**62


class TrainingDiverged(RuntimeError):
    """The loss became NaN or infinite."""


def model_for_task(
    task: str,
    task_config: dict[str, Any] | None = None,
    model: str = "transformer",
    **overrides: Any,
) -> Any:
    """The reference's model of kind ``model`` for ``task``, sized to the task's config
    (``n_ctx``, ``d_input``, ``d_output`` from :meth:`Task.model_io`), with ``overrides``."""
    io = make_task(task, task_config).model_io()
    return model_preset(model, task, **{**io, **overrides})


def weight_decay_groups(model: torch.nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """AdamW groups: decay for parameters of 2 or more dims, none for 1-D ones (biases of
    the output layers, norms), as in the official code's mask."""
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


def check_cuda_options(
    device: torch.device,
    task: Task | type[Task],
    compile: bool,
    cuda_graphs: bool,
    distributed: bool,
) -> None:
    """Refuse ``--compile`` and ``--cuda-graphs`` where they cannot work (``task``: the
    task or its class). On the CPU, inductor builds C++ kernels: it needs a compiler."""
    if compile and device.type == "cpu" and not cpp_compiler():
        raise ValueError(
            "--compile on the CPU builds C++ kernels and no C++ compiler was found (g++, "
            "c++ or clang++, or $CXX); install one (e.g. apt install g++) or drop --compile"
        )
    if cuda_graphs and (device.type != "cuda" or distributed):
        raise ValueError(
            "--cuda-graphs captures the whole step on one CUDA device: it needs a CUDA "
            "device and a single process (not torchrun); drop it here"
        )
    if cuda_graphs and not task.graph_capturable:
        raise ValueError(
            f"the {task.name} task's batches cannot be captured in a CUDA graph "
            "(its sampler synchronises with the host); drop --cuda-graphs (--compile works)"
        )


def cpp_compiler() -> str | None:
    """The C++ compiler inductor's CPU backend would use, if one is on the PATH."""
    names = [os.environ["CXX"]] if os.environ.get("CXX") else ["g++", "c++", "clang++"]
    return next((found for name in names if (found := shutil.which(name))), None)


def use_fused_kernels_on_cpu(model: torch.nn.Module, device: torch.device) -> None:
    """``--fused``: the model's attention cores on the fused CPU kernel (float32, to
    rounding the same step); refused where it cannot apply."""
    if device.type != "cpu":
        raise ValueError(
            f"--fused computes attention with CPU kernels; the run is on {device.type}: drop "
            "--fused (on CUDA, --compile or --cuda-graphs speed up the step)"
        )
    if not use_fused_kernels(model):
        raise ValueError(
            "--fused has no kernel for this model (it covers transformer MLPs and softmax, "
            "linear or HYLA attention with linear, relu or identity values); drop --fused"
        )


def warn_if_bf16_is_emulated() -> None:
    """bf16 on a CPU without bfloat16 arithmetic (AVX-512 BF16 or AMX) is emulated: a step
    ran 10x slower than float32 on a 2-core AVX2 machine (docs/benchmarks.md)."""
    if not (torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()):
        warnings.warn(
            "--precision bf16: this CPU has no bfloat16 arithmetic (AVX-512 BF16 or AMX), so "
            "it is emulated and about 10x slower than fp32; use --precision fp32 here",
            stacklevel=3,
        )


def precision_scope(
    precision: str, device: torch.device, graphed: bool
) -> contextlib.AbstractContextManager:
    """The arithmetic of ``precision`` for the code run inside it.

    ``bf16``: bf16 autocast (its cast cache would hold tensors across a CUDA-graph capture:
    it is off for a ``graphed`` step). ``tf32``: on CUDA, float32 matmuls multiply on TF32
    tensor cores (inputs rounded to a 10-bit mantissa, float32 accumulation), as JAX does by
    default on Ampere and Hopper GPUs; the process's setting is restored on exit. On the
    CPU ``tf32`` is strict float32. ``fp32``: strict float32, nothing changes.
    """
    if precision == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16, cache_enabled=not graphed)
    if precision == "tf32" and device.type == "cuda":
        return float32_matmul_precision("high")
    return contextlib.nullcontext()


@contextlib.contextmanager
def float32_matmul_precision(precision: str) -> Iterator[None]:
    """:func:`torch.set_float32_matmul_precision` inside the block only."""
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(precision)
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(previous)


class Trainer:
    """Train a model (any kind of :data:`latentlens.models.MODEL_KINDS`) on a task, writing
    a run directory.

    Under ``torchrun`` the trainer joins the process group and trains data-parallel
    (DistributedDataParallel): every rank draws the same global batch and trains on its
    rows, rank 0 alone evaluates, runs the callbacks and writes the run directory.

    The step is built to be captured in a CUDA graph (``cuda_graphs=True``, the CLI's
    ``--cuda-graphs``): the batch is made on the device, shapes are static, the learning
    rate is a device tensor updated in place, AdamW is fused, and nothing reads a value
    back to the host inside the step.
    """

    def __init__(
        self,
        run_dir: RunDirectory,
        config: dict[str, Any],
        device: str = "auto",
        quiet: bool = False,
        compile: bool = False,
        cuda_graphs: bool = False,
        callbacks: Sequence[Callback] = (),
        time_budget: float | None = None,
        fused: bool = False,
    ) -> None:
        self.run_dir = run_dir
        self.config = config
        self.dist, self.device = init_distributed(resolve_device(device))
        self.quiet = quiet or not self.dist.is_main
        self.model_kind = resolve_model_kind(config.get("model_kind", "transformer"))
        self.model_cfg = model_config(self.model_kind, config["model"])
        self.train_cfg = TrainConfig.from_dict(config["train"])
        if self.train_cfg.path is not None:  # a recorded path: the run computes that way
            compile, fused, cuda_graphs = options_of(self.train_cfg.path).values()
        if self.train_cfg.thread_counts:  # numbers alike on each: follow the load
            compute_with_threads(start_threads(self.train_cfg.thread_counts))
        else:
            compute_with_threads(self.train_cfg.threads)
        if self.device.type == "cpu":
            keep_freed_memory()  # a step's buffers reused, not faulted in again
        self.task_name = config["task"]["name"]
        if self.train_cfg.batch_size % self.dist.world_size:
            raise ValueError(
                f"train.batch_size={self.train_cfg.batch_size} cannot be split over "
                f"{self.dist.world_size} processes; use a multiple of {self.dist.world_size}"
            )
        seed = self.train_cfg.seed
        check_fits(self.model_kind, self.model_cfg, self.train_cfg.batch_size, self.device)
        torch.manual_seed(seed)
        self.model: HookedModel = build_model(self.model_kind, self.model_cfg).to(self.device)
        if self.dist.rank > 0:
            torch.manual_seed(seed + self.dist.rank)  # own dropout masks per rank
        self.task: Task = make_task(self.task_name, config["task"]["config"], seed, self.device)
        callbacks = [*callbacks, *self.track_recorders(callbacks)]
        self.callbacks = callbacks if self.dist.is_main else []
        self.data_generator = self.task.make_generator(seed)
        self.lr = torch.tensor(self.train_cfg.lr, device=self.device)
        self.optimizer = torch.optim.AdamW(
            weight_decay_groups(self.model, self.train_cfg.weight_decay),
            lr=self.lr,
            betas=(0.9, 0.999),
            eps=1e-8,
            fused=True,
            capturable=cuda_graphs,
        )
        check_cuda_options(
            self.device,
            self.task,
            compile,
            cuda_graphs,
            self.dist.enabled,
        )
        if self.train_cfg.precision == "bf16" and self.device.type == "cpu":
            warn_if_bf16_is_emulated()
        # AdamW's step: one kernel call for every tensor under --fused
        self.optimizer_step = self.optimizer.step
        if fused:
            use_fused_kernels_on_cpu(self.model, self.device)
            self.optimizer_step = FusedAdamWStep(self.optimizer)
        # Hooks added after compilation are ignored: compile only the hook-free train path
        # (the objective wraps the model; the model itself stays eager for analyses).
        objective: torch.nn.Module = TrainingObjective(self.model, self.task)
        if compile:
            objective.compile(dynamic=False, options=inductor_options())
        if self.dist.enabled:
            objective = torch.nn.parallel.DistributedDataParallel(objective)
        self.objective = objective
        self.compiled = compile
        self.fused = fused
        self.graphed = (
            GraphedStep(
                self.compute_step,
                lambda: self.optimizer.zero_grad(set_to_none=True),
                generators=[self.data_generator],
            )
            if cuda_graphs
            else None
        )
        self.step = 0
        self.lock: RunLock | None = None
        self.time_budget = time_budget
        self.stopped_at: int | None = None  # the step a time budget stopped training at
        # the wall time of training behind this state (None: unknown, resumed from a
        # checkpoint that did not record it), this process's share of it (a seed group's
        # runs share its time) and when this process began training
        self.seconds_before: float | None = 0.0
        self.seconds_share = 1.0
        self.training_since: float | None = None

    def track_recorders(self, callbacks: Sequence[Callback]) -> list[ActivationRecorder]:
        """The recorder of the hooks ``train.track`` names, on a fixed batch of the task's
        first split; none when it names none. Refuses a hook that another callback
        already records (both would write ``tracking/{hook}.safetensors``)."""
        names = matching_hooks(self.model.hook_dict, self.train_cfg.track)
        if not names:
            return []
        taken = {n for c in callbacks if isinstance(c, TrackedArrays) for n in c.names}
        if clash := [name for name in names if name in taken]:
            raise ValueError(
                f"train.track: this run already records {clash} (a task's own tracking); "
                "drop them from --track"
            )
        return [ActivationRecorder(names, split=self.task.eval_splits[0])]

    # ----------------------------------------------------------------- construction
    @staticmethod
    def resolve_config(
        task: str,
        model: Any,
        train: TrainConfig,
        task_config: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The fully resolved run config written to ``config.json``; ``model`` is the
        config of any model kind (e.g. from :func:`model_for_task`)."""
        if task not in TASKS:
            raise ValueError(f"task={task!r} is unknown; choose one of {sorted(TASKS)}")
        task_obj = make_task(task, task_config)
        mismatched = {
            key: (getattr(model, key), value)
            for key, value in task_obj.model_io().items()
            if getattr(model, key) != value
        }
        if mismatched:
            detail = ", ".join(
                f"model.{k}={m} but the task needs {t}" for k, (m, t) in mismatched.items()
            )
            raise ValueError(
                f"the model does not fit the task {task!r}: {detail}; build the model with "
                "model_for_task() or drop these overrides"
            )
        kind = next(
            (name for name, (cls, _) in MODEL_KINDS.items() if isinstance(model, cls)), None
        )
        if kind is None:
            raise ValueError(
                f"model must be the config of a model kind {sorted(MODEL_KINDS)}, got "
                f"{type(model).__name__}"
            )
        model_dict = model.to_dict()
        work = work_of({"model": model_dict, "train": train.to_dict()})
        small = work is not None and work < SMALL_WORK
        if train.threads is None and (small or requested_threads() is not None):
            train = replace(train, threads=run_threads(work))  # else settled at the start
        return {
            "latentlens_version": __version__,
            "model_kind": kind,
            "model": model_dict,
            "task": {"name": task, "config": task_obj.config.to_dict()},
            "task_description": task_obj.describe(),
            "train": train.to_dict(),
        }

    @classmethod
    def create(
        cls,
        run_dir: str | Path,
        config: dict[str, Any],
        init_from: str | Path | None = None,
        record_path: bool = True,
        **kwargs: Any,
    ) -> Trainer:
        """Start a new run in ``run_dir``; refuses a directory that already holds a run.
        ``init_from``: a run whose newest weights the model starts from (fine-tuning; it
        may add a layer connection), recorded in ``config.json`` as ``init_from``.
        ``record_path``: record the step's path (``compile``, ``fused``, ``cuda_graphs``)
        in the config, kept on resume (not for a seed group's members, whose group
        computes the step)."""
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
            if record_path and trainer.train_cfg.path is None:
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

    def record_path(self) -> None:
        """Record the path this run's step takes in its config (``train.path``)."""
        path = path_of(self.compiled, self.fused, self.graphed is not None)
        self.train_cfg = replace(self.train_cfg, path=path)
        self.config = {**self.config, "train": self.train_cfg.to_dict()}

    def settle_threads(self) -> None:
        """A new run's thread counts (:mod:`latentlens.training.thread_choice`): the
        counts whose step computes the same gradients, where the eager CPU step has more
        than one (the run then follows the load); else one recorded count
        (:func:`latentlens.threads.run_threads`). Compiled, fused, CUDA and data-parallel
        steps record their count."""
        train = self.train_cfg
        counts = candidate_counts()
        agreeing: tuple[int, ...] = ()
        eager_cpu = self.device.type == "cpu" and not (self.compiled or self.fused)
        if eager_cpu and self.graphed is None and not self.dist.enabled and len(counts) > 1:
            generator = self.task.make_generator(train.seed)
            batch = self.task.draw(train.batch_size, "train", generator)
            agreeing = agreeing_thread_counts(
                self.model, TrainingObjective, self.task, batch, train.grad_clip, counts
            )
        if len(agreeing) > 1:
            train = replace(train, thread_counts=agreeing)
            compute_with_threads(start_threads(agreeing))
        else:
            train = replace(train, threads=run_threads(work_of(self.config)))
            compute_with_threads(train.threads)
        self.train_cfg = train
        self.config = {**self.config, "train": train.to_dict()}

    def close(self) -> None:
        """Release the run directory's writer lock (done when :meth:`train` returns)."""
        if self.lock is not None:
            self.lock.release()
            self.lock = None

    @classmethod
    def load(
        cls, run_dir: str | Path, checkpoint: int | None = None, device: str = "auto"
    ) -> Trainer:
        """A trained run for analysis: its model, task and config at the checkpoint of
        step ``checkpoint`` (default: the newest); nothing on disk changes."""
        directory = RunDirectory(run_dir)
        config = directory.read_config()
        _, path = select_checkpoint(directory.checkpoints, checkpoint)
        trainer = cls(directory, config, device=device, quiet=True)
        # weights alone: the optimiser and RNG states serve training, and a data generator's
        # state is the device's own (a CUDA run's is read on a CPU too)
        trainer.restore_weights(load_checkpoint(path))
        trainer.model.eval()
        return trainer

    def restore_weights(self, checkpoint: Any) -> None:
        """The checkpoint's model weights and step."""
        try:
            self.model.load_state_dict(checkpoint.model)
        except (RuntimeError, ValueError, KeyError) as err:
            raise CheckpointError(
                f"the checkpoint of step {checkpoint.step} does not fit this run's model ({err})"
            ) from None
        self.step = checkpoint.step

    def restore(self, checkpoint: Any) -> None:
        """The checkpoint's weights, optimiser and RNG states: training continues from it."""
        self.restore_weights(checkpoint)
        self.seconds_before = checkpoint.train_seconds
        # the optimiser's settings come from the config (a resume may change weight decay;
        # a damaged setting in the checkpoint's metadata must not), its state from the file;
        # they include lr, the tensor the schedule updates in place
        groups = self.optimizer.param_groups
        settings = [{k: v for k, v in g.items() if k != "params"} for g in groups]
        try:
            self.optimizer.load_state_dict(checkpoint.optimizer)
        except (RuntimeError, ValueError, KeyError) as err:
            raise CheckpointError(
                f"the checkpoint of step {checkpoint.step} does not fit this run's model ({err})"
            ) from None
        for group, setting in zip(self.optimizer.param_groups, settings, strict=True):
            group.update(setting)
        if flips := header_flips(settings, checkpoint.optimizer["param_groups"], self.config):
            warnings.warn(
                f"the checkpoint of step {checkpoint.step} records {', '.join(flips)}, which "
                "config.json does not; config.json is followed (a checkpoint's header sets no "
                "optimiser setting)",
                stacklevel=2,
            )
        suffix = f"@{self.dist.rank}" if self.dist.rank else ""
        try:
            self.data_generator.set_state(checkpoint.rng["data"].to(torch.uint8))
            if "torch" + suffix in checkpoint.rng:
                torch.set_rng_state(checkpoint.rng["torch" + suffix])
        except (KeyError, RuntimeError) as err:
            raise CheckpointError(
                f"the checkpoint of step {checkpoint.step} holds an RNG state that does not "
                f"fit ({err}); resume from an earlier checkpoint"
            ) from None
        if "torch" + suffix not in checkpoint.rng:
            warnings.warn(
                f"the checkpoint of step {checkpoint.step} has no RNG state for rank "
                f"{self.dist.rank} (it was written by fewer processes); this rank's dropout "
                "masks are reseeded, so the resumed run is not bit-exact",
                stacklevel=2,
            )
            torch.manual_seed(self.train_cfg.seed + self.dist.rank + checkpoint.step)
        if self.device.type == "cuda" and "cuda" + suffix in checkpoint.rng:
            torch.cuda.set_rng_state(checkpoint.rng["cuda" + suffix], self.device)
        self.step = checkpoint.step

    # ----------------------------------------------------------------- training
    def precision_scope(self) -> contextlib.AbstractContextManager:
        """The run's arithmetic (:func:`precision_scope`) for the code run inside it."""
        return precision_scope(self.train_cfg.precision, self.device, self.graphed is not None)

    def train_step(self) -> torch.Tensor:
        """One optimisation step; returns this rank's loss (on the device, no host sync)."""
        self.lr.fill_(self.train_cfg.learning_rate(self.step))
        if self.graphed is not None:
            loss = self.graphed()
        else:
            self.optimizer.zero_grad(set_to_none=True)
            loss = self.compute_step()
        self.step += 1
        return loss

    def compute_step(self) -> torch.Tensor:
        """Draw a batch, forward, backward, clip and update (gradients must be None or
        zero before); returns the loss. Capturable in a CUDA graph."""
        draws = self.task.draw(self.train_cfg.batch_size, "train", self.data_generator)
        with self.precision_scope():
            loss = self.objective(self.dist.rows(draws))
        loss.backward()
        if self.train_cfg.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.train_cfg.grad_clip)
        self.optimizer_step()
        return loss.detach()

    def train(self) -> list[dict[str, Any]]:
        """Run to ``train.steps``; returns the last evaluation's records. The run
        directory's lock is released when it returns or fails."""
        try:
            return self._train()
        finally:
            self.close()

    def train_seconds(self) -> float | None:
        """Wall seconds of training behind the current state, from step 0: those recorded
        in the checkpoint it resumed from plus this process's (its share in a seed group),
        evaluations and checkpoints included; None where the checkpoint recorded none."""
        if self.seconds_before is None or self.training_since is None:
            return self.seconds_before
        elapsed = time.monotonic() - self.training_since
        return self.seconds_before + self.seconds_share * elapsed

    def _train(self) -> list[dict[str, Any]]:
        cfg = self.train_cfg
        self.model.train()
        self.training_since = time.monotonic()
        last_records: list[dict[str, Any]] = []
        first_bad = torch.full((), NO_BAD_STEP, dtype=torch.long, device=self.device)
        running, count = torch.zeros((), device=self.device), 0
        if self.step == 0 and self.dist.is_main:
            for callback in self.callbacks:
                callback.on_start(self)
            self.evaluate_initialisation()
        bar = progress_bar(
            total=cfg.steps, initial=self.step, disable=self.quiet, desc="train", dynamic_ncols=True
        )
        clock = BudgetClock(self.time_budget, self.step)
        with bar:
            while self.step < cfg.steps:
                loss = self.train_step()
                bad = ~torch.isfinite(loss) & (first_bad == NO_BAD_STEP)
                first_bad = torch.where(bad, self.step, first_bad)
                running, count = running + loss, count + 1
                for callback in self.callbacks:
                    callback.on_step(self, self.step, loss)
                at_eval = self.step % cfg.eval_every == 0 or self.step == cfg.steps
                if self.step % LOG_EVERY == 0 or at_eval:
                    self.check_finite(first_bad)
                    bar.set_postfix(loss=f"{self.dist.mean(running).item() / count:.4g}")
                    running, count = torch.zeros_like(running), 0
                bar.update(1)
                if at_eval:
                    with clock.timing_checkpoint():
                        last_records = self.evaluate_and_checkpoint()
                    bar.set_postfix_str(_summary(last_records))
                checks = clock.budget is not None and (at_eval or self.step % LOG_EVERY == 0)
                if checks and self.step < cfg.steps and self.budget_spent(clock):
                    if not at_eval:
                        self.checkpoint(evaluate=False)
                    self.stopped_at = self.step
                    return last_records
        for callback in self.callbacks:
            callback.on_end(self)
        return last_records

    def budget_spent(self, clock: BudgetClock) -> bool:
        """Whether any rank's clock says the time budget is spent (a collective)."""
        left = torch.tensor(int(not clock.spent(self.step)), device=self.device)
        return int(self.dist.minimum(left)) == 0

    def check_finite(self, first_bad: torch.Tensor) -> None:
        bad_step = int(self.dist.minimum(first_bad))
        if bad_step == NO_BAD_STEP:
            return
        raise TrainingDiverged(self.diverged_message(f"the training loss at step {bad_step}"))

    def diverged_message(self, what: str) -> str:
        """What diverged, the last good checkpoint and the command that continues from it."""
        found = list_checkpoints(self.run_dir.checkpoints)
        where = (f"the last good checkpoint is step {found[-1][0]} ({found[-1][1]})" if found
                 else "there is no checkpoint yet (it restarts from step 0)")  # fmt: skip
        lower = f"{self.train_cfg.lr / 10:g}"
        return (
            f"{what} became NaN or infinite; the run stopped and {where}. Continue with a "
            f"lower learning rate: latentlens train --resume {self.run_dir.path} --lr {lower}"
        )

    def check_state_finite(self) -> None:
        """Refuse to checkpoint non-finite weights or optimiser state (a diverged run's
        last checkpoint stays the last good one)."""
        tensors = [*self.model.parameters()]
        tensors += [v for state in self.optimizer.state.values() for v in state.values()
                    if isinstance(v, torch.Tensor) and v.is_floating_point()]  # fmt: skip
        finite = torch.stack([torch.isfinite(t).all() for t in tensors]).all()
        if not bool(self.dist.minimum(finite.long())):
            raise TrainingDiverged(
                self.diverged_message(f"the weights or optimiser state at step {self.step}")
            )

    def evaluate_and_checkpoint(self) -> list[dict[str, Any]]:
        """Evaluate, log and checkpoint (rank 0; the other ranks only send RNG states)."""
        return self.checkpoint(evaluate=True)

    def checkpoint(self, evaluate: bool) -> list[dict[str, Any]]:
        """Write the checkpoint of this step, after an evaluation (logged, with the
        callbacks' ``on_eval``) or without one (a stop for the time budget, which leaves
        the logs as an uninterrupted run's)."""
        own = {"torch": torch.get_rng_state()}
        if self.device.type == "cuda":
            own["cuda"] = torch.cuda.get_rng_state(self.device)
        every_rank = self.dist.gather(own)
        self.check_state_finite()
        if not self.dist.is_main:
            return []
        records = []
        if evaluate:
            records = [
                {"step": self.step, "split": s, **self.evaluate(s)} for s in self.task.eval_splits
            ]
            self.run_dir.append_metrics(records)
            # finite weights can still compute a NaN loss (activations overflow): such a
            # checkpoint is no good one to continue from, so it is not written
            diverged = [r["split"] for r in records if not math.isfinite(r.get("loss", 0.0))]
            if diverged:
                raise TrainingDiverged(
                    self.diverged_message(f"the {diverged[0]} loss at step {self.step}")
                )
        rng = {"data": self.data_generator.get_state()}
        for rank, states in enumerate(every_rank):
            rng.update({key + (f"@{rank}" if rank else ""): v for key, v in states.items()})
        for callback in self.callbacks if evaluate else ():
            callback.on_eval(self, self.step, records)
        save_checkpoint(
            self.run_dir.checkpoints,
            self.step,
            self.model,
            self.optimizer,
            rng,
            self.train_cfg.keep_checkpoints,
            self.train_seconds(),
        )
        return records

    def evaluate_initialisation(self) -> None:
        """Evaluate and log the model as initialised (step 0, no checkpoint; the callbacks'
        ``on_eval`` too), so that every curve starts where training did. It draws from no
        generator training uses: the run's steps are the same with it as without."""
        records = [{"step": 0, "split": s, **self.evaluate(s)} for s in self.task.eval_splits]
        self.run_dir.append_metrics(records)
        for callback in self.callbacks:
            callback.on_eval(self, 0, records)

    def evaluation_batches(self, split: str, examples: int | None = None) -> Iterator[Batch]:
        """The batches of ``split``'s fixed evaluation set (``examples``, default the run's
        ``eval_examples``), in batches of the training batch size: what :meth:`evaluate`
        scores, so that a probe can measure on the very same examples."""
        cfg = self.train_cfg
        if examples is not None and examples < 1:
            raise ValueError(f"examples={examples}: evaluate at least 1 example per split")
        examples = examples or cfg.eval_examples
        check_eval_examples("examples", examples)
        self.task.check_split(split)
        generator = self.task.make_generator(cfg.seed + 1 + self.task.splits.index(split))
        for start in range(0, examples, cfg.batch_size):
            yield self.task.sample(min(cfg.batch_size, examples - start), split, generator)

    def evaluation_set(self, split: str, examples: int | None = None) -> Batch:
        """:meth:`evaluation_batches` as one batch."""
        return Batch.cat(list(self.evaluation_batches(split, examples)))

    @torch.no_grad()
    def evaluate(
        self, split: str, examples: int | None = None, errors: bool = False
    ) -> dict[str, float]:
        """Mean loss and task metrics over a fixed evaluation set of ``split``.

        The set is the same at every evaluation (its own generator, seeded from the run's
        seed and the split), and drawing it leaves the training stream untouched. With
        ``errors``, each value ``name`` comes with ``name_se``, its standard error over the
        set's batches (sample std of the per-batch values / sqrt(batches); ``nan`` for a
        set of one batch).
        """
        batches = list(self.evaluation_batches(split, examples))  # checks split and size
        was_training = self.model.training
        self.model.eval()
        loss_sum, sums, seen = 0.0, {}, 0
        per_batch: list[dict[str, float]] = []
        for batch in batches:
            size = len(batch)
            with self.precision_scope():
                predictions = predict(self.model, self.task, batch).float()
            loss = float(self.task.loss(predictions, batch))
            loss_sum += loss * size
            summed = self.task.metric_sums(predictions, batch)
            batch_sums = {name: float(value) for name, value in summed.items()}
            for name, value in batch_sums.items():
                sums[name] = sums.get(name, 0.0) + value
            if errors:
                per_batch.append({"loss": loss, **self.task.finish_metrics(batch_sums, size)})
            seen += size
        self.model.train(was_training)
        result = {"loss": loss_sum / seen, **self.task.finish_metrics(sums, seen)}
        if errors:
            for name in list(result):
                values = torch.tensor([b[name] for b in per_batch], dtype=torch.float64)
                spread = values.std() / len(values) ** 0.5 if len(values) > 1 else math.nan
                result[f"{name}_se"] = float(spread)
        return result


def _plain(value: Any) -> Any:
    """An optimiser setting as the checkpoint's JSON holds it: numbers, lists."""
    if isinstance(value, torch.Tensor):
        return value.tolist()
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    return value


def header_flips(
    settings: list[dict[str, Any]], recorded: list[dict[str, Any]], config: dict[str, Any]
) -> list[str]:
    """The optimiser settings a checkpoint's header records that differ from the ones the
    run's config gives (``key=recorded``), which a resume ignores: the scheduled ``lr``
    is left out, and so are settings a resume changed (in the config's ``history``)."""
    changed = {key for entry in config.get("history", []) for key in entry.get("train", {})}
    flips = []
    for ours, theirs in zip(settings, recorded, strict=False):
        for key, value in ours.items():
            if key in ("lr", "initial_lr") or key in changed:
                continue
            if key in theirs and _plain(theirs[key]) != _plain(value):
                flips.append(f"{key}={theirs[key]}")
    return list(dict.fromkeys(flips))  # once each, where several groups record it


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


def _summary(records: list[dict[str, Any]]) -> str:
    parts = []
    for record in records:
        metric = next((k for k in ("r2", "accuracy") if k in record), "loss")
        parts.append(f"{record['split']} {metric} {record[metric]:.3f}")
    return ", ".join(parts)


class BudgetClock:
    """When a wall-time budget (seconds from this object's creation) is spent: before the
    next stretch of steps and a checkpoint would overrun it, judged from the pace so far
    and the slowest evaluation and checkpoint seen."""

    def __init__(self, budget: float | None, step: int) -> None:
        self.budget, self.first_step = budget, step
        self.start = time.monotonic()
        self.slowest_checkpoint = 0.0

    @contextlib.contextmanager
    def timing_checkpoint(self) -> Iterator[None]:
        began = time.monotonic()
        yield
        self.slowest_checkpoint = max(self.slowest_checkpoint, time.monotonic() - began)

    def spent(self, step: int) -> bool:
        if self.budget is None:
            return False
        elapsed = time.monotonic() - self.start
        per_step = elapsed / max(step - self.first_step, 1)
        reserve = LOG_EVERY * per_step + 2 * self.slowest_checkpoint
        return elapsed + reserve > self.budget


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


def train_or_resume(
    run: str | Path,
    config: dict[str, Any],
    callbacks: Sequence[Callback] = (),
    init_from: str | Path | None = None,
    **runtime: Any,
) -> Path:
    """Bring the run in ``run`` to ``config``'s last step: reuse it if finished, resume it
    if interrupted, start it if new (or killed before its first checkpoint; from the
    weights of run ``init_from`` if given). A run whose stored training config differs
    from ``config``'s is an error, never overwritten."""
    directory = RunDirectory(run)
    if directory.config_path.is_file():
        if not same_training(directory.read_config().get("train"), config["train"]):
            raise ValueError(f"{directory.path} holds a different run; choose another directory")
        found = list_checkpoints(directory.checkpoints)
        if not found or found[-1][0] < config["train"]["steps"]:
            Trainer.resume(run, callbacks=callbacks, **runtime).train()  # or from step 0
        return directory.path
    Trainer.create(run, config, init_from=init_from, callbacks=callbacks, **runtime).train()
    return directory.path


def choose_run_path(config: dict[str, Any], device: str = "auto") -> Choice:
    """The fastest path for a new run of ``config`` on this machine
    (:func:`latentlens.training.fast_path.choose_path`), timed on throwaway trainers."""
    resolved = resolve_device(device)
    task_cls = TASKS[config["task"]["name"]][0]
    paths = candidates(resolved, task_cls.graph_capturable, cpp_compiler() is not None)

    def make_step(path: str) -> Any:
        trainer = Trainer(None, config, device=device, quiet=True, **options_of(path))
        return trainer.train_step

    sync = (lambda: torch.cuda.synchronize(resolved)) if resolved.type == "cuda" else (lambda: None)
    return choose_path(config, resolved, paths, make_step, sync)
