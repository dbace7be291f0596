"""The demo's models: the zoo's converged ones (copied, never retrained) and the one it
trains live, with the sizes it trains at."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from latentlens.models.config import VARIANTS
from latentlens.threads import available_cpus, compute_with_threads
from latentlens.training import RunDirectory, TrainConfig, Trainer, list_checkpoints, model_for_task
from latentlens.training.config import same_training
from latentlens.training.thread_choice import start_threads
from latentlens.training.trainer import choose_run_path
from latentlens.zoo import STAMP as ZOO_STAMP
from latentlens.zoo import run_directory as zoo_run_directory

# The names the report and the figures use: the attention variants' paper names.
VARIANT_NAMES = {v: VARIANTS[v].paper_name for v in ("softmax", "linear", "hyla")}


@dataclass(frozen=True)
class DemoSize:
    """Model and training sizes of a demo run; ``zoo_examples``: the examples the zoo's
    models are probed on (codes, and the first ones of their evaluation sets)."""

    model: dict[str, Any]
    train: dict[str, Any]
    examples: int
    zoo_examples: int


SIZES = {
    # The reference's default model (D=128, H=8, MLP 256), ~1 min of training per variant
    # on a 2-core CPU. At half its width (D=64, MLP 128), HYLA's layer-0 value network
    # (2 ReLU units per pair) died at the query for seed 2024 at lr 3e-3 and 1e-3 alike; at
    # this size it lives for every seed tried, and in 3,000 steps lr 3e-3 (one of the
    # paper's sweep values) trains all three variants further than the reference's 1e-3:
    # benchmarks/reproduction/demo_settings.py holds the search and docs/benchmarks.md its numbers.
    "small": DemoSize(
        model=dict(attention_dropout=0.0),
        train=dict(steps=3_000, batch_size=128, lr=3e-3, warmup_steps=100, eval_every=250,
                   eval_examples=2_048),
        examples=2_048,
        # about 20 s a zoo model on a 2-core AVX2 EPYC; test R² has a standard error near 0.05
        zoo_examples=1_024,
    ),
    # seconds: for tests and a first look
    "tiny": DemoSize(
        model=dict(d_model=16, n_heads=4, qk_dim=8, v_dim=8, d_mlp=32, attention_dropout=0.0),
        train=dict(steps=30, batch_size=32, lr=3e-3, warmup_steps=5, eval_every=15,
                   eval_examples=128),
        examples=256,
        zoo_examples=256,  # two batches: a standard error
    ),
}  # fmt: skip


def live_config(variant: str, size: DemoSize, steps: int | None, seed: int) -> dict[str, Any]:
    """The resolved run config the demo trains ``variant`` live with."""
    train = {**size.train, "seed": seed, **({"steps": steps} if steps else {})}
    return Trainer.resolve_config(
        "fuzzy-logic",
        model_for_task("fuzzy-logic", attention=variant, **size.model),
        TrainConfig.for_task("fuzzy-logic", **train),
    )


def check_live_run(run: Path, config: dict[str, Any]) -> bool:
    """Whether ``run`` already holds the run of ``config`` (False: nothing there yet); a
    ValueError naming ``run`` if it holds another run or one without checkpoints. The demo
    checks every live run before it writes anything."""
    directory = RunDirectory(run)
    if not directory.config_path.is_file():
        return False
    stored = directory.read_config()
    if stored["model"] != config["model"] or not same_training(stored["train"], config["train"]):
        raise ValueError(f"{run} holds a different run; choose another --out or delete it")
    if not list_checkpoints(directory.checkpoints):
        raise ValueError(f"{run} holds a run without checkpoints; delete it and run again")
    return True


def live_trainer(run: Path, variant: str, size: DemoSize, steps: int | None, device: str,
                 quiet: bool, seed: int) -> Trainer | None:  # fmt: skip
    """The trainer of one variant's live run in ``run``: a new run (computing its step as
    ``latentlens train`` would, :func:`~latentlens.training.trainer.choose_run_path`) or
    the interrupted one resumed; None if ``run`` holds it finished."""
    config = live_config(variant, size, steps, seed)
    if check_live_run(run, config):
        done = list_checkpoints(RunDirectory(run).checkpoints)
        if done[-1][0] < config["train"]["steps"]:
            return Trainer.resume(run, device=device, quiet=quiet)
        return None
    path = choose_run_path(config, device).path
    config = {**config, "train": {**config["train"], "path": path}}
    return Trainer.create(run, config, device=device, quiet=quiet)


def leave_a_cpu(trainer: Trainer | None) -> bool:
    """Have the live run compute with one CPU fewer than the rest of the machine leaves
    free, so that a side process has one to itself (two processes each spinning two
    threads on two CPUs slowed the live run fourfold); True if it could, or has nothing
    to train. False where its numbers need a recorded thread count that takes them all."""
    if trainer is None or trainer.device.type != "cpu":
        return True
    counts = trainer.train_cfg.thread_counts
    if counts:  # the same numbers on each of these counts
        compute_with_threads(start_threads(counts, reserved=1))
        return True
    return (trainer.train_cfg.threads or torch.get_num_threads()) < available_cpus()


def train_variant(run: Path, variant: str, size: DemoSize, steps: int | None, device: str,
                  quiet: bool, seed: int) -> None:  # fmt: skip
    """Train one variant into ``run`` (:func:`live_trainer`); a finished run is kept."""
    trainer = live_trainer(run, variant, size, steps, device, quiet, seed)
    if trainer is not None:
        trainer.train()


# The zoo's models the demo probes: every seed of each variant at Table A1's setting.
ZOO_GROUP = "fuzzy-logic-a1"
ZOO_SEEDS = (0, 1, 2)


@dataclass(frozen=True)
class DemoRun:
    """One model of the demo: trained live into ``path``, or the zoo's ``zoo_name`` copied
    there."""

    variant: str
    path: Path
    zoo_name: str | None = None

    @property
    def figure_label(self) -> str:
        """The label of the group figures, where a variant's zoo seeds are drawn together."""
        name = VARIANT_NAMES[self.variant]
        return f"{name} (zoo)" if self.zoo_name else f"{name} (live)"

    @property
    def label(self) -> str:
        name = VARIANT_NAMES[self.variant]
        if self.zoo_name:
            return f"{name} (zoo {self.zoo_name.rsplit('/', 1)[1]})"  # "HYLA (zoo s0)"
        return f"{name} (live)"


def copy_zoo_run(name: str, run: Path) -> None:
    """The zoo model ``name``'s run directory (config, curve, checkpoint) copied to ``run``,
    where the demo probes and draws it; a copy already there is kept when it is of the same
    weights, and anything else there is refused."""
    source = zoo_run_directory(name)
    if RunDirectory(run).config_path.is_file():
        stamp = run / ZOO_STAMP  # the weights' checksum, as zoo.run_directory writes it
        if stamp.is_file() and stamp.read_text() == (source / ZOO_STAMP).read_text():
            return
        raise ValueError(f"{run} holds a different run; choose another --out or delete it")
    run.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(source, run, ignore=shutil.ignore_patterns("probes", "figures"))
