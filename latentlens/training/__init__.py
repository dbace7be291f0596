"""The training loop, run directories, checkpoints and callbacks."""

from latentlens.training.callbacks import (
    ActivationRecorder,
    Callback,
    QuantityRecorder,
    TrackedArrays,
)
from latentlens.training.checkpoint import CheckpointError, list_checkpoints, load_checkpoint
from latentlens.training.config import (
    MODEL_DEFAULTS,
    PRECISIONS,
    RESUME_CHANGEABLE,
    TASK_DEFAULTS,
    TrainConfig,
)
from latentlens.training.loop import TrainingDiverged
from latentlens.training.multiseed import SeedGroup, seed_configs, train_group_or_resume
from latentlens.training.run_dir import RunDirectory
from latentlens.training.step_setup import precision_scope, weight_decay_groups
from latentlens.training.tracked_file import TrackedArray, load_tracked
from latentlens.training.trainer import Trainer, model_for_task, train_or_resume

__all__ = [
    "SeedGroup",
    "load_tracked",
    "seed_configs",
    "train_group_or_resume",
    "train_or_resume",
    "MODEL_DEFAULTS",
    "PRECISIONS",
    "RESUME_CHANGEABLE",
    "TASK_DEFAULTS",
    "ActivationRecorder",
    "Callback",
    "QuantityRecorder",
    "CheckpointError",
    "RunDirectory",
    "TrackedArray",
    "TrackedArrays",
    "TrainConfig",
    "Trainer",
    "TrainingDiverged",
    "list_checkpoints",
    "load_checkpoint",
    "model_for_task",
    "precision_scope",
    "weight_decay_groups",
]
