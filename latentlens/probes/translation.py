"""Translation quality of an encoder-decoder by greedy decoding: CTER on the CG test
(instance and aggregate, overall and per NP / VP / PP subset) and BLEU on the CG test and
the random test, once or tracked over training."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from latentlens.tasks.translation import (
    BOS,
    EOS,
    SUBSETS,
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
def decode_texts(
    model: EncoderDecoderTransformer, task: TranslationTask, source: torch.Tensor, chunk: int = 2048
) -> list[str]:
    """Greedy translations of ``source`` ``[N, S]`` as detokenised text, ``chunk`` rows at
    a time."""
    texts = []
    for start in range(0, len(source), chunk):
        ids = model.greedy_decode(source[start : start + chunk], BOS, EOS)
        texts += [task.detokenize(row) for row in ids.tolist()]
    return texts


@torch.no_grad()
def translation_quality(
    model: EncoderDecoderTransformer,
    task: TranslationTask,
    test_examples: int = 1_000,
    cg_compounds: int | None = None,
) -> dict[str, float]:
    """``cter_instance``, ``cter_aggregate``, ``cter_{NP,VP,PP}_{instance,aggregate}`` and
    ``bleu_cg`` on the CG test (its first ``cg_compounds`` compounds with all their contexts;
    default: all), ``bleu_test`` on the first ``test_examples`` random-test sentences."""
    if not isinstance(task, TranslationTask) or not hasattr(model, "greedy_decode"):
        raise ValueError(
            "translation_quality needs an encoder-decoder model on the translation task"
        )
    was_training = model.training
    model.eval()
    try:
        limit = None if cg_compounds is None else cg_compounds * task.config.contexts
        cg = task.split_set("cg", limit)
        cg_texts = decode_texts(model, task, cg.inputs)
        test = task.split_set("test", test_examples)
        test_texts = decode_texts(model, task, test.inputs)
    finally:
        model.train(was_training)
    compounds = [task.corpus.cg.compounds[i] for i in cg.labels["compound"].tolist()]
    subsets = [SUBSETS[i] for i in cg.labels["subset"].tolist()]
    cter = compound_translation_error_rate(cg_texts, compounds, task.lexicon, subsets)
    references = {name: [task.detokenize(row) for row in batch.targets.tolist()]
                  for name, batch in (("cg", cg), ("test", test))}  # fmt: skip
    return {
        **{f"cter_{key}": value for key, value in cter.items()},
        "bleu_cg": bleu(cg_texts, references["cg"]),
        "bleu_test": bleu(test_texts, references["test"]),
    }


class TranslationQualityTracker(Callback):
    """At every evaluation, :func:`translation_quality` into
    ``tracking/translation_quality.jsonl`` (``{"step", "cter_instance", ...}``): on
    ``cg_compounds`` compounds spread over the CG test while training (decoding all of it
    costs more than the steps between evaluations at CPU sizes), on the whole CG test at the
    last step."""

    def __init__(self, test_examples: int = 1_000, cg_compounds: int | None = 360) -> None:
        self.test_examples = test_examples
        self.cg_compounds = cg_compounds

    def on_eval(self, trainer: Trainer, step: int, records: list[dict[str, Any]]) -> None:
        last = step >= trainer.train_cfg.steps
        scores = translation_quality(
            trainer.model, trainer.task, self.test_examples, None if last else self.cg_compounds
        )
        append_jsonl(trainer.run_dir.tracking / FILE_NAME, [{"step": step, **scores}])

    def on_resume(self, trainer: Trainer, step: int) -> None:
        path = trainer.run_dir.tracking / FILE_NAME
        if path.is_file():
            truncate_jsonl(path, step)
