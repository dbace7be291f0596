"""The official code trained at Table A1's fuzzy-logic setting (T = 32, frac_test 0.7,
50,000 steps) with its own ``LogicLatents`` callback (``callbacks.py``) run over training:
the other side of latentlens's ``r2_attn_latent`` (:mod:`latentlens.probes.official`).

    python benchmarks/codes/official_logic_latents.py --official PATH --variant hyla --out DIR
        [--steps 50000] [--eval-every 5000] [--time-budget SECONDS] [--seed 0]

The run is ``parity_official.py``'s (the official dataset factory, model, schedule and
AdamW, trained through the official ``Experiment.train_step``) at ``cpu_side_by_side.py``'s
``fuzzy-logic-a1`` spec, with 16,000 problems per evaluation and callback set (the official
``num_valid``). At step 0, every ``--eval-every`` steps and at the end it runs the official
``LogicLatents`` callback itself (the checkout's, on the loaders the official factory made)
and ``Experiment.eval`` on the test (held-out combinations) and OOD sets, appending
``{"step", "r2_attn_latent", "test_r2", "ood_r2", "train_loss"}`` to ``DIR/records.jsonl``.

``--time-budget``: stop at an evaluation once this many seconds have passed, the state
pickled to ``DIR/state.pkl`` (written whole or not at all); the same command continues
from it (the loader's batch ``i`` is keyed by ``i``, so the batches are the uninterrupted
run's). Exit code 3 when stopped early. XLA runs on one thread (``XLA_FLAGS``), so that
two runs share two cores.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import sys
import time
from pathlib import Path

os.environ.setdefault(
    "XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
)

BENCHMARKS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(BENCHMARKS))
from parity.parity_official import experiment, import_official, versions  # noqa: E402
from speed.cpu_side_by_side import task_spec  # noqa: E402

STATE, RECORDS = "state.pkl", "records.jsonl"


def official_callback():
    """The checkout's ``LogicLatents`` callback (never saving to disk)."""
    from callbacks import LogicLatents  # noqa: PLC0415 (the checkout is on sys.path)
    from hyla.experiment import CallbackEvent  # noqa: PLC0415

    return LogicLatents(log_level=0, onevent=CallbackEvent.STEP, save_to_disk=False)


def batches(loader, start: int):
    """The official loader's batches from index ``start`` (batch ``i`` is keyed by ``i``)."""
    import jax  # noqa: PLC0415

    for index in range(start, loader.steps):
        key = jax.random.fold_in(loader.fixed_rng, index)
        yield loader.sample_fn(key, loader.batch_size, loader.seq_len)


def save_state(out: Path, state, step: int, losses: list[float]) -> None:
    import jax  # noqa: PLC0415

    partial = out / f"{STATE}.{os.getpid()}"
    with partial.open("wb") as handle:
        pickle.dump({"state": jax.device_get(state), "step": step, "losses": losses}, handle)
    os.replace(partial, out / STATE)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--official", type=Path, required=True)
    parser.add_argument("--variant", choices=["softmax", "linear", "hyla"], required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=50_000)
    parser.add_argument("--eval-every", type=int, default=5_000)
    parser.add_argument("--time-budget", type=float)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    began = time.monotonic()
    official = import_official(args.official.resolve())
    spec = task_spec("fuzzy-logic-a1", args.variant)
    spec = {**spec, "seed": args.seed, "steps": args.steps, "eval_examples": 16_000}
    exp, evals = experiment(official, spec)
    callback = official_callback()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "spec.json").write_text(json.dumps({**spec, "versions": versions()}, indent=1))

    import jax  # noqa: PLC0415

    if (args.out / STATE).is_file():
        saved = pickle.loads((args.out / STATE).read_bytes())
        state, step, losses = saved["state"], saved["step"], saved["losses"]
        print(f"resuming at step {step}", flush=True)
    else:
        state, step, losses = exp.reset(jax.random.PRNGKey(spec["seed"])), 0, []
        (args.out / RECORDS).unlink(missing_ok=True)

    def record(step: int) -> None:
        row = {"step": step, "train_loss": sum(losses) / len(losses) if losses else None}
        row["r2_attn_latent"] = float(callback(ctx=exp, exp_state=state)["r2_attn_latent"])
        for split in ("test", "ood"):
            row[f"{split}_r2"] = float(exp.eval(state, evals[split])["r2"])
        with (args.out / RECORDS).open("a") as handle:
            handle.write(json.dumps(row) + "\n")
        print(json.dumps(row), flush=True)

    if step == 0:
        record(0)
    for batch in batches(exp.train_loader, step):
        state, metrics = exp.train_step(state, batch)
        losses.append(float(metrics["loss"]))
        step += 1
        if step % args.eval_every == 0 or step == args.steps:
            record(step)
            losses = []
            save_state(args.out, state, step, losses)
            spent = time.monotonic() - began
            if args.time_budget and step < args.steps and spent > args.time_budget:
                print(f"stopped at step {step} for --time-budget; run again to continue")
                return 3
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
