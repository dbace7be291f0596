"""What a reader of a run's config should hear before it starts, beside the schedule's
notes (:meth:`~latentlens.training.TrainConfig.schedule_notes`): a model far larger than
its task's reference (``--n-layers 20000`` started a 60M-parameter run on a tiny task
without a word)."""

from __future__ import annotations

from typing import Any

from latentlens.models import model_config, resolve_model_kind
from latentlens.training.memory import parameter_count
from latentlens.training.trainer import model_for_task

# A model this many times its task's reference size gets a note: a typo more often than
# a plan.
OVERSIZE = 100


def size_notes(config: dict[str, Any]) -> list[str]:
    """A note where the resolved run ``config``'s model has over :data:`OVERSIZE` times the
    parameters of the reference model for its task."""
    kind = resolve_model_kind(config.get("model_kind", "transformer"))
    task = config["task"]["name"]
    try:
        reference = parameter_count(kind, model_for_task(task, config["task"]["config"], kind))
    except (ValueError, TypeError, KeyError):  # no reference of this kind for the task
        return []
    ours = parameter_count(kind, model_config(kind, config["model"]))
    if ours <= OVERSIZE * reference:
        return []
    return [
        f"the model has {ours:,} parameters, {ours / reference:,.0f} times the reference's "
        f"{reference:,} for {task}: check --n-layers, --d-model and --d-mlp"
    ]
