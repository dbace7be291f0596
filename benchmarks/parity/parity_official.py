"""Train the official JAX code (smonsays/hypernetwork-attention) on one parity configuration
and write its learning curves as JSON: the reference side of ``benchmarks/parity/parity.py``.

    python benchmarks/parity/parity_official.py --official PATH --spec SPEC.json --out RUN.json

``PATH`` is a checkout of the official repository (its ``hyla`` package is imported from
there; nothing of it is copied here). ``SPEC.json`` is one run of ``parity.py``'s plan:
task, variant, seed, data and model sizes, optimiser settings, steps, evaluation points.

The run is built as the official ``run.py`` builds it (``setup``): the task's own dataset
factory, ``CausalTransformer``, ``optax.warmup_cosine_decay_schedule`` (0 -> lr over the
warm-up, cosine to lr/10 over ``train_steps - warmup`` steps counted from 0) and
``optax.adamw`` with weight decay masked off 1-D parameters, trained through the official
``Experiment.train_step`` and evaluated through ``Experiment.eval``. ``run.py`` itself is not
imported: it needs TensorFlow for the WikiText task. One change to the evaluation, made
for a like-for-like comparison: the official loaders draw their batch ``i`` from the same
key as training batch ``i``, so its "test" split is the first training batches; here every
evaluation split gets its own key (``fold_in(seed, 1 + split index)``), fresh problems of
the split's distribution, as latentlens evaluates.

With ``--sample N`` it trains nothing and writes ``N`` SRAVEN problems drawn uniformly
over every rule combination (the official ``"ind+ood"`` draw) to ``--out`` (``.npz``):
``values`` ``[N, 9F]`` (the nine panels' feature values, row-major, answer last),
``permutations`` ``[N, 3, F]`` and ``rules`` ``[N, F]``, for ``parity.py``'s comparison of
the two data distributions.

With ``--serve`` it times training steps for ``cpu_side_by_side.py``: after 5 warm-up
steps (compilation) it prints ``ready``, then for each line ``N`` read from stdin times ``N``
whole training steps (the loader's draw, forward, backward, AdamW; the last step's loss
read back, so that the time covers every step's work, and no other: the official ``run.py``
reads metrics every ``log_every`` = 1,000 steps, and a read each step would keep its steps
from queueing on a GPU) and prints their steps per second, until stdin closes. The thread
count is XLA's: the caller sets ``XLA_FLAGS`` (without it, one thread, as the parity runs
use).

With ``--lockstep N`` it trains ``N`` steps with attention dropout off and writes to
``--out`` (``.npz``) the initial parameters (``param:`` + Flax's path), the ``N`` training
batches (``x``, ``y``) and the loss of every step: ``parity.py --lockstep`` trains
latentlens from the same weights on the same batches and compares the losses.

Needs ``jax``, ``flax``, ``optax``, ``chex``, ``ml_collections`` and ``einops`` (the
``parity`` extra: ``pip install -e ".[parity]"``).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
import types
from functools import partial
from pathlib import Path
from typing import Any

# One thread per run, so that runs side by side do not fight for cores (set before jax).
os.environ.setdefault(
    "XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
)

# The official variant names of the three attentions compared.
SEQUENCE_MIXERS = {
    "softmax": "softmax_attention",
    "linear": "linear_attention",
    "hyla": "linear_hypatt",
}


class UnusedModule(types.ModuleType):
    """A stand-in for a module the official code imports but these runs never call (its
    ``hyla/logging.py`` imports wandb at import time for the W&B logger; the runs here use its
    standard logger): any use of it is an error naming the module."""

    def __getattr__(self, name: str) -> Any:
        raise SystemExit(f"error: the official code used {self.__name__}.{name}; install "
                         f"{self.__name__} (pip install {self.__name__})")  # fmt: skip


def import_official(path: Path) -> dict[str, Any]:
    """The official modules the run needs, imported from the checkout at ``path``."""
    if not (path / "hyla" / "experiment.py").is_file():
        raise SystemExit(
            f"error: {path} is not a checkout of smonsays/hypernetwork-attention (no "
            "hyla/experiment.py); clone it and pass its folder to --official"
        )
    sys.path.insert(0, str(path))
    if importlib.util.find_spec("wandb") is None:  # not in the parity extra
        sys.modules["wandb"] = UnusedModule("wandb")
    try:
        import jax  # noqa: F401
        import optax  # noqa: F401
        from hyla.data.logic import create_fuzzy_logic_datasets
        from hyla.data.raven import create_raven_datasets
        from hyla.experiment import Experiment
        from hyla.loss import FuzzyLogicLoss, SymbolicRavenLoss
        from hyla.models.transformer import CausalTransformer, TransformerConfig
    except ImportError as error:
        raise SystemExit(
            f"error: the official code needs {error.name}; install the parity extra: "
            'pip install -e ".[parity]"'
        ) from None
    return {
        "create_fuzzy_logic_datasets": create_fuzzy_logic_datasets,
        "create_raven_datasets": create_raven_datasets,
        "Experiment": Experiment,
        "FuzzyLogicLoss": FuzzyLogicLoss,
        "SymbolicRavenLoss": SymbolicRavenLoss,
        "CausalTransformer": CausalTransformer,
        "TransformerConfig": TransformerConfig,
    }


def datasets(official: dict[str, Any], spec: dict[str, Any]) -> tuple[Any, dict, dict, Any, int]:
    """Training loader, evaluation loaders, the callbacks' loaders (as the official code
    makes them), loss class and sequence length of ``spec``."""
    data, batch = spec["data"], spec["batch_size"]
    num_train = spec["steps"] * batch
    examples = spec["eval_examples"]
    if spec["task"] == "sraven":
        seq_len = 9 * data["num_features"]
        (train, evals, callbacks), _ = official["create_raven_datasets"](
            batch_size=batch,
            seed=spec["seed"],
            seq_len=seq_len,
            num_train=num_train,
            num_test=examples,
            num_ood=examples,
            num_features=data["num_features"],
            feature_maxval=data["num_values"],
            grid_size=3,
            permute_features=data["permute_features"],
            frac_ood=data["frac_ood"],
        )
        loss = partial(
            official["SymbolicRavenLoss"],
            num_features=data["num_features"],
            num_feature_values=data["num_values"],
        )
        return train, evals, callbacks, loss, seq_len
    seq_len = data["seq_len"]
    (train, evals, callbacks), _ = official["create_fuzzy_logic_datasets"](
        batch_size=batch,
        seed=spec["seed"],
        seq_len=seq_len,
        num_train=num_train,
        num_test=examples,
        num_ood=examples,
        num_valid=examples,
        num_variables=data["num_variables"],
        num_terms=data["num_terms"],
        frac_test=data["frac_test"],
        frac_ood_conj=data["frac_ood_conj"],
    )
    return train, evals, callbacks, official["FuzzyLogicLoss"], seq_len


def experiment(official: dict[str, Any], spec: dict[str, Any]) -> tuple[Any, dict]:
    """The official ``Experiment`` of ``spec`` (as ``run.py``'s ``setup`` builds it) and its
    evaluation loaders, each re-keyed to fresh problems."""
    import jax
    import optax

    train, evals, callbacks, loss, seq_len = datasets(official, spec)
    for index, loader in enumerate(evals.values()):
        loader.fixed_rng = jax.random.fold_in(jax.random.PRNGKey(spec["seed"]), 1 + index)
    model = spec["model"]
    config = official["TransformerConfig"](
        num_heads=model["n_heads"],
        num_layers=model["n_layers"],
        emb_dim=model["d_model"],
        qk_dim=model["qk_dim"],
        v_dim=model["v_dim"],
        mlp_dim=model["d_mlp"],
        output_dim=spec["output_dim"],
        dropout_rate=0.0,
        attention_dropout_rate=model["attention_dropout"],
        sequence_mixer=SEQUENCE_MIXERS[spec["variant"]],
        use_causal_mask=False,
        use_absolute_position=False,
        use_relative_position=True,
        relative_position_max_dist=seq_len,
    )
    lr, warmup = spec["lr"], spec["warmup_steps"]
    schedule = optax.warmup_cosine_decay_schedule(
        init_value=0.0,
        peak_value=lr,
        warmup_steps=warmup,
        decay_steps=spec["steps"] - warmup,
        end_value=lr * 0.1,
    )
    optimizer = optax.adamw(
        learning_rate=schedule,
        weight_decay=spec["weight_decay"],
        mask=lambda p: jax.tree_util.tree_map(lambda x: x.ndim != 1, p),
    )
    exp = official["Experiment"](
        config=None,
        model=official["CausalTransformer"](config),
        loss=loss,
        optimizer=optimizer,
        train_loader=train,
        eval_loaders=evals,
        callback_loaders=callbacks,
    )
    return exp, evals


def train(official: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    """Train ``spec``'s run; its curves ``{"records": [{step, split, metric: value}]}``,
    evaluated at step 0, every ``eval_every`` steps and at the end, plus the training loss
    (mean over the steps since the last evaluation)."""
    import jax

    exp, evals = experiment(official, spec)
    state = exp.reset(jax.random.PRNGKey(spec["seed"]))
    records: list[dict[str, Any]] = []

    def evaluate(step: int, train_losses: list[float]) -> None:
        if train_losses:
            records.append(
                {"step": step, "split": "train_loss", "loss": sum(train_losses) / len(train_losses)}
            )
        for split, loader in evals.items():
            metrics = exp.eval(state, loader)
            records.append(
                {"step": step, "split": split, **{k: float(v) for k, v in metrics.items()}}
            )

    start = time.perf_counter()
    evaluate(0, [])
    losses: list[float] = []
    for step, batch in enumerate(exp.train_loader, start=1):
        state, metrics = exp.train_step(state, batch)
        losses.append(float(metrics["loss"]))
        if step % spec["eval_every"] == 0 or step == spec["steps"]:
            evaluate(step, losses)
            losses = []
    return {
        "spec": spec,
        "records": records,
        "seconds": time.perf_counter() - start,
        "versions": versions(),
    }


def sample(official: dict[str, Any], spec: dict[str, Any], count: int, out: Path) -> None:
    """``count`` SRAVEN problems of ``spec``'s sizes over all rule combinations, saved to
    ``out`` (see the module docstring)."""
    import jax
    import numpy as np

    if spec["task"] != "sraven":
        raise SystemExit(f"error: --sample draws SRAVEN problems only, not {spec['task']}")
    train, _, _, _, seq_len = datasets(official, spec)
    draw = train.sample_fn.func  # the jitted sample_fn of create_raven_datasets
    batch = draw(jax.random.PRNGKey(spec["seed"]), count, seq_len, latent_dist="ind+ood")
    context = np.asarray(batch.x)[:, : -spec["data"]["num_features"]].argmax(-1)
    values = np.concatenate([context, np.asarray(batch.y)], axis=1)
    with out.open("wb") as handle:
        np.savez(
            handle,
            values=values,
            permutations=np.asarray(batch.info["perms"]),
            rules=np.asarray(batch.info["latents"]),
        )


def lockstep(official: dict[str, Any], spec: dict[str, Any], steps: int, out: Path) -> None:
    """``steps`` steps without attention dropout; initial weights, batches and losses to
    ``out`` (see the module docstring)."""
    import jax
    import numpy as np

    spec = {**spec, "model": {**spec["model"], "attention_dropout": 0.0}}
    exp, _ = experiment(official, spec)
    state = exp.reset(jax.random.PRNGKey(spec["seed"]))
    leaves = jax.tree_util.tree_flatten_with_path(state.params)[0]
    arrays = {"param:" + jax.tree_util.keystr(path): np.asarray(v) for path, v in leaves}
    xs, ys, losses = [], [], []
    for _, batch in zip(range(steps), exp.train_loader, strict=False):
        xs.append(np.asarray(batch.x))
        ys.append(np.asarray(batch.y))
        state, metrics = exp.train_step(state, batch)
        losses.append(float(metrics["loss"]))
    with out.open("wb") as handle:
        np.savez(handle, x=np.stack(xs), y=np.stack(ys), losses=np.array(losses), **arrays)


def serve(official: dict[str, Any], spec: dict[str, Any]) -> None:
    """Time training steps on request (see the module docstring)."""
    import jax

    exp, _ = experiment(official, spec)
    state = exp.reset(jax.random.PRNGKey(spec["seed"]))
    batches = iter(exp.train_loader)

    def run(steps: int) -> None:
        nonlocal state
        for _ in range(steps):
            state, metrics = exp.train_step(state, next(batches))
        float(metrics["loss"])  # depends on every step before it

    run(5)
    print("ready", flush=True)
    for line in sys.stdin:
        start = time.perf_counter()
        run(int(line))
        print(int(line) / (time.perf_counter() - start), flush=True)


def versions() -> dict[str, str]:
    import flax
    import jax
    import optax

    return {"jax": jax.__version__, "flax": flax.__version__, "optax": optax.__version__}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--official", type=Path, required=True)
    parser.add_argument("--spec", type=Path, required=True)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--sample", type=int, help="draw this many problems, train nothing")
    parser.add_argument("--lockstep", type=int, help="steps of the lockstep comparison")
    parser.add_argument("--serve", action="store_true", help="time steps asked for on stdin")
    args = parser.parse_args(argv)
    if args.out is None and not args.serve:
        parser.error("--out is needed unless --serve")
    official = import_official(args.official.resolve())
    spec = json.loads(args.spec.read_text())
    if args.sample:
        sample(official, spec, args.sample, args.out)
        return 0
    if args.lockstep:
        lockstep(official, spec, args.lockstep, args.out)
        return 0
    if args.serve:
        serve(official, spec)
        return 0
    result = train(official, spec)
    partial_path = args.out.with_suffix(".part")
    partial_path.write_text(json.dumps(result))
    partial_path.replace(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
