"""A new run's config from ``latentlens train``'s flags: the flags that set config values,
the ``--config`` file (sections, or a run's own config.json) and their resolution."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from latentlens.cli.choices import PRECISIONS

# The flags that set a value of the run's config, by section (plain strings: the library is
# imported by the functions that run a command, so that --help answers at once).
MODEL_FLAGS = {"d_model": int, "n_layers": int, "n_heads": int, "qk_dim": int, "v_dim": int,
               "d_mlp": int, "attention_dropout": float, "activation": str}  # fmt: skip
TRAIN_FLAGS = {"steps": int, "batch_size": int, "lr": float, "weight_decay": float,
               "warmup_steps": int, "eval_every": int, "eval_examples": int, "seed": int,
               "precision": str, "keep_checkpoints": int, "grad_clip": float,
               "tracking_examples": int}  # fmt: skip
# Flags of the two dicts above with a closed set of values or a help line: (choices, help).
FLAG_CHOICES = {
    "precision": (
        PRECISIONS,
        "fp32: strict float32 (default); tf32: float32 with CUDA matmuls on TF32 tensor "
        "cores, JAX's default on GPUs; bf16: bf16 autocast",
    ),
    "tracking_examples": (
        None,
        "examples the task's tracker reads at every evaluation (fuzzy logic's official "
        "r2_attn_latent: default 16,000, the official code's; modular-icl: eval_examples); "
        "even. Fewer is quicker, but the official number changes with its sample",
    ),
}
TASK_FLAGS = {"support": str, "data_dir": str}
SEQ2SEQ_FLAGS = {"fuse": str, "connection": str}


SECTIONS = ("model", "task", "train")


@dataclass(frozen=True)
class ConfigFile:
    """What a ``--config`` file holds: its ``model``, ``task`` (the task's config) and
    ``train`` sections, and the task and model kind it names (a run's config.json names
    both; a hand-written file neither)."""

    sections: dict[str, dict[str, Any]] = field(default_factory=lambda: {s: {} for s in SECTIONS})
    task: str | None = None
    model_kind: str | None = None


# The entries of a run's config.json that describe the run without configuring it (where
# its weights started is a flag, --init-from, not a section).
RUN_RECORD = {"latentlens_version", "task_description", "init_from", "history"}


def read_config_file(path: Path) -> ConfigFile:
    """A ``--config`` file: sections ``model``, ``task`` and ``train``, or a run's own
    ``config.json`` (its task and model kind become the defaults of --task and --model)."""
    try:
        loaded = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"--config {path} could not be read as JSON ({err})") from None
    except RecursionError:  # nesting deeper than Python's parser recurses
        raise ValueError(f"--config {path} is nested too deeply to be a config") from None
    if not isinstance(loaded, dict):
        raise ValueError(f"--config {path} must hold a JSON object with sections {SECTIONS}")
    task = model_kind = None
    if "model_kind" in loaded:  # a run's config.json
        record = loaded.get("task")
        if not isinstance(record, dict) or set(record) != {"name", "config"}:
            raise ValueError(
                f"--config {path} looks like a run's config.json (it has 'model_kind') but "
                "its 'task' section is not {'name': ..., 'config': {...}}"
            )
        loaded = {k: v for k, v in loaded.items() if k not in RUN_RECORD}
        task, model_kind = record["name"], loaded.pop("model_kind")
        loaded["task"] = record["config"]
    unknown = sorted(set(loaded) - set(SECTIONS))
    if unknown:
        raise ValueError(
            f"--config {path} has unknown sections {unknown}; allowed: {', '.join(SECTIONS)} "
            "(or a run's config.json as it is)"
        )
    wrong = sorted(name for name, section in loaded.items() if not isinstance(section, dict))
    if wrong:
        raise ValueError(f"--config {path}: the sections {wrong} must be JSON objects")
    return ConfigFile({s: dict(loaded.get(s, {})) for s in SECTIONS}, task, model_kind)


def apply_config_defaults(args: argparse.Namespace, file: ConfigFile) -> None:
    """Fill --task, --attention and --model from ``file``, then the defaults; a flag that
    contradicts the task a run's config.json was made for is refused."""
    if file.task is not None and args.task not in (None, file.task):
        raise ValueError(
            f"--config {args.config} is a {file.task} run's config, not {args.task}'s; drop "
            "--task or pass a config for that task"
        )
    args.task = args.task or file.task or "fuzzy-logic"
    args.attention = args.attention or file.sections["model"].get("attention") or "softmax"
    args.model = args.model or file.model_kind or "transformer"


def resolve_run_config(args: argparse.Namespace, file: ConfigFile) -> dict[str, Any]:
    """The resolved config of a new run: ``file``'s sections, then the flags."""
    from latentlens.training import TrainConfig, Trainer, model_for_task

    sections = file.sections
    model = {**sections["model"], "attention": args.attention}
    model.update({k: getattr(args, k) for k in MODEL_FLAGS if getattr(args, k) is not None})
    model.update({k: getattr(args, k) for k in SEQ2SEQ_FLAGS if getattr(args, k) is not None})
    train = {**sections["train"]}
    train.update({k: getattr(args, k) for k in TRAIN_FLAGS if getattr(args, k) is not None})
    if args.track is not None:
        train["track"] = args.track
    if getattr(args, "threads", None) is not None:  # the global --threads, flags last
        train["threads"] = args.threads
    task = {**sections["task"]}
    task.update({k: getattr(args, k) for k in TASK_FLAGS if getattr(args, k) is not None})
    return Trainer.resolve_config(
        args.task,
        model_for_task(args.task, task or None, args.model, **model),
        TrainConfig.for_task(args.task, args.model, **train),
        task or None,
    )
