"""``latentlens train``: start, resume or continue runs (one, a seed group, or torchrun's
data-parallel run), with the fast path and thread count settled and recorded."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from latentlens.cli.choices import resolve_runs
from latentlens.cli.run_config import (
    MODEL_FLAGS,
    SEQ2SEQ_FLAGS,
    TASK_FLAGS,
    TRAIN_FLAGS,
    ConfigFile,
    apply_config_defaults,
    read_config_file,
    resolve_run_config,
)
from latentlens.cli.tables import print_seed_summary, print_table

if TYPE_CHECKING:
    from latentlens.training import Trainer


def run_train(args: argparse.Namespace) -> int:
    from latentlens.models import canonical_kind
    from latentlens.probes import tracking_callbacks
    from latentlens.training import (
        RESUME_CHANGEABLE,
        RunDirectory,
        SeedGroup,
        TrainConfig,
        Trainer,
        TrainingDiverged,
        seed_configs,
    )
    from latentlens.training.distributed import shutdown_distributed
    from latentlens.training.fast_path import path_of
    from latentlens.training.loggers import experiment_loggers
    from latentlens.training.notes import size_notes

    if args.init_from:  # zoo:NAME too
        args.init_from = str(resolve_runs([Path(args.init_from)])[0])

    runtime: dict[str, Any] = dict(
        device=args.device,
        quiet=args.quiet,
        compile=args.compile,
        cuda_graphs=args.cuda_graphs,
        time_budget=args.time_budget,
        fused=args.fused,
    )
    explicit = args.compile or args.fused or args.cuda_graphs
    if args.eager and explicit:
        raise ValueError("--eager computes the step eagerly: drop --compile, --fused and "
                         "--cuda-graphs, or --eager")  # fmt: skip
    if args.time_budget is not None and not args.time_budget > 0:
        raise ValueError(f"--time-budget {args.time_budget} is invalid: give seconds > 0")
    ended = False  # every rank meets at the end of a finished run (shutdown_distributed)
    trainers: list[Trainer] = []
    try:
        if args.seeds and (args.resume or args.seed is not None):
            raise ValueError("--seeds starts new runs: drop --seed and --resume")
        if args.init_from and (args.resume or args.seeds):
            raise ValueError("--init-from starts one new run: drop --resume and --seeds")
        if args.resume:
            stored = [RunDirectory(run).read_config() for run in args.resume]
            for run, config in zip(args.resume, stored, strict=True):
                check_resume_flags(args, config, run)
                path = config.get("train", {}).get("path")
                flags = args.eager or args.compile or args.fused or args.cuda_graphs
                if path and flags and path_of(args.compile, args.fused, args.cuda_graphs) != path:
                    print(f"note: {run} computes its step the way it was started ({path}, "
                          "recorded in its config); the path flags apply to new runs",
                          file=sys.stderr)  # fmt: skip
                recorded = config.get("train", {}).get("threads")
                if getattr(args, "threads", None) not in (None, recorded) and recorded:
                    print(f"note: {run} computes with the {recorded} thread(s) it was started "
                          f"with (recorded in its config); --threads {args.threads} applies "
                          "to new runs", file=sys.stderr)  # fmt: skip
            changes = {k: getattr(args, k, None) for k in RESUME_CHANGEABLE
                       if getattr(args, k, None) is not None}  # fmt: skip
            callbacks = [tracking_callbacks(c) + experiment_loggers(args.log) for c in stored]
            if len(args.resume) > 1:
                if changes:
                    raise ValueError(
                        f"--{'/--'.join(changes).replace('_', '-')} on resume changes one run "
                        "at a time; resume the seeds one by one"
                    )
                trainer = SeedGroup.resume(args.resume, callbacks, **runtime)
            else:
                trainer = Trainer.resume(
                    args.resume[0], train_changes=changes, callbacks=callbacks[0], **runtime
                )
        else:
            file = read_config_file(args.config) if args.config else ConfigFile()
            apply_config_defaults(args, file)
            canonical_kind(args.task, args.model)  # a clear error for an unknown kind
            try:
                config = resolve_run_config(args, file)
            except ValueError as err:  # a value of the file, or a flag: name the file too
                if args.config is None:
                    raise
                raise ValueError(f"--config {args.config} (and the flags): {err}") from None
            notes = TrainConfig.from_dict(config["train"]).schedule_notes() + size_notes(config)
            for note in notes:
                print(f"warning: {note}", file=sys.stderr)
            kind = "" if args.model in ("transformer", "vanilla") else f"{args.model}-"
            if args.seeds:
                base = args.run_dir or f"runs/{args.task}-{kind}{args.attention}"
                configs = seed_configs(config, args.seeds)
                runs = [f"{base}-s{seed}" for seed in args.seeds]
                callbacks = [tracking_callbacks(c) + experiment_loggers(args.log) for c in configs]
                if args.time_budget is not None and all(map(continues, runs, configs)):
                    trainer = SeedGroup.resume(runs, callbacks, **runtime)
                else:
                    trainer = SeedGroup.create(runs, configs, callbacks, **runtime)
            else:
                seed = config["train"]["seed"]
                run_dir = args.run_dir or f"runs/{args.task}-{kind}{args.attention}-s{seed}"
                runtime["callbacks"] = tracking_callbacks(config) + experiment_loggers(args.log)
                if args.time_budget is not None and continues(run_dir, config):
                    trainer = Trainer.resume(run_dir, **runtime)
                else:
                    settle_path(args, config, runtime)
                    trainer = Trainer.create(run_dir, config, init_from=args.init_from, **runtime)
        try:
            if isinstance(trainer, SeedGroup):
                trainers = trainer.trainers
                finished = list(zip(trainers, trainer.train(quiet=args.quiet), strict=True))
            else:
                trainers = [trainer]
                finished = [(trainer, trainer.train())]
        except KeyboardInterrupt:
            if trainers[0].dist.is_main:
                print(interrupted_message(trainers), file=sys.stderr)
            return 130  # the shell's code for a command stopped by Ctrl-C (SIGINT)
        ended = True
    except TrainingDiverged as err:
        raise ValueError(str(err)) from None
    finally:
        for one in trainers:
            one.leave_data_parallel()
        shutdown_distributed(finished=ended)
    stopped = [one for one, _ in finished if one.stopped_at is not None]
    if stopped:
        runs = " ".join(str(one.run_dir.path) for one in stopped)
        print(
            f"latentlens train: stopped at step {stopped[0].stopped_at} of "
            f"{stopped[0].train_cfg.steps} for --time-budget ({runs}, checkpointed); run the "
            "same command again to continue",
            file=sys.stderr,
        )
        return 3
    for one, records in finished:
        if one.dist.is_main:
            print(f"run directory: {one.run_dir.path}")
            print_table(records)
    print_seed_summary([records for _, records in finished])
    return 0


def settle_path(args: argparse.Namespace, config: dict[str, Any], runtime: dict) -> None:
    """A new run's path in ``config`` and ``runtime``: the flags', else the config file's
    recorded one, else ``$LATENTLENS_PATH``, else the fastest measured here
    (:func:`choose_run_path`); said on stderr when it was measured."""
    from latentlens.training.fast_path import options_of, path_of
    from latentlens.training.trainer import announced_run_path

    train = config["train"]
    if args.eager or args.compile or args.fused or args.cuda_graphs:
        train["path"] = path_of(args.compile, args.fused, args.cuda_graphs)
    elif train.get("path") is None:
        choosing = "--eager, --compile or --fused choose one"
        train["path"] = announced_run_path(config, args.device, args.quiet, choosing)
    runtime.update(options_of(train["path"]))


def continues(run_dir: str, config: dict[str, Any]) -> bool:
    """Whether ``run_dir`` holds an unfinished run of ``config`` (so that the command that
    started it, given a time budget, continues it)."""
    from latentlens.training import RunDirectory
    from latentlens.training.config import same_training

    directory = RunDirectory(run_dir)
    if not directory.config_path.is_file():
        return False
    stored = directory.read_config()
    same = all(stored.get(k) == config.get(k) for k in ("model_kind", "model", "task"))
    same = same and same_training(stored.get("train"), config["train"])
    if not same:
        raise ValueError(
            f"{directory.path} holds a different run; the same command continues a run, "
            "so choose another --run-dir for this one"
        )
    return True


def interrupted_message(trainers: list[Trainer]) -> str:
    """What a Ctrl-C left: each run's newest checkpoint, and how to continue."""
    from latentlens.training import list_checkpoints

    runs = [str(t.run_dir.path) for t in trainers]
    saved = [list_checkpoints(t.run_dir.checkpoints) for t in trainers]
    if not all(saved):
        return (
            f"latentlens train: interrupted at step {trainers[0].step}, before the first "
            f"checkpoint; delete {' '.join(runs)} and start again"
        )
    return (
        f"latentlens train: interrupted at step {trainers[0].step}; the newest checkpoint of "
        f"{' and '.join(runs)} is step {saved[0][-1][0]}, where `latentlens train --resume "
        f"{' '.join(runs)}` continues"
    )


def check_resume_flags(args: argparse.Namespace, stored: dict[str, Any], run: str) -> None:
    """With --resume, every config flag given must equal the stored run's value."""
    from latentlens.models import canonical_kind
    from latentlens.training import RESUME_CHANGEABLE

    if args.config is not None:
        raise ValueError(
            "--config cannot be combined with --resume: the run's config.json is the config"
        )
    given = {("task", "name"): args.task, ("model", "attention"): args.attention}
    if args.model is not None:
        stored_kind = stored.get("model_kind", "transformer")
        if canonical_kind(stored["task"]["name"], args.model) != stored_kind:
            raise ValueError(
                f"the run in {run} is a {stored_kind!r} model, not {args.model!r}; "
                "resume without --model, or start a new run"
            )
    given.update({("task_config", k): getattr(args, k) for k in TASK_FLAGS})
    given.update({("model", k): getattr(args, k) for k in SEQ2SEQ_FLAGS})
    given.update({("model", k): getattr(args, k) for k in MODEL_FLAGS})
    given.update({("train", k): getattr(args, k) for k in [*TRAIN_FLAGS, "track"]
                  if k not in RESUME_CHANGEABLE})  # fmt: skip
    sections = {**stored, "task_config": stored["task"]["config"]}
    differ = [
        f"{section}.{key}={value!r} (the run has {sections[section].get(key)!r})"
        for (section, key), value in given.items()
        if value is not None and sections[section].get(key) != value
    ]
    if differ:
        raise ValueError(
            f"the run in {run} was made with a different config: "
            f"{'; '.join(differ)}. Resume without these flags, or start a new run"
        )
