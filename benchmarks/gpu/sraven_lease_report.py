"""The RESULTS section of a GPU lease's SRAVEN runs (benchmarks/gpu/gpu_sraven_lease.py):
accuracy beside paper Table A1 with each difference's 95% Welch interval over seeds, the
OOD curves, and Fig. 5F's rule decoding from the final query's codes (fit on
in-distribution tasks, scored on OOD tasks) with its 20-permutation control, clustering and
topographic similarity, for the runs that were probed.

    python benchmarks/gpu/sraven_lease_report.py RUNS --schedule STEPS --figure FILE.png
        [--probes RUN_NAME=FOLDER ...]

``RUNS`` holds ``{variant}-s{seed}`` run folders (config.json, metrics.jsonl and, where
probed on the device, probes/results.json); ``--probes`` names probe results made elsewhere
(``latentlens probe`` on the CPU from the run's returned weights). Prints markdown.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from matplotlib.figure import Figure

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from reproduction.sraven_section import PAPER_TABLE_A1  # noqa: E402

from latentlens.figures import save_figure  # noqa: E402
from latentlens.models.config import VARIANTS as ATTENTION_VARIANTS  # noqa: E402
from latentlens.reports.seeds import difference_interval, mean_std  # noqa: E402

VARIANTS = ("softmax", "linear", "hyla")


def evaluations(run: Path) -> dict[int, dict[str, dict[str, float]]]:
    """``step -> split -> metrics`` of a run's metrics.jsonl."""
    table: dict[int, dict[str, dict[str, float]]] = {}
    for line in (run / "metrics.jsonl").read_text().splitlines():
        if line.strip():
            record = json.loads(line)
            table.setdefault(record["step"], {})[record["split"]] = record
    return table


def last(run: Path) -> tuple[int, dict[str, dict[str, float]]]:
    table = evaluations(run)
    step = max(table)
    return step, table[step]


def runs_of(folder: Path) -> dict[str, list[Path]]:
    return {v: sorted(folder.glob(f"{v}-s[0-9]*")) for v in VARIANTS}


def accuracy_lines(runs: dict[str, list[Path]], schedule: int) -> list[str]:
    lines = [
        "| attention | steps reached | test accuracy % | OOD accuracy % | OOD per feature % "
        "| paper OOD % (156,250 steps) |",
        "|---|---|---|---|---|---|",
    ]
    ood = {}
    for variant, folders in runs.items():
        ends = [last(run) for run in folders]
        ood[variant] = [100 * m["ood"]["accuracy"] for _, m in ends]
        steps = sorted({step for step, _ in ends})
        lines.append(
            f"| {ATTENTION_VARIANTS[variant].paper_name} | "
            f"{', '.join(f'{s:,}' for s in steps)} of {schedule:,} | "
            f"{mean_std([100 * m['test']['accuracy'] for _, m in ends], digits=1)} | "
            f"{mean_std(ood[variant], digits=1)} | "
            f"{mean_std([100 * m['ood']['feature_accuracy'] for _, m in ends], digits=1)} | "
            f"{PAPER_TABLE_A1[variant]:.1f} |"
        )
    # the same step for every run (the schedules are the same: the same learning rate)
    common = min(max(evaluations(run)) for folders in runs.values() for run in folders)
    at = {v: [100 * evaluations(run)[common]["ood"]["accuracy"] for run in folders]
          for v, folders in runs.items()}  # fmt: skip
    lines += [
        "",
        f"| OOD accuracy, difference | at the last evaluation [95% Welch CI over seeds] | "
        f"at step {common:,}, every run's | paper |",
        "|---|---|---|---|",
    ]
    for ours, base in (("hyla", "softmax"), ("hyla", "linear"), ("linear", "softmax")):
        mean, low, high = difference_interval(ood[ours], ood[base])
        same, same_low, same_high = difference_interval(at[ours], at[base])
        paper = PAPER_TABLE_A1[ours] - PAPER_TABLE_A1[base]
        lines.append(
            f"| {ours} − {base} | {mean:+.1f} [{low:+.1f}, {high:+.1f}] | "
            f"{same:+.1f} [{same_low:+.1f}, {same_high:+.1f}] | {paper:+.1f} |"
        )
    return lines


def decoding_lines(probed: dict[str, list[dict]]) -> list[str]:
    lines = [
        "| attention | runs | rule decoding OOD acc. % | chance % | 20 permutations: mean "
        "[5th, 95th] % | p | best layer (acc. %) | k-means ARI | topographic ρ |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for variant, results in probed.items():
        if not results:
            continue
        whole = [r["decoding"][0] for r in results]
        layers = [[row for row in r["decoding"] if row["heads"] == "all" and row["layer"] != "all"]
                  for r in results]  # fmt: skip
        best = [max(rows, key=lambda row: row["test"]) for rows in layers]
        bands = [w["shuffled_band"] for w in whole]
        p_values = "; ".join(f"{w['p_value']:.3f}" for w in whole)
        best_layers = "; ".join(f"{b['layer']} ({100 * b['test']:.1f})" for b in best)
        lines.append(
            f"| {ATTENTION_VARIANTS[variant].paper_name} | {len(results)} | "
            f"{mean_std([100 * w['test'] for w in whole], digits=1)} | "
            f"{mean_std([100 * w['chance'] for w in whole], digits=1)} | "
            f"{mean_std([100 * w['shuffled'] for w in whole], digits=1)} "
            f"[{100 * min(b[0] for b in bands):.1f}, {100 * max(b[1] for b in bands):.1f}] | "
            f"{p_values} | {best_layers} | "
            f"{mean_std([r['clustering']['kmeans']['ari'] for r in results])} | "
            f"{mean_std([r['topography']['rho'] for r in results])} |"
        )
    return lines


def curves(runs: dict[str, list[Path]]) -> Figure:
    """OOD accuracy over training, each seed a thin line, per variant."""
    figure = Figure(figsize=(6.0, 3.4), layout="constrained")
    ax = figure.subplots()
    for colour, (variant, folders) in enumerate(runs.items()):
        for index, run in enumerate(folders):
            table = evaluations(run)
            steps = sorted(table)
            ax.plot(steps, [100 * table[s]["ood"]["accuracy"] for s in steps], color=f"C{colour}",
                    lw=1, label=variant if index == 0 else None)  # fmt: skip
    for colour, variant in enumerate(runs):
        ax.axhline(PAPER_TABLE_A1[variant], color=f"C{colour}", ls=":", lw=1)
    ax.set_xlabel("training step")
    ax.set_ylabel("OOD accuracy, % (dotted: paper)")
    ax.set_title("SRAVEN, Table A1's setting, a shortened schedule (3 seeds each)")
    ax.legend(frameon=False)
    return figure


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", type=Path)
    parser.add_argument("--schedule", type=int, required=True, help="the runs' planned steps")
    parser.add_argument("--figure", type=Path, required=True)
    parser.add_argument("--probes", nargs="*", default=[], metavar="RUN=FOLDER")
    args = parser.parse_args(argv)
    runs = runs_of(args.runs)
    elsewhere = dict(item.split("=", 1) for item in args.probes)
    probed: dict[str, list[dict]] = {}
    for variant, folders in runs.items():
        probed[variant] = []
        for run in folders:
            path = Path(elsewhere.get(run.name, run)) / "probes" / "results.json"
            if path.is_file():
                probed[variant].append(json.loads(path.read_text()))
    save_figure(curves(runs), args.figure.with_suffix(""), ("png",))
    print("\n".join(accuracy_lines(runs, args.schedule)))
    print()
    print("\n".join(decoding_lines(probed)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
