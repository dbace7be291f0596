"""Fuzzy logic at paper Table A1's setting trained again, each run alone and eagerly, by
``latentlens sweep benchmarks/reproduction/sweeps/fuzzy-logic-a1.yaml`` (on a CPU, or on any machine
without --compile): the same configs as ``fuzzy-logic-a1``, whose HYLA runs were trained
with ``--compile`` on CUDA, which gives HYLA wrong gradients at SRAVEN's size
(benchmarks/results/h200_2026-11-26). Test and ood R² beside Table A1 with the 95%
interval of each difference, each run's wall time, and each variant beside the same configs
trained elsewhere (``OUT/elsewhere``), the latent-code protocol of the runs probed after
training, and seed 0's curves. Only the evaluations and probe results are read, so the
committed raw output (config.json, metrics.jsonl, sweep.json, probes/results.json)
rewrites the section."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from latentlens.training import RunDirectory
from reproduction import fuzzy_logic_a1_section as a1
from reproduction.finding import Finding
from reproduction.fuzzy_logic_section import VARIANTS, final_r2
from reproduction.runs import RunSpec, recorded_seconds
from reproduction.sraven_section import read_probes

TITLE = "Fuzzy logic at Table A1's setting, each run trained alone and eagerly"
# the headline its section opens with (reproduction/finding.py)
FINDING = Finding("test R²", reference="paper Table A1")


def plan(size: str, seeds: int, out: Path) -> list[RunSpec]:
    """Table A1's runs, each alone (as the sweep trains them) and not probed."""
    return [replace(spec, probe_examples=0, group="")
            for spec in a1.plan(size, seeds, out)]  # fmt: skip


def report(out: Path, size: str, seeds: int, device: str, figures: Path) -> str:
    lines = [f"## {TITLE}", "", *a1.r2_lines(out, size, seeds)]
    lines += wall_time_lines(out, seeds)
    lines += a1.elsewhere_lines(out, seeds)
    lines += probed_lines(out, size, seeds)
    lines += a1.seed0_curve_lines(
        out, figures, "fuzzy-logic-a1-cpu-curves", "R² over training, seed 0, every run eager"
    )
    return "\n".join(lines)


def probed_lines(out: Path, size: str, seeds: int) -> list[str]:
    """The latent-code protocol's rows of the variants whose every seed was probed after
    training (their committed ``probes/results.json``); nothing where none was."""
    probed = {
        variant: label
        for variant, label in VARIANTS.items()
        if all((out / f"{variant}-s{s}" / "probes" / "results.json").is_file()
               for s in range(seeds))
    }  # fmt: skip
    if not probed:
        return []
    kept = " and ".join(probed.values())
    lines = a1.latent_code_lines(
        out,
        seeds,
        a1.SIZES[size]["probe_examples"],
        recorded_seconds(out.parent),
        probed,
        (),
        which=f"the {kept} runs, whose weights were kept as the zoo's",
    )
    notes = [
        f"- {label} s{seed}: {note['message']}"
        for variant, label in probed.items()
        for seed in range(seeds)
        for note in read_probes(out / f"{variant}-s{seed}")["health"]
        if note["kind"] == "dead_value_network"
    ]
    if notes:
        lines += ["", "Where a score is n/a, the probe's health check says why:", "", *notes]
    return lines


def wall_time_lines(out: Path, seeds: int) -> list[str]:
    """Every run's final test and ood R², its training wall time (from the sweep's or this
    script's record; evaluations and checkpoints included) and its steps per second."""
    seconds = recorded_seconds(out.parent)
    lines = [
        "",
        "| run | test R² | ood R² | training s | steps/s |",
        "|---|---|---|---|---|",
    ]
    for variant, label in VARIANTS.items():
        for seed in range(seeds):
            run = out / f"{variant}-s{seed}"
            r2 = final_r2(run)
            steps = max(record["step"] for record in RunDirectory(run).read_metrics())
            took = seconds.get(f"{out.name}/{run.name}")
            rate = "n/a" if not took else f"{steps / took:.1f}"
            lines.append(
                f"| {label} s{seed} | {r2['test']:.3f} | {r2['ood']:.3f} | "
                f"{'n/a' if took is None else f'{took:,.0f}'} | {rate} |"
            )
    return lines
