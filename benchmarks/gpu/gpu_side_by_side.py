"""GPU training steps/s of latentlens beside the official JAX code, on one card, in one
command: one process each, alternating rounds, so that a drift of the card's clocks or of
its neighbours hits both sides of a round alike.

    python benchmarks/gpu/gpu_side_by_side.py --official PATH [--tasks fuzzy-logic sraven-default]
        [--variants softmax linear hyla] [--modes eager graphs-compile] [--rounds 3]
        [--steps 300] [--deadline SECONDS] [--out FILE.json]

``PATH`` is a checkout of smonsays/hypernetwork-attention; the official code trains in its own
process (``parity_official.py --serve``: the loader's draw, forward, backward, AdamW, the
loss read back once per timed request, as its ``run.py`` reads metrics every 1,000 steps),
with JAX's memory preallocation off so that both fit on the card. latentlens's modes,
each a :class:`~latentlens.training.Trainer` in this process: ``eager`` (what
``latentlens train --device cuda`` ran without flags before the path was chosen),
``graphs`` (``--cuda-graphs``) and ``graphs-compile`` (``--cuda-graphs --compile``), in
strict float32 (the official code leaves JAX's default matmul precision, TF32 on Hopper). Tasks
are ``cpu_side_by_side.py``'s: ``fuzzy-logic`` (the reference's T = 16, batch 128) and
``sraven-default`` (the reference's 4 features of 8 values, 4 layers, batch 128) among them.
Each row is printed (and written to ``--out``) as it is measured; ``--deadline`` stops
before a row that would start after that many seconds, so a lease cut short keeps what it
measured.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch

BENCHMARKS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(BENCHMARKS))
from parity.parity import VARIANTS  # noqa: E402
from speed.cpu_side_by_side import (  # noqa: E402
    TASKS,
    Server,
    StepTimer,
    latentlens_config,
    official_server,
    spread,
    task_spec,
)

from latentlens.training import Trainer  # noqa: E402

MODES = {"eager": {}, "graphs": {"cuda_graphs": True},
         "graphs-compile": {"cuda_graphs": True, "compile": True}}  # fmt: skip


def measure_row(args: argparse.Namespace, spec: dict[str, Any], official: Server) -> dict:
    """One task's and variant's rates per round: the official server (started) and each of
    latentlens's modes, alternating."""
    sides: dict[str, Any] = {"official": official}
    startup = {}
    try:
        torch.compiler.reset()
        for mode in args.modes:
            started = time.perf_counter()
            config = latentlens_config(spec, "fp32", threads=2)
            trainer = Trainer(None, config, device=args.device, quiet=True, **MODES[mode])
            sides[mode] = StepTimer(trainer.train_step, 1, trainer.device, warmup=10)
            startup[mode] = time.perf_counter() - started
        rates: dict[str, list[float]] = {side: [] for side in sides}
        for _ in range(args.rounds):
            for side, rate in sides.items():
                rates[side].append(rate(args.steps))
    finally:
        for side in sides.values():
            side.close()
    return {"task": spec["task"], "variant": spec["variant"], "rates": rates, "startup_s": startup}


def row_line(row: dict[str, Any], modes: list[str]) -> str:
    rates = row["rates"]
    cells = [f"{row['task']:<15}{row['variant']:<9}{spread(rates['official']):>22}"]
    for mode in modes:
        ratios = [
            ours / theirs for ours, theirs in zip(rates[mode], rates["official"], strict=True)
        ]
        cells.append(f"{spread(rates[mode]):>24}{spread(ratios, 2) + 'x':>24}")
    return "".join(cells)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--official", type=Path, required=True)
    parser.add_argument("--tasks", nargs="+", default=["fuzzy-logic", "sraven-default"],
                        choices=TASKS)  # fmt: skip
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    parser.add_argument("--modes", nargs="+", default=["eager", "graphs-compile"],
                        choices=list(MODES))  # fmt: skip
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=300, help="timed steps per side a round")
    parser.add_argument("--deadline", type=float, help="start no row after this many seconds")
    parser.add_argument("--out", type=Path, help="write every rate as JSON here")
    parser.add_argument("--device", default="cuda", help="cpu: a smoke test of the script")
    args = parser.parse_args(argv)
    if not (args.official / "hyla" / "experiment.py").is_file():
        parser.error(f"--official {args.official}: not a checkout of the official code")
    if min(args.rounds, args.steps) < 1:
        parser.error("--rounds and --steps must be at least 1")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("no CUDA device: this benchmark times the GPU (--device cpu: a smoke test)")
    began = time.perf_counter()
    name = torch.cuda.get_device_name() if args.device == "cuda" else "CPU"
    device = f"{name}, torch {torch.__version__}"
    print(f"GPU training steps/s beside the official JAX code ({device}); {args.rounds} "
          f"alternating rounds of {args.steps} steps; median [min–max] over rounds, the "
          "ratio taken per round\n")  # fmt: skip
    header = f"{'task':<15}{'variant':<9}{'official':>22}"
    for mode in args.modes:
        header += f"{mode:>24}{mode + ' / official':>24}"
    print(header, flush=True)
    result: dict[str, Any] = {"device": device, "rounds": args.rounds, "steps": args.steps,
                              "modes": args.modes, "rows": []}  # fmt: skip
    # variant-major: with a deadline, every task's first variant is measured first
    specs = [task_spec(task, variant) for variant in args.variants for task in args.tasks]
    with tempfile.TemporaryDirectory() as folder, ThreadPoolExecutor(len(specs)) as pool:
        # the official processes compile at once, each waiting for its turn once ready
        servers = list(pool.map(
            lambda spec: official_server(args.official, spec, 1, Path(folder), "cuda"), specs
        ))  # fmt: skip
        result["official_startup_s"] = time.perf_counter() - began
        for spec, server in zip(specs, servers, strict=True):
            if args.deadline and time.perf_counter() - began > args.deadline:
                print(f"{spec['task']} {spec['variant']}: not measured (past --deadline)")
                server.close()
                continue
            result["rows"].append(measure_row(args, spec, server))
            print(row_line(result["rows"][-1], args.modes), flush=True)
            if args.out:
                args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
