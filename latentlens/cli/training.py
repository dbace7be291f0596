"""The parsers of ``latentlens train`` and ``latentlens eval``; the commands themselves are
:mod:`latentlens.cli.train_command` and :mod:`latentlens.cli.eval_command`."""

from __future__ import annotations

import argparse
from pathlib import Path

from latentlens.cli.choices import (
    CONNECTIONS,
    DEVICE_CHOICES,
    FUSE_CHOICES,
    LOGGERS,
    MODEL_CHOICES,
    RUN_HELP,
    SUPPORTS,
    TASK_CHOICES,
    VARIANT_NAMES,
)
from latentlens.cli.eval_command import run_eval
from latentlens.cli.run_config import FLAG_CHOICES, MODEL_FLAGS, TRAIN_FLAGS
from latentlens.cli.train_command import run_train


def add_train_parser(commands: argparse._SubParsersAction) -> None:
    train = commands.add_parser(
        "train",
        help="train a model on a task into a run directory",
        description="Train a model on a task. Defaults are the reference's for the task and "
        "model (AdamW, warm-up + cosine, batch 128); a JSON --config file with 'model', 'task' and "
        "'train' sections and the flags below override them, flags last. Under "
        "'torchrun --nproc_per_node=N -m latentlens train ...' it trains data-parallel with "
        "the same global batch; rank 0 writes the run directory.",
    )
    train.add_argument(
        "--task",
        choices=TASK_CHOICES,
        help="default: fuzzy-logic (cognition is the translation task)",
    )
    train.add_argument("--attention", choices=VARIANT_NAMES, help="default: softmax")
    train.add_argument(
        "--model",
        choices=MODEL_CHOICES,
        help="model kind (default: transformer; vanilla is the same; on translation, "
        "transformer is the encoder-decoder and fusion adds fuse-attention)",
    )
    train.add_argument("--fuse", choices=FUSE_CHOICES, help="translation: fuse-attention where")
    train.add_argument(
        "--connection",
        choices=CONNECTIONS,
        help="translation: encoder-decoder layer connection and its initialisation",
    )
    train.add_argument(
        "--support",
        choices=[s for s in SUPPORTS if s != "custom"],
        help="modular-icl: the training support (default: connected-plus); custom mask sets "
        "go in the --config file's task section",
    )
    train.add_argument(
        "--data-dir",
        help="translation: a folder with the real CoGnition release (train/valid/test/cg-test "
        "files, cg-test.compound, lexicon) instead of its synthetic twin",
    )
    train.add_argument("--run-dir", help="run directory (default: runs/TASK-ATTENTION-sSEED)")
    train.add_argument(
        "--seeds",
        type=int,
        nargs="+",
        metavar="SEED",
        help="train these seeds at once in one process (one vmapped step, which "
        "--compile and --cuda-graphs apply to), one run directory each: RUN_DIR-sSEED",
    )
    train.add_argument(
        "--resume",
        metavar="RUN_DIR",
        nargs="+",
        help="continue this run from its newest checkpoint (from step 0 if it has none); "
        "--lr, --weight-decay, --grad-clip and --warmup-steps change from there on (kept in "
        "its config history), other config flags must match the stored config; several runs "
        "trained together with --seeds resume together",
    )
    train.add_argument(
        "--init-from",
        metavar="RUN_DIR",
        help="start from this run's newest weights (fine-tuning), or a zoo model's (zoo:NAME): "
        "same model kind and task; the model may add a --connection the run did not have",
    )
    train.add_argument(
        "--config",
        type=Path,
        help="JSON file with model/task/train sections, or a run's config.json (its task and "
        "model kind too): a new run of that config, flags overriding it",
    )
    train.add_argument("--device", choices=DEVICE_CHOICES, default="auto")
    train.add_argument(
        "--compile",
        action="store_true",
        help="torch.compile the train step (on the CPU: C++ kernels, needs a C++ compiler)",
    )
    train.add_argument(
        "--fused",
        action="store_true",
        help="compute attention and the MLP's GELU with latentlens's fused CPU kernels (C, "
        "built on first use; float32, the same step to rounding; needs a C compiler; "
        "combines with --compile)",
    )
    train.add_argument(
        "--cuda-graphs",
        action="store_true",
        help="capture the whole train step (data, forward, backward, AdamW) in one CUDA graph",
    )
    train.add_argument(
        "--eager",
        action="store_true",
        help="compute the step eagerly. Without --eager, --compile, --fused or "
        "--cuda-graphs, a new run of 5,000 steps or more times each path on a few steps "
        "(cached per machine and model) and takes the fastest; shorter runs are eager. "
        "The path is recorded in the run's config and kept on resume",
    )
    train.add_argument(
        "--time-budget",
        type=float,
        metavar="SECONDS",
        help="checkpoint and stop before this much wall time has passed (exit code 3); the "
        "same command then continues the run, so a series of short commands finishes it",
    )
    train.add_argument(
        "--log",
        nargs="+",
        choices=LOGGERS,
        metavar="TRACKER",
        help="also log every evaluation and the config to tensorboard (RUN/tensorboard/) "
        "and/or wandb (offline without an API key); metrics.jsonl stays the record",
    )
    train.add_argument("--quiet", action="store_true", help="no progress bar")
    train.add_argument(
        "--track",
        nargs="+",
        metavar="HOOK",
        help="record these hooks' activations (mean over a fixed batch) at step 0 and every "
        "evaluation into RUN_DIR/tracking/: names or patterns such as 'blocks.*.attn.hook_pattern' "
        "(`latentlens inspect` lists the hooks); `latentlens figures` draws them",
    )
    for name, kind in {**MODEL_FLAGS, **TRAIN_FLAGS}.items():
        choices, text = FLAG_CHOICES.get(name, (None, None))
        flag = "--" + name.replace("_", "-")
        train.add_argument(flag, type=kind, default=None, choices=choices, help=text)
    train.set_defaults(handler=run_train)


def add_eval_parser(commands: argparse._SubParsersAction) -> None:
    evaluate = commands.add_parser(
        "eval",
        help="print the metrics of a trained run",
        description="Evaluate a trained run's checkpoint on its task's splits and print a "
        "metrics table, each value ± its standard error over the evaluation batches. Given "
        "several runs, a table each and, where the runs differ only in "
        "their seed, each split's mean ± std over them.",
    )
    evaluate.add_argument("run_dir", type=Path, nargs="+", metavar="RUN_DIR", help=RUN_HELP)
    evaluate.add_argument(
        "--split", action="append", help="split(s) to evaluate (default: the task's eval splits)"
    )
    evaluate.add_argument("--checkpoint", type=int, help="step (default: the newest)")
    evaluate.add_argument(
        "--examples", type=int, help="examples per split (default: the run's eval_examples)"
    )
    evaluate.add_argument("--device", choices=DEVICE_CHOICES, default="auto")
    evaluate.set_defaults(handler=run_eval)
