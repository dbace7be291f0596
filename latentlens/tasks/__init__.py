"""Task generators with compositional splits: vectorised, seeded, device-agnostic."""

from __future__ import annotations

from typing import Any

import torch

from latentlens.tasks.base import Batch, DrawnTask, Task
from latentlens.tasks.fuzzy_logic import FuzzyLogicConfig, FuzzyLogicTask, fuzzy_dnf, term_bits
from latentlens.tasks.modular_icl import (
    SUPPORTS,
    ModularICLConfig,
    ModularICLTask,
    is_compositional,
    is_connected,
    support_masks,
    two_hot_masks,
)
from latentlens.tasks.sraven import RULE_NAMES, SRavenConfig, SRavenTask, rule_answers
from latentlens.tasks.translation import (
    TranslationConfig,
    TranslationTask,
    bleu,
    compound_translation_error_rate,
)

TASKS: dict[str, tuple[type[Task], type]] = {
    "fuzzy-logic": (FuzzyLogicTask, FuzzyLogicConfig),
    "sraven": (SRavenTask, SRavenConfig),
    "modular-icl": (ModularICLTask, ModularICLConfig),
    "translation": (TranslationTask, TranslationConfig),
}
# Other names a task answers to: CoGnition is what the translation task reproduces (its
# synthetic twin by default, the release itself with ``data_dir``).
TASK_ALIASES = {"cognition": "translation"}


def make_task(
    name: str,
    config: dict[str, Any] | None = None,
    seed: int = 0,
    device: torch.device | str = "cpu",
) -> Task:
    """Build the task ``name`` (or an alias) from a config dict (defaults where omitted)."""
    name = TASK_ALIASES.get(name, name)
    if name not in TASKS:
        raise ValueError(
            f"task={name!r} is unknown; choose one of {sorted([*TASKS, *TASK_ALIASES])}"
        )
    task_cls, config_cls = TASKS[name]
    return task_cls(config_cls.from_dict(config or {}), seed=seed, device=device)


__all__ = [
    "RULE_NAMES",
    "SUPPORTS",
    "TASKS",
    "TASK_ALIASES",
    "Batch",
    "DrawnTask",
    "FuzzyLogicConfig",
    "FuzzyLogicTask",
    "ModularICLConfig",
    "ModularICLTask",
    "SRavenConfig",
    "SRavenTask",
    "Task",
    "TranslationConfig",
    "TranslationTask",
    "bleu",
    "compound_translation_error_rate",
    "fuzzy_dnf",
    "is_compositional",
    "is_connected",
    "make_task",
    "rule_answers",
    "support_masks",
    "term_bits",
    "two_hot_masks",
]
