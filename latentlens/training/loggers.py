"""Experiment tracking beside ``metrics.jsonl`` (which stays the source of truth): every
evaluation's metrics and the run's config to TensorBoard event files or Weights & Biases.

    latentlens train ... --log tensorboard wandb

TensorBoard writes ``RUN/tensorboard/`` (``tensorboard --logdir RUN``); a resumed run
purges the events after its checkpoint, as the metrics are. W&B logs to project
``latentlens`` under the run directory's name, online when an API key is configured and
offline otherwise (``wandb sync RUN/wandb/offline-run-*`` uploads it later);
``WANDB_MODE`` overrides that. A resumed run continues the same W&B run.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from latentlens.training.callbacks import Callback

if TYPE_CHECKING:
    from latentlens.training.trainer import Trainer

LOGGERS = ("tensorboard", "wandb")


def scalars(records: list[dict[str, Any]]) -> dict[str, float]:
    """``{"split/metric": value}`` of an evaluation's records (numbers only)."""
    return {
        f"{record['split']}/{key}": float(value)
        for record in records
        for key, value in record.items()
        if key not in ("step", "split") and isinstance(value, (int, float))
    }


class TensorBoardLogger(Callback):
    def __init__(self) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            raise ValueError(
                '--log tensorboard needs TensorBoard: pip install "latentlens[tracking]"'
            ) from None
        self.writer_cls = SummaryWriter
        self.writer: Any = None
        self.purge_step: int | None = None

    def writer_for(self, trainer: Trainer) -> Any:
        if self.writer is None:
            log_dir = str(trainer.run_dir.path / "tensorboard")
            self.writer = self.writer_cls(log_dir=log_dir, purge_step=self.purge_step)
        return self.writer

    def on_start(self, trainer: Trainer) -> None:
        config = json.dumps(trainer.config, indent=2, sort_keys=True)
        self.writer_for(trainer).add_text("config", f"```\n{config}\n```", 0)

    def on_resume(self, trainer: Trainer, step: int) -> None:
        self.purge_step = step + 1  # events after the checkpoint are written again

    def on_eval(self, trainer: Trainer, step: int, records: list[dict[str, Any]]) -> None:
        writer = self.writer_for(trainer)
        for name, value in scalars(records).items():
            writer.add_scalar(name, value, step)
        writer.flush()

    def on_end(self, trainer: Trainer) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None


def wandb_mode() -> str:
    """``WANDB_MODE`` if set; online with an API key (environment or ~/.netrc), else offline."""
    if mode := os.environ.get("WANDB_MODE"):
        return mode
    netrc = Path.home() / ".netrc"
    has_key = bool(os.environ.get("WANDB_API_KEY")) or (
        netrc.is_file() and "api.wandb.ai" in netrc.read_text(errors="ignore")
    )
    return "online" if has_key else "offline"


class WandbLogger(Callback):
    def __init__(self) -> None:
        try:
            import wandb
        except ImportError:
            raise ValueError(
                '--log wandb needs wandb: pip install "latentlens[tracking]"'
            ) from None
        self.wandb = wandb
        self.run: Any = None

    def started(self, trainer: Trainer) -> Any:
        if self.run is None:
            path = trainer.run_dir.path.resolve()
            self.run = self.wandb.init(
                project=os.environ.get("WANDB_PROJECT", "latentlens"),
                name=path.name,
                id=hashlib.sha1(str(path).encode()).hexdigest()[:16],  # stable across resumes
                resume="allow",
                dir=str(path),
                config=trainer.config,
                mode=wandb_mode(),
                reinit="finish_previous",
            )
        return self.run

    def on_start(self, trainer: Trainer) -> None:
        self.started(trainer)

    def on_eval(self, trainer: Trainer, step: int, records: list[dict[str, Any]]) -> None:
        self.started(trainer).log(scalars(records), step=step)

    def on_end(self, trainer: Trainer) -> None:
        if self.run is not None:
            self.run.finish()
            self.run = None


def experiment_loggers(names: Sequence[str] | None) -> list[Callback]:
    """The loggers ``--log`` names (``tensorboard``, ``wandb``)."""
    unknown = sorted(set(names or ()) - set(LOGGERS))
    if unknown:
        raise ValueError(f"--log {' '.join(unknown)} is unknown; choose from {list(LOGGERS)}")
    makers = {"tensorboard": TensorBoardLogger, "wandb": WandbLogger}
    return [makers[name]() for name in dict.fromkeys(names or ())]
