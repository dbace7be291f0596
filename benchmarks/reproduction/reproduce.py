"""Reproduce the seeds' findings and write docs/RESULTS.md from the numbers it measures.

Every latentlens number in the written file comes from the runs this script trains (or
finds finished in ``--out``); the published and official figures beside them come from
docs/methods/numbers.md. Experiments (one module each in ``benchmarks/reproduction/``):

- ``fuzzy-logic``: softmax, linear and HYLA; test and ood R²; a frac_test sweep; the
  latent-code decoding R².
- ``sraven``: OOD accuracy of softmax, linear and HYLA; multi-head against single-head;
  the Table A1 ablations; the value network's nonlinearity; rule decoding from the final
  query's latent code on OOD tasks; clustering and topographic similarity.
- ``hyperteacher``: the hypernetwork against the vanilla transformer on modular ICL.
- ``translation``: FUSION and the GCA layer connection, with the fuse weights over training.
- ``layer-connection``: the connection inserted into translation's pretrained baselines
  and fine-tuned in seed 001's four conditions, with the routing over fine-tuning.

    python benchmarks/reproduction/reproduce.py --size cpu|gpu|tiny [--only NAME ...] [--seeds 3]
        [--jobs N] [--device auto] [--out runs/reproduce-SIZE] [--results docs/RESULTS.md]

With ``--only``, an existing results file keeps its other sections: each experiment run
replaces its own section (matched by title; a section whose title changed is appended).

Sizes: ``gpu`` is the reference's (default models and step counts; CUDA graphs on CUDA);
``cpu`` shrinks models, tasks and step counts so that every experiment with 3 seeds
finishes in under 2 hours on 2 cores (each module's ``SIZES`` says how); ``tiny`` is for
the tests. Figures go to ``figures/`` beside the results file.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import sys
import time
from pathlib import Path
from types import ModuleType

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the reproduction package

from latentlens import __version__  # noqa: E402
from latentlens.devices import cpu_model, resolve_device  # noqa: E402
from reproduction import (  # noqa: E402
    connection_section,
    fuzzy_logic_a1_ablations_section,
    fuzzy_logic_a1_cpu_section,
    fuzzy_logic_a1_one_head_section,
    fuzzy_logic_a1_section,
    fuzzy_logic_section,
    hyperteacher_plus_section,
    hyperteacher_section,
    sraven_main_section,
    sraven_section,
    translation_section,
)
from reproduction.finding import finding_sentence  # noqa: E402
from reproduction.runs import (  # noqa: E402
    code_commit,
    default_jobs,
    finished,
    recorded_seconds,
    train_all,
    trained_on,
    units_of,
)

EXPERIMENTS: dict[str, ModuleType] = {
    "fuzzy-logic": fuzzy_logic_section,
    "sraven": sraven_section,
    "hyperteacher": hyperteacher_section,
    "translation": translation_section,
    "layer-connection": connection_section,
}
# The papers' headlines alone, each sized for a GPU sitting (seed groups), in the order to
# run them when a GPU is lent; trained only when named with --only.
SECTIONS: dict[str, ModuleType] = {
    "sraven-main": sraven_main_section,
    "fuzzy-logic-a1": fuzzy_logic_a1_section,
    "fuzzy-logic-a1-ablations": fuzzy_logic_a1_ablations_section,
    # Fig. 5C: one head, the same parameters, beside fuzzy-logic-a1's 8-head runs
    "fuzzy-logic-a1-one-head": fuzzy_logic_a1_one_head_section,
    # the same configs each trained alone and eagerly (latentlens sweep), read back from
    # the raw output: benchmarks/results/cpu_a1_2026-11-26
    "fuzzy-logic-a1-cpu": fuzzy_logic_a1_cpu_section,
    "hyperteacher-connected-plus": hyperteacher_plus_section,
}
SIZES = ("cpu", "gpu", "tiny")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="cpu", choices=SIZES)
    parser.add_argument(
        "--only",
        nargs="*",
        choices=[*EXPERIMENTS, *SECTIONS],
        default=None,
        help=f"experiments to run (default: all but the GPU sections {', '.join(SECTIONS)}, "
        "which run only when named)",
    )
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--jobs", type=int, default=None,
                        help="runs trained at once (default: one per CPU core on a CPU, "
                             "1 on a GPU)")  # fmt: skip
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument(
        "--plan",
        action="store_true",
        help="print the runs and estimated device minutes, train nothing",
    )
    parser.add_argument("--time-budget", type=float, metavar="SECONDS",
                        help="stop (runs checkpointed, exit code 3) before this much wall "
                             "time; the same command continues")  # fmt: skip
    parser.add_argument("--results", type=Path, default=Path("docs/RESULTS.md"))
    args = parser.parse_args(argv)
    if args.seeds < 1:
        parser.error(f"--seeds {args.seeds}: at least one seed is needed")
    jobs = args.jobs or default_jobs(args.device)
    if jobs < 1:
        parser.error(f"--jobs {jobs}: at least one job is needed")
    out = args.out or Path(f"runs/reproduce-{args.size}")
    names = args.only or list(EXPERIMENTS)
    modules = {**EXPERIMENTS, **SECTIONS}
    figures = args.results.parent / "figures"
    start = time.perf_counter()

    specs = {name: modules[name].plan(args.size, args.seeds, out / name) for name in names}
    every = list({spec.path: spec for name in names for spec in specs[name]}.values())
    print("\n".join(plan_lines(specs, args.size, jobs)), flush=True)
    if args.plan:
        return 0
    print(f"training {len(every)} runs ({args.size}), {jobs} at a time ...", flush=True)
    deadline = None if args.time_budget is None else time.time() + args.time_budget
    # runs a sweep trained into a section's folder keep their seconds in its sweep.json
    timings = recorded_seconds(out) | train_all(every, out, args.device, jobs, deadline)
    trained_s = time.perf_counter() - start
    unfinished = [spec for spec in every if not finished(spec)]
    if unfinished:
        print(
            f"--time-budget: {len(unfinished)} of {len(every)} runs are not finished (each "
            "checkpointed); run the same command again to continue",
            file=sys.stderr,
        )
        return 3

    home = str(Path.home())  # a user's paths, not this machine's: ~/latentlens-runs/...
    words = [w.replace(home, "~", 1) if w.startswith(home) else w for w in argv or sys.argv[1:]]
    command = " ".join(["python benchmarks/reproduction/reproduce.py", *words])
    sections = []
    for name in names:
        print(f"{name}: analysis ...", flush=True)
        section_start = time.perf_counter()
        text = modules[name].report(out / name, args.size, args.seeds, args.device, figures)
        own = [s for s in specs[name] if s.path.is_relative_to(out / name)]
        run_s = sum(timings.get(str(s.path.relative_to(out)), 0.0) for s in own)
        # written where the runs were trained; their files' dates are those of a copy
        where, dates = trained_on(out / name), ""
        if not where:  # trained here, by this code
            where = f"{this_machine(args.device, own)}. Code: commit {code_commit()}"
            dates = trained_between(own)
        title, _, body = text.partition("\n")
        spec = modules[name].FINDING  # None: the section writes its own finding
        finding = "" if spec is None else f"\n{finding_sentence(text, spec, args.seeds)}\n"
        provenance = (
            f"*Made by `{command}` on {datetime.date.today().isoformat()}: {len(own)} runs"
            f"{dates}, {run_s / 60:.1f} minutes of training summed over runs; "
            f"analysis {(time.perf_counter() - section_start) / 60:.1f} minutes. Trained on "
            f"{where.rstrip('.')}.*"
        )
        # for readers: the finding, the tables, then where the numbers came from
        sections.append(f"{title}\n{finding}{body.rstrip()}\n\n{provenance}")
    wall = time.perf_counter() - start
    header = [
        "# Results",
        "",
        "Written by `benchmarks/reproduction/reproduce.py`; every latentlens number below was "
        "measured by it, none typed by hand. Published and official figures come from "
        "[Methods: numbers](methods/numbers.md). Each section opens with its finding (read "
        "from its first table by `reproduction/finding.py`), then its tables, and ends with "
        "the command, machine, dates and commit whose code measured it; where later code "
        "changed what a run computes, the section says "
        "**Stale:**, and the reviews that found a later change computes the same are "
        "recorded in `docs/results_reviews.json` (a test checks both).",
        "",
        f"Command: `{command}`  ",
        f"Machine: {platform.machine()} {platform.system()}, {torch.get_num_threads()} CPU "
        f"threads, device {args.device}, {jobs} run(s) at a time; latentlens {__version__}, "
        f"torch {torch.__version__}.  ",
        f"Wall time: {wall / 60:.1f} minutes ({trained_s / 60:.1f} training, the rest "
        "analysis), for the runs this invocation had to train; runs found finished in "
        f"`{str(out).replace(home, '~', 1)}` cost nothing and keep the training time recorded "
        "when they ran.  ",
        f"Size `{args.size}`: the sizes of each experiment are in its module's `SIZES` "
        "(benchmarks/reproduction/).",
    ]
    args.results.parent.mkdir(parents=True, exist_ok=True)
    if args.only and args.results.is_file():
        text = replace_sections(args.results.read_text(), sections)
    else:
        text = "\n".join(header) + "\n\n" + "\n\n".join(sections) + "\n"
    args.results.write_text(text)
    print(f"wrote {args.results} ({wall / 60:.1f} min)")
    return 0


# Graphed, compiled single-run training steps per second on an H100 (README / docs
# benchmarks, torch 2.11; the slowest variant of each task); tasks not timed there: None.
H100_STEPS_PER_SECOND = {"fuzzy-logic": 1484.0, "sraven": 438.0}


def plan_lines(specs: dict[str, list], size: str, jobs: int) -> list[str]:
    """Per experiment: its runs, their steps and, at the GPU size, the device minutes the
    H100 throughput gives them (one run or seed group at a time). A seed group of n runs
    has not been timed on a GPU: its range runs from a group step costing one run's step
    (the vmapped step fills an idle GPU) to no gain at all (n runs' time)."""
    lines = [f"plan ({size}, {jobs} run(s) at a time):"]
    low_total = high_total = 0.0
    for name, runs in specs.items():
        steps = sum(spec.config["train"]["steps"] for spec in runs)
        units = units_of(runs)
        grouped = sum(len(unit) for unit in units if len(unit) > 1)
        groups = f" ({grouped} in {sum(len(u) > 1 for u in units)} seed groups)" if grouped else ""
        estimate = ""
        if size == "gpu":
            rates = [H100_STEPS_PER_SECOND.get(u[0].config["task"]["name"]) for u in units]
            if all(rates):
                low = (
                    sum(
                        u[0].config["train"]["steps"] / rate
                        for u, rate in zip(units, rates, strict=True)
                    )
                    / 60
                )
                high = (
                    sum(
                        len(u) * u[0].config["train"]["steps"] / rate
                        for u, rate in zip(units, rates, strict=True)
                    )
                    / 60
                )
                low_total, high_total = low_total + low, high_total + high
                shown = f"{high:.0f}" if low == high else f"{low:.0f}-{high:.0f}"
                estimate = f", about {shown} device minutes"
            else:
                estimate = ", device minutes unknown (task not timed on a GPU yet)"
        lines.append(f"  {name}: {len(runs)} runs{groups}, {steps:,} steps{estimate}")
    if size == "gpu":
        shown = (
            f"{high_total:.0f}" if low_total == high_total else f"{low_total:.0f}-{high_total:.0f}"
        )
        lines.append(f"  timed sections: about {shown} device minutes in all")
        if low_total != high_total:
            lines.append(
                "  (a seed group's range: from a group step costing one run's step to no gain; "
                "seed groups are not yet timed on a GPU)"
            )
    return lines


def this_machine(device: str, specs: list) -> str:
    """The machine this invocation trains on, as a section's provenance names it, with the
    CPU threads each run trained with (its config's, which a run found finished keeps)."""
    if resolve_device(device).type == "cuda":
        where = torch.cuda.get_device_name()
    else:
        where = f"{cpu_model() or 'an unknown CPU'} ({platform.machine()} {platform.system()})"
    threads = sorted({threads_of(spec) for spec in specs})
    counts = " or ".join(str(n) for n in threads) or str(torch.get_num_threads())
    return f"{where}, {counts} CPU thread(s) per run, torch {torch.__version__}"


def threads_of(spec) -> int:
    """The threads a run trained with: its stored config's, else its plan's."""
    stored = spec.path / "config.json"
    config = json.loads(stored.read_text()) if stored.is_file() else spec.config
    return int(config["train"]["threads"])


def trained_between(specs: list) -> str:
    """`` trained DAY`` or `` trained DAY to DAY``: from the first run's start (its config's
    date) to the last one's end (its metrics' last write); empty where none was written."""
    started = [s.path / "config.json" for s in specs if (s.path / "config.json").is_file()]
    ended = [s.path / "metrics.jsonl" for s in specs if (s.path / "metrics.jsonl").is_file()]
    if not started or not ended:
        return ""
    first = datetime.date.fromtimestamp(min(p.stat().st_mtime for p in started))
    last = datetime.date.fromtimestamp(max(p.stat().st_mtime for p in ended))
    return f" trained {first}" if first == last else f" trained {first} to {last}"


def replace_sections(text: str, sections: list[str]) -> str:
    """``text`` (a results file) with each of ``sections`` (each naming the command that
    made it) put in place of the section of the same ``## `` title, or appended: ``--only``
    re-runs a few experiments without discarding the others' results."""
    parts = text.rstrip("\n").split("\n\n## ")
    head, old = parts[0], ["## " + part for part in parts[1:]]
    titles = [part.splitlines()[0] for part in old]
    for section in sections:
        title = section.splitlines()[0]
        if title in titles:
            old[titles.index(title)] = section
        else:
            old.append(section)
            titles.append(title)
    return "\n\n".join([head, *old]) + "\n"


if __name__ == "__main__":
    sys.exit(main())
