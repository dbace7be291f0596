"""What bfloat16 autocast (``--precision bf16``) does to the parity runs' final metrics:
latentlens trained on ``parity.py``'s configurations in float32 and in bfloat16 with the
same seeds (the same split, initial weights and batches), so the difference of each seed's
pair measures the precision alone.

    python benchmarks/reproduction/bf16_effect.py [--tasks fuzzy-logic sraven] [--seeds 5]
        [--jobs 2] [--variants softmax linear hyla] [--out runs/bf16-effect]
        [--results benchmarks/results]

Per task and variant: each metric's mean ± std over seeds at the last step in each
precision, the mean paired difference bf16 − fp32 with its 95% t interval, and the
official code's mean from the committed parity result (``parity_{task}.json``) beside
them; each precision's training steps/s (mean over runs, from the sweep's wall times). Runs
train through the sweep engine, one thread each, and are kept under ``--out``: the command
can be stopped and run again. Writes ``bf16_effect_{task}.json`` and ``.md`` under
``--results``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

BENCHMARKS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(BENCHMARKS))
from parity.parity import CONFIGS, VARIANTS, mean_std, run_latentlens  # noqa: E402

PRECISIONS = ("fp32", "bf16")


def paired(a: list[float], b: list[float]) -> tuple[float, float]:
    """Mean of the paired differences b - a and its 95% t interval's half-width."""
    from scipy import stats

    diffs = [y - x for x, y in zip(a, b, strict=True)]
    mean, std = mean_std(diffs)
    return mean, stats.t.ppf(0.975, len(diffs) - 1) * std / math.sqrt(len(diffs))


def steps_per_second(folder: Path, steps: int) -> list[float]:
    """Each run's steps/s from the sweep's record of its training seconds."""
    from latentlens.sweep.run import sweep_states

    return [steps / cell["seconds"] for cell in sweep_states(folder).values()
            if cell.get("seconds")]  # fmt: skip


def final_values(records: list[dict[str, Any]], split: str, metric: str) -> float:
    """The metric's value at the last evaluated step of ``split``."""
    last = max((r for r in records if r["split"] == split), key=lambda r: r["step"])
    return float(last[metric])


def official_means(results: Path, task: str) -> dict[tuple[str, str, str], float]:
    """The official code's final means from the committed parity result, if any."""
    path = results / f"parity_{task}.json"
    if not path.is_file():
        return {}
    rows = json.loads(path.read_text())["summary"]
    return {(r["variant"], r["split"], r["metric"]): mean_std(r["official"])[0] for r in rows}


def table(task: str, runs: dict, official: dict, seeds: int, rates: dict) -> list[str]:
    """The markdown table of ``runs[(precision, variant, seed)]`` (metric records)."""
    cfg = CONFIGS[task]
    lines = [
        f"# bfloat16 against float32: {task}, {seeds} seeds, {cfg.steps} steps",
        "",
        "`python benchmarks/reproduction/bf16_effect.py` (same seeds in both precisions; the "
        "difference is paired by seed)",
        "",
        "| variant | split | metric | fp32 | bf16 | bf16 − fp32 [95% CI] | official |",
        "|---|---|---|---|---|---|---|",
    ]
    variants = sorted({key[1] for key in runs})
    for variant in variants:
        for split in cfg.splits:
            for metric in cfg.metrics.values():
                values = {
                    p: [final_values(runs[(p, variant, s)], split, metric) for s in range(seeds)]
                    for p in PRECISIONS
                }
                (m32, s32), (m16, s16) = mean_std(values["fp32"]), mean_std(values["bf16"])
                diff, half = paired(values["fp32"], values["bf16"])
                theirs = official.get((variant, split, metric))
                lines.append(
                    f"| {variant} | {split} | {metric} | {m32:.3f} ± {s32:.3f} | "
                    f"{m16:.3f} ± {s16:.3f} | {diff:+.3f} [{diff - half:+.3f}, "
                    f"{diff + half:+.3f}] | {'n/a' if theirs is None else f'{theirs:.3f}'} |"
                )
    lines += ["", "Training steps/s per run (one thread each, evaluations included):", ""]
    for precision in PRECISIONS:
        mean, std = mean_std(rates[precision])
        lines.append(f"- {precision}: {mean:.1f} ± {std:.1f} over {len(rates[precision])} runs")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", default=["fuzzy-logic"], choices=list(CONFIGS))
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--jobs", type=int, default=2, help="runs side by side")
    parser.add_argument("--out", type=Path, default=Path("runs/bf16-effect"))
    parser.add_argument("--results", type=Path, default=BENCHMARKS / "results")
    args = parser.parse_args(argv)
    if args.seeds < 2:
        parser.error(f"--seeds {args.seeds}: an interval of the difference needs 2 or more")
    for task in args.tasks:
        cfg, runs, rates = CONFIGS[task], {}, {}
        for precision in PRECISIONS:
            rates[precision] = []
            for seed in range(args.seeds):
                folder = args.out / task / precision / f"seed{seed}"
                records = run_latentlens(
                    task, cfg, args.variants, seed, folder, args.jobs, precision
                )
                runs.update({(precision, v, seed): r for v, r in records.items()})
                rates[precision] += steps_per_second(folder, cfg.steps)
            print(f"{task}: {precision} runs done", flush=True)
        lines = table(task, runs, official_means(args.results, task), args.seeds, rates)
        args.results.mkdir(parents=True, exist_ok=True)
        result = {
            "task": task,
            "seeds": args.seeds,
            "steps_per_second": rates,
            "runs": {f"{p}/{v}/s{s}": r for (p, v, s), r in runs.items()},
        }
        (args.results / f"bf16_effect_{task}.json").write_text(json.dumps(result, indent=1))
        (args.results / f"bf16_effect_{task}.md").write_text("\n".join(lines) + "\n")
        print("\n".join(lines), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
