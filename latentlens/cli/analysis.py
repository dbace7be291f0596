"""``latentlens probe``, ``latentlens figures`` and ``latentlens demo``."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from latentlens.cli.choices import (
    DEVICE_CHOICES,
    EMBEDDINGS,
    MATPLOTLIB_FORMATS,
    RUN_HELP,
    resolve_runs,
)

# The parser is built from plain strings; the functions that run a command import the
# library (torch, matplotlib, scikit-learn), so that --help answers at once.


def add_analysis_parsers(commands: argparse._SubParsersAction) -> None:
    probe = commands.add_parser(
        "probe",
        help="probe a trained run's latent codes into RUN/probes/results.json; several "
        "runs are also summarised side by side",
        description="Run the task's latent-code protocol (docs/methods/probes.md) on a "
        "trained run: linear decoders with chance and shuffled-label controls per layer and "
        "head, clustering, embeddings, topographic similarity, head ablations and patching. "
        "Given several runs (variants, or the seeds of `train --seeds`), probe each and "
        "print their main scores in one table, with mean ± std where the runs differ only "
        "in their seed.",
    )
    probe.add_argument("run_dir", type=Path, nargs="+", metavar="RUN_DIR", help=RUN_HELP)
    probe.add_argument("--examples", type=int, default=2048, help="examples per code set")
    probe.add_argument(
        "--eval-examples",
        type=int,
        help="examples of the run's fixed evaluation set that the metrics and head ablations "
        "read, its first ones (default: the run's eval_examples; fewer: a quicker look)",
    )
    probe.add_argument("--embedding", choices=EMBEDDINGS, default="pca")
    probe.add_argument("--checkpoint", type=int, help="step (default: the newest)")
    probe.add_argument("--device", choices=DEVICE_CHOICES, default="auto")
    probe.add_argument("--quiet", action="store_true", help="no progress bar")
    probe.set_defaults(handler=run_probe)

    figures = commands.add_parser(
        "figures",
        help="draw every figure a run's results allow into RUN/figures/; several runs are "
        "also drawn side by side",
        description="Metric curves, tracked quantities and, after `latentlens probe`, "
        "decoding per head, code embeddings (also interactive HTML), head ablations and "
        "structure scores, into each RUN/figures/. Given several runs (variants, seeds), "
        "also their metric curves and, where probed, structure scores side by side, into "
        "--out.",
    )
    figures.add_argument("run_dir", type=Path, nargs="+", metavar="RUN_DIR", help=RUN_HELP)
    figures.add_argument(
        "--out",
        type=Path,
        help="where the side-by-side figures of several runs go (default: comparison/ "
        "beside the runs, in their common parent directory)",
    )
    figures.add_argument(
        "--formats",
        default="png,svg,html",
        help=f"comma-separated, from {','.join(MATPLOTLIB_FORMATS)} (default: %(default)s)",
    )
    figures.set_defaults(handler=run_figures_command)

    demo = commands.add_parser(
        "demo",
        help="probe converged softmax, linear and HYLA models from the zoo and one trained "
        "live, draw, write a report",
        description="From nothing to report.md and report.html (opens offline): probes the "
        "latent codes of the zoo's converged softmax, linear and HYLA models (fuzzy logic at "
        "the paper's Table A1 setting) beside the paper's numbers, trains one HYLA model live "
        "at a small size to show the training path (minutes on a 2-core CPU), and draws the "
        "figures.",
    )
    demo.add_argument("--out", type=Path, default=Path("runs/demo"), help="default: %(default)s")
    demo.add_argument("--size", choices=["small", "tiny"], default="small")
    demo.add_argument("--steps", type=int, help="training steps (default: the size's)")
    demo.add_argument("--embedding", choices=EMBEDDINGS, default="pca")
    demo.add_argument("--device", choices=DEVICE_CHOICES, default="auto")
    demo.add_argument(
        "--no-zoo",
        action="store_true",
        help="train softmax, linear and HYLA live instead of probing the zoo's converged "
        "models beside one live HYLA",
    )
    demo.add_argument("--quiet", action="store_true", help="no progress bars")
    demo.set_defaults(handler=run_demo_command)


def run_probe(args: argparse.Namespace) -> int:
    from latentlens.probes.run import check_probe_run, probe_run
    from latentlens.training.config import check_eval_examples
    from latentlens.training.run_dir import require_distinct, seeds_of_one_config

    if args.examples < 4:
        raise ValueError(f"--examples={args.examples} is too few; use at least 4")
    if args.eval_examples is not None and args.eval_examples < 1:
        raise ValueError(f"--eval-examples={args.eval_examples} is invalid: use at least 1")
    check_eval_examples("--examples", args.examples)
    if args.eval_examples is not None:
        check_eval_examples("--eval-examples", args.eval_examples)
    runs: list[Path] = resolve_runs(args.run_dir)
    require_distinct(runs)
    for run in runs:  # every refusal before the first run's minutes of probing
        check_probe_run(run, args.checkpoint)
    probed = {}
    for run in runs:
        probed[run] = probe_run(
            run,
            args.examples,
            args.embedding,
            args.checkpoint,
            args.device,
            args.quiet,
            args.eval_examples,
        )
        print_probe_results(run, probed[run])
    if len(runs) > 1:
        print(probe_summary(probed, seeds_of_one_config(runs)))
    return 0


def permutation_summary(row: dict) -> str:
    """The shuffled-label control of a decoding row: its permutations' mean, band and the
    p-value (results written before permutations have the one shuffled decoder)."""
    if row.get("shuffled_band") is None:
        return f"shuffled labels {row['shuffled']:.3f}"
    low, high = row["shuffled_band"]
    return (
        f"shuffled labels {row['shuffled']:.3f} [{low:.3f}, {high:.3f}] over "
        f"{row['permutations']} permutations, p = {row['p_value']:.3f}"
    )


def print_probe_results(run: Path, results: dict) -> None:
    """The main scores of one run's probe results, a line each."""
    print(f"probe results: {run / 'probes' / 'results.json'}")
    for split, metrics in results.get("evaluation", {}).items():
        shown = [
            f"{name} {value:.3f} ± {metrics[name + '_se']:.3f}"
            for name, value in metrics.items()
            if not name.endswith("_se") and name != "loss" and f"{name}_se" in metrics
        ]
        print(f"{split}: {', '.join(shown)} (± standard error over evaluation batches)")
    for row in results.get("decoding", [])[:1]:
        error = f" ± {row['test_se']:.3f}" if row.get("test_se") is not None else ""
        print(
            f"decoding ({row['metric']}, every layer and head): held out {row['test']:.3f}"
            f"{error}, chance {row['chance']:.3f}, {permutation_summary(row)}"
        )
    for row in results.get("z_decoding", []):
        print(f"z from {row['site']}: R² fit {row['r2_fit']:.3f}, OOD {row['r2_ood']:.3f}")
    if "clustering" in results:
        kmeans = results["clustering"]["kmeans"]
        if kmeans["ari"] is None:
            print(f"clustering: undefined ({results['clustering']['note']})")
        else:
            print(
                f"clustering (k-means, {kmeans['n_clusters']} groups): ARI {kmeans['ari']:.3f}, "
                f"AMI {kmeans['ami']:.3f} (0 = chance)"
            )
    if "topography" in results:
        topo = results["topography"]
        if topo["rho"] is None:
            print(f"topographic similarity: undefined ({topo['note']})")
        else:
            print(f"topographic similarity: rho {topo['rho']:.3f} (p = {topo['p_value']:.3g})")
    if results.get("ablation"):
        print(ablation_summary(results["ablation"]))
    for row in results.get("patching", []):
        print(f"code patched from other examples (layer {row['layer']}, query {row['query']}, "
              f"key {row['key']}): {_change(row)}")  # fmt: skip
    for line in code_swap_lines(results.get("code_swaps", [])):
        print(line)
    for line in rule_code_swap_lines(results.get("rule_code_swaps", [])):
        print(line)
    for row in results.get("rule_swaps", []):
        print(f"codes of {row['rules'][0]} and {row['rules'][1]} swapped (layer {row['layer']}): "
              f"{_change(row)}")  # fmt: skip
    for note in results.get("health", []):
        print(f"warning: {note['message']}")


def code_swap_lines(swaps: list[dict]) -> list[str]:
    """One line per layer of :func:`~latentlens.probes.code_interventions.swap_codes`'s
    results: the fraction of a one-term donor's output change the swap reproduces, beside a
    random combination's, and the R² a same-combination donor's codes leave."""
    lines = []
    for layer in sorted({tuple(s["layers"]) for s in swaps}):
        kind = {s["donor"]: s for s in swaps if tuple(s["layers"]) == layer}
        one, other, same = kind["one-term"], kind["random-combination"], kind["same-combination"]
        lines.append(
            f"final query's codes swapped for a donor's (layer {','.join(map(str, layer))}): "
            f"one term changed, {one['moved']:.3f} ± {one['moved_se']:.3f} of the donor's "
            f"output change follows (another combination {other['moved']:.3f} ± "
            f"{other['moved_se']:.3f}); the same function on other inputs leaves R² "
            f"{same['r2_own']:.3f} of {same['r2_own_clean']:.3f}"
        )
    return lines


def rule_code_swap_lines(swaps: list[dict]) -> list[str]:
    """One line per layer of :func:`~latentlens.probes.sraven_swaps.sraven_code_swaps`'s
    results: how often the model gives a one-rule donor's answer on its own puzzle before
    and after the swap (beside a random combination's), and how often it stays right on
    the features whose rule is kept (beside the same rules' codes from other panels)."""
    lines = []
    for layer in sorted({tuple(s["layers"]) for s in swaps}, key=lambda x: (len(x), x)):
        kind = {s["donor"]: s for s in swaps if tuple(s["layers"]) == layer}
        one, other = kind["one-rule"], kind["random-combination"]
        same = kind["same-combination"]
        lines.append(
            f"final queries' codes swapped for a donor's (layer {','.join(map(str, layer))}): "
            f"the donor rule's answer {one['donor_clean']:.3f} -> {one['donor_swapped']:.3f} "
            f"± {one['donor_swapped_se']:.3f} with one rule changed (another combination "
            f"{other['donor_clean']:.3f} -> {other['donor_swapped']:.3f}); kept rules right "
            f"{one['kept_clean']:.3f} -> {one['kept_swapped']:.3f} (the same rules on other "
            f"panels: {same['kept_swapped']:.3f})"
        )
    return lines


def summary_scores(results: dict) -> dict[str, float | None]:
    """One run's headline probe scores (``None``: undefined, e.g. constant codes): decoding
    from every layer and head with its chance level, or z's best OOD R² over the decoding
    sites; k-means ARI; topographic ρ; heads beyond two standard errors when ablated."""
    from latentlens.figures.axes import metric_label
    from latentlens.figures.probes import beyond_noise

    scores: dict[str, float | None] = {}
    for row in results.get("decoding", [])[:1]:
        label = metric_label(row["metric"])
        scores[f"decoding {label}"] = row["test"]
        scores[f"{label} chance"] = row["chance"]
    if results.get("z_decoding"):
        scores["z OOD R² (best site)"] = max(row["r2_ood"] for row in results["z_decoding"])
    if "clustering" in results:
        scores["k-means ARI"] = results["clustering"]["kmeans"]["ari"]
    if "topography" in results:
        scores["topographic ρ"] = results["topography"]["rho"]
    if results.get("ablation"):
        scores["heads > 2 SE"] = beyond_noise(results["ablation"])
    return scores


def probe_summary(probed: dict[Path, dict], seeds_only: bool) -> str:
    """A table of every run's :func:`summary_scores`, a row each, and, when the runs differ
    only in their seed (``seeds_only``), their mean ± sample std (over the runs where a
    score is defined, their number given where that is not all). A run is labelled by its
    directory's name, or its path where two names coincide; "-" marks a score its task has
    not."""
    unique = len({run.name for run in probed}) == len(probed)
    rows = {run.name if unique else str(run): summary_scores(r) for run, r in probed.items()}
    names = list(dict.fromkeys(name for scores in rows.values() for name in scores))
    cells = {
        label: [_score(scores[name]) if name in scores else "-" for name in names]
        for label, scores in rows.items()
    }
    if seeds_only:
        cells[f"mean ± std ({len(rows)} seeds)"] = [
            _mean_std([scores.get(name) for scores in rows.values()]) for name in names
        ]
    table = [["run", *names], *([label, *row] for label, row in cells.items())]
    widths = [max(map(len, column)) + 2 for column in zip(*table, strict=True)]
    return "\n".join(
        f"{row[0]:<{widths[0]}}"
        + "".join(f"{c:>{w}}" for c, w in zip(row[1:], widths[1:], strict=True))
        for row in table
    )


def _score(value: float | None) -> str:
    if value is None:
        return "undefined"
    return str(value) if isinstance(value, int) else f"{value:.3f}"


def _mean_std(values: list[float | None]) -> str:
    from latentlens.figures.probes import seed_score

    mean, std, defined = seed_score(values)
    if std is None:
        return "n/a"
    counts = [v for v in values if v is not None]
    if all(isinstance(v, int) and not isinstance(v, bool) for v in counts):  # a count of heads
        low, high = min(counts), max(counts)
        text = str(low) if low == high else f"{low}-{high} (mean {mean:.1f})"
    else:
        text = f"{mean:.3f} ± {std:.3f}"
    return text if defined == len(values) else f"{text} (of {defined})"


def _change(row: dict) -> str:
    """``metric change ± standard error`` of an intervention's result."""
    from latentlens.figures.axes import metric_label

    error = row.get("standard_error")
    return (
        f"{metric_label(row['metric'])} {row['baseline']:.3f} -> {row['intervened']:.3f}, "
        f"change {row['change']:+.3f}" + (f" ± {error:.3f}" if error is not None else "")
    )


def ablation_summary(rows: list[dict]) -> str:
    """One line: the head whose zeroing changes the metric most, with its standard error,
    and how many heads change it by more than two standard errors."""
    from latentlens.figures.axes import metric_label
    from latentlens.figures.probes import BEYOND_TWO_ERRORS, beyond_noise

    top = max(rows, key=lambda r: abs(r["change"]))
    line = (
        f"head ablation ({metric_label(top['metric'])}, baseline {top['baseline']:.3f}): "
        f"largest change {top['change']:+.3f}"
    )
    stack = top.get("prefix", "").rstrip(".")  # an encoder-decoder's "encoder", ...
    where = f"{stack + ' ' if stack else ''}layer {top['layer']} head {top['head']}"
    beyond = beyond_noise(rows)
    if beyond is None:
        return f"{line} ({where})"
    return (
        f"{line} ± {top['standard_error']:.3f} ({where}); {beyond} of {len(rows)} heads "
        f"beyond 2 standard errors, {len(rows) * BEYOND_TWO_ERRORS:.1f} expected from noise alone"
    )


def run_figures_command(args: argparse.Namespace) -> int:
    args.run_dir = resolve_runs(args.run_dir)
    from latentlens.figures.run_figures import comparison_figures, run_figures

    formats = tuple(f.strip() for f in args.formats.split(",") if f.strip())
    if not formats:
        raise ValueError(
            f"--formats {args.formats!r} names no format: give comma-separated formats from "
            f"{','.join(MATPLOTLIB_FORMATS)}"
        )
    if args.out is not None and len(args.run_dir) < 2:
        raise ValueError("--out is where several runs are compared: give at least two runs")
    drawn = {run / "figures": run_figures(run, formats) for run in args.run_dir}
    if len(args.run_dir) > 1:
        common = Path(os.path.commonpath([run.resolve() for run in args.run_dir]))
        out = args.out or common / "comparison"
        drawn[out] = comparison_figures(args.run_dir, out, formats)
    for folder, written in drawn.items():
        print(f"{len(written)} figures in {folder}: {', '.join(written)}")
    return 0


def run_demo_command(args: argparse.Namespace) -> int:
    from latentlens.reports.demo import run_demo

    done = run_demo(
        args.out, args.size, args.steps, embedding=args.embedding, device=args.device,
        quiet=args.quiet, zoo=not args.no_zoo,
    )  # fmt: skip
    print(done.summary)
    print(f"report: {done.markdown}\n        {done.page} (opens offline; keep "
          "plotly.min.js beside it)")  # fmt: skip
    return 0
