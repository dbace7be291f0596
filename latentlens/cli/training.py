"""``latentlens train`` and ``latentlens eval``."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from latentlens.cli.choices import (
    CONNECTIONS,
    DEVICE_CHOICES,
    FUSE_CHOICES,
    LOGGERS,
    MODEL_CHOICES,
    PRECISIONS,
    RUN_HELP,
    SUPPORTS,
    TASK_CHOICES,
    VARIANT_NAMES,
    resolve_runs,
)

if TYPE_CHECKING:
    from latentlens.training import Trainer

# The parser is built from plain strings; the library (torch, the models, the trainer) is
# imported by the functions that run a command, so that --help answers at once.
MODEL_FLAGS = {"d_model": int, "n_layers": int, "n_heads": int, "qk_dim": int, "v_dim": int,
               "d_mlp": int, "attention_dropout": float, "activation": str}  # fmt: skip
TRAIN_FLAGS = {"steps": int, "batch_size": int, "lr": float, "weight_decay": float,
               "warmup_steps": int, "eval_every": int, "eval_examples": int, "seed": int,
               "precision": str, "keep_checkpoints": int, "grad_clip": float}  # fmt: skip
# Flags of the two dicts above with a closed set of values: (choices, help).
FLAG_CHOICES = {
    "precision": (
        PRECISIONS,
        "fp32: strict float32 (default); tf32: float32 with CUDA matmuls on TF32 tensor "
        "cores, JAX's default on GPUs; bf16: bf16 autocast",
    )
}
TASK_FLAGS = {"support": str, "data_dir": str}
SEQ2SEQ_FLAGS = {"fuse": str, "connection": str}


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
    except TrainingDiverged as err:
        raise ValueError(str(err)) from None
    finally:
        shutdown_distributed()
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
    from latentlens.training.fast_path import options_of, path_of, requested_path
    from latentlens.training.trainer import choose_run_path

    train = config["train"]
    if args.eager or args.compile or args.fused or args.cuda_graphs:
        train["path"] = path_of(args.compile, args.fused, args.cuda_graphs)
    elif train.get("path") is None and requested_path() is not None:
        train["path"] = requested_path()
    elif train.get("path") is None:
        choice = choose_run_path(config, args.device)
        train["path"] = choice.path
        if not args.quiet or choice.calibration is not None:
            print(f"path: {choice.path} ({choice.reason}; --eager, --compile or --fused "
                  "choose one)", file=sys.stderr)  # fmt: skip
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


def run_eval(args: argparse.Namespace) -> int:
    from latentlens.training import RunDirectory, Trainer
    from latentlens.training.checkpoint import select_checkpoint
    from latentlens.training.config import check_eval_examples
    from latentlens.training.run_dir import require_distinct, seeds_of_one_config

    if args.examples is not None:
        check_eval_examples("--examples", args.examples)
    runs: list[Path] = resolve_runs(args.run_dir)
    require_distinct(runs)
    for run in runs:  # every refusal before the first evaluation
        RunDirectory(run).read_config()
        select_checkpoint(RunDirectory(run).checkpoints, args.checkpoint)
    evaluated = []
    for run in runs:
        trainer = Trainer.load(run, args.checkpoint, args.device)
        splits = args.split or list(trainer.task.eval_splits)
        for split in splits:
            trainer.task.check_split(split)
        records = [
            {"step": trainer.step, "split": s, **trainer.evaluate(s, args.examples, errors=True)}
            for s in splits
        ]
        examples = args.examples or trainer.config["train"]["eval_examples"]
        print(
            f"run {trainer.run_dir.path}, checkpoint step {trainer.step}; the run's fixed "
            f"evaluation set, {examples:,} examples a split (± standard error over batches)"
        )
        print_table(records)
        if trainer.task_name == "translation":  # the benchmark's own metrics, by decoding
            print_translation_quality(trainer, args.examples)
        evaluated.append(records)
    if len(runs) > 1 and seeds_of_one_config(runs):
        print_seed_summary(evaluated)
    return 0


def print_translation_quality(trainer: Any, examples: int | None) -> None:
    """BLEU on the CG and random tests and CTER (instance, aggregate) by greedy decoding,
    the translation benchmark's headline metrics."""
    from latentlens.probes.translation import translation_quality

    quality = translation_quality(trainer.model, trainer.task, test_examples=examples or 1_000)
    print(
        f"greedy decoding: BLEU cg {quality['bleu_cg']:.2f}, test {quality['bleu_test']:.2f}; "
        f"CTER instance {100 * quality['cter_instance']:.1f}%, aggregate "
        f"{100 * quality['cter_aggregate']:.1f}% (CG test, lower is better)"
    )


def print_seed_summary(runs: list[list[dict[str, Any]]]) -> None:
    """Each split's final metrics as mean ± sample standard deviation over the seeds' runs
    (``runs``: each run's final evaluation records; none where a resumed run had no steps
    left, and then there is nothing to summarise)."""
    if len(runs) < 2 or not all(runs):
        return
    names = [k for k in runs[0][0] if k not in ("step", "split") and not k.endswith("_se")]
    by_split = [{record["split"]: record for record in records} for records in runs]
    rows = {}
    for split in by_split[0]:
        cells = [[records[split][name] for records in by_split] for name in names]
        rows[split] = [f"{statistics.mean(v):.4f} ± {statistics.stdev(v):.4f}" for v in cells]
    print(f"mean ± std over {len(runs)} seeds")
    _print_split_rows(names, rows, 22)


def print_table(records: list[dict[str, Any]]) -> None:
    """A split per row; a value ``name`` with a ``name_se`` beside it is printed as
    ``value ± standard error``."""
    if not records:
        return
    names = [k for k in records[0] if k not in ("step", "split") and not k.endswith("_se")]

    def cell(record: dict[str, Any], name: str) -> str:
        error = record.get(f"{name}_se")
        return f"{record[name]:.4f}" + ("" if error is None else f" ± {error:.4f}")

    rows = {record["split"]: [cell(record, n) for n in names] for record in records}
    width = 22 if any(f"{n}_se" in records[0] for n in names) else 18
    _print_split_rows(names, rows, width)


def _print_split_rows(names: list[str], rows: dict[str, list[str]], cell_width: int) -> None:
    """A table with a split column as wide as its longest name, then right-aligned cells."""
    width = max(len("split"), *map(len, rows)) + 2
    print(f"{'split':<{width}}" + "".join(f"{n:>{cell_width}}" for n in names))
    for split, cells in rows.items():
        print(f"{split:<{width}}" + "".join(f"{cell:>{cell_width}}" for cell in cells))
