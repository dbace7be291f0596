"""``latentlens train`` and ``latentlens eval``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from latentlens.devices import DEVICE_CHOICES
from latentlens.models import VARIANTS
from latentlens.tasks import TASKS
from latentlens.training import (
    EVAL_SPLITS,
    CheckpointError,
    RunDirectory,
    TrainConfig,
    Trainer,
    TrainingDiverged,
    list_checkpoints,
    load_checkpoint,
    model_for_task,
)
from latentlens.training.distributed import shutdown_distributed

MODEL_FLAGS = {"d_model": int, "n_layers": int, "n_heads": int, "qk_dim": int, "v_dim": int,
               "d_mlp": int, "attention_dropout": float, "activation": str}  # fmt: skip
TRAIN_FLAGS = {"steps": int, "batch_size": int, "lr": float, "weight_decay": float,
               "warmup_steps": int, "eval_every": int, "eval_examples": int, "seed": int,
               "precision": str, "keep_checkpoints": int}  # fmt: skip


def add_train_parser(commands: argparse._SubParsersAction) -> None:
    train = commands.add_parser(
        "train",
        help="train a model on a task into a run directory",
        description="Train a decoder-only transformer on a task. Defaults are the reference's "
        "(AdamW, warm-up + cosine, batch 128); a JSON --config file with 'model', 'task' and "
        "'train' sections and the flags below override them, flags last. Under "
        "'torchrun --nproc_per_node=N -m latentlens train ...' it trains data-parallel with "
        "the same global batch; rank 0 writes the run directory.",
    )
    train.add_argument("--task", choices=sorted(TASKS), help="default: fuzzy-logic")
    train.add_argument("--attention", choices=sorted(VARIANTS), help="default: softmax")
    train.add_argument("--run-dir", help="run directory (default: runs/TASK-ATTENTION-sSEED)")
    train.add_argument(
        "--resume",
        metavar="RUN_DIR",
        help="continue this run from its newest "
        "checkpoint (other config flags must match the stored config)",
    )
    train.add_argument("--config", type=Path, help="JSON file with model/task/train sections")
    train.add_argument("--device", choices=DEVICE_CHOICES, default="auto")
    train.add_argument("--compile", action="store_true", help="torch.compile the train step (CUDA)")
    train.add_argument("--quiet", action="store_true", help="no progress bar")
    for name, kind in {**MODEL_FLAGS, **TRAIN_FLAGS}.items():
        train.add_argument("--" + name.replace("_", "-"), type=kind, default=None)
    train.set_defaults(handler=run_train)


def add_eval_parser(commands: argparse._SubParsersAction) -> None:
    evaluate = commands.add_parser("eval", help="print the metrics of a trained run")
    evaluate.add_argument("run_dir", type=Path)
    evaluate.add_argument(
        "--split", choices=EVAL_SPLITS, action="append", help="split(s) to evaluate (default: all)"
    )
    evaluate.add_argument("--checkpoint", type=int, help="step (default: the newest)")
    evaluate.add_argument(
        "--examples", type=int, help="examples per split (default: the run's eval_examples)"
    )
    evaluate.add_argument("--device", choices=DEVICE_CHOICES, default="auto")
    evaluate.set_defaults(handler=run_eval)


def resolve_run_config(args: argparse.Namespace) -> dict[str, Any]:
    sections: dict[str, Any] = {"model": {}, "task": {}, "train": {}}
    if args.config is not None:
        try:
            loaded = json.loads(args.config.read_text())
        except (OSError, json.JSONDecodeError) as err:
            raise ValueError(f"--config {args.config} could not be read as JSON ({err})") from None
        unknown = sorted(set(loaded) - set(sections))
        if unknown:
            raise ValueError(
                f"--config {args.config} has unknown sections {unknown}; "
                "allowed: model, task, train"
            )
        sections.update({k: dict(v) for k, v in loaded.items()})
    model = {**sections["model"], "attention": args.attention}
    model.update({k: getattr(args, k) for k in MODEL_FLAGS if getattr(args, k) is not None})
    train = {**sections["train"]}
    train.update({k: getattr(args, k) for k in TRAIN_FLAGS if getattr(args, k) is not None})
    return Trainer.resolve_config(
        args.task,
        model_for_task(args.task, sections["task"] or None, **model),
        TrainConfig.for_task(args.task, **train),
        sections["task"] or None,
    )


def run_train(args: argparse.Namespace) -> int:
    runtime = dict(device=args.device, quiet=args.quiet, compile=args.compile)
    try:
        if args.resume:
            check_resume_flags(args, RunDirectory(args.resume).read_config())
            trainer = Trainer.resume(args.resume, **runtime)
        else:
            args.task, args.attention = args.task or "fuzzy-logic", args.attention or "softmax"
            config = resolve_run_config(args)
            seed = config["train"]["seed"]
            run_dir = args.run_dir or f"runs/{args.task}-{args.attention}-s{seed}"
            trainer = Trainer.create(run_dir, config, **runtime)
        records = trainer.train()
    except TrainingDiverged as err:
        raise ValueError(str(err)) from None
    finally:
        shutdown_distributed()
    if trainer.dist.is_main:
        print(f"run directory: {trainer.run_dir.path}")
        print_table(records)
    return 0


def check_resume_flags(args: argparse.Namespace, stored: dict[str, Any]) -> None:
    """With --resume, every config flag given must equal the stored run's value."""
    if args.config is not None:
        raise ValueError(
            "--config cannot be combined with --resume: the run's config.json is the config"
        )
    given = {("task", "name"): args.task, ("model", "attention"): args.attention}
    given.update({("model", k): getattr(args, k) for k in MODEL_FLAGS})
    given.update({("train", k): getattr(args, k) for k in TRAIN_FLAGS})
    differ = [
        f"{section}.{key}={value!r} (the run has {stored[section].get(key)!r})"
        for (section, key), value in given.items()
        if value is not None and stored[section].get(key) != value
    ]
    if differ:
        raise ValueError(
            f"the run in {args.resume} was made with a different config: "
            f"{'; '.join(differ)}. Resume without these flags, or start a new run"
        )


def run_eval(args: argparse.Namespace) -> int:
    directory = RunDirectory(args.run_dir)
    config = directory.read_config()
    found = dict(list_checkpoints(directory.checkpoints))
    if not found:
        raise CheckpointError(f"{directory.checkpoints} holds no checkpoint")
    step = max(found) if args.checkpoint is None else args.checkpoint
    if step not in found:
        raise CheckpointError(
            f"no checkpoint of step {step} in {directory.checkpoints}; available: {sorted(found)}"
        )
    trainer = Trainer(directory, config, device=args.device, quiet=True)
    trainer.restore(load_checkpoint(found[step]))
    splits = args.split or list(EVAL_SPLITS)
    records = [{"step": step, "split": s, **trainer.evaluate(s, args.examples)} for s in splits]
    print(f"run {directory.path}, checkpoint step {step}")
    print_table(records)
    return 0


def print_table(records: list[dict[str, Any]]) -> None:
    if not records:
        return
    names = [k for k in records[0] if k not in ("step", "split")]
    print(f"{'split':<8}" + "".join(f"{n:>18}" for n in names))
    for record in records:
        print(f"{record['split']:<8}" + "".join(f"{record[n]:>18.4f}" for n in names))
