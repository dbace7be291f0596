"""Evaluation of a :class:`~latentlens.training.trainer.Trainer`: a fixed evaluation set per
split, drawn from its own generator (the training stream is untouched), scored with the
task's metrics and, on request, their standard errors over the set's batches."""

from __future__ import annotations

import math
from collections.abc import Iterator

import torch

from latentlens.tasks import Batch
from latentlens.training.config import check_eval_examples
from latentlens.training.objective import predict


class Evaluation:
    """The evaluation's part of :class:`~latentlens.training.trainer.Trainer`."""

    def evaluate_initialisation(self) -> None:
        """Evaluate and log the model as initialised (step 0, no checkpoint; the callbacks'
        ``on_eval`` too), so that every curve starts where training did. It draws from no
        generator training uses: the run's steps are the same with it as without."""
        records = [{"step": 0, "split": s, **self.evaluate(s)} for s in self.task.eval_splits]
        self.run_dir.append_metrics(records)
        for callback in self.callbacks:
            callback.on_eval(self, 0, records)

    def evaluation_batches(self, split: str, examples: int | None = None) -> Iterator[Batch]:
        """The batches of ``split``'s fixed evaluation set (``examples``, default the run's
        ``eval_examples``), in batches of the training batch size: what :meth:`evaluate`
        scores, so that a probe can measure on the very same examples."""
        cfg = self.train_cfg
        if examples is not None and examples < 1:
            raise ValueError(f"examples={examples}: evaluate at least 1 example per split")
        examples = examples or cfg.eval_examples
        check_eval_examples("examples", examples)
        self.task.check_split(split)
        generator = self.task.make_generator(cfg.seed + 1 + self.task.splits.index(split))
        for start in range(0, examples, cfg.batch_size):
            yield self.task.sample(min(cfg.batch_size, examples - start), split, generator)

    def evaluation_set(self, split: str, examples: int | None = None) -> Batch:
        """:meth:`evaluation_batches` as one batch."""
        return Batch.cat(list(self.evaluation_batches(split, examples)))

    @torch.no_grad()
    def evaluate(
        self, split: str, examples: int | None = None, errors: bool = False
    ) -> dict[str, float]:
        """Mean loss and task metrics over a fixed evaluation set of ``split``.

        The set is the same at every evaluation (its own generator, seeded from the run's
        seed and the split), and drawing it leaves the training stream untouched. With
        ``errors``, each value ``name`` comes with ``name_se``, its standard error over the
        set's batches (sample std of the per-batch values / sqrt(batches); ``nan`` for a
        set of one batch).
        """
        batches = list(self.evaluation_batches(split, examples))  # checks split and size
        was_training = self.model.training
        self.model.eval()
        loss_sum, sums, seen = 0.0, {}, 0
        per_batch: list[dict[str, float]] = []
        for batch in batches:
            size = len(batch)
            with self.precision_scope():
                predictions = predict(self.model, self.task, batch).float()
            loss = float(self.task.loss(predictions, batch))
            loss_sum += loss * size
            summed = self.task.metric_sums(predictions, batch)
            batch_sums = {name: float(value) for name, value in summed.items()}
            for name, value in batch_sums.items():
                sums[name] = sums.get(name, 0.0) + value
            if errors:
                per_batch.append({"loss": loss, **self.task.finish_metrics(batch_sums, size)})
            seen += size
        self.model.train(was_training)
        result = {"loss": loss_sum / seen, **self.task.finish_metrics(sums, seen)}
        if errors:
            for name in list(result):
                values = torch.tensor([b[name] for b in per_batch], dtype=torch.float64)
                spread = values.std() / len(values) ** 0.5 if len(values) > 1 else math.nan
                result[f"{name}_se"] = float(spread)
        return result
