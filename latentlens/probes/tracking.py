"""Linear decoding of a task latent tracked over training (a trainer callback).

At every evaluation, :class:`LatentDecodingTracker` extracts the residual stream at the last
token after every layer (and ``hook_task_latent`` where the model has one) on a fixed
in-distribution set and a fixed out-of-distribution set, fits a ridge decoder of a label
(default ``z``) on the first and scores R² on both. Records go to
``tracking/latent_decoding.jsonl``: ``{"step", "site", "r2_fit", "r2_ood"}``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from latentlens.probes.extraction import extract
from latentlens.probes.linear import ridge_decoding
from latentlens.training.callbacks import Callback
from latentlens.training.run_dir import RunDirectory, append_jsonl, read_jsonl, truncate_jsonl

if TYPE_CHECKING:
    from latentlens.models import HookedModel
    from latentlens.training.trainer import Trainer

FILE_NAME = "latent_decoding.jsonl"


def decoding_sites(model: HookedModel) -> list[str]:
    """The residual stream after each block, in order, then the bottleneck if any."""
    sites = sorted(
        (name for name in model.hook_dict if name.endswith("hook_resid_post")),
        key=lambda name: int(name.split("blocks.")[1].split(".")[0]),
    )
    if "hook_task_latent" in model.hook_dict:
        sites.append("hook_task_latent")
    return sites


def read_decoding(run_dir: str | Path) -> list[dict[str, Any]]:
    """The records a tracker wrote into the run directory ``run_dir``."""
    return read_jsonl(RunDirectory(run_dir).tracking / FILE_NAME)


class LatentDecodingTracker(Callback):
    """Fit on ``fit_split``, score on ``test_split``, ``examples`` sequences each
    (the reference uses 16,000; ridge ``alpha`` 1)."""

    def __init__(
        self,
        label: str = "z",
        fit_split: str = "train",
        test_split: str = "ood",
        examples: int = 4_096,
        alpha: float = 1.0,
        seed: int = 54321,
    ) -> None:
        self.label, self.fit_split, self.test_split = label, fit_split, test_split
        self.examples, self.alpha, self.seed = examples, alpha, seed

    def scores(self, trainer: Trainer) -> list[dict[str, Any]]:
        """One record per site for the trainer's current model."""
        sites = decoding_sites(trainer.model)
        common = dict(hook_names=sites, examples=self.examples)
        fit = extract(trainer.model, trainer.task, self.fit_split, seed=self.seed, **common)
        test = extract(trainer.model, trainer.task, self.test_split, seed=self.seed + 1, **common)
        if self.label not in fit.labels:
            raise ValueError(
                f"LatentDecodingTracker: the task has no label {self.label!r}; its labels "
                f"are {sorted(fit.labels)}"
            )
        records = []
        for site in sites:
            score = ridge_decoding(
                fit.activations[site],
                fit.labels[self.label],
                test.activations[site],
                test.labels[self.label],
                self.alpha,
            )
            records.append({"site": site, "r2_fit": score.fit, "r2_ood": score.test})
        return records

    def on_eval(self, trainer: Trainer, step: int, records: list[dict[str, Any]]) -> None:
        rows = [{"step": step, **row} for row in self.scores(trainer)]
        append_jsonl(trainer.run_dir.tracking / FILE_NAME, rows)

    def on_resume(self, trainer: Trainer, step: int) -> None:
        path = trainer.run_dir.tracking / FILE_NAME
        if path.is_file():
            truncate_jsonl(path, step)
