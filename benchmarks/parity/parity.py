"""Training parity with the official JAX code: both implementations trained on the same
small configurations for N seeds, every metric's mean ± std and a two-sided test of the
difference, with learning curves.

    python benchmarks/parity/parity.py --official PATH [--tasks sraven fuzzy-logic] [--seeds 5]
        [--variants softmax linear hyla] [--jobs 2] [--out runs/parity]
        [--results benchmarks/results]

``PATH`` is a checkout of smonsays/hypernetwork-attention; its side runs in
``benchmarks/parity/parity_official.py`` (one subprocess per run, needs the ``parity`` extra).
latentlens's side trains through the sweep engine (``latentlens.sweep``, one sweep per
seed). Both use the issue's configurations (:data:`CONFIGS`): the same data sizes, model,
batch, learning rate, warm-up then cosine to lr/10, weight decay 0.1 off 1-D parameters,
attention dropout 0.1, steps and evaluation problems. Each run draws its split of the
rule (term) combinations from its seed on both sides, so a difference in the split draw
is part of the seed noise that the test measures against. Evaluation is on fresh problems
of each split on both sides (see ``parity_official.py``).

Finished runs are kept under ``--out`` and reused (a run whose spec changed is redone), so
the command can be stopped and run again. Writes, per task, ``parity_{task}.json`` (every
curve, per seed) and ``parity_{task}.md`` (the table) under ``--results`` and the learning
curves to ``docs/figures/parity-{task}.png``. ``--label NAME`` names another version of
latentlens's side (e.g. ``before``): its runs go to their own folder and its files end in
``-NAME``, the official runs are shared. Run it with the other version installed
(not editable: an editable install wins over ``PYTHONPATH``) in its own environment, from a
folder outside the checkout (Ray puts the driver's working directory on its workers'
import path), with absolute ``--out``, ``--results`` and ``--figures``.

The test: Welch's two-sided t-test of the seed means (official vs latentlens) for each
variant, split and metric at the last step, with the 95% interval of the difference.
Parity holds where p > 0.05.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import json
import math
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
BENCHMARKS = HERE.parent
VARIANTS = ("softmax", "linear", "hyla")


@dataclass(frozen=True)
class ParityConfig:
    """One task's parity configuration, in latentlens's names (the driver maps them)."""

    data: dict[str, Any]
    model: dict[str, Any]
    batch_size: int
    lr: float
    warmup_steps: int
    steps: int
    output_dim: int
    metrics: dict[str, str]  # official name -> latentlens name
    weight_decay: float = 0.1
    eval_examples: int = 2048
    eval_every: int = 250
    splits: tuple[str, ...] = ("test", "ood")
    lower_is_better: tuple[str, ...] = field(default=("loss",))


# The small SRAVEN configuration (2 features of 5 values, T = 18) and a small
# fuzzy-logic one: the reference's task and model (L = 4, K = 2, D = 128, 8 heads of 2) at
# the reference's batch and learning rate, 3,000 steps.
CONFIGS: dict[str, ParityConfig] = {
    "sraven": ParityConfig(
        data={"num_features": 2, "num_values": 5, "frac_ood": 0.25, "permute_features": True},
        model={
            "n_layers": 2,
            "d_model": 64,
            "n_heads": 8,
            "qk_dim": 32,
            "v_dim": 32,
            "d_mlp": 128,
            "attention_dropout": 0.1,
        },
        batch_size=64,
        lr=3e-3,
        warmup_steps=100,
        steps=3000,
        output_dim=5,
        metrics={"acc": "accuracy", "acc_per_feature": "feature_accuracy", "loss": "loss"},
    ),
    "fuzzy-logic": ParityConfig(
        data={
            "num_variables": 4,
            "num_terms": 2,
            "seq_len": 16,
            "frac_test": 0.5,
            "frac_ood_conj": 0.25,
        },
        model={
            "n_layers": 2,
            "d_model": 128,
            "n_heads": 8,
            "qk_dim": 16,
            "v_dim": 16,
            "d_mlp": 256,
            "attention_dropout": 0.1,
        },
        batch_size=128,
        lr=1e-3,
        warmup_steps=100,
        steps=3000,
        output_dim=1,
        metrics={"r2": "r2", "loss": "loss"},
    ),
}


def official_spec(task: str, cfg: ParityConfig, variant: str, seed: int) -> dict[str, Any]:
    """The run spec ``parity_official.py`` reads."""
    if cfg.steps <= 2 * cfg.warmup_steps:
        raise SystemExit(
            f"error: {task}: steps={cfg.steps} must exceed twice warmup_steps="
            f"{cfg.warmup_steps} (optax's cosine decay needs positive decay steps)"
        )
    return {
        "task": task,
        "variant": variant,
        "seed": seed,
        "steps": cfg.steps,
        "eval_every": cfg.eval_every,
        "eval_examples": cfg.eval_examples,
        "batch_size": cfg.batch_size,
        "lr": cfg.lr,
        "warmup_steps": cfg.warmup_steps,
        "weight_decay": cfg.weight_decay,
        "output_dim": cfg.output_dim,
        "data": cfg.data,
        "model": cfg.model,
    }


def run_driver(official: Path, spec: dict[str, Any], out: Path, *mode: str) -> None:
    """``parity_official.py`` on ``spec`` (written beside ``out`` as ``.spec.json``),
    writing ``out``; ``mode``: e.g. ``("--lockstep", "300")``. A failure ends the benchmark
    with the driver's last error line."""
    spec_path = out.with_suffix(".spec.json")
    spec_path.write_text(json.dumps(spec, indent=1))
    command = [sys.executable, str(HERE / "parity_official.py"), "--official", str(official),
               "--spec", str(spec_path), "--out", str(out), *mode]  # fmt: skip
    finished = subprocess.run(command, capture_output=True, text=True)
    if finished.returncode:
        tail = (finished.stderr or finished.stdout).strip().splitlines()[-1:]
        raise SystemExit(f"error: the official code failed ({out.name}): {' '.join(tail)}")


def run_official(official: Path, spec: dict[str, Any], out: Path) -> dict[str, Any]:
    """The official run of ``spec``, trained unless ``out`` already holds it."""
    if out.is_file():
        done = json.loads(out.read_text())
        if done.get("spec") == spec:
            return done
    run_driver(official, spec, out)
    return json.loads(out.read_text())


def run_latentlens(
    task: str,
    cfg: ParityConfig,
    variants: list[str],
    seed: int,
    out: Path,
    jobs: int,
    precision: str = "fp32",
) -> dict[str, list[dict[str, Any]]]:
    """latentlens's runs of one seed (a sweep over the variants) in ``precision``: their
    metric records."""
    from latentlens.sweep import SweepSpec, run_sweep

    data = {**cfg.data, "split_seed": seed}
    train = {
        "steps": cfg.steps,
        "batch_size": cfg.batch_size,
        "lr": cfg.lr,
        "warmup_steps": cfg.warmup_steps,
        "weight_decay": cfg.weight_decay,
        "eval_every": cfg.eval_every,
        "eval_examples": cfg.eval_examples,
        "seed": seed,
        "precision": precision,
    }
    spec = SweepSpec.from_dict(
        {
            "task": task,
            "base": {"task": data, "model": cfg.model, "train": train},
            "axes": {"model.attention": variants},
        }
    )
    run_sweep(spec, out, num_cpus=jobs)
    records = {}
    for cell in spec.cells():
        lines = (out / cell.name / "metrics.jsonl").read_text().splitlines()
        records[cell.values["model.attention"]] = [json.loads(line) for line in lines if line]
    return records


def data_check(official: Path, cfg: ParityConfig, count: int, folder: Path) -> dict[str, Any]:
    """SRAVEN's data distributions side by side, ``count`` problems each over every rule
    combination: the frequency of each panel value, of each pair of the 9F values being
    equal (the rules' and the permutation's footprint), and the share of ambiguous
    problems (:meth:`SRavenTask.ambiguous`, applied to both sides' problems with their own
    permutations). Two-proportion z-scores; with no difference the largest of the few
    hundred is about 3.5."""
    import numpy as np
    import torch

    from latentlens.tasks.base import Batch
    from latentlens.tasks.sraven import GRID, SRavenConfig, SRavenTask

    spec = official_spec("sraven", cfg, "softmax", 0)
    path = folder / "official_sample.npz"
    run_driver(official, spec, path, "--sample", str(count))
    theirs = np.load(path)
    task = SRavenTask(SRavenConfig(**cfg.data), seed=1)
    in_share = len(task.in_dist_indices) / len(task.rule_multisets)
    n_in = round(count * in_share)
    batch = Batch.cat([task.sample(n_in, "train"), task.sample(count - n_in, "ood")])
    nf = cfg.data["num_features"]

    def statistics(values: np.ndarray, perms: np.ndarray) -> dict[str, np.ndarray]:
        grid = torch.as_tensor(values).reshape(-1, GRID, GRID, nf)
        labels = {"grid": grid, "permutations": torch.as_tensor(perms).long()}
        ambiguous = task.ambiguous(Batch(torch.empty(len(values)), grid[:, 2, 2], labels))
        one_hot = values[..., None] == np.arange(cfg.data["num_values"])
        equal = values[:, :, None] == values[:, None, :]
        upper = np.triu_indices(values.shape[1], 1)
        return {
            "value frequencies": one_hot.mean(0).ravel(),
            "pairs equal": equal[:, upper[0], upper[1]].mean(0),
            "ambiguous share": np.array([ambiguous.float().mean().item()]),
        }

    ours_values = batch.labels["grid"].reshape(count, -1).numpy()
    a = statistics(theirs["values"], theirs["permutations"])
    b = statistics(ours_values, batch.labels["permutations"].numpy())
    report = {}
    for name in a:
        pooled = (a[name] + b[name]) / 2
        se = np.sqrt(np.maximum(pooled * (1 - pooled), 1e-12) * 2 / count)
        z = (b[name] - a[name]) / se
        report[name] = {
            "count": int(len(z)),
            "max_abs_z": float(np.abs(z).max()),
            "beyond_3": int((np.abs(z) > 3).sum()),
        }
        if name == "ambiguous share":
            report[name].update(official=float(a[name][0]), latentlens=float(b[name][0]))
    return report


def official_state_dict(arrays: Any, n_layers: int) -> dict[str, Any]:
    """latentlens's ``DecoderTransformer`` state dict from the official Flax parameters
    (``param:`` + Flax's key path, as ``parity_official.py --lockstep`` saves them):
    kernels ``[in, out]`` transposed to ``Linear``'s ``[out, in]``, ``DenseGeneral``'s q/k/v
    kernels ``[d_model, head, d]`` to ``[head, d_model, d]``."""
    import torch

    def get(*keys: str) -> torch.Tensor:
        return torch.from_numpy(arrays["param:['params']" + "".join(f"['{k}']" for k in keys)])

    state = {
        "embed.weight": get("embedding", "kernel").T,
        "embed.bias": get("embedding", "bias"),
        "ln_final.weight": get("decoder_norm", "scale"),
        "ln_final.bias": get("decoder_norm", "bias"),
        "unembed.weight": get("logitdense", "kernel").T,
        "unembed.bias": get("logitdense", "bias"),
    }
    for layer in range(n_layers):
        block, ours = f"transformer_block_{layer}", f"blocks.{layer}."
        attn = (block, "sequence_mixer")
        for norm, name in (("norm1", "ln1"), ("norm2", "ln2")):
            state[f"{ours}{name}.weight"] = get(block, norm, "scale")
            state[f"{ours}{name}.bias"] = get(block, norm, "bias")
        state[f"{ours}attn.rel_pos.table"] = get(block, "relative_embedding", "rel_embedding")
        for flax_name, letter in (("query", "Q"), ("key", "K"), ("value", "V")):
            state[f"{ours}attn.W_{letter}"] = get(*attn, flax_name, "kernel").permute(1, 0, 2)
            state[f"{ours}attn.b_{letter}"] = get(*attn, flax_name, "bias")
        state[f"{ours}attn.W_O"] = get(*attn, "out", "kernel")
        state[f"{ours}attn.b_O"] = get(*attn, "out", "bias")
        for dense, name in (("Dense_0", "fc_in"), ("Dense_1", "fc_out")):
            state[f"{ours}mlp.{name}.weight"] = get(block, "state_mixer", dense, "kernel").T
            state[f"{ours}mlp.{name}.bias"] = get(block, "state_mixer", dense, "bias")
    return state


def lockstep(
    official: Path, task: str, cfg: ParityConfig, variant: str, steps: int, folder: Path
) -> dict[str, Any]:
    """Both implementations from the official initial weights on the official batches,
    attention dropout off: every step's loss side by side. latentlens trains through a
    real :class:`Trainer` (its model, AdamW and schedule), fed the official batches."""
    import tempfile

    import numpy as np
    import torch

    from latentlens.tasks.base import Batch
    from latentlens.training import TrainConfig, Trainer, model_for_task
    from latentlens.training.objective import predict

    spec = official_spec(task, cfg, variant, 0)
    path = folder / f"lockstep-{variant}.npz"
    run_driver(official, spec, path, "--lockstep", str(steps))
    arrays = np.load(path)
    model = model_for_task(
        task, cfg.data, **{**cfg.model, "attention": variant, "attention_dropout": 0.0}
    )
    train = TrainConfig(
        steps=cfg.steps,
        batch_size=cfg.batch_size,
        lr=cfg.lr,
        warmup_steps=cfg.warmup_steps,
        weight_decay=cfg.weight_decay,
    )
    config = Trainer.resolve_config(task, model, train, cfg.data)
    weights = official_state_dict(arrays, cfg.model["n_layers"])

    def train_losses(nudge: bool) -> list[float]:
        """latentlens's losses; ``nudge``: one weight matrix moved by one float32 step
        first (the control: how far rounding alone carries a run)."""
        with tempfile.TemporaryDirectory() as run:
            trainer = Trainer.create(Path(run) / "run", config, device="cpu", quiet=True)
            trainer.model.load_state_dict(weights)
            if nudge:
                with torch.no_grad():
                    w = trainer.model.blocks[0].attn.W_V
                    w.copy_(torch.nextafter(w, torch.full_like(w, math.inf)))
            losses = []
            for step in range(steps):
                targets = torch.from_numpy(arrays["y"][step])
                # SRAVEN: the answer panel [batch, F]; fuzzy logic: the last y, [batch, 1]
                targets = targets.long() if task == "sraven" else targets[:, 0]
                batch = Batch(torch.from_numpy(arrays["x"][step]), targets, {})
                trainer.lr.fill_(trainer.train_cfg.learning_rate(step))
                trainer.optimizer.zero_grad(set_to_none=True)
                predictions = predict(trainer.model, trainer.task, batch).float()
                loss = trainer.task.loss(predictions, batch)
                loss.backward()
                trainer.optimizer.step()
                losses.append(loss.item())
            trainer.lock.release()
        return losses

    ours, nudged = np.array(train_losses(False)), np.array(train_losses(True))
    theirs = arrays["losses"]
    return {
        "variant": variant,
        "steps": steps,
        "max_abs_difference": float(np.abs(ours - theirs).max()),
        "control_difference": float(np.abs(ours - nudged).max()),
        "last_official": float(theirs[-1]),
        "last_latentlens": float(ours[-1]),
        "first_loss": float(theirs[0]),
    }


def welch(a: list[float], b: list[float]) -> tuple[float, float, float]:
    """Difference of means b - a, its 95% interval's half-width (Welch-Satterthwaite) and
    the two-sided p-value."""
    from scipy import stats

    na, nb = len(a), len(b)
    ma, mb = sum(a) / na, sum(b) / nb
    va = sum((x - ma) ** 2 for x in a) / (na - 1)
    vb = sum((x - mb) ** 2 for x in b) / (nb - 1)
    se2 = va / na + vb / nb
    if se2 == 0:
        return mb - ma, 0.0, 1.0 if mb == ma else 0.0
    df = se2**2 / ((va / na) ** 2 / (na - 1) + (vb / nb) ** 2 / (nb - 1))
    t = (mb - ma) / math.sqrt(se2)
    return mb - ma, stats.t.ppf(0.975, df) * math.sqrt(se2), 2 * stats.t.sf(abs(t), df)


def mean_std(values: list[float]) -> tuple[float, float]:
    mean = sum(values) / len(values)
    var = sum((v - mean) ** 2 for v in values) / max(len(values) - 1, 1)
    return mean, math.sqrt(var)


def curves(task: str, cfg: ParityConfig, official: dict, ours: dict) -> dict[str, Any]:
    """``{impl: {variant: {split: {metric: {step: [value per seed]}}}}}`` in latentlens's
    metric names, from both sides' records."""
    table: dict[str, Any] = {"official": {}, "latentlens": {}}
    for (variant, _seed), run in sorted(official.items()):
        for record in run["records"]:
            if record["split"] not in cfg.splits:
                continue
            for name, ours_name in cfg.metrics.items():
                by_step = (
                    table["official"]
                    .setdefault(variant, {})
                    .setdefault(record["split"], {})
                    .setdefault(ours_name, {})
                )
                by_step.setdefault(record["step"], []).append(record[name])
    for (variant, _seed), records in sorted(ours.items()):
        for record in records:
            if record["split"] not in cfg.splits:
                continue
            for ours_name in cfg.metrics.values():
                by_step = (
                    table["latentlens"]
                    .setdefault(variant, {})
                    .setdefault(record["split"], {})
                    .setdefault(ours_name, {})
                )
                by_step.setdefault(record["step"], []).append(record[ours_name])
    return table


def summary_rows(cfg: ParityConfig, table: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per variant, split and metric at the last step: both means ± std, the
    difference with its 95% interval and Welch's p."""
    rows = []
    for variant, splits in table["official"].items():
        for split, metrics in splits.items():
            for metric, by_step in metrics.items():
                last = max(by_step)
                a = by_step[last]
                b = table["latentlens"][variant][split][metric][last]
                diff, half, p = welch(a, b)
                rows.append(
                    {
                        "variant": variant,
                        "split": split,
                        "metric": metric,
                        "step": last,
                        "official": a,
                        "latentlens": b,
                        "difference": diff,
                        "ci95": half,
                        "p": p,
                    }
                )
    return rows


def markdown(
    task: str,
    cfg: ParityConfig,
    rows: list[dict[str, Any]],
    seeds: int,
    command: str,
    data: dict[str, Any] | None,
    locked: list[dict[str, Any]] = (),
) -> str:
    lines = [
        f"# Parity: {task}, {seeds} seeds, {cfg.steps} steps",
        "",
        f"`{command}`",
        "",
        "| variant | split | metric | official | latentlens | latentlens − official [95% CI] | p |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        a, b = mean_std(row["official"]), mean_std(row["latentlens"])
        lines.append(
            f"| {row['variant']} | {row['split']} | {row['metric']} | {a[0]:.3f} ± {a[1]:.3f} "
            f"| {b[0]:.3f} ± {b[1]:.3f} | {row['difference']:+.3f} "
            f"[{row['difference'] - row['ci95']:+.3f}, {row['difference'] + row['ci95']:+.3f}] "
            f"| {row['p']:.3f} |"
        )
    below = sum(row["p"] <= 0.05 for row in rows)
    lines += [
        "",
        f"{below} of {len(rows)} comparisons differ at p <= 0.05 "
        f"(about {0.05 * len(rows):.1f} expected by chance when none differs).",
    ]
    if locked:
        lines += [
            "",
            f"Lockstep, {locked[0]['steps']} steps from the official initial weights on the "
            "official batches (attention dropout off). Control: latentlens against itself "
            "with one weight matrix moved by one float32 step, what rounding alone does.",
            "",
            "| variant | largest loss difference to the official | control | loss at the "
            "end, official / latentlens |",
            "|---|---|---|---|",
        ]
        for row in locked:
            lines.append(
                f"| {row['variant']} | {row['max_abs_difference']:.1e} | "
                f"{row['control_difference']:.1e} | {row['last_official']:.4f} / "
                f"{row['last_latentlens']:.4f} |"
            )
    if data:
        lines += ["", "Data distributions, both sides over every rule combination:", ""]
        for name, check in data.items():
            lines.append(
                f"- {name}: {check['count']} statistics, largest |z| {check['max_abs_z']:.2f}, "
                f"{check['beyond_3']} beyond 3"
                + (
                    f" (official {check['official']:.4f}, latentlens {check['latentlens']:.4f})"
                    if "official" in check
                    else ""
                )
            )
    return "\n".join(lines) + "\n"


SECTION_TITLE = "## Training parity with the official code"


def results_section(results: Path) -> str:
    """The parity section of docs/RESULTS.md, from every ``parity_{task}.json`` in
    ``results``: per task, each comparison's means ± std, difference [95% CI] and p, with
    the earlier version's p beside it where a ``-before`` file exists."""
    results_files = [p for p in sorted(results.glob("parity_*.json")) if "-before" not in p.stem]
    lines = [
        SECTION_TITLE,
        "",
        parity_finding([json.loads(path.read_text()) for path in results_files]),
        "",
        "Written by `benchmarks/parity/parity.py` (see [Reproducing](reproducing.md#parity-"
        "with-the-official-code)): the official JAX code and latentlens trained on the same small "
        "configurations, 5 seeds each, evaluated on fresh problems; Welch's two-sided test "
        "at the last step. *before*: latentlens before the relative-position initialisation "
        "was fixed (its own runs, the same official runs). The fix (commit 6ba4c21, "
        "2026-11-25) changes every model with relative positions; the other sections of "
        "this page were trained before it and, as of that date, not yet again.",
    ]
    for path in results_files:
        result = json.loads(path.read_text())
        before_path = path.with_name(f"{path.stem}-before.json")
        before = json.loads(before_path.read_text()) if before_path.is_file() else None
        key = lambda r: (r["variant"], r["split"], r["metric"])  # noqa: E731
        earlier = {key(r): r for r in before["summary"]} if before else {}
        cfg = result["config"]
        lines += [
            "",
            f"### {result['task']}: {cfg['steps']} steps, batch {cfg['batch_size']}, "
            f"lr {cfg['lr']}",
            "",
            "| variant | split | metric | official | latentlens | difference [95% CI] | p "
            "| before: latentlens | before: p |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for row in result["summary"]:
            a, b = mean_std(row["official"]), mean_std(row["latentlens"])
            old = earlier.get(key(row))
            old_cells = f"{mean_std(old['latentlens'])[0]:.3f} | {old['p']:.3f}" if old else "| "
            lines.append(
                f"| {row['variant']} | {row['split']} | {row['metric']} | {a[0]:.3f} ± "
                f"{a[1]:.3f} | {b[0]:.3f} ± {b[1]:.3f} | {row['difference']:+.3f} "
                f"[{row['difference'] - row['ci95']:+.3f}, "
                f"{row['difference'] + row['ci95']:+.3f}] | {row['p']:.3f} | {old_cells} |"
            )
        below = sum(r["p"] <= 0.05 for r in result["summary"])
        lines += ["", f"{below} of {len(result['summary'])} comparisons at p <= 0.05.", ""]
        for row in result.get("lockstep", []):
            lines.append(
                f"- Lockstep ({row['steps']} steps, same weights and batches), {row['variant']}: "
                f"largest loss difference {row['max_abs_difference']:.1e}, control "
                f"{row['control_difference']:.1e}."
            )
        for name, check in (result.get("data_check") or {}).items():
            lines.append(
                f"- Data, {name}: largest |z| {check['max_abs_z']:.2f} of {check['count']} "
                "(50,000 problems a side)."
            )
        task = result["task"]
        lines += ["", f"![{task}: learning curves of both implementations, mean ± std over "
                  f"seeds](figures/parity-{task}.png)"]  # fmt: skip
    return "\n".join(lines)


def parity_finding(results: list[dict[str, Any]]) -> str:
    """The section's finding: how many final-metric comparisons of all tasks differ at
    p <= 0.05, beside the count chance alone gives (one in twenty)."""
    rows = [row for result in results for row in result["summary"]]
    below = sum(row["p"] <= 0.05 for row in rows)
    tasks = " and ".join(result["task"] for result in results)
    seeds = sorted({result["seeds"] for result in results})
    return (
        f"**Finding.** latentlens and the official code train alike on {tasks}: {below} of "
        f"{len(rows)} comparisons of final metrics differ at p <= 0.05 (Welch's test, "
        f"{' or '.join(map(str, seeds))} seeds a side), where chance alone would put about "
        f"{len(rows) / 20:.1f} there."
    )


def figure(task: str, table: dict[str, Any], path: Path) -> None:
    """Learning curves, mean ± std over seeds: a row per variant, a column per split and
    metric, official and latentlens overlaid."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    variants = list(table["official"])
    panels = [(s, m) for s, ms in table["official"][variants[0]].items() for m in ms]
    fig, axes = plt.subplots(
        len(variants), len(panels), squeeze=False, figsize=(3.2 * len(panels), 2.6 * len(variants))
    )
    for i, variant in enumerate(variants):
        for j, (split, metric) in enumerate(panels):
            ax = axes[i][j]
            shown = []  # the band after the initialisation, which sets the y-range
            for impl, colour in (("official", "tab:grey"), ("latentlens", "tab:blue")):
                by_step = table[impl][variant][split][metric]
                steps = sorted(by_step)
                stats = [mean_std(by_step[s]) for s in steps]
                means = [m for m, _ in stats]
                ax.plot(steps, means, color=colour, label=impl)
                ax.fill_between(steps, [m - s for m, s in stats], [m + s for m, s in stats],
                                color=colour, alpha=0.25, linewidth=0)  # fmt: skip
                shown += [v for step, (m, s) in zip(steps, stats, strict=True) if step > 0
                          for v in (m - s, m + s)]  # fmt: skip
            if shown:  # the untrained model's values at step 0 would flatten the curves
                low, high = min(shown), max(shown)
                pad = 0.1 * (high - low) or 0.01
                ax.set_ylim(low - pad, high + pad)
            ax.set_title(f"{variant}: {split} {metric}", fontsize=9)
            ax.set_xlabel("step")
            if i == 0 and j == 0:
                ax.legend(fontsize=8)
    fig.suptitle(
        f"{task}: official JAX code vs latentlens (mean ± std over seeds; y-range "
        "from the first evaluation after step 0)"
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--official", type=Path, required=True, help="a checkout of smonsays/hypernetwork-attention"
    )
    parser.add_argument("--tasks", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--steps", type=int, help="override every task's steps")
    parser.add_argument("--jobs", type=int, default=2, help="runs side by side")
    parser.add_argument("--out", type=Path, default=Path("runs/parity"))
    parser.add_argument("--results", type=Path, default=BENCHMARKS / "results")
    parser.add_argument("--figures", type=Path, default=BENCHMARKS.parent / "docs" / "figures")
    parser.add_argument("--label", help="name of this version of latentlens's side")
    parser.add_argument(
        "--summary",
        type=Path,
        default=BENCHMARKS.parent / "docs" / "RESULTS.md",
        help="results page whose parity section is rewritten (unlabelled runs)",
    )
    parser.add_argument(
        "--lockstep",
        type=int,
        default=300,
        metavar="STEPS",
        help="steps of the lockstep comparison per variant (0: skip it)",
    )
    args = parser.parse_args(argv)
    if not (args.official / "hyla" / "experiment.py").is_file():
        parser.error(
            f"--official {args.official} is not a checkout of "
            "smonsays/hypernetwork-attention (no hyla/experiment.py)"
        )
    if args.seeds < 2:
        parser.error(f"--seeds {args.seeds}: a test of the difference needs 2 or more")
    command = "python benchmarks/parity/parity.py " + " ".join(
        a if not a.startswith("/") else "PATH" for a in (argv or sys.argv[1:])
    )
    suffix = f"-{args.label}" if args.label else ""
    ours_name = f"latentlens{suffix}"
    for task in args.tasks:
        cfg = CONFIGS[task]
        if args.steps:
            cfg = ParityConfig(
                **{
                    **cfg.__dict__,
                    "steps": args.steps,
                    "eval_every": min(cfg.eval_every, args.steps),
                }
            )
        folder = args.out / task
        (folder / "official").mkdir(parents=True, exist_ok=True)
        plan = [(v, s) for s in range(args.seeds) for v in args.variants]
        print(f"{task}: {len(plan)} official runs, {len(plan)} latentlens runs", flush=True)
        with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            futures = {
                key: pool.submit(
                    run_official,
                    args.official.resolve(),
                    official_spec(task, cfg, *key),
                    folder / "official" / f"{key[0]}-s{key[1]}.json",
                )
                for key in plan
            }
            official = {key: future.result() for key, future in futures.items()}
        print(f"{task}: official runs done", flush=True)
        ours = {}
        for seed in range(args.seeds):
            records = run_latentlens(
                task, cfg, args.variants, seed, folder / ours_name / f"seed{seed}", args.jobs
            )
            ours.update({(variant, seed): r for variant, r in records.items()})
        official_path = args.official.resolve()
        locked = [
            lockstep(official_path, task, cfg, variant, args.lockstep, folder)
            for variant in args.variants
            if args.lockstep
        ]
        data = data_check(official_path, cfg, 50_000, folder) if task == "sraven" else None
        table = curves(task, cfg, official, ours)
        rows = summary_rows(cfg, table)
        args.results.mkdir(parents=True, exist_ok=True)
        result = {
            "task": task,
            "config": cfg.__dict__,
            "seeds": args.seeds,
            "versions": next(iter(official.values()))["versions"],
            "lockstep": locked,
            "data_check": data,
            "curves": table,
            "summary": rows,
        }
        (args.results / f"parity_{task}{suffix}.json").write_text(json.dumps(result, indent=1))
        text = markdown(task, cfg, rows, args.seeds, command, data, locked)
        (args.results / f"parity_{task}{suffix}.md").write_text(text)
        figure(task, table, args.figures / f"parity-{task}{suffix}.png")
        print(text, flush=True)
    if not args.label and args.summary.is_file():
        sys.path.insert(0, str(BENCHMARKS))
        from reproduction.reproduce import replace_sections
        from reproduction.runs import code_commit

        today = datetime.date.today().isoformat()
        provenance = f"*Made by `{command}` on {today}. Code: commit {code_commit()}.*"
        section = f"{results_section(args.results)}\n\n{provenance}"
        args.summary.write_text(replace_sections(args.summary.read_text(), [section]))
        print(f"wrote the parity section of {args.summary}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
