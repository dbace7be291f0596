"""``latentlens eval``: a trained run's checkpoint scored on its fixed evaluation sets."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from latentlens.cli.choices import resolve_runs
from latentlens.cli.tables import print_seed_summary, print_table


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
