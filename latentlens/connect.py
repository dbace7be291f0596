"""Seed 001's layer-connection experiment on latentlens's own encoder-decoder
(docs/methods/models.md): a pretrained translation model (a finished
``translation`` run) fine-tuned in four conditions with one training config for all four:

1. ``original``: the layer connection inserted with the original initialisation (at step
   0 it computes exactly what the pretrained model computes), fine-tuned;
2. ``unmodified``: the pretrained model as it is, fine-tuned (the baseline);
3. ``gca``: the connection with the GCA (mirror) initialisation, fine-tuned;
4. ``scratch``: the same architecture as 1, every weight re-initialised, trained for the
   same steps.

The author fine-tuned the baseline with batch 128 and the others with 16; here every
condition shares the batch size, learning rate and step budget. Each condition's run is
``OUT/{condition}-s{seed}`` (reused if finished, resumed if interrupted), with the CTER and
BLEU of the translation task and the routing matrix tracked from step 0.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from latentlens.models import model_config
from latentlens.training import (
    RunDirectory,
    TrainConfig,
    Trainer,
    list_checkpoints,
    load_tracked,
    train_or_resume,
)
from latentlens.training.run_dir import read_jsonl


@dataclass(frozen=True)
class Condition:
    label: str
    connection: str
    pretrained: bool


CONDITIONS: dict[str, Condition] = {
    "original": Condition("bridge, original init, fine-tuned", "original", True),
    "unmodified": Condition("unmodified, fine-tuned (baseline)", "none", True),
    "gca": Condition("bridge, GCA init, fine-tuned", "gca", True),
    "scratch": Condition("all re-initialised + bridge, from scratch", "original", False),
}
# docs/methods/numbers.md: opus-mt-de-en on wmt16 de-en after 1 epoch
PAPER = {
    "original": {"bleu": 33.60, "eval_loss": 1.336},
    "unmodified": {"bleu": 36.43, "eval_loss": 1.182},
    "gca": {"bleu": 32.15, "eval_loss": 1.460},
    "scratch": {"bleu": 0.0003, "eval_loss": 11.0},
}
QUALITY = ("bleu_test", "bleu_cg", "cter_instance", "cter_aggregate")


def parse_conditions(names: Sequence[str]) -> list[str]:
    """``all`` or condition names, in the reference's order; a clear error otherwise."""
    if list(names) == ["all"]:
        return list(CONDITIONS)
    unknown = [n for n in names if n not in CONDITIONS]
    if unknown or not names:
        raise ValueError(
            f"--conditions {' '.join(names) or '(none)'}: choose 'all' or some of "
            f"{list(CONDITIONS)}"
        )
    return [n for n in CONDITIONS if n in names]


def base_config(base: str | Path) -> dict[str, Any]:
    """The stored config of a finished encoder-decoder run on the translation task."""
    directory = RunDirectory(base)
    config = directory.read_config()
    if config.get("model_kind") != "encoder-decoder" or config["task"]["name"] != "translation":
        raise ValueError(
            f"--base {base} is a {config.get('model_kind')!r} run on "
            f"{config['task']['name']!r}; the layer connection goes into an encoder-decoder "
            "trained on translation (latentlens train --task translation)"
        )
    if config["model"].get("connection", "none") != "none":
        raise ValueError(
            f"--base {base} already has a layer connection "
            f"({config['model']['connection']!r}); pretrain the base without one"
        )
    if not list_checkpoints(directory.checkpoints):
        raise ValueError(f"--base {base} has no checkpoint yet; train it first")
    return config


def fine_tune_settings(base: dict[str, Any], **overrides: Any) -> dict[str, Any]:
    """The training config shared by the four conditions: the base's, for a third of its
    steps at a tenth of its peak learning rate without warm-up (fine-tuning starts from
    trained weights), evaluated twice; ``overrides`` (not None) win."""
    train = dict(base["train"])
    steps = overrides.get("steps") or max(train["steps"] // 3, 1)
    defaults = {"steps": steps, "lr": train["lr"] / 10, "warmup_steps": 0,
                "eval_every": max(steps // 2, 1), "track": []}  # fmt: skip
    given = {k: v for k, v in overrides.items() if v is not None}
    return {**train, **defaults, **given}


def condition_config(
    base: dict[str, Any], condition: str, seed: int, train: dict[str, Any]
) -> dict[str, Any]:
    """The resolved run config of ``condition`` for ``seed``."""
    model = {**base["model"], "connection": CONDITIONS[condition].connection}
    task = base["task"]
    return Trainer.resolve_config(
        task["name"],
        model_config(base["model_kind"], model),
        TrainConfig.from_dict({**train, "seed": seed}),
        task["config"],
    )


@dataclass(frozen=True)
class ConditionRun:
    condition: str
    seed: int
    base: Path
    run: Path


def plan(
    bases: Sequence[str | Path],
    conditions: Sequence[str],
    out: str | Path,
    seeds: Sequence[int] | None = None,
) -> list[ConditionRun]:
    """Which run fine-tunes which base: one base per seed (its own seed), or one base and
    ``seeds``."""
    bases = [Path(b) for b in bases]
    if seeds is not None and len(bases) > 1:
        raise ValueError("--seeds goes with one --base; several bases bring their own seeds")
    if seeds is None:
        seeds = [base_config(b)["train"]["seed"] for b in bases]
        if len(set(seeds)) < len(seeds):
            raise ValueError(f"the --base runs share seeds {seeds}; give bases of distinct seeds")
        pairs = list(zip(bases, seeds, strict=True))
    else:
        pairs = [(bases[0], seed) for seed in seeds]
    out = Path(out)
    return [
        ConditionRun(condition, seed, base, out / f"{condition}-s{seed}")
        for condition in conditions
        for base, seed in pairs
    ]


def run_conditions(
    runs: Sequence[ConditionRun], train: dict[str, Any] | None = None, **runtime: Any
) -> None:
    """Train every planned run (``train``: overrides of :func:`fine_tune_settings`)."""
    from latentlens.probes import tracking_callbacks  # scikit-learn: only when training

    for one in runs:
        base = base_config(one.base)
        config = condition_config(base, one.condition, one.seed,
                                  fine_tune_settings(base, **(train or {})))  # fmt: skip
        init_from = one.base if CONDITIONS[one.condition].pretrained else None
        train_or_resume(one.run, config, tracking_callbacks(config), init_from=init_from,
                        **runtime)  # fmt: skip


def routing_record(run: Path) -> dict[str, Any] | None:
    """The routing matrix at the first and last record, how far it moved (mean over
    decoder layers of the total-variation distance, 0 to 1) and the share on the GCA
    mirror at the end; ``None`` for a run without a layer connection."""
    path = RunDirectory(run).tracking / "routing_matrix.safetensors"
    if not path.is_file():
        return None
    tracked = load_tracked(path)
    first, last = tracked.values[0].astype(float), tracked.values[-1].astype(float)
    dec, enc = first.shape
    mirror = [last[j, enc - 1 - j] for j in range(min(dec, enc))]
    return {
        "first_step": tracked.steps[0],
        "last_step": tracked.steps[-1],
        "first": np.round(first, 4).tolist(),
        "last": np.round(last, 4).tolist(),
        "moved": float(0.5 * np.abs(last - first).sum(axis=1).mean()),
        "mirror_share": float(np.mean(mirror)),
    }


def run_result(one: ConditionRun) -> dict[str, Any]:
    """One finished run's final quality, test loss and routing."""
    directory = RunDirectory(one.run)
    quality = read_jsonl(directory.tracking / "translation_quality.jsonl")[-1]
    test = directory.last_evaluation()["test"]
    return {
        "condition": one.condition,
        "seed": one.seed,
        "base": str(one.base),
        "run": str(one.run),
        **{key: quality[key] for key in QUALITY},
        "test_loss": test["loss"],
        "routing": routing_record(one.run),
    }


def is_latentlens_run(base: str | Path) -> bool:
    """Whether ``base`` is a latentlens run directory (else a Hugging Face model)."""
    path = Path(base) / "config.json"
    if not path.is_file():
        return False
    try:
        return "model_kind" in json.loads(path.read_text())
    except json.JSONDecodeError:
        return False


def plan_marian(
    base: str, conditions: Sequence[str], out: str | Path, seeds: Sequence[int] | None
) -> list[ConditionRun]:
    """The runs of a Hugging Face MarianMT base: each condition for each seed (default 0)."""
    return [
        ConditionRun(condition, seed, Path(base), Path(out) / f"{condition}-s{seed}")
        for condition in conditions
        for seed in (seeds or [0])
    ]


def marian_result(one: ConditionRun) -> dict[str, Any]:
    """A finished MarianMT fine-tune's BLEU (start and end), test loss and routing."""
    records = RunDirectory(one.run).read_metrics()
    return {
        "condition": one.condition,
        "seed": one.seed,
        "base": str(one.base),
        "run": str(one.run),
        "bleu_start": records[0]["bleu"],
        "bleu_test": records[-1]["bleu"],
        "test_loss": records[-1]["loss"],
        "routing": routing_record(one.run),
    }


def summarise(results: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per condition: mean and sample std over seeds of each quality, the test loss and,
    where there is a connection, the routing's movement and mirror share."""
    summary = {}
    measured = [k for k in ("bleu_start", *QUALITY, "test_loss") if k in results[0]]
    for condition in dict.fromkeys(r["condition"] for r in results):
        rows = [r for r in results if r["condition"] == condition]
        values = {key: [r[key] for r in rows] for key in measured}
        if rows[0]["routing"] is not None:
            values["routing_moved"] = [r["routing"]["moved"] for r in rows]
            values["mirror_share"] = [r["routing"]["mirror_share"] for r in rows]
        summary[condition] = {
            "seeds": len(rows),
            **{k: (statistics.mean(v), statistics.stdev(v) if len(v) > 1 else float("nan"))
               for k, v in values.items()},
        }  # fmt: skip
    return summary


def write_results(out: str | Path, results: Sequence[dict[str, Any]]) -> Path:
    path = Path(out) / "connect.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"runs": list(results), "summary": summarise(results), "paper": PAPER}
    path.write_text(json.dumps(payload, indent=2) + "\n")
    return path


def summary_cell(row: dict[str, Any], key: str, scale: float = 1.0, digits: int = 2) -> str:
    """``mean ± std`` of one summarised quantity (``-`` where the condition has none)."""
    if key not in row:
        return "-"
    mean, std = row[key]
    return f"{scale * mean:.{digits}f} ± {scale * std:.{digits}f}"


def format_table(summary: dict[str, dict[str, Any]]) -> str:
    """The four conditions as a text table, mean ± std, beside the author's BLEU."""
    header = (
        f"{'condition':<11}{'seeds':>6}{'BLEU start':>16}{'BLEU test':>16}{'BLEU CG':>16}"
        f"{'CTER inst %':>16}{'test loss':>18}{'routing moved':>16}{'paper BLEU':>12}"
    )
    lines = [header]
    for condition, row in summary.items():
        lines.append(
            f"{condition:<11}{row['seeds']:>6}{summary_cell(row, 'bleu_start'):>16}"
            f"{summary_cell(row, 'bleu_test'):>16}"
            f"{summary_cell(row, 'bleu_cg'):>16}{summary_cell(row, 'cter_instance', 100, 1):>16}"
            f"{summary_cell(row, 'test_loss', 1, 4):>18}"
            f"{summary_cell(row, 'routing_moved', 1, 3):>16}{PAPER[condition]['bleu']:>12}"
        )
    return "\n".join(lines)
