"""Every benchmark script imports: they are run by hand (and on a lent GPU), not by CI, so
a renamed library function would otherwise break them unnoticed. Scripts live in rooms by
purpose (``benchmarks/<room>/``) and import one another by room (``speed.cpu_side_by_side``)
from the benchmarks folder, which each puts on ``sys.path``."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
ROOMS = sorted(p for p in BENCHMARKS.iterdir() if (p / "__init__.py").is_file())
MODULES = sorted(p for room in ROOMS for p in room.glob("*.py") if p.name != "__init__.py")


def is_script(path: Path) -> bool:
    """A file a user runs (a shell script, or Python with a ``__main__`` block), not a helper
    module of its room (a RESULTS section's module, a shared twin)."""
    return path.suffix == ".sh" or 'if __name__ == "__main__":' in path.read_text()


def load_script(script: Path, monkeypatch: pytest.MonkeyPatch):
    """``script`` imported as a module (its ``main`` not run), registered first as an
    import registers a module: a dataclass looks its module up in sys.modules (parity.py's
    failed alone, and passed only where another test had imported it)."""
    spec = importlib.util.spec_from_file_location(f"benchmark_{script.stem}", script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)  # runs the imports, not main(): __name__ is not __main__
    return module


def test_the_benchmarks_are_found_in_their_rooms() -> None:
    assert {"speed", "gpu", "reproduction", "parity", "codes"} <= {room.name for room in ROOMS}
    assert {"speed/train_throughput", "speed/step_kernels", "reproduction/reproduce"} <= {
        f"{p.parent.name}/{p.stem}" for p in MODULES
    }


def test_no_script_is_left_outside_a_room() -> None:
    loose = [p.name for p in BENCHMARKS.iterdir() if p.suffix in (".py", ".sh")]
    assert loose == [], f"{loose}: move each into the room of its purpose (benchmarks/README.md)"


@pytest.mark.parametrize("script", MODULES, ids=lambda path: f"{path.parent.name}/{path.stem}")
def test_benchmark_script_imports(script: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(script.parent))  # as `python benchmarks/ROOM/X.py` has it
    module = load_script(script, monkeypatch)
    if is_script(script):
        assert callable(getattr(module, "main", None)), f"{script.name} has no main()"


def test_every_script_is_in_the_index() -> None:
    """benchmarks/README.md names each script by its room: a newcomer finds which table it
    backs."""
    index = (BENCHMARKS / "README.md").read_text()
    scripts = [p for room in ROOMS for p in room.iterdir() if p.suffix in (".py", ".sh")]
    missing = [
        f"{p.parent.name}/{p.name}" for p in scripts if is_script(p) and f"`{p.name}`" not in index
    ]
    assert missing == []
    for room in ROOMS:
        assert f"## `{room.name}/`" in index, f"benchmarks/README.md: no heading for {room.name}/"


def test_the_loop_profile_finds_every_part_of_the_loop(tmp_path: Path, monkeypatch) -> None:
    """loop_profile.py reads its parts' functions from the functions themselves: named by
    file, it once kept looking for the step in a module a split had moved it out of."""
    script = BENCHMARKS / "speed" / "loop_profile.py"
    monkeypatch.syspath_prepend(str(script.parent))
    module = load_script(script, monkeypatch)
    out = tmp_path / "profile.json"
    flags = ["--d-model", "16", "--eval-every", "10", "--eval-examples", "64"]
    assert module.main(["--steps", "20", "--out", str(out), "--", *flags]) == 0
    profile = json.loads(out.read_text())
    parts = profile["parts"]
    found = ("steps", "evaluation", "checkpoints", "tracked metrics (on_eval)")
    assert all(parts[part] > 0 for part in found), parts
    # the parts do not overlap: evaluation once counted every function torch.no_grad wraps
    assert parts["rest of the loop"] >= 0, parts
    assert profile["steps"] == 20
    # a command stopped by --time-budget (exit code 3) is profiled up to where it stopped
    budget = ["--time-budget", "0.001"]
    assert module.main(["--steps", "20", "--out", str(out), "--", *flags, *budget]) == 0
    assert json.loads(out.read_text())["steps"] == 10  # stopped at the first evaluation


def test_the_loop_phases_time_the_same_step_both_ways(monkeypatch) -> None:
    """loop_phases.py alternates latentlens's loop and the reference's: both must train
    as Trainer.train_step does, bit for bit, and every part must be timed."""
    import torch

    from latentlens.training import TrainConfig, Trainer, model_for_task

    script = BENCHMARKS / "speed" / "loop_phases.py"
    module = load_script(script, monkeypatch)
    model = model_for_task("fuzzy-logic", d_model=16, n_heads=2, qk_dim=4, v_dim=4, d_mlp=32)
    config = Trainer.resolve_config(
        "fuzzy-logic", model, TrainConfig.for_task("fuzzy-logic", batch_size=16)
    )
    timed, plain = (Trainer(None, config, device="cpu", fused=True, quiet=True) for _ in "ab")
    ours, reference = module.Phases(timed), module.Phases(timed)
    torch.manual_seed(0)  # the attention's dropout draws from the global generator
    for index in range(6):
        (reference if index % 2 else ours).step(reference=bool(index % 2))
    torch.manual_seed(0)
    for _ in range(6):
        plain.train_step()
    for a, b in zip(timed.model.parameters(), plain.model.parameters(), strict=True):
        assert torch.equal(a, b)
    parts = {"learning rate", "gradients to None", "draw", "forward (compiled)", "backward",
             "optimizer step", "loss bookkeeping"}  # fmt: skip
    assert set(ours.seconds) == set(reference.seconds) == parts


def test_the_suite_profile_counts_each_stack_for_its_innermost_process(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    """suite_cpu.py reads py-spy's raw profile: each stack's samples go to the kind of the
    last process in its chain, imports and compiling apart; a command line holding a
    newline (``python -c`` with a script) continues its record on the next line."""
    script = BENCHMARKS / "speed" / "suite_cpu.py"
    module = load_script(script, monkeypatch)
    root = 'process 1:"python -m pytest"'
    worker = f'{root};process 2:"python -u -c import sys;exec(eval(sys.stdin.readline()))"'
    load = "_find_and_load (<frozen importlib._bootstrap>:1165)"
    lines = [
        f"{worker};test_a (tests/test_a.py:3);{load};<module> (torch/__init__.py:1) 40",
        f"{worker};test_b (tests/test_b.py:9);compile_fx (torch/_inductor/compile_fx.py:9) 60",
        f"{worker};test_b (tests/test_b.py:9);forward (latentlens/models/attention.py:1) 100",
        f'{worker};process 3:"python -m latentlens --threads 1 train --steps 8";{load} 20',
        f'{worker};process 4:"python -c import x\nprint(x)";<module> (<string>:2) 10',
        f'{worker};process 5:"python -B -c from multiprocessing.spawn import spawn_main" 6',
    ]
    profile = tmp_path / "suite.txt"
    profile.write_text("\n".join(lines) + "\n")
    assert module.main([str(profile), "--rate", "2"]) == 0
    rows = {line.split(" | ")[0].strip("| "): line.split(" | ")[1:]
            for line in capsys.readouterr().out.splitlines() if line.startswith("| ")}  # fmt: skip
    # kind: count, seconds (samples / 2 Hz), of which imports, of which compiling
    assert rows["xdist workers (in-process tests)"] == ["1", "100", "20", "30 |"]
    assert rows["`latentlens train` commands"] == ["1", "10", "10", " |"]
    assert rows["pytest and the rest"] == ["1", "5", "0", " |"]
    assert rows["spawned workers"] == ["1", "3", "0", " |"]
    with pytest.raises(SystemExit):
        module.main([str(tmp_path / "missing.txt")])
    assert "is not a file" in capsys.readouterr().err


def test_the_command_benchmark_times_runs_to_their_end(tmp_path: Path, monkeypatch) -> None:
    """command_side_by_side.py's ``--lengths`` (the GPU's way): a command run to the end at
    a step count reports that count, and the rate is the two runs' difference while the
    whole-run rate keeps the start-up in."""
    script = BENCHMARKS / "speed" / "command_side_by_side.py"
    monkeypatch.syspath_prepend(str(script.parent))
    module = load_script(script, monkeypatch)
    run_dir = tmp_path / "run"
    limit = module.Limit(steps=2)
    args = module.command("fuzzy-logic", "linear", 0, run_dir, limit, tmp_path, 1, "cpu")
    assert args[args.index("--steps") + 1] == "2" and "--time-budget" not in args
    [run] = module.timed_commands([(args, run_dir)])
    assert (run.steps, run.path) == (2, "eager")  # under 1,000 steps a run is eager
    assert 0 < run.training < run.wall and run.start_up == run.wall - run.training
    Run = module.TimedRun
    rate = module.rate_of([Run(1_000, 30.0, 18.0, "fused")], [Run(5_000, 50.0, 38.5, "fused")])
    assert rate.total == rate.per_run[0] == 4_000 / 20.0
    assert rate.whole == [5_000 / 50.0] and rate.paths == ["fused"] and rate.unlike() == []
    budgets = module.command("sraven", "hyla", 1, run_dir, module.Limit(seconds=40), tmp_path, None)
    assert budgets[budgets.index("--time-budget") + 1] == "40" and "--steps" not in budgets


def test_the_command_benchmark_survives_a_command_that_writes_much_to_stderr(
    tmp_path: Path, monkeypatch
) -> None:
    """A timed command may write more to stderr than a pipe holds (64 KiB: inductor prints
    the code it failed to compile, warnings repeat); ``timed_commands`` must neither block
    it nor wait on it forever, and a failure's message must end as its stderr ended."""
    script = BENCHMARKS / "speed" / "command_side_by_side.py"
    monkeypatch.syspath_prepend(str(script.parent))
    module = load_script(script, monkeypatch)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    writes = (
        "import json, pathlib, sys; sys.stderr.write('x' * 300_000 + '\\n'); "
        f"pathlib.Path({str(run_dir / 'config.json')!r}).write_text("
        "json.dumps({'train': {'steps': 7, 'path': 'eager'}}))"
    )
    found: list = []
    command = [([sys.executable, "-c", writes], run_dir)]
    timing = threading.Thread(
        target=lambda: found.extend(module.timed_commands(command)), daemon=True
    )
    timing.start()
    timing.join(timeout=60)
    assert not timing.is_alive(), "timed_commands waited on a command blocked on its stderr"
    [run] = found
    assert (run.steps, run.path, run.training) == (7, "eager", None)
    failing = "import sys; sys.stderr.write('y' * 100_000 + 'the end'); sys.exit(1)"
    with pytest.raises(SystemExit, match="the end"):
        module.timed_commands([([sys.executable, "-c", failing], run_dir)])


def test_the_command_benchmark_finds_pairs_that_did_not_start_alike(monkeypatch) -> None:
    """The difference of two runs' walls is their steps' rate only where they start up
    alike: a pair whose start-ups differ by more than a tenth of its difference in training
    time, or whose runs took different paths, is named (and the round timed again)."""
    script = BENCHMARKS / "speed" / "command_side_by_side.py"
    monkeypatch.syspath_prepend(str(script.parent))
    module = load_script(script, monkeypatch)
    Run = module.TimedRun
    short = Run(200, 30.0, 20.0, "fused-compile")  # start-up 10 s
    # training 40 s apart: start-ups 3.9 s apart pass, 4.1 s apart do not
    assert module.rate_of([short], [Run(700, 73.9, 60.0, "fused-compile")]).unlike() == []
    [late] = module.rate_of([short], [Run(700, 74.1, 60.0, "fused-compile")]).unlike()
    assert late == "the runs' start-ups differ (10.0 and 14.1 s)"
    # a short run that spent 25 s more starting up inflates the difference 2.7-fold
    slow_start = Run(250, 45.0, 10.0, "fused-compile")
    rate = module.rate_of([slow_start], [Run(770, 60.0, 50.0, "fused-compile")])
    assert rate.total == pytest.approx(520 / 15) and len(rate.unlike()) == 1
    [paths] = module.rate_of([Run(200, 30.0, 20.0, "eager")],
                             [Run(700, 70.0, 60.0, "fused-compile")]).unlike()  # fmt: skip
    assert paths == "the runs took different paths (eager, fused-compile)"
    unknown = module.rate_of([Run(200, 30.0, None, "eager")], [Run(700, 90.0, None, "eager")])
    assert unknown.unlike() == []  # runs that record no training seconds cannot be checked


def test_the_command_benchmark_times_a_round_again_where_its_runs_did_not_start_alike(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    """A round whose pair did not start up alike is timed again, once: the second pair's
    rate is the round's, the row counts the retiming and keeps the runs it used."""
    script = BENCHMARKS / "speed" / "command_side_by_side.py"
    monkeypatch.syspath_prepend(str(script.parent))
    module = load_script(script, monkeypatch)
    Run = module.TimedRun
    pairs = iter([
        ([Run(250, 45.0, 10.0, "fused-compile")], [Run(770, 60.0, 50.0, "fused-compile")]),
        ([Run(250, 30.0, 20.0, "fused-compile")], [Run(770, 70.0, 60.0, "fused-compile")]),
    ])  # fmt: skip
    tags = []

    def command_rate(task, variant, runs, limits, folder, tag, device="cpu"):
        tags.append(tag)
        return module.rate_of(*next(pairs))

    monkeypatch.setattr(module, "command_rate", command_rate)
    monkeypatch.setattr(module, "prime", lambda *args, **kwargs: None)
    monkeypatch.setattr(module, "official_rate", lambda *args, **kwargs: 4.0)
    monkeypatch.setattr(module, "step_rate", lambda *args, **kwargs: 7.0)
    (tmp_path / "hyla").mkdir()
    out = tmp_path / "out.json"
    argv = ["--official", str(tmp_path), "--tasks", "sraven", "--variants", "linear",
            "--modes", "single", "--rounds", "1", "--out", str(out)]  # fmt: skip
    assert module.main(argv) == 0
    assert tags == ["single-r0", "single-r0-again"]  # a fresh run directory for the retiming
    assert "start-ups differ (35.0 and 10.0 s): timed again" in capsys.readouterr().err
    [row] = json.loads(out.read_text())["rows"]
    assert row["retimed"] == 1 and row["command"] == [520 / 40]
    assert row["pairs"][0][0][0] == {"steps": 250, "wall": 30.0, "training": 20.0,
                                     "path": "fused-compile"}  # fmt: skip


def test_the_command_benchmark_budgets_hold_an_evaluation_per_task(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    """By default SRAVEN's runs train 40 and 160 s, fuzzy logic's 20 and 60: at SRAVEN's
    13-16 steps/s budgets of 20 and 60 s stop near steps 300 and 900, whose difference holds
    none of its evaluations (every 1,000 steps). ``--budgets`` sets both tasks'."""
    script = BENCHMARKS / "speed" / "command_side_by_side.py"
    monkeypatch.syspath_prepend(str(script.parent))
    module = load_script(script, monkeypatch)
    Run = module.TimedRun
    seen = {}

    def command_rate(task, variant, runs, limits, folder, tag, device="cpu"):
        seen[task] = tuple(limit.seconds for limit in limits)
        pair = [Run(250, 30.0, 20.0, "fused-compile")], [Run(770, 70.0, 60.0, "fused-compile")]
        return module.rate_of(*pair)

    monkeypatch.setattr(module, "command_rate", command_rate)
    monkeypatch.setattr(module, "prime", lambda *args, **kwargs: None)
    monkeypatch.setattr(module, "official_rate", lambda *args, **kwargs: 4.0)
    monkeypatch.setattr(module, "step_rate", lambda *args, **kwargs: 7.0)
    (tmp_path / "hyla").mkdir()
    argv = ["--official", str(tmp_path), "--tasks", "fuzzy-logic", "sraven", "--variants",
            "linear", "--modes", "single", "--rounds", "1"]  # fmt: skip
    assert module.main(argv) == 0
    assert seen == {"fuzzy-logic": (20.0, 60.0), "sraven": (40.0, 160.0)}
    assert "budgets 20 and 60 s (fuzzy-logic); 40 and 160 s (sraven)" in capsys.readouterr().out
    assert module.main([*argv, "--budgets", "30", "90"]) == 0
    assert seen == {"fuzzy-logic": (30.0, 90.0), "sraven": (30.0, 90.0)}


def test_the_command_benchmark_refuses_cores_on_cuda(tmp_path: Path, monkeypatch, capsys) -> None:
    script = BENCHMARKS / "speed" / "command_side_by_side.py"
    module = load_script(script, monkeypatch)
    (tmp_path / "hyla").mkdir()
    with pytest.raises(SystemExit):
        module.main(["--official", str(tmp_path), "--device", "cuda", "--modes", "cores"])
    assert "one run per core is a CPU mode" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        module.main(["--official", str(tmp_path), "--lengths", "50", "20"])
    assert "--lengths 50 20" in capsys.readouterr().err


def test_the_command_benchmark_refuses_runs_too_short_to_compile(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    """A run of under CALIBRATE_FROM steps compiles nothing (on CUDA it runs eager), so a
    pair of lengths whose shorter run is that short would time two paths: refused, before
    any command runs."""
    script = BENCHMARKS / "speed" / "command_side_by_side.py"
    module = load_script(script, monkeypatch)
    (tmp_path / "hyla").mkdir()
    monkeypatch.setattr(module, "prime", lambda *args, **kwargs: pytest.fail("it ran"))
    with pytest.raises(SystemExit):
        module.main(["--official", str(tmp_path), "--lengths", "2000", "6000"])
    err = capsys.readouterr().err
    assert "--lengths 2000 6000: a run of under 5000 steps compiles nothing" in err
    assert module.CALIBRATE_FROM == 5000


def rounds_file(path: Path, rows: list[tuple[str, str, str, list[float], list[float]]]) -> Path:
    """A command_side_by_side.py ``--out`` file of ``(task, variant, mode, official, command)``
    rows, as that script writes it."""
    data = {"meta": {"cpus": 2}, "rows": [
        {"task": task, "variant": variant, "mode": mode, "runs": 1, "official": official,
         "command": command, "per_run": [[c] for c in command], "step": [], "paths": []}
        for task, variant, mode, official, command in rows
    ]}  # fmt: skip
    path.write_text(json.dumps(data))
    return path


def test_the_command_rounds_interval_is_students(monkeypatch) -> None:
    """The mean's 95% interval against Student's t written out: with two degrees of freedom
    the t distribution's CDF is 1/2 + t / (2 sqrt(2 + t^2)), so its 0.975 quantile is
    sqrt(2 * 0.95^2 / (1 - 0.95^2))."""
    module = load_script(BENCHMARKS / "speed" / "command_rounds.py", monkeypatch)
    ratios = (3.0, 3.2, 3.4)  # mean 3.2, standard deviation 0.2
    quantile = (2 * 0.95**2 / (1 - 0.95**2)) ** 0.5
    half = quantile * 0.2 / 3**0.5
    low, high = module.Cell("t", "v", "m", ratios).mean_interval()
    assert low == pytest.approx(3.2 - half, rel=1e-12)
    assert high == pytest.approx(3.2 + half, rel=1e-12)
    assert module.Cell("t", "v", "m", (2.9,)).mean_interval() is None


@pytest.mark.parametrize(
    ("ratios", "verdict"),
    [
        ((3.0, 3.5), "every round"),
        ((3.5, 3.6, 3.4, 3.5, 3.6, 3.4, 2.99), "mean above, not every round"),
        ((2.5, 2.6, 2.55), "mean below"),
        ((2.8, 3.2), "mean across"),
        ((2.9,), "short"),
    ],
)
def test_the_command_rounds_verdicts(ratios, verdict, monkeypatch) -> None:
    module = load_script(BENCHMARKS / "speed" / "command_rounds.py", monkeypatch)
    assert module.Cell("t", "v", "m", ratios).verdict(3.0) == verdict


def test_the_command_rounds_pool_every_file_of_a_folder(tmp_path: Path, monkeypatch, capsys):
    """Rounds of one cell are pooled across files, each ratio the command's rate over the
    official code's in its round; other JSON files are passed over; rows come in the
    table's order whatever the files' order."""
    module = load_script(BENCHMARKS / "speed" / "command_rounds.py", monkeypatch)
    rounds_file(tmp_path / "a.json", [("sraven", "linear", "single", [4.0], [12.0]),
                                      ("fuzzy-logic", "softmax", "single", [20.0, 25.0],
                                       [50.0, 80.0])])  # fmt: skip
    rounds_file(tmp_path / "b.json", [("fuzzy-logic", "softmax", "single", [30.0], [96.0])])
    recorded = json.loads((tmp_path / "b.json").read_text())
    recorded["meta"]["processor"] = "AMD EPYC (family 25 model 17, AVX-512)"
    (tmp_path / "b.json").write_text(json.dumps(recorded))
    (tmp_path / "other.json").write_text(json.dumps({"rounds": [1, 2]}))
    cells = module.collect(module.read_outputs(module.result_files([tmp_path])))
    assert [(c.task, c.variant, c.mode) for c in cells] == [
        ("fuzzy-logic", "softmax", "single"),
        ("sraven", "linear", "single"),
    ]
    assert cells[0].ratios == (2.5, 3.2, 3.2) and cells[1].ratios == (3.0,)
    assert module.main([str(tmp_path)]) == 0
    table = capsys.readouterr().out
    assert table.startswith(
        "processors: not recorded (1 file); AMD EPYC (family 25 model 17, AVX-512) (1 file)\n\n|"
    )
    assert "| fuzzy-logic | softmax | single | 3 | 3.20x | 2 of 3 |" in table
    assert "| sraven | linear | single | 1 | 3.00x | 1 of 1 | 3.00 |  | every round |" in table


def test_the_command_rounds_refuse_what_they_cannot_read(tmp_path: Path, monkeypatch, capsys):
    module = load_script(BENCHMARKS / "speed" / "command_rounds.py", monkeypatch)
    assert module.main([str(tmp_path / "missing")]) == 2
    assert "missing: no such file or folder" in capsys.readouterr().err
    (tmp_path / "torn.json").write_text('{"rows": [')
    assert module.main([str(tmp_path / "torn.json")]) == 2
    assert "torn.json: not readable as JSON" in capsys.readouterr().err
    rounds_file(tmp_path / "zero.json", [("sraven", "hyla", "cores", [0.0], [3.0])])
    assert module.main([str(tmp_path / "zero.json")]) == 2
    assert "sraven hyla cores has a rate that is not positive" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert module.main([str(tmp_path / "empty")]) == 2
    assert "no command_side_by_side.py rounds" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        module.main([str(tmp_path / "zero.json"), "--target", "0"])
    assert "--target 0: give a ratio above 0" in capsys.readouterr().err


def test_the_command_benchmark_names_the_processor(tmp_path: Path, monkeypatch) -> None:
    """Results name the CPU by family and model and vector width (cloud guests show every
    EPYC as "AMD EPYC"), and by its model name alone where /proc/cpuinfo is not Linux's."""
    script = BENCHMARKS / "speed" / "command_side_by_side.py"
    monkeypatch.syspath_prepend(str(script.parent))
    module = load_script(script, monkeypatch)
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(
        "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 1\n"
        "model name\t: AMD EPYC\nflags\t\t: fpu sse2 avx2 fma\n\nprocessor\t: 1\n"
        "cpu family\t: 25\nmodel\t\t: 1\nflags\t\t: fpu sse2 avx2 fma avx512f\n"
    )
    assert module.processor(cpuinfo) == "AMD EPYC (family 25 model 1, no AVX-512)"
    cpuinfo.write_text(cpuinfo.read_text().replace("avx2 fma\n\n", "avx2 fma avx512f\n\n"))
    assert module.processor(cpuinfo).endswith(", AVX-512)")
    monkeypatch.setattr(module, "cpu_model", lambda: "Apple M3")
    assert module.processor(tmp_path / "missing") == "Apple M3"


def test_thread_shares_sorts_samples_by_kind_of_code(monkeypatch) -> None:
    """Each thread's samples (``perf script -F tid,ip,sym,dso -G`` lines) as shares of its
    own, by the library they fell in and, inside libtorch, by the function (MKL's and
    oneDNN's apart from libtorch's own); the main thread's column first."""
    module = load_script(BENCHMARKS / "speed" / "thread_shares.py", monkeypatch)
    torch_cpu = "(/x/torch/lib/libtorch_cpu.so)"
    lines = [
        "100      7feb6b4c032b [unknown] (/tmp/perf-100.map)",
        "100      7feb6b4c032c [unknown] (/tmp/perf-100.map)",
        "100      7feb9c41e02a [unknown] (/x/torch/lib/libgomp.so.1)",
        "100      2158 attention_backward._omp_fn.0 (/root/.cache/latentlens/k/attention_core.so)",
        "101      7feb6b4c05de [unknown] (/tmp/perf-100.map)",
        "101      11 _PyEval_EvalFrameDefault (/usr/lib/libpython3.11.so.1.0)",
        f"101      12 c10::impl::OperatorEntry::lookup {torch_cpu}",
        "101      13 _int_malloc (/usr/lib/x86_64-linux-gnu/libc.so.6)",
        "101      14 cpp_fused_add_0 (/tmp/torchinductor_root/c5/c5xc.main.so)",
        "101      15 [unknown] ([kernel.kallsyms])",
        "101      16 [unknown] (/x/_ctypes.cpython-311-x86_64-linux-gnu.so)",
        "101      17 f (/x/libunknown.so)",
        f"101      18 mkl_blas_def_sgemm_kernel_0_zen {torch_cpu}",
        "101      19 std::_Function_handler<void (int, int), dnnl::impl::cpu::x64::matmul::"
        f"brgemm_matmul_t<(dnnl::impl::cpu::x64::cpu_isa_t)880>::execute_body> {torch_cpu}",
        "101 ",  # a sample perf could not place: passed over
        "",
    ]
    shares = module.thread_shares(lines)
    assert shares[100] == {"oneDNN's matmul kernels": 0.5, "waiting in OpenMP": 0.25,
                           "latentlens's C kernels": 0.25}  # fmt: skip
    assert shares[101]["Python and PyTorch's bindings"] == pytest.approx(2 / 10)
    for kind in (
        "oneDNN's matmul kernels",
        "MKL's sgemm (per-core weight gradients)",
        "oneDNN's set-up and drivers",
        "libtorch (dispatch, allocation, copies)",
        "glibc (malloc, memset)",
        "inductor's graph kernels",
        "Linux kernel",
        "other",
    ):
        assert shares[101][kind] == pytest.approx(1 / 10), kind  # fmt: skip
    text = module.table(shares, main=101)
    header, first = text.splitlines()[:2]
    assert header.split() == ["main", "thread", "100"]
    assert first.split()[-2:] == ["10.0%", "50.0%"]  # oneDNN: main 1 of 10, the other 2 of 4
    last = text.splitlines()[-1]
    assert last.startswith("waiting in OpenMP") and last.split()[-2:] == ["0.0%", "25.0%"]


def test_thread_shares_says_when_perf_is_missing(monkeypatch) -> None:
    module = load_script(BENCHMARKS / "speed" / "thread_shares.py", monkeypatch)
    monkeypatch.setattr(module.shutil, "which", lambda name: None)
    with pytest.raises(SystemExit, match="Linux perf was not found; install it"):
        module.sample("fuzzy-logic", "softmax", 1.0, 100)


def test_core_distance_sorts_timings_by_where_the_cores_sat(monkeypatch, capsys) -> None:
    """A timing counts as near or far apart only where both of its probes agree; each
    side's medians, and latentlens's rate against the official step's, per place."""
    module = load_script(BENCHMARKS / "speed" / "core_distance.py", monkeypatch)
    timings = [
        {"side": "latentlens", "round_trip_ns": [80, 90], "step_ms": 10.0},
        {"side": "official", "round_trip_ns": [90, 85], "step_ms": 40.0},
        {"side": "latentlens", "round_trip_ns": [85, 400], "step_ms": 99.0},  # a move: out
        {"side": "official", "round_trip_ns": [400, 350], "step_ms": 42.0},
        {"side": "latentlens", "round_trip_ns": [350, 360], "step_ms": 14.0},
    ]
    places = [module.place_of(t["round_trip_ns"], 200.0) for t in timings]
    assert places == ["near", "near", None, "far", "far"]
    module.report(timings, 200.0)
    out = capsys.readouterr().out
    assert "latentlens: far apart, the step takes 1.400x as long" in out
    assert "official: far apart, the step takes 1.050x as long" in out
    assert "near: latentlens's step at 4.00x the official step's rate" in out
    assert "far: latentlens's step at 3.00x the official step's rate" in out


def test_core_distance_lists_the_operators_that_grow_far_apart(monkeypatch, capsys) -> None:
    module = load_script(BENCHMARKS / "speed" / "core_distance.py", monkeypatch)
    near = {"mm": 6.0, "norm": 0.1}
    timings = [
        {"side": "latentlens", "round_trip_ns": [80, 80], "step_ms": 9.0, "operators_ms": near},
        {"side": "latentlens", "round_trip_ns": [400, 400], "step_ms": 9.9,
         "operators_ms": {"mm": 6.2, "norm": 0.4, "new": 0.05}},
    ]  # fmt: skip
    module.operator_growth(timings, 200.0, rows=2)
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines[1:]] == ["norm", "mm"]  # +0.3, then +0.2
    assert lines[1].split()[1:] == ["0.100", "0.400", "+0.300"]
    module.operator_growth(timings[:1], 200.0, rows=2)
    assert "no timing both near and far apart" in capsys.readouterr().out


def test_core_distance_measures_a_round_trip(monkeypatch) -> None:
    """The probe builds and bounces a line between this process's first two CPUs: a
    positive time, under a millisecond a trip even on a loaded machine."""
    if len(os.sched_getaffinity(0)) < 2 or shutil.which("gcc") is None:
        pytest.skip("needs two CPUs and gcc")
    module = load_script(BENCHMARKS / "speed" / "core_distance.py", monkeypatch)
    assert 0 < module.round_trip_ns(trips=200) < 1e6


def test_core_distance_says_when_its_probe_does_not_build(monkeypatch) -> None:
    if shutil.which("gcc") is None and shutil.which("cc") is None:
        pytest.skip("needs a C compiler")
    module = load_script(BENCHMARKS / "speed" / "core_distance.py", monkeypatch)
    monkeypatch.setattr(module, "PROBE_C", "int main( {")
    module.probe.cache_clear()
    with pytest.raises(SystemExit, match=r"could not build the probe: .*error"):
        module.probe()


def test_processes_per_run_times_a_pair_by_its_slower_process(monkeypatch, capsys) -> None:
    """Each round: a probe of the cores' distance, a turn of each setup (the pair's time is
    its slower process's, the first turn alternating), a probe after."""
    module = load_script(BENCHMARKS / "speed" / "processes_per_run.py", monkeypatch)
    sent: list[str] = []

    class Pipe:
        def __init__(self, name: str, ms: float) -> None:
            self.name, self.ms = name, ms

        def send(self, steps: int) -> None:
            sent.append(self.name)

        def recv(self) -> float:
            return self.ms

    probes = iter([80.0, 90.0, 400.0, 350.0])
    monkeypatch.setattr(module, "round_trip_ns", lambda: next(probes))
    pipes = {"one process": [Pipe("one", 10.0)],
             "two processes": [Pipe("rank 0", 8.0), Pipe("rank 1", 12.5)]}  # fmt: skip
    times, trips = module.take_turns(pipes, rounds=2, steps=5)
    assert times == {"one process": [10.0, 10.0], "two processes": [12.5, 12.5]}
    assert trips == [[80.0, 90.0], [400.0, 350.0]]
    assert sent == ["one", "rank 0", "rank 1", "rank 0", "rank 1", "one"]
    assert "0.800x" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        (
            {},
            "--tasks fuzzy-logic --variants softmax linear hyla --rounds 1 --lengths 20000 "
            "50000 --out OUT/command_fuzzy_logic.json",
        ),
        (
            {"TASKS": "sraven fuzzy-logic-a1", "VARIANTS": "linear", "LENGTHS": "10000 30000"},
            "--tasks sraven fuzzy-logic-a1 --variants linear --rounds 1 --lengths 10000 30000 "
            "--out OUT/command_sraven_fuzzy_logic_a1.json",
        ),
    ],
)
def test_gpu_checks_command_passes_its_tasks_variants_and_lengths(
    tmp_path, settings, expected
) -> None:
    """The GPU script's ``command`` check hands TASKS, VARIANTS and LENGTHS (or their
    defaults) to ``command_side_by_side.py --device cuda``, its output named by the tasks:
    run with a stand-in ``python3`` that says CUDA is there and records its arguments."""
    bin_folder, log, out = tmp_path / "bin", tmp_path / "calls.txt", tmp_path / "OUT"
    bin_folder.mkdir()
    stand_in = bin_folder / "python3"
    stand_in.write_text(f'#!/bin/sh\necho "$*" >> {log}\n')
    stand_in.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("TASKS", "VARIANTS", "LENGTHS")}
    env.update(settings, PATH=f"{bin_folder}:{os.environ['PATH']}", OFFICIAL="/official")
    done = subprocess.run(["bash", str(BENCHMARKS / "gpu" / "gpu_checks.sh"), str(out),
                           "command"], env=env, capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    calls = log.read_text().splitlines()
    assert calls[0].startswith("-c import torch")  # the CUDA check, answered yes
    assert calls[1] == (f"benchmarks/speed/command_side_by_side.py --official /official "
                        f"--device cuda {expected.replace('OUT', str(out))}")  # fmt: skip


def test_operator_share_sorts_the_main_threads_chains(monkeypatch) -> None:
    """Each main-thread sample of ``perf script`` with call chains sorted by what its chain
    holds: a call into a kernel's operator, and there the kernel or the Python or C around
    it; the graph's wrapper; elsewhere. Other threads' samples are left out."""
    module = load_script(BENCHMARKS / "speed" / "operator_share.py", monkeypatch)
    torch_cpu = "(/x/torch/lib/libtorch_cpu.so)"
    call = f"\t 5 aoti_torch_call_dispatcher {torch_cpu}"
    graph = "\t 6 inductor_entry_impl (/tmp/torchinductor/ab.main.so)"
    lines = [
        "100 ",  # Python around a kernel: the leaf in libpython, under an operator's call
        "\t 1 _PyEval_EvalFrameDefault (/usr/lib/libpython3.11.so.1.0)",
        call,
        graph,
        "",
        "100 ",  # a C kernel through ctypes, under an operator's call
        "\t 2 row_backward (/c/layer_norm.so)",
        "\t 3 ffi_call (/usr/lib/libffi.so.8)",
        call,
        "",
        "100 ",  # allocation around a kernel
        "\t 4 _int_malloc (/usr/lib/x86_64-linux-gnu/libc.so.6)",
        call,
        "",
        "100 ",  # the wrapper's own work
        f"\t 7 at::empty_strided {torch_cpu}",
        graph,
        "",
        "100 ",  # a chain cut short in JIT code
        "\t 8 [unknown] (/tmp/perf-100.map)",
        "",
        "101 ",  # another thread: not counted
        "\t 9 [unknown] (/x/torch/lib/libgomp.so.1)",
        "",
    ]
    samples = module.call_chains(lines)
    assert [tid for tid, _ in samples] == [100] * 5 + [101]
    assert samples[1][1][0] == "2 row_backward (/c/layer_norm.so)"
    shares = module.operator_shares(samples, main=100)
    assert shares == {kind: 0.2 for kind in module.KINDS}
    text = module.report(lines, main=100)
    assert text.splitlines()[0] == "main thread, 5 samples"
    assert text.splitlines()[1].endswith("20.0%")
    with pytest.raises(SystemExit, match="no call chain of the main thread"):
        module.operator_shares(samples, main=999)


def test_operator_bodies_times_each_body_in_turns(monkeypatch, capsys) -> None:
    """operator_bodies.py runs the command with the C++ bodies (the switch unset) and with
    the Python ones (``LATENTLENS_NATIVE_OPERATORS=0``), the order swapped each round, and
    reports each round's ratio C++ / Python and their mean."""
    script = BENCHMARKS / "speed" / "operator_bodies.py"
    monkeypatch.syspath_prepend(str(script.parent))
    module = load_script(script, monkeypatch)
    from speed.command_side_by_side import CommandRate  # noqa: PLC0415 -- the script's room

    monkeypatch.setenv(module.SWITCH, "1")
    seen, rates = [], {None: [110.0, 120.0, 100.0], "0": [100.0, 100.0, 100.0]}

    def command_rate(task, variant, runs, limits, folder, tag, device="cpu"):
        switch = os.environ.get(module.SWITCH)
        seen.append((tag, switch))
        total = rates[switch].pop(0)
        return CommandRate(total, [total], [total], ["fused-compile"], [])

    monkeypatch.setattr(sys.modules["speed.command_side_by_side"], "command_rate", command_rate)
    switch = module.SWITCH
    monkeypatch.setattr(module, "prime", lambda *a: seen.append(("prime", os.environ.get(switch))))
    assert module.main(["--variants", "linear", "--rounds", "3"]) == 0
    assert seen == [
        ("prime", None),
        ("prime", "0"),
        ("cpp-r0", None),
        ("python-r0", "0"),
        ("python-r1", "0"),
        ("cpp-r1", None),
        ("cpp-r2", None),
        ("python-r2", "0"),
    ]
    out = capsys.readouterr().out
    assert "round 1: C++ 110.0, Python 100.0 steps/s" in out and "1.100x" in out
    assert "fuzzy-logic linear: 1.100x [" in out and "over 3 rounds" in out
    assert module.SWITCH not in os.environ  # left on the C++ bodies, the default


def test_operator_bodies_runs_to_given_lengths(monkeypatch, capsys) -> None:
    """``--lengths`` times runs that go to the end at those steps (the mid-length runs that
    take the fused kernels eagerly) instead of budgets; lengths out of order are refused."""
    script = BENCHMARKS / "speed" / "operator_bodies.py"
    monkeypatch.syspath_prepend(str(script.parent))
    module = load_script(script, monkeypatch)
    from speed.command_side_by_side import CommandRate  # noqa: PLC0415 -- the script's room

    limits_seen = []

    def command_rate(task, variant, runs, limits, folder, tag, device="cpu"):
        limits_seen.append(limits)
        return CommandRate(100.0, [100.0], [90.0], ["fused"], [])

    monkeypatch.setattr(sys.modules["speed.command_side_by_side"], "command_rate", command_rate)
    monkeypatch.setattr(module, "prime", lambda *a: None)
    assert module.main(["--variants", "hyla", "--rounds", "1", "--lengths", "1500", "3000"]) == 0
    assert [(a.steps, b.steps) for a, b in limits_seen] == [(1500, 3000)] * 2
    assert all(a.seconds is None and b.seconds is None for a, b in limits_seen)
    assert "runs of 1500 and 3000 steps" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        module.main(["--lengths", "3000", "1500"])
    assert "shorter first" in capsys.readouterr().err


def test_operator_bodies_refuses_lengths_either_side_of_compiling(monkeypatch, capsys) -> None:
    """A pair whose shorter run is under CALIBRATE_FROM steps (no compile) and whose longer
    run is not (compiled) would time two paths: refused, before any command runs."""
    script = BENCHMARKS / "speed" / "operator_bodies.py"
    module = load_script(script, monkeypatch)
    monkeypatch.setattr(module, "prime", lambda *a: pytest.fail("it ran"))
    with pytest.raises(SystemExit):
        module.main(["--variants", "hyla", "--lengths", "1500", "6000"])
    err = capsys.readouterr().err
    assert "--lengths 1500 6000: a run of under 5000 steps compiles nothing and the longer" in err


def test_operator_bodies_times_uneven_pairs_again_at_each_tasks_budgets(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    """operator_bodies.py takes command_side_by_side.py's budgets per task (SRAVEN's 40 and
    160 s hold an evaluation) and times a pair that did not start alike again, as that script
    does, counting it in its results."""
    script = BENCHMARKS / "speed" / "operator_bodies.py"
    monkeypatch.syspath_prepend(str(script.parent))
    module = load_script(script, monkeypatch)
    side_by_side = sys.modules["speed.command_side_by_side"]
    Run = side_by_side.TimedRun
    uneven = [Run(250, 45.0, 10.0, "fused-compile")], [Run(770, 60.0, 50.0, "fused-compile")]
    even = [Run(250, 30.0, 20.0, "fused-compile")], [Run(770, 70.0, 60.0, "fused-compile")]
    pairs, calls = iter([uneven, even, even]), []

    def command_rate(task, variant, runs, limits, folder, tag, device="cpu"):
        calls.append((task, tag, tuple(limit.seconds for limit in limits)))
        return side_by_side.rate_of(*next(pairs))

    monkeypatch.setattr(side_by_side, "command_rate", command_rate)
    monkeypatch.setattr(module, "prime", lambda *a: None)
    out = tmp_path / "bodies.json"
    argv = ["--tasks", "sraven", "--variants", "linear", "--rounds", "1", "--out", str(out)]
    assert module.main(argv) == 0
    assert calls == [("sraven", "cpp-r0", (40.0, 160.0)),
                     ("sraven", "cpp-r0-again", (40.0, 160.0)),
                     ("sraven", "python-r0", (40.0, 160.0))]  # fmt: skip
    assert "start-ups differ (35.0 and 10.0 s): timed again" in capsys.readouterr().err
    [result] = json.loads(out.read_text())["results"]
    assert result["retimed"] == 1 and result["ratios"] == [1.0]


def test_eager_bodies_switches_each_route_and_back(monkeypatch) -> None:
    """eager_bodies.py's routes: the Python bodies called directly, the registered bodies
    below autograd, or the operators (what a compiled step calls); ``registered`` is the
    library's own and what it leaves behind."""
    script = BENCHMARKS / "speed" / "eager_bodies.py"
    module = load_script(script, monkeypatch)
    import torch  # noqa: PLC0415 -- as the script's room has it

    from latentlens.kernels import build, compiling, gelu_tanh, layer_norm, mlp  # noqa: PLC0415

    x = torch.randn(3, 8)
    try:
        module.use_route("python")
        assert all(m.body is module.python_body and m.compiling is compiling
                   for m in (gelu_tanh, layer_norm, mlp))  # fmt: skip
        assert torch.equal(module.python_body(gelu_tanh.gelu_tanh, x), gelu_tanh.forward_values(x))
        module.use_route("operators")
        assert all(m.body is build.body and m.compiling() for m in (gelu_tanh, layer_norm, mlp))
    finally:
        module.use_route("registered")
    assert all(m.body is build.body and m.compiling is compiling
               for m in (gelu_tanh, layer_norm, mlp))  # fmt: skip
