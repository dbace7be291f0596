"""The training loop: seeded data on the device, AdamW, evaluation, checkpoints, exact resume.

A :class:`Trainer` owns one run directory. ``Trainer.create`` starts a run (refusing a
directory that already holds one); ``Trainer.resume`` continues the run from its newest
checkpoint with the model, optimiser, torch RNG and data-generator states restored, so that a
killed and resumed run ends, on the CPU, with the same metrics and weights bit for bit as an
uninterrupted one.

The trainer is built here (model, task, optimiser, the step's path and threads); its other
jobs live in their own modules, one part of the class each: :mod:`~.run_start` (create,
resume, load), :mod:`~.loop` (the step and the loop), :mod:`~.checkpointing` and
:mod:`~.evaluation`; :mod:`~.step_setup` holds the step's arithmetic and path checks.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from latentlens import __version__
from latentlens.allocator import keep_freed_memory
from latentlens.devices import resolve_device
from latentlens.kernels.adamw import FusedAdamWStep
from latentlens.kernels.linear import use_weight_gradients
from latentlens.models import (
    MODEL_KINDS,
    HookedModel,
    build_model,
    model_config,
    model_preset,
    resolve_model_kind,
)
from latentlens.tasks import TASKS, Task, make_task
from latentlens.threads import (
    SMALL_WORK,
    available_cpus,
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
from latentlens.training.checkpoint import list_checkpoints
from latentlens.training.checkpointing import Checkpointing
from latentlens.training.config import TrainConfig, same_training
from latentlens.training.distributed import init_distributed
from latentlens.training.evaluation import Evaluation
from latentlens.training.fast_path import (
    REQUESTED,
    Choice,
    StepFactory,
    candidates,
    choose_path,
    options_of,
    path_of,
    requested_path,
)
from latentlens.training.graphs import GraphedStep
from latentlens.training.load_following import LoadFollower
from latentlens.training.loop import TrainingLoop
from latentlens.training.memory import check_fits
from latentlens.training.objective import TrainingObjective, inductor_options
from latentlens.training.run_dir import RunDirectory
from latentlens.training.run_lock import RunLock
from latentlens.training.run_start import RunStart
from latentlens.training.step_setup import (
    check_cuda_options,
    cpp_compiler,
    use_fused_kernels_on_cpu,
    warn_if_bf16_is_emulated,
    weight_decay_groups,
)
from latentlens.training.thread_choice import (
    agreeing_thread_counts,
    candidate_counts,
    start_threads,
)
from latentlens.training.traced_step import TracedGradients
from latentlens.training.weight_gradient_choice import choose_weight_gradients


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


class Trainer(RunStart, TrainingLoop, Checkpointing, Evaluation):
    """Train a model (any kind of :data:`latentlens.models.MODEL_KINDS`) on a task, writing
    a run directory.

    Under ``torchrun`` the trainer joins the process group and trains data-parallel
    (DistributedDataParallel): every rank draws the same global batch and trains on its
    rows, rank 0 alone evaluates, runs the callbacks and writes the run directory.

    The step is built to be captured in a CUDA graph (``cuda_graphs=True``, the CLI's
    ``--cuda-graphs``): the batch is made on the device, shapes are static, the learning
    rate is a device tensor updated in place, AdamW is fused, and nothing reads a value
    back to the host inside the step.

    ``trains=False`` builds a trainer for analysis alone (:meth:`load`): the model, task,
    evaluation and callbacks, but no optimiser and no compiled or graphed step. Building
    AdamW imports ``torch._dynamo`` (about 2 s a process), which a probe never needs;
    training, checkpointing or restoring such a trainer is an error naming
    :meth:`resume`.
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
        trains: bool = True,
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
        compile, cuda_graphs = compile and trains, cuda_graphs and trains  # the step's alone
        self.optimizer: torch.optim.AdamW | None = (
            torch.optim.AdamW(
                weight_decay_groups(self.model, self.train_cfg.weight_decay),
                lr=self.lr,
                betas=(0.9, 0.999),
                eps=1e-8,
                fused=True,
                capturable=cuda_graphs,
            )
            if trains
            else None
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
        self.optimizer_step = None if self.optimizer is None else self.optimizer.step
        # how the fused step sums its weights' gradients (train.weight_gradients)
        self.weight_gradients: str | None = None
        if fused:
            use_fused_kernels_on_cpu(self.model, self.device)
            self.weight_gradients = (
                self.train_cfg.weight_gradients
                or choose_weight_gradients(self.train_cfg.threads or available_cpus())[0]
            )
            use_weight_gradients(self.weight_gradients)
            if self.optimizer is not None:
                self.optimizer_step = FusedAdamWStep(self.optimizer)
        # Hooks added after compilation are ignored: compile only the hook-free train path
        # (the objective wraps the model; the model itself stays eager for analyses).
        objective: torch.nn.Module = TrainingObjective(self.model, self.task)
        # the fused CPU step compiled whole, forward and backward in one graph
        self.traced = (
            TracedGradients(objective, inductor_options())
            if compile and fused and self.traces_whole_step(cuda_graphs)
            else None
        )
        if compile and self.traced is None:
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
        # the thread count following the load while training (None: it keeps its count)
        self.load_follower: LoadFollower | None = None

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

    def record_path(self) -> None:
        """Record the path this run's step takes in its config (``train.path``, where the
        config does not name it already), and how it sums the weights' gradients
        (``train.weight_gradients``)."""
        path = self.train_cfg.path or path_of(self.compiled, self.fused, self.graphed is not None)
        self.train_cfg = replace(self.train_cfg, path=path, weight_gradients=self.weight_gradients)
        self.config = {**self.config, "train": self.train_cfg.to_dict()}

    def settle_threads(self) -> None:
        """A new run's thread counts (:mod:`latentlens.training.thread_choice`): the
        counts whose step computes the same gradients, where the eager CPU step has more
        than one (the run then follows the load); else one recorded count
        (:func:`latentlens.threads.run_threads`). The eager and fused CPU steps are checked
        (the fused kernels sum in fixed slices; compiled, on the compiled step); compiled
        steps without the kernels, CUDA and data-parallel steps record their count."""
        train = self.train_cfg
        counts = candidate_counts()
        agreeing: tuple[int, ...] = ()
        checked = self.device.type == "cpu" and (self.fused or not self.compiled)
        if checked and self.graphed is None and not self.dist.enabled and len(counts) > 1:
            generator = self.task.make_generator(train.seed)
            batch = self.task.draw(train.batch_size, "train", generator)
            agreeing = agreeing_thread_counts(
                self.model, self.objective_as_stepped, self.task, batch, train.grad_clip, counts
            )
        if len(agreeing) > 1:
            train = replace(train, thread_counts=agreeing)
            compute_with_threads(start_threads(agreeing))
        else:
            train = replace(train, threads=run_threads(work_of(self.config)))
            compute_with_threads(train.threads)
        self.train_cfg = train
        self.config = {**self.config, "train": train.to_dict()}

    def traces_whole_step(self, cuda_graphs: bool) -> bool:
        """Whether a compiled fused step is traced whole (:class:`TracedGradients`): in one
        process on the CPU, in float32 (under bf16 autocast the kernels stand aside)."""
        return (
            self.device.type == "cpu"
            and not self.dist.enabled
            and not cuda_graphs
            and self.train_cfg.precision != "bf16"
        )

    def objective_as_stepped(
        self, model: torch.nn.Module, task: Task
    ) -> torch.nn.Module | TracedGradients:
        """The training objective of ``model`` as this run's step computes it: compiled
        where the step is, traced whole (its call then writes the gradients) where the
        step is."""
        objective = TrainingObjective(model, task)
        if self.traced is not None:
            return self.traced.on(objective)
        if self.compiled:
            objective.compile(dynamic=False, options=inductor_options())
        return objective

    def close(self) -> None:
        """Release the run directory's writer lock (done when :meth:`train` returns)."""
        if self.lock is not None:
            self.lock.release()
            self.lock = None

    def leave_data_parallel(self) -> None:
        """Unwrap DistributedDataParallel before the process group is destroyed (see
        :func:`~latentlens.training.distributed.shutdown_distributed`); a no-op otherwise."""
        if isinstance(self.objective, torch.nn.parallel.DistributedDataParallel):
            self.objective = self.objective.module


def train_or_resume(
    run: str | Path,
    config: dict[str, Any],
    callbacks: Sequence[Callback] = (),
    init_from: str | Path | None = None,
    path: str | None = None,
    **runtime: Any,
) -> Path:
    """Bring the run in ``run`` to ``config``'s last step: reuse it if finished, resume it
    if interrupted, start it if new (or killed before its first checkpoint; from the
    weights of run ``init_from`` if given, its step's path ``path`` as
    :meth:`Trainer.create` takes it; a resumed run keeps its own). A run whose stored
    training config differs from ``config``'s is an error, never overwritten."""
    directory = RunDirectory(run)
    if directory.config_path.is_file():
        if not same_training(directory.read_config().get("train"), config["train"]):
            raise ValueError(f"{directory.path} holds a different run; choose another directory")
        found = list_checkpoints(directory.checkpoints)
        if not found or found[-1][0] < config["train"]["steps"]:
            Trainer.resume(run, callbacks=callbacks, **runtime).train()  # or from step 0
        return directory.path
    trainer = Trainer.create(
        run, config, init_from=init_from, callbacks=callbacks, path=path, **runtime
    )
    trainer.train()
    return directory.path


def path_timing(
    config: dict[str, Any], device: str = "auto"
) -> tuple[torch.device, list[str], StepFactory, Callable[[], None]]:
    """What timing the paths of ``config`` takes here: the device, the paths that can run
    on it, a factory of each path's step (a throwaway trainer's) and the device's sync."""
    resolved = resolve_device(device)
    task_cls = TASKS[config["task"]["name"]][0]
    paths = candidates(resolved, task_cls.graph_capturable, cpp_compiler() is not None)

    def make_step(path: str) -> Any:
        trainer = Trainer(None, config, device=device, quiet=True, **options_of(path))
        return trainer.train_step

    sync = (lambda: torch.cuda.synchronize(resolved)) if resolved.type == "cuda" else (lambda: None)
    return resolved, paths, make_step, sync


def choose_run_path(config: dict[str, Any], device: str = "auto") -> Choice:
    """The path for a new run of ``config``: the one ``$LATENTLENS_PATH`` names, else the
    fastest on this machine (:func:`latentlens.training.fast_path.choose_path`), timed on
    throwaway trainers."""
    requested = requested_path()
    if requested is not None:
        return Choice(requested, REQUESTED)
    resolved, paths, make_step, sync = path_timing(config, device)
    return choose_path(config, resolved, paths, make_step, sync)


def announced_run_path(config: dict[str, Any], device: str, quiet: bool, choosing: str) -> str:
    """:func:`choose_run_path`'s path, said on stderr with its reason where the paths were
    timed (or, unless ``quiet``, where the environment did not name it); ``choosing``:
    how the caller names a path instead (the CLI's flags, ``path=``)."""
    choice = choose_run_path(config, device)
    if choice.calibration is not None or not (quiet or choice.reason == REQUESTED):
        print(f"path: {choice.path} ({choice.reason}; {choosing})", file=sys.stderr)
    return choice.path


def config_with_path(
    config: dict[str, Any], path: str, device: str = "auto", quiet: bool = False
) -> dict[str, Any]:
    """``config`` with its step's path (``train.path``) settled: ``path``, or for
    ``"auto"`` the fastest here, as ``latentlens train`` chooses it
    (:func:`announced_run_path`); a path the config already records stays, and another
    one is refused."""
    recorded = config["train"].get("path")
    if path == "auto":
        choosing = 'path="eager" or another names one'
        path = recorded or announced_run_path(config, device, quiet, choosing)
    else:
        options_of(path)  # a clear error naming the paths
    if recorded not in (None, path):
        raise ValueError(
            f"the config's train.path is {recorded!r} but path={path!r}: give one of them"
        )
    return {**config, "train": {**config["train"], "path": path}}
