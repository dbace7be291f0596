"""The closed sets of values the command line takes, as plain strings, so that building
the parser imports neither torch nor the models: ``latentlens --help`` and argument errors
answer at once. Each set is the copy of one in the library (named beside it);
``tests/test_cli.py`` checks that the two agree."""

from __future__ import annotations

from pathlib import Path

DEVICE_CHOICES = ("auto", "cpu", "cuda")  # latentlens.devices
VARIANT_NAMES = (  # latentlens.models.VARIANTS
    "hyla", "hyla_mlp_linear", "hyla_mlp_linear_no_rms_head", "hyla_no_rms_head", "linear",
    "linear_rms_head", "softmax", "softmax_hyla",
)  # fmt: skip
MODEL_KIND_NAMES = ("transformer", "hypernetwork", "encoder-decoder")  # models.MODEL_KINDS
MODEL_ALIASES = {"vanilla": "transformer"}  # latentlens.models.MODEL_ALIASES
# What --model takes (train and inspect): every kind, its aliases, and translation's
# "fusion" (the encoder-decoder with fuse-attention).
MODEL_CHOICES = tuple(sorted([*MODEL_KIND_NAMES, *MODEL_ALIASES, "fusion"]))
TASK_NAMES = ("fuzzy-logic", "modular-icl", "sraven", "translation")  # latentlens.tasks.TASKS
TASK_ALIASES = {"cognition": "translation"}  # latentlens.tasks.TASK_ALIASES
TASK_CHOICES = tuple(sorted([*TASK_NAMES, *TASK_ALIASES]))
SUPPORTS = ("connected-plus", "connected", "disconnected", "custom")  # tasks.SUPPORTS
FUSE_CHOICES = ("none", "encoder", "decoder", "both")  # models.encoder_decoder.FUSE_CHOICES
CONNECTIONS = ("none", "original", "gca", "layerwise", "uniform")  # models.fusion.CONNECTIONS
PRECISIONS = ("fp32", "tf32", "bf16")  # latentlens.training.PRECISIONS
LOGGERS = ("tensorboard", "wandb")  # latentlens.training.loggers.LOGGERS
MATPLOTLIB_FORMATS = ("png", "svg", "pdf", "html")  # latentlens.figures.save
EMBEDDINGS = ("pca", "umap")  # latentlens.probes.structure.EMBEDDINGS
MAX_CELLS = 10_000  # latentlens.sweep.spec.MAX_CELLS
RELATION_SOURCES = ("repeated-tokens", "text")  # latentlens.reports.atlas.RELATION_SOURCES

RUN_HELP = "a run directory, or zoo:NAME for a model of the zoo (`latentlens zoo` lists them)"


def resolve_runs(runs: list[Path]) -> list[Path]:
    """Each ``zoo:NAME`` among a command's run arguments as that zoo entry's run directory
    (:func:`latentlens.zoo.resolve_run`), the others as given: resolved when the command
    runs, so that parsing imports no torch."""
    from latentlens.zoo import resolve_run

    return [resolve_run(run) for run in runs]
