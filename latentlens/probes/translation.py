"""Translation quality of an encoder-decoder by greedy decoding: CTER on the held-out
compounds (instance and aggregate) and BLEU on the compound and in-distribution test sets,
once or tracked over training."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from latentlens.tasks.translation import (
    BOS,
    EOS,
    TranslationTask,
    bleu,
    compound_translation_error_rate,
)
from latentlens.training.callbacks import Callback
from latentlens.training.run_dir import append_jsonl, truncate_jsonl

if TYPE_CHECKING:
    from latentlens.models import EncoderDecoderTransformer
    from latentlens.training.trainer import Trainer

FILE_NAME = "translation_quality.jsonl"


@torch.no_grad()
def translation_quality(
    model: EncoderDecoderTransformer, task: TranslationTask, test_examples: int = 512, seed: int = 0
) -> dict[str, float]:
    """``cter_instance``, ``cter_aggregate`` and ``bleu_compound`` on
    :meth:`TranslationTask.compound_test_set`; ``bleu_test`` on in-distribution sentences."""
    if not isinstance(task, TranslationTask) or not hasattr(model, "greedy_decode"):
        raise ValueError(
            "translation_quality needs an encoder-decoder model on the translation task"
        )
    was_training = model.training
    model.eval()
    try:
        compound = task.compound_test_set(seed)
        outputs = model.greedy_decode(compound.inputs, BOS, EOS).tolist()
        cter = compound_translation_error_rate(
            outputs,
            compound.labels["compound_tokens"].tolist(),
            compound.labels["compound"].tolist(),
        )
        test = task.sample(test_examples, "test", task.make_generator(seed + 1))
        test_outputs = model.greedy_decode(test.inputs, BOS, EOS).tolist()
    finally:
        model.train(was_training)
    return {
        "cter_instance": cter["instance"],
        "cter_aggregate": cter["aggregate"],
        "bleu_compound": bleu(outputs, compound.targets.tolist()),
        "bleu_test": bleu(test_outputs, test.targets.tolist()),
    }


class TranslationQualityTracker(Callback):
    """At every evaluation, :func:`translation_quality` into
    ``tracking/translation_quality.jsonl`` (``{"step", "cter_instance", ...}``)."""

    def __init__(self, test_examples: int = 512) -> None:
        self.test_examples = test_examples

    def on_eval(self, trainer: Trainer, step: int, records: list[dict[str, Any]]) -> None:
        scores = translation_quality(trainer.model, trainer.task, self.test_examples)
        append_jsonl(trainer.run_dir.tracking / FILE_NAME, [{"step": step, **scores}])

    def on_resume(self, trainer: Trainer, step: int) -> None:
        path = trainer.run_dir.tracking / FILE_NAME
        if path.is_file():
            truncate_jsonl(path, step)
