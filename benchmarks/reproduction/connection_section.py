"""The layer connection inserted into a pretrained translation model (seed 001,
docs/methods/models.md) on latentlens's own encoder-decoder: each seed's
baseline of the translation experiment is the pretrained model, fine-tuned in the four
conditions of ``latentlens connect`` with one training config; BLEU, CTER, loss, the
differences from the unmodified fine-tune with 95% intervals, and where the routing goes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from latentlens import connect
from latentlens.figures import routing_evolution, save_figure
from latentlens.reports.seeds import difference_interval, mean_std
from latentlens.training import RunDirectory
from reproduction import fusion_gca, translation_section
from reproduction.finding import Finding
from reproduction.runs import RunSpec

TITLE = "Layer connection in a pretrained translation model: four conditions"
# the headline its section opens with (reproduction/finding.py)
FINDING = Finding("BLEU CG test", reference="paper BLEU")
# fine-tuning settings shared by the four conditions, per size (the bases are the
# translation experiment's baselines of that size)
SIZES: dict[str, dict[str, Any]] = {
    "cpu": dict(steps=500, lr=2e-4, eval_every=250),
    "gpu": dict(steps=3_000, lr=1e-4, eval_every=1_000),
    "tiny": dict(steps=4, lr=1e-3, eval_every=2),
}
LABELS = {"bleu_test": "BLEU random test", "bleu_cg": "BLEU CG test",
          "cter_instance": "CTER instance", "cter_aggregate": "CTER aggregate",
          "test_loss": "test loss"}  # fmt: skip


def base_spec(out: Path, size: str, seed: int) -> RunSpec:
    """The translation experiment's baseline of ``seed``: the pretrained model."""
    path = translation_section.run_path(out.parent / "translation", "baseline", seed)
    config = fusion_gca.run_config("baseline", seed, translation_section.SIZES[size])
    return RunSpec(path, config)


def plan(size: str, seeds: int, out: Path) -> list[RunSpec]:
    specs = []
    for seed in range(seeds):
        base = base_spec(out, size, seed)
        specs.append(base)
        settings = connect.fine_tune_settings(base.config, **SIZES[size])
        for condition, spec in connect.CONDITIONS.items():
            config = connect.condition_config(base.config, condition, seed, settings)
            init_from = base.path if spec.pretrained else None
            specs.append(RunSpec(out / f"{condition}-s{seed}", config, init_from=init_from))
    return specs


def difference_cell(results: list[dict[str, Any]], condition: str, key: str, scale: float) -> str:
    ours = [scale * r[key] for r in results if r["condition"] == condition]
    base = [scale * r[key] for r in results if r["condition"] == "unmodified"]
    diff, low, high = difference_interval(ours, base)
    return f"{diff:+.2f} [{low:+.2f}, {high:+.2f}]"


def mean_routing(results: list[dict[str, Any]], condition: str, which: str) -> np.ndarray:
    return np.mean([r["routing"][which] for r in results if r["condition"] == condition], axis=0)


def routing_rows(matrix: np.ndarray) -> list[str]:
    enc = matrix.shape[1]
    lines = ["| decoder layer | " + " | ".join(f"enc {k + 1}" for k in range(enc)) + " |",
             "|---|" + "---|" * enc]  # fmt: skip
    lines += [f"| {j + 1} | " + " | ".join(f"{v:.2f}" for v in row) + " |"
              for j, row in enumerate(matrix)]  # fmt: skip
    return lines


def report(out: Path, size: str, seeds: int, device: str, figures: Path) -> str:
    runs = [
        connect.ConditionRun(
            condition, seed, base_spec(out, size, seed).path, out / f"{condition}-s{seed}"
        )  # fmt: skip
        for condition in connect.CONDITIONS
        for seed in range(seeds)
    ]
    results = [connect.run_result(one) for one in runs]
    base_config = base_spec(out, size, 0).config
    tuned = RunDirectory(out / "gca-s0").read_config()["train"]
    lines = [
        f"## {TITLE}",
        "",
        "Seed 001's experiment ([Methods: models](methods/models.md#the-encoderdecoder-layer-"
        "connection-original-and-gca)) on latentlens's "
        "encoder-decoder: each seed's translation baseline above "
        f"({base_config['train']['steps']:,} steps at lr {base_config['train']['lr']:g}) is "
        "the pretrained model, then fine-tuned in four conditions with one config for all "
        f"four: {tuned['steps']:,} steps of batch {tuned['batch_size']} at lr "
        f"{tuned['lr']:g} (cosine decay, no warm-up). `scratch` re-initialises every weight "
        "and trains the same steps. The author fine-tuned opus-mt-de-en on wmt16 (1M pairs, "
        "1 epoch) with batch 16 for three conditions and 128 for the baseline; here the "
        f"batch is shared. Mean ± std over {seeds} seeds (one pretrained base each); the "
        "paper column is the author's test BLEU on wmt16, a different task and scale: "
        "compare the ordering, not the values. Command: `latentlens connect --base "
        "RUN_DIR ... --conditions all` runs the same.",
        "",
        "| condition | " + " | ".join(LABELS.values()) + " | paper BLEU |",
        "|---|" + "---|" * (len(LABELS) + 1),
    ]
    for condition, spec in connect.CONDITIONS.items():
        rows = [r for r in results if r["condition"] == condition]
        cells = [mean_std([r[k] for r in rows], 2 if "bleu" in k else 3) for k in LABELS]
        lines.append(f"| {condition}: {spec.label} | " + " | ".join(cells)
                     + f" | {connect.PAPER[condition]['bleu']} |")  # fmt: skip
    lines += [
        "",
        "Difference from the unmodified fine-tune (mean, 95% Welch interval over seeds); "
        "the author's ordering is unmodified > original > GCA >> scratch in BLEU:",
        "",
        "| condition | ΔBLEU CG | ΔBLEU random test | ΔCTER instance (points) |",
        "|---|---|---|---|",
    ]
    for condition in ("original", "gca", "scratch"):
        lines.append(
            f"| {condition} | {difference_cell(results, condition, 'bleu_cg', 1)} | "
            f"{difference_cell(results, condition, 'bleu_test', 1)} | "
            f"{difference_cell(results, condition, 'cter_instance', 100)} |"
        )
    lines += [
        "",
        "How far the routing moved over the fine-tune (mean over decoder layers of the "
        "total-variation distance between the first and last routing matrix, 0 to 1) and "
        "the share on the GCA mirror (decoder layer j reading encoder layer L + 1 - j) at "
        "the end:",
        "",
        "| condition | routing moved | mirror share at the end |",
        "|---|---|---|",
    ]
    for condition in ("original", "gca", "scratch"):
        rows = [r["routing"] for r in results if r["condition"] == condition]
        lines.append(f"| {condition} | {mean_std([r['moved'] for r in rows], 3)} | "
                     f"{mean_std([r['mirror_share'] for r in rows], 3)} |")  # fmt: skip
    for condition in ("gca", "original"):
        lines += ["", f"Routing R of `{condition}` at the start and end of the fine-tune "
                  f"(mean over seeds), start:", ""]  # fmt: skip
        lines += routing_rows(mean_routing(results, condition, "first"))
        lines += ["", "end:", ""]
        lines += routing_rows(mean_routing(results, condition, "last"))
    save_figure(routing_evolution(out / "gca-s0"), figures / "connection-routing-gca", ("png",))
    lines += ["", f"![routing over the GCA fine-tune, seed 0]({figures.name}/"
              "connection-routing-gca.png)"]  # fmt: skip
    return "\n".join(lines)
