"""The training config: the HYLA paper's defaults (docs/methods/attention.md)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from latentlens.configs import (
    JsonConfig,
    require_choice,
    require_non_negative,
    require_positive,
    require_seed,
)
from latentlens.kernels.linear import WEIGHT_GRADIENTS
from latentlens.threads import MAX_THREADS
from latentlens.training.fast_path import PATHS

# More examples per split than an evaluation can score in reasonable time (10^7 fuzzy-logic
# examples take minutes on a CPU): a larger count is a typo, refused before it hangs.
MAX_EVAL_EXAMPLES = 10_000_000
FLOAT32_MAX = 3.4028234663852886e38


def check_eval_examples(name: str, examples: int) -> None:
    """A one-line error naming ``name`` when ``examples`` is over :data:`MAX_EVAL_EXAMPLES`."""
    if examples > MAX_EVAL_EXAMPLES:
        raise ValueError(
            f"{name}={examples:,} is invalid: at most {MAX_EVAL_EXAMPLES:,} examples per split"
        )


def check_tracking_examples(name: str, examples: Any) -> None:
    """A one-line error naming ``name`` unless ``examples`` is an even integer from 4 to
    :data:`MAX_EVAL_EXAMPLES` (fuzzy logic's tracker fits on one half, scores on the other)."""
    valid = isinstance(examples, int) and not isinstance(examples, bool)
    if not (valid and 4 <= examples <= MAX_EVAL_EXAMPLES and examples % 2 == 0):
        raise ValueError(
            f"{name}={examples!r} is invalid: give an even integer from 4 to "
            f"{MAX_EVAL_EXAMPLES:,} (the tracker fits on one half and scores on the other)"
        )


PRECISIONS = ("fp32", "tf32", "bf16")
# Optimiser settings a resumed run may change (e.g. a lower lr after a divergence); the
# change is recorded in the run's config history.
RESUME_CHANGEABLE = ("lr", "weight_decay", "grad_clip", "warmup_steps", "min_lr_ratio")

# The reference's runs: logic 50,000 steps; SRAVEN 20M examples; modular ICL 100,000 steps
# with gradient clipping at norm 1 and R² over 16,000 sequences (its warm-up is ours).
TASK_DEFAULTS: dict[str, dict[str, Any]] = {
    "fuzzy-logic": {"steps": 50_000, "warmup_steps": 100},
    "sraven": {"steps": 156_250, "warmup_steps": 1_000},
    "translation": {"steps": 10_000, "warmup_steps": 500},  # ours: a synthetic task
    "modular-icl": {
        "steps": 100_000,
        "warmup_steps": 1_000,
        "grad_clip": 1.0,
        "eval_examples": 16_000,
    },
}
# Per task and model kind: the hypernetwork transformer trains without weight decay.
MODEL_DEFAULTS: dict[tuple[str, str], dict[str, Any]] = {
    ("modular-icl", "hypernetwork"): {"weight_decay": 0.0},
}


# what a new run finds when it starts (not what it was asked for): a stored run is a run
# of a config that has yet to find them
FOUND_AT_START = ("thread_counts", "path", "weight_gradients")


@dataclass(frozen=True)
class TrainConfig(JsonConfig):
    """AdamW with weight decay off 1-D parameters, linear warm-up then cosine decay.

    The learning rate rises linearly from 0 over ``warmup_steps``, then follows a cosine
    to ``min_lr_ratio * lr``, reached ``warmup_steps`` before the end (the official code's
    optax schedule counts the warm-up inside its decay steps), then stays flat.
    Evaluation and checkpoints happen every ``eval_every`` steps and at the end.
    ``grad_clip`` > 0 clips the global gradient norm to it (0: no clipping).
    ``track``: hook names, or shell-style patterns such as ``blocks.*.attn.hook_pattern``,
    whose activations (mean over a fixed batch) are recorded at step 0 and every evaluation into
    ``tracking/`` (:class:`latentlens.training.ActivationRecorder`).
    ``precision``: ``fp32`` (strict float32), ``tf32`` (float32 tensors, matmuls on CUDA's
    TF32 tensor cores: JAX's default on Ampere and Hopper GPUs, hence the official code's)
    or ``bf16`` (bf16 autocast); see :func:`latentlens.training.trainer.precision_scope`.
    ``threads``: the CPU threads the run computes with. Float sums split over another
    number of threads round differently, so the count is part of what a run computes and
    is recorded: :meth:`~latentlens.training.Trainer.resolve_config` fills a None with
    :func:`latentlens.threads.run_threads` (never from the machine's load), and a resumed
    run, or a new run of its config, computes with it again. None in a stored config: a
    run whose count follows the load (``thread_counts``), or one from before the count was
    recorded.
    ``thread_counts``: the counts whose training step a new run found to compute the same
    gradients bit for bit (:mod:`latentlens.training.thread_choice`); a run that records
    them computes with the largest the machine's load allows, at every start.
    ``path``: how the step is computed (:data:`latentlens.training.fast_path.PATHS`:
    eager, compiled, on the fused CPU kernels, graphed on CUDA), chosen when the run starts
    (:func:`latentlens.training.fast_path.choose_path`) and kept on resume; None: chosen by
    the Trainer's options.
    ``weight_gradients``: how the fused kernels' path sums the weights' gradients
    (:data:`latentlens.kernels.linear.WEIGHT_GRADIENTS`: oneDNN's matmul, or each core its
    own rows), chosen with the path
    (:func:`latentlens.training.weight_gradient_choice.choose_weight_gradients`) and kept on
    resume; None on the other paths.
    ``tracking_examples``: the sample each evaluation's over-training tracker reads
    (:func:`latentlens.probes.tracking_callbacks`): fuzzy logic's official
    ``r2_attn_latent`` (None: the official code's ``num_valid``, 16,000), modular ICL's
    decoding of z (None: ``eval_examples``, of each split). Even, since fuzzy logic's
    protocol fits on one half and scores on the other. A smaller sample is quicker (a quick
    look, a test) but gives another number, not a noisier estimate of the official one: the
    protocol's 10 conjugate-gradient steps and its penalty do not scale with the sample
    (docs/methods/probes.md).
    """

    steps: int = 50_000
    batch_size: int = 128
    lr: float = 1e-3
    weight_decay: float = 0.1
    warmup_steps: int = 100
    min_lr_ratio: float = 0.1
    eval_every: int = 1_000
    eval_examples: int = 1_024
    keep_checkpoints: int = 3
    seed: int = 2024
    precision: str = "fp32"
    grad_clip: float = 0.0
    track: tuple[str, ...] = ()
    threads: int | None = None
    thread_counts: tuple[int, ...] = ()
    path: str | None = None
    weight_gradients: str | None = None
    tracking_examples: int | None = None

    def __post_init__(self) -> None:
        owner = "TrainConfig"
        if self.threads is not None:
            require_positive(owner, "threads", self.threads)
            if self.threads > MAX_THREADS:
                raise ValueError(
                    f"{owner}.threads={self.threads} is invalid: at most {MAX_THREADS}"
                )
        if not isinstance(self.thread_counts, (list, tuple)) or not all(
            isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= MAX_THREADS
            for n in self.thread_counts
        ):
            raise ValueError(
                f"{owner}.thread_counts={self.thread_counts!r} is invalid: a list of thread "
                f"counts from 1 to {MAX_THREADS}"
            )
        object.__setattr__(self, "thread_counts", tuple(self.thread_counts))
        if not isinstance(self.track, (list, tuple)) or not all(
            isinstance(name, str) and name for name in self.track
        ):
            raise ValueError(
                f"{owner}.track={self.track!r} is invalid: it must be a list of hook names "
                "or patterns, e.g. ['blocks.*.attn.hook_pattern']"
            )
        object.__setattr__(self, "track", tuple(self.track))  # JSON and the CLI give lists
        for name in ("steps", "batch_size", "eval_every", "eval_examples", "keep_checkpoints"):
            require_positive(owner, name, getattr(self, name))
        check_eval_examples(f"{owner}.eval_examples", self.eval_examples)
        if self.tracking_examples is not None:
            check_tracking_examples(f"{owner}.tracking_examples", self.tracking_examples)
        require_non_negative(owner, "warmup_steps", self.warmup_steps, integer=True)
        for name in ("lr", "weight_decay", "min_lr_ratio", "grad_clip"):
            require_non_negative(owner, name, getattr(self, name))
            if getattr(self, name) > FLOAT32_MAX:  # the optimiser holds it in float32
                raise ValueError(
                    f"{owner}.{name}={getattr(self, name):g} is invalid: at most "
                    f"{FLOAT32_MAX:.3g}, the largest float32"
                )
        if self.lr == 0:
            raise ValueError(f"{owner}.lr=0 is invalid: nothing would be learned")
        if self.min_lr_ratio > 1:
            raise ValueError(
                f"{owner}.min_lr_ratio={self.min_lr_ratio} is invalid: the decay "
                "ends at a fraction of lr, in [0, 1]"
            )
        require_choice(owner, "precision", self.precision, PRECISIONS)
        if self.path is not None:
            require_choice(owner, "path", self.path, PATHS)
        if self.weight_gradients is not None:
            require_choice(owner, "weight_gradients", self.weight_gradients, WEIGHT_GRADIENTS)
        require_seed(owner, "seed", self.seed)

    def schedule_notes(self) -> list[str]:
        """What a reader of this schedule should hear before the run starts: a warm-up or
        an evaluation interval as long as the run itself (a task's defaults kept for a
        short ``steps``)."""
        notes = []
        if self.warmup_steps >= self.steps:
            notes.append(
                f"warmup_steps={self.warmup_steps:,} is not shorter than steps={self.steps:,}: "
                "the run never leaves warm-up (its lr never reaches lr); lower --warmup-steps"
            )
        if self.eval_every >= self.steps:
            notes.append(
                f"eval_every={self.eval_every:,} is not shorter than steps={self.steps:,}: the "
                "curves get two points (step 0 and the end); lower --eval-every"
            )
        return notes

    def same_run(self, other: TrainConfig) -> bool:
        """Whether a run stored with this config is a run of ``other``: every field equal,
        the thread count too unless this one follows the load or predates its recording
        (None), and the agreeing thread counts, path and weight-gradient engine unless
        ``other`` has yet to find them."""
        if self.threads is None:
            other = replace(other, threads=None)
        yet_to_find = {name: getattr(self, name) for name in FOUND_AT_START
                       if not getattr(other, name)}  # fmt: skip
        return self == replace(other, **yet_to_find)

    @classmethod
    def for_task(cls, task: str, model: str = "transformer", **overrides: Any) -> TrainConfig:
        """The reference's training defaults for ``task`` and model kind ``model``, with
        ``overrides`` applied."""
        defaults = {**TASK_DEFAULTS.get(task, {}), **MODEL_DEFAULTS.get((task, model), {})}
        return cls.from_dict({**defaults, **overrides})  # an unknown key named, not a TypeError

    def learning_rate(self, step: int) -> float:
        """Learning rate of optimisation step ``step`` (0-based)."""
        if step < self.warmup_steps:
            return self.lr * step / self.warmup_steps
        decay_end = max(self.steps - self.warmup_steps, self.warmup_steps)
        span = decay_end - self.warmup_steps
        progress = 1.0 if span <= 0 else min((step - self.warmup_steps) / span, 1.0)
        cosine = 0.5 * (1.0 + math.cos(math.pi * progress))
        return self.lr * (self.min_lr_ratio + (1.0 - self.min_lr_ratio) * cosine)


def same_training(stored: dict[str, Any] | None, wanted: dict[str, Any]) -> bool:
    """Whether a run directory's stored ``train`` section is a run of ``wanted``
    (:meth:`TrainConfig.same_run`)."""
    if not isinstance(stored, dict):
        return False
    return TrainConfig.from_dict(stored).same_run(TrainConfig.from_dict(wanted))
