"""Checkpoints of a :class:`~latentlens.training.trainer.Trainer`: written after an evaluation
(or at a time-budget stop) only from finite weights and optimiser states, and restored
with the optimiser and RNG states so that a resumed run continues bit for bit."""

from __future__ import annotations

import math
import warnings
from typing import Any

import torch

from latentlens.training.checkpoint import CheckpointError, save_checkpoint
from latentlens.training.loop import TrainingDiverged


class Checkpointing:
    """The checkpoint's part of :class:`~latentlens.training.trainer.Trainer`."""

    def check_state_finite(self) -> None:
        """Refuse to checkpoint non-finite weights or optimiser state (a diverged run's
        last checkpoint stays the last good one)."""
        tensors = [*self.model.parameters()]
        tensors += [v for state in self.optimizer.state.values() for v in state.values()
                    if isinstance(v, torch.Tensor) and v.is_floating_point()]  # fmt: skip
        finite = torch.stack([torch.isfinite(t).all() for t in tensors]).all()
        if not bool(self.dist.minimum(finite.long())):
            raise TrainingDiverged(
                self.diverged_message(f"the weights or optimiser state at step {self.step}")
            )

    def evaluate_and_checkpoint(self) -> list[dict[str, Any]]:
        """Evaluate, log and checkpoint (rank 0; the other ranks only send RNG states)."""
        return self.checkpoint(evaluate=True)

    def checkpoint(self, evaluate: bool) -> list[dict[str, Any]]:
        """Write the checkpoint of this step, after an evaluation (logged, with the
        callbacks' ``on_eval``) or without one (a stop for the time budget, which leaves
        the logs as an uninterrupted run's)."""
        self.require_training("checkpoint")
        own = {"torch": torch.get_rng_state()}
        if self.device.type == "cuda":
            own["cuda"] = torch.cuda.get_rng_state(self.device)
        every_rank = self.dist.gather(own)
        self.check_state_finite()
        if not self.dist.is_main:
            return []
        records = []
        if evaluate:
            records = [
                {"step": self.step, "split": s, **self.evaluate(s)} for s in self.task.eval_splits
            ]
            self.run_dir.append_metrics(records)
            # finite weights can still compute a NaN loss (activations overflow): such a
            # checkpoint is no good one to continue from, so it is not written
            diverged = [r["split"] for r in records if not math.isfinite(r.get("loss", 0.0))]
            if diverged:
                raise TrainingDiverged(
                    self.diverged_message(f"the {diverged[0]} loss at step {self.step}")
                )
        rng = {"data": self.data_generator.get_state()}
        for rank, states in enumerate(every_rank):
            rng.update({key + (f"@{rank}" if rank else ""): v for key, v in states.items()})
        for callback in self.callbacks if evaluate else ():
            callback.on_eval(self, self.step, records)
        save_checkpoint(
            self.run_dir.checkpoints,
            self.step,
            self.model,
            self.optimizer,
            rng,
            self.train_cfg.keep_checkpoints,
            self.train_seconds(),
        )
        return records

    def restore_weights(self, checkpoint: Any) -> None:
        """The checkpoint's model weights and step."""
        try:
            self.model.load_state_dict(checkpoint.model)
        except (RuntimeError, ValueError, KeyError) as err:
            raise CheckpointError(
                f"the checkpoint of step {checkpoint.step} does not fit this run's model ({err})"
            ) from None
        self.step = checkpoint.step

    def restore(self, checkpoint: Any) -> None:
        """The checkpoint's weights, optimiser and RNG states: training continues from it."""
        self.require_training("restore an optimiser state")
        self.restore_weights(checkpoint)
        self.seconds_before = checkpoint.train_seconds
        # the optimiser's settings come from the config (a resume may change weight decay;
        # a damaged setting in the checkpoint's metadata must not), its state from the file;
        # they include lr, the tensor the schedule updates in place
        groups = self.optimizer.param_groups
        settings = [{k: v for k, v in g.items() if k != "params"} for g in groups]
        try:
            self.optimizer.load_state_dict(checkpoint.optimizer)
        except (RuntimeError, ValueError, KeyError) as err:
            raise CheckpointError(
                f"the checkpoint of step {checkpoint.step} does not fit this run's model ({err})"
            ) from None
        for group, setting in zip(self.optimizer.param_groups, settings, strict=True):
            group.update(setting)
        if flips := header_flips(settings, checkpoint.optimizer["param_groups"], self.config):
            warnings.warn(
                f"the checkpoint of step {checkpoint.step} records {', '.join(flips)}, which "
                "config.json does not; config.json is followed (a checkpoint's header sets no "
                "optimiser setting)",
                stacklevel=2,
            )
        suffix = f"@{self.dist.rank}" if self.dist.rank else ""
        try:
            self.data_generator.set_state(checkpoint.rng["data"].to(torch.uint8))
            if "torch" + suffix in checkpoint.rng:
                torch.set_rng_state(checkpoint.rng["torch" + suffix])
        except (KeyError, RuntimeError) as err:
            raise CheckpointError(
                f"the checkpoint of step {checkpoint.step} holds an RNG state that does not "
                f"fit ({err}); resume from an earlier checkpoint"
            ) from None
        if "torch" + suffix not in checkpoint.rng:
            warnings.warn(
                f"the checkpoint of step {checkpoint.step} has no RNG state for rank "
                f"{self.dist.rank} (it was written by fewer processes); this rank's dropout "
                "masks are reseeded, so the resumed run is not bit-exact",
                stacklevel=2,
            )
            torch.manual_seed(self.train_cfg.seed + self.dist.rank + checkpoint.step)
        if self.device.type == "cuda" and "cuda" + suffix in checkpoint.rng:
            torch.cuda.set_rng_state(checkpoint.rng["cuda" + suffix], self.device)
        self.step = checkpoint.step


def _plain(value: Any) -> Any:
    """An optimiser setting as the checkpoint's JSON holds it: numbers, lists."""
    if isinstance(value, torch.Tensor):
        return value.tolist()
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    return value


def header_flips(
    settings: list[dict[str, Any]], recorded: list[dict[str, Any]], config: dict[str, Any]
) -> list[str]:
    """The optimiser settings a checkpoint's header records that differ from the ones the
    run's config gives (``key=recorded``), which a resume ignores: the scheduled ``lr``
    is left out, and so are settings a resume changed (in the config's ``history``)."""
    changed = {key for entry in config.get("history", []) for key in entry.get("train", {})}
    flips = []
    for ours, theirs in zip(settings, recorded, strict=False):
        for key, value in ours.items():
            if key in ("lr", "initial_lr") or key in changed:
                continue
            if key in theirs and _plain(theirs[key]) != _plain(value):
                flips.append(f"{key}={theirs[key]}")
    return list(dict.fromkeys(flips))  # once each, where several groups record it
