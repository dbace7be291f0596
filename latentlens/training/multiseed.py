"""Several seeds of one run trained at once in one process (``torch.func``).

Small models leave a GPU idle between kernel launches; a seed sweep can fill it instead.
:class:`SeedGroup` stacks the parameters of S models (one per seed) on a leading seed
axis, runs one vmapped forward and backward over S batches, and updates the stack with
one fused AdamW, which is element-wise, so each seed's update is its own. On CUDA the
group's whole step can be captured in one CUDA graph and its objective compiled (the
seeds' batches assembled from their draws, the vmapped forward and the losses:
:class:`~latentlens.training.objective.SeedGroupObjective`), as a single run's
(``cuda_graphs``, ``compile``): one replay then launches each kernel once for all seeds.
Each seed keeps a whole :class:`~latentlens.training.Trainer`: its model initialised
with its seed, its data stream, run directory, evaluations, checkpoints and callbacks, so
every seed's run directory is an ordinary run (``latentlens eval``, ``probe`` and
``--resume`` of one seed alone work on it).

With attention dropout off, a group trains every seed as its own run would, up to the
order of float sums (tested). With dropout on, the masks come from the one process-wide
generator, drawn per seed by ``vmap(randomness="different")``, so they differ from a
single run's (a group resumed as a group is exact; one seed resumed alone continues with
other masks). The seeds' models are brought up to date at each evaluation: an
``on_step`` callback that reads a model between evaluations sees its last evaluated
weights.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from latentlens.devices import resolve_device
from latentlens.progress import progress_bar
from latentlens.tasks import TASKS
from latentlens.tasks.base import Draws
from latentlens.threads import run_threads, work_of
from latentlens.training.callbacks import Callback
from latentlens.training.checkpoint import list_checkpoints
from latentlens.training.config import TrainConfig
from latentlens.training.graphs import GraphedStep
from latentlens.training.loop import LOG_EVERY, BudgetClock, drop_gradients, first_nonfinite
from latentlens.training.objective import SeedGroupObjective, inductor_options
from latentlens.training.run_dir import RunDirectory
from latentlens.training.step_setup import check_cuda_options, precision_scope
from latentlens.training.trainer import Trainer


def seed_configs(config: dict[str, Any], seeds: Sequence[int]) -> list[dict[str, Any]]:
    """``config`` once per seed (``train.seed`` replaced)."""
    if len(set(seeds)) != len(seeds) or not seeds:
        raise ValueError(f"seeds={list(seeds)}: give one or more distinct seeds")
    return [{**config, "train": {**config["train"], "seed": int(seed)}} for seed in seeds]


def check_group_options(
    config: dict[str, Any], device: str, compile: bool, cuda_graphs: bool, fused: bool = False
) -> None:
    """The group's refusals, made before any run directory is written or truncated."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise ValueError("several seeds train in one process: run them without torchrun")
    if fused:
        raise ValueError(
            "--fused kernels do not run inside a seed group's vmapped step; drop --seeds "
            "and train the seeds one per core (latentlens sweep, or one train per seed)"
        )
    task_cls = TASKS[config["task"]["name"]][0]
    check_cuda_options(resolve_device(device), task_cls, compile, cuda_graphs, False)


def common_checkpoint(run_dirs: Sequence[str | Path]) -> int | None:
    """The step a seed group's runs resume from when their newest checkpoints differ (a
    group killed between its seeds' writes): the newest one every run holds, 0 (the start)
    where some run holds none yet (killed between its seeds' first writes); ``None`` when
    they agree (each resumes from its newest). An error naming the runs when no step is
    held by all."""
    held = [{step for step, _ in list_checkpoints(RunDirectory(run).checkpoints)}
            for run in run_dirs]  # fmt: skip
    newest = {max(steps) if steps else None for steps in held}
    if len(newest) <= 1:
        return None
    if None in newest:
        return 0
    shared = set.intersection(*held)
    if not shared:
        steps = {str(run): max(steps) for run, steps in zip(run_dirs, held, strict=True)}
        raise ValueError(
            f"the runs are at different steps {steps} and hold no checkpoint in common; "
            "resume them one by one"
        )
    return max(shared)


def _rewindable(runs: Sequence[str | Path]) -> bool:
    """Whether runs at different steps resume as a group (:func:`common_checkpoint`)."""
    try:
        return common_checkpoint(runs) is not None
    except ValueError:
        return False


def _without_seed(config: dict[str, Any]) -> dict[str, Any]:
    return {**config, "train": {k: v for k, v in config["train"].items() if k != "seed"}}


class SeedGroup:
    """Train ``trainers`` (the same config but for ``train.seed``, at the same step, one
    process, built without CUDA graphs or compile) together; see the module docstring.

    ``cuda_graphs`` captures the group's whole step (every seed's batch, the vmapped
    forward and backward, clipping, AdamW) in one CUDA graph; ``compile`` compiles the
    group's objective (batch assembly, vmapped forward, losses) with ``torch.compile``.
    Both need CUDA, as for a single run.
    """

    def __init__(
        self, trainers: Sequence[Trainer], compile: bool = False, cuda_graphs: bool = False
    ) -> None:
        if not trainers:
            raise ValueError("a seed group needs at least one trainer")
        first = trainers[0]
        for other in trainers[1:]:
            if _without_seed(other.config) != _without_seed(first.config):
                raise ValueError(
                    f"{other.run_dir.path} and {first.run_dir.path} differ in more than "
                    "train.seed; a seed group trains one config with several seeds"
                )
        seeds = [t.train_cfg.seed for t in trainers]
        if len(set(seeds)) != len(seeds):
            raise ValueError(f"the seeds {seeds} repeat; give each run its own seed")
        if len({t.step for t in trainers}) != 1:
            steps = {str(t.run_dir.path): t.step for t in trainers}
            raise ValueError(f"the runs are at different steps {steps}; resume them one by one")
        if any(t.dist.enabled or t.graphed is not None or t.compiled
               for t in trainers):  # fmt: skip
            raise ValueError(
                "a seed group's trainers are single-process and built without --cuda-graphs "
                "or --compile (pass those to the SeedGroup, which applies them to the group)"
            )
        self.trainers = list(trainers)
        self.train_cfg: TrainConfig = first.train_cfg
        self.device = first.device
        self.step = first.step
        check_cuda_options(self.device, first.task, compile, cuda_graphs, False)
        self.lr = torch.tensor(self.train_cfg.lr, device=self.device)
        models = [dict(t.model.named_parameters()) for t in trainers]
        self.params = {
            name: torch.stack([m[name].detach() for m in models]).requires_grad_()
            for name in models[0]
        }
        self.buffers = {
            name: torch.stack([dict(t.model.named_buffers())[name] for t in trainers])
            for name, _ in first.model.named_buffers()
        }
        decay = [p for p in self.params.values() if p.ndim - 1 >= 2]  # as weight_decay_groups
        no_decay = [p for p in self.params.values() if p.ndim - 1 < 2]
        self.optimizer = torch.optim.AdamW(
            [
                {"params": decay, "weight_decay": self.train_cfg.weight_decay},
                {"params": no_decay, "weight_decay": 0.0},
            ],
            lr=self.lr,
            betas=(0.9, 0.999),
            eps=1e-8,
            fused=True,
            capturable=cuda_graphs,
        )
        self._stack_optimizer_state()
        objective = SeedGroupObjective(first.model, first.task)
        self._objective = (
            torch.compile(objective, dynamic=False, options=inductor_options())
            if compile
            else objective
        )
        self.graphed = (
            GraphedStep(
                self.compute_step,
                lambda: self.optimizer.zero_grad(set_to_none=True),
                generators=[t.data_generator for t in self.trainers],
            )
            if cuda_graphs
            else None
        )

    # ----------------------------------------------------------------- construction
    @classmethod
    def create(
        cls,
        run_dirs: Sequence[str | Path],
        configs: Sequence[dict[str, Any]],
        callbacks: Sequence[Sequence[Callback]] | None = None,
        compile: bool = False,
        cuda_graphs: bool = False,
        **runtime: Any,
    ) -> SeedGroup:
        """New runs, one per (run directory, config); ``callbacks`` one list per run;
        ``runtime`` as for :class:`Trainer` (``device``, ``quiet``)."""
        if len(run_dirs) != len(configs):
            raise ValueError(f"{len(run_dirs)} run directories for {len(configs)} configs")
        check_group_options(
            configs[0], runtime.get("device", "auto"), compile, cuda_graphs, runtime.get("fused")
        )
        taken = [str(run) for run in run_dirs if RunDirectory(run).config_path.exists()]
        if taken:  # checked before any directory is written
            raise ValueError(f"{taken} already hold runs; choose other run directories")
        callbacks = callbacks or [()] * len(configs)
        configs = [with_recorded_threads(config) for config in configs]
        return cls(
            [
                Trainer.create(run, config, callbacks=cbs, record_path=False, **runtime)
                for run, config, cbs in zip(run_dirs, configs, callbacks, strict=True)
            ],
            compile=compile,
            cuda_graphs=cuda_graphs,
        )

    @classmethod
    def resume(
        cls,
        run_dirs: Sequence[str | Path],
        callbacks: Sequence[Sequence[Callback]] | None = None,
        compile: bool = False,
        cuda_graphs: bool = False,
        **runtime: Any,
    ) -> SeedGroup:
        """Continue runs trained as a group, from their newest checkpoints; runs killed
        between their seeds' checkpoint writes (some a checkpoint ahead of the others)
        continue from the newest step all of them hold, the ones ahead rewound to it."""
        if run_dirs:
            stored = RunDirectory(run_dirs[0]).read_config()
            check_group_options(
                stored, runtime.get("device", "auto"), compile, cuda_graphs, runtime.get("fused")
            )
        callbacks = callbacks or [()] * len(run_dirs)
        common = common_checkpoint(run_dirs)
        trainers = []
        try:
            for run, cbs in zip(run_dirs, callbacks, strict=True):
                trainers.append(Trainer.resume(run, callbacks=cbs, rewind_to=common, **runtime))
        except BaseException:
            for trainer in trainers:
                trainer.close()
            raise
        return cls(trainers, compile=compile, cuda_graphs=cuda_graphs)

    def _state_of(self, trainer: Trainer) -> dict[str, dict[str, torch.Tensor]]:
        names = {id(p): n for n, p in trainer.model.named_parameters()}
        return {names[id(p)]: s for p, s in trainer.optimizer.state.items()}

    def _stack_optimizer_state(self) -> None:
        """Resumed trainers carry AdamW state: stack it onto the group's parameters."""
        states = [self._state_of(t) for t in self.trainers]
        for name, param in self.params.items():
            if name not in states[0]:
                continue
            self.optimizer.state[param] = {
                "step": states[0][name]["step"].clone(),
                **{
                    key: torch.stack([s[name][key] for s in states]).to(param)
                    for key in ("exp_avg", "exp_avg_sq")
                },
            }

    def sync(self) -> None:
        """Copy each seed's slice of the stacked weights and AdamW state into its trainer."""
        with torch.no_grad():
            for index, trainer in enumerate(self.trainers):
                params = dict(trainer.model.named_parameters())
                for name, stacked in self.params.items():
                    params[name].copy_(stacked[index])
                    state = self.optimizer.state.get(stacked)
                    if state:
                        trainer.optimizer.state[params[name]] = {
                            "step": state["step"].clone(),
                            "exp_avg": state["exp_avg"][index].clone(),
                            "exp_avg_sq": state["exp_avg_sq"][index].clone(),
                        }
                trainer.step = self.step
                trainer.lr.copy_(self.lr)

    # ----------------------------------------------------------------- training
    def _losses(self, draws: Draws) -> torch.Tensor:
        """``[seeds]``: each seed's loss on the batch its ``draws`` make (every tensor
        ``[seeds, batch, ...]``), assembled and run in one pass."""
        graphed = self.graphed is not None
        with precision_scope(self.train_cfg.precision, self.device, graphed):
            return self._objective(self.params, self.buffers, draws)

    def _clip(self) -> None:
        """Each seed's gradient clipped by its own global norm, as a single run would be."""
        grads = [p.grad for p in self.params.values() if p.grad is not None]
        squares = torch.stack([g.flatten(1).float().square().sum(1) for g in grads]).sum(0)
        scale = (self.train_cfg.grad_clip / (squares.sqrt() + 1e-6)).clamp(max=1.0)
        for grad in grads:
            grad.mul_(scale.view(-1, *[1] * (grad.ndim - 1)).to(grad.dtype))

    def train_step(self) -> torch.Tensor:
        """One optimisation step of every seed; returns the losses ``[seeds]``."""
        self.lr.fill_(self.train_cfg.learning_rate(self.step))
        if self.graphed is not None:
            losses = self.graphed()
        else:
            drop_gradients(self.optimizer)
            losses = self.compute_step()
        self.step += 1
        return losses

    def compute_step(self) -> torch.Tensor:
        """Every seed's batch, forward, backward, clip and update (gradients None before);
        returns the losses ``[seeds]``. Capturable in a CUDA graph."""
        generators = [t.data_generator for t in self.trainers]
        draws = self.trainers[0].task.draw_seeds(self.train_cfg.batch_size, "train", generators)
        losses = self._losses(draws)
        losses.sum().backward()  # the seeds share no parameter: each gets its own gradient
        if self.train_cfg.grad_clip > 0:
            self._clip()
        self.optimizer.step()
        return losses.detach()

    def train(self, quiet: bool = False) -> list[list[dict[str, Any]]]:
        """Run every seed to ``train.steps``; returns each seed's last evaluation records
        (the runs' locks are released when it returns or fails)."""
        try:
            return self._train(quiet)
        finally:
            for trainer in self.trainers:
                trainer.close()

    def _train(self, quiet: bool) -> list[list[dict[str, Any]]]:
        cfg = self.train_cfg
        started = time.monotonic()
        for trainer in self.trainers:
            trainer.model.train()
            # the group's wall time, shared equally by its runs
            trainer.training_since, trainer.seconds_share = started, 1 / len(self.trainers)
        seeds = len(self.trainers)
        last: list[list[dict[str, Any]]] = [[] for _ in self.trainers]
        window: list[torch.Tensor] = []  # the losses since the last check, as TrainingLoop's
        if self.step == 0:
            for trainer in self.trainers:
                for callback in trainer.callbacks:
                    callback.on_start(trainer)
                trainer.evaluate_initialisation()
        clock = BudgetClock(self.trainers[0].time_budget, self.step)
        bar = progress_bar(total=cfg.steps, initial=self.step, disable=quiet,
                   desc=f"train {seeds} seeds", dynamic_ncols=True)  # fmt: skip
        with bar:
            while self.step < cfg.steps:
                losses = self.train_step()
                window.append(losses)
                for index, trainer in enumerate(self.trainers):
                    for callback in trainer.callbacks:
                        callback.on_step(trainer, self.step, losses[index])
                at_eval = self.step % cfg.eval_every == 0 or self.step == cfg.steps
                if self.step % LOG_EVERY == 0 or at_eval:
                    stacked = torch.stack(window)  # [steps, seeds]
                    first_bad = first_nonfinite(stacked, self.step - len(window) + 1)
                    for index, trainer in enumerate(self.trainers):
                        trainer.check_finite(first_bad[index])
                    bar.set_postfix(loss=f"{stacked.mean().item():.4g}")
                    window = []
                bar.update(1)
                if at_eval:
                    with clock.timing_checkpoint():
                        self.sync()
                        last = [t.evaluate_and_checkpoint() for t in self.trainers]
                checks = clock.budget is not None and (at_eval or self.step % LOG_EVERY == 0)
                if checks and self.step < cfg.steps and clock.spent(self.step):
                    if not at_eval:
                        self.sync()
                        for trainer in self.trainers:
                            trainer.checkpoint(evaluate=False)
                    for trainer in self.trainers:
                        trainer.stopped_at = self.step
                    return last
        self.sync()
        for trainer in self.trainers:
            for callback in trainer.callbacks:
                callback.on_end(trainer)
        return last


def train_group_or_resume(
    runs: Sequence[str | Path],
    configs: Sequence[dict[str, Any]],
    callbacks: Sequence[Sequence[Callback]] | None = None,
    compile: bool = False,
    cuda_graphs: bool = False,
    **runtime: Any,
) -> list[Path]:
    """Bring runs that differ only in their seed to their configs' last step as one seed
    group, as :func:`~latentlens.training.train_or_resume` does for one run: reuse them if
    all are finished, resume them as a group if all stopped at the same checkpoint or hold
    one in common (killed between the seeds' writes: see :meth:`SeedGroup.resume`), start
    them as a group if none exists. Runs in any other state (started apart, or with no
    checkpoint in common) are finished one by one. ``runtime`` as for :class:`Trainer`
    (``device``, ``quiet``, ``time_budget``); ``compile`` and ``cuda_graphs`` apply to
    the group. A run whose stored training config differs from its config is an error."""
    from latentlens.training.config import same_training
    from latentlens.training.trainer import train_or_resume

    callbacks = callbacks or [()] * len(runs)
    directories = [RunDirectory(run) for run in runs]
    for directory, config in zip(directories, configs, strict=True):
        if directory.config_path.is_file() and not same_training(
            directory.read_config().get("train"), config["train"]
        ):
            raise ValueError(f"{directory.path} holds a different run; choose another directory")
    last = [
        (found[-1][0] if (found := list_checkpoints(d.checkpoints)) else -1)
        if d.config_path.is_file()
        else None
        for d in directories
    ]
    target = configs[0]["train"]["steps"]
    if all(step is not None and step >= target for step in last):
        return [d.path for d in directories]
    if all(step is None for step in last):
        group = SeedGroup.create(runs, configs, callbacks, compile, cuda_graphs, **runtime)
    elif len(set(last)) == 1 or _rewindable(runs):
        # stopped together (or killed before the first checkpoint), or killed between the
        # seeds' checkpoint writes: the ones ahead rewind to the step all of them hold
        group = SeedGroup.resume(runs, callbacks, compile, cuda_graphs, **runtime)
    else:
        for run, config, cbs in zip(runs, configs, callbacks, strict=True):
            train_or_resume(run, config, cbs, **runtime)
        return [d.path for d in directories]
    group.train(quiet=runtime.get("quiet", False))
    return [d.path for d in directories]


def with_recorded_threads(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` with its thread count recorded where it has none: a group's vmapped step
    is not the step whose thread counts a single run checks, so it keeps one count."""
    train = config["train"]
    if train.get("threads") is not None or train.get("thread_counts"):
        return config
    return {**config, "train": {**train, "threads": run_threads(work_of(config))}}
