"""Fine-tune a Hugging Face MarianMT model in one of seed 001's four conditions on a
parallel corpus, as its author did (docs/methods/models.md): AdamW, linear
decay, one epoch over the first ``train_pairs`` pairs, sacreBLEU by beam search on the
test split, the routing matrix recorded from step 0.

The run directory is latentlens's: ``config.json``, ``metrics.jsonl`` (``{"step",
"split": "test", "loss", "bleu"}`` at step 0 and every evaluation),
``tracking/routing_matrix.safetensors`` (the routing figures read it as for latentlens's
own model) and ``checkpoint/`` (the model in safetensors, the optimiser state and the step),
replaced atomically at every evaluation, from which an interrupted run resumes.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from latentlens.configs import JsonConfig, require_positive
from latentlens.pretrained.bridge import insert_bridge, load_bridged, routing_matrix, save_bridged
from latentlens.training.checkpoint import atomic_write_bytes
from latentlens.training.run_dir import RunDirectory, truncate_jsonl
from latentlens.training.run_lock import RunLock
from latentlens.training.tracked_file import load_tracked, tracked_bytes

# condition -> (bridge initialisation or None, start from the pretrained weights)
MARIAN_CONDITIONS: dict[str, tuple[str | None, bool]] = {
    "original": ("original", True),
    "unmodified": (None, True),
    "gca": ("gca", True),
    "scratch": ("original", False),
}


@dataclass(frozen=True)
class MarianFineTune(JsonConfig):
    """The author's settings: wmt16 de-en, the first 1,000,000 training pairs, one epoch of
    batch 16, lr 2e-5, weight decay 0.01, max length 128, beam 4 on the 2,999 test pairs.
    ``dataset`` is a ``datasets`` name (``dataset_config`` its configuration) or a local
    folder of ``{train,validation,test}.{jsonl,json,csv}`` files; rows hold
    ``{"translation": {src: ..., tgt: ...}}`` or columns named by the languages.
    ``steps``: default one epoch."""

    dataset: str = "wmt16"
    dataset_config: str | None = "de-en"
    source_lang: str = "de"
    target_lang: str = "en"
    train_pairs: int = 1_000_000
    eval_pairs: int = 1_000
    test_pairs: int | None = None
    batch_size: int = 16
    lr: float = 2e-5
    weight_decay: float = 0.01
    max_length: int = 128
    num_beams: int = 4
    eval_every: int = 5_000
    steps: int | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        owner = "MarianFineTune"
        for name in (
            "train_pairs",
            "eval_pairs",
            "batch_size",
            "max_length",
            "num_beams",
            "eval_every",
        ):
            require_positive(owner, name, getattr(self, name))
        for name in ("test_pairs", "steps"):
            if getattr(self, name) is not None:
                require_positive(owner, name, getattr(self, name))

    def total_steps(self, pairs: int) -> int:
        return self.steps or math.ceil(pairs / self.batch_size)


def load_pairs(cfg: MarianFineTune, split: str, limit: int | None) -> tuple[list[str], list[str]]:
    """The first ``limit`` (source, target) texts of ``split`` of the configured corpus."""
    import datasets

    local = Path(cfg.dataset)
    if local.is_dir():
        files = [local / f"{split}.{ext}" for ext in ("jsonl", "json", "csv")]
        found = next((f for f in files if f.is_file()), None)
        if found is None:
            raise ValueError(
                f"--dataset {local} has no {split}.jsonl, {split}.json or {split}.csv; a local "
                "corpus is a folder with train, validation and test files"
            )
        kind = "csv" if found.suffix == ".csv" else "json"
        rows = datasets.load_dataset(kind, data_files={split: str(found)}, split=split)
    else:
        try:
            rows = datasets.load_dataset(cfg.dataset, cfg.dataset_config, split=split)
        except Exception as err:  # noqa: BLE001 - the hub and file system raise many kinds
            raise ValueError(
                f"--dataset {cfg.dataset} ({cfg.dataset_config}) split {split!r} could not be "
                f"loaded ({type(err).__name__}: {err})"
            ) from None
    if limit is not None:
        rows = rows.select(range(min(limit, len(rows))))
    src, tgt = cfg.source_lang, cfg.target_lang
    if "translation" in rows.column_names:
        pairs = rows["translation"]
        if pairs and not {src, tgt} <= set(pairs[0]):
            raise ValueError(
                f"--dataset {cfg.dataset}: its pairs are in {sorted(pairs[0])}, not "
                f"{src!r} and {tgt!r}; set --source-lang and --target-lang"
            )
        sources, targets = [p[src] for p in pairs], [p[tgt] for p in pairs]
    elif {src, tgt} <= set(rows.column_names):
        sources, targets = list(rows[src]), list(rows[tgt])
    else:
        raise ValueError(
            f"--dataset {cfg.dataset}: rows need a 'translation' column or columns {src!r} "
            f"and {tgt!r}; it has {rows.column_names}"
        )
    if not sources:
        raise ValueError(f"--dataset {cfg.dataset} split {split!r} holds no pairs")
    return sources, targets


def condition_model(base: str, condition: str, seed: int) -> Any:
    """The model of ``condition``: the pretrained ``base`` with or without the bridge, or
    (``scratch``) its architecture freshly initialised, with the bridge."""
    from transformers import AutoConfig, MarianMTModel

    init, pretrained = MARIAN_CONDITIONS[condition]
    if pretrained:
        model = MarianMTModel.from_pretrained(base)
    else:
        torch.manual_seed(seed)
        model = MarianMTModel(AutoConfig.from_pretrained(base))
    return model if init is None else insert_bridge(model, init)


class Batches:
    """Tokenised, shuffled training batches: step ``i`` is the ``i``-th batch of the
    seed's permutation (reshuffled every epoch), so a resumed run sees the same data."""

    def __init__(
        self, tokenizer: Any, sources: list[str], targets: list[str], cfg: MarianFineTune
    ) -> None:
        self.tokenizer, self.sources, self.targets, self.cfg = tokenizer, sources, targets, cfg

    def __call__(self, step: int) -> dict[str, torch.Tensor]:
        per_epoch = max(len(self.sources) // self.cfg.batch_size, 1)
        epoch, index = divmod(step, per_epoch)
        order = torch.randperm(
            len(self.sources), generator=torch.Generator().manual_seed(self.cfg.seed + epoch)
        )
        rows = order[index * self.cfg.batch_size : (index + 1) * self.cfg.batch_size].tolist()
        return encode(
            self.tokenizer,
            [self.sources[i] for i in rows],
            [self.targets[i] for i in rows],
            self.cfg.max_length,
        )


def encode(
    tokenizer: Any, sources: Sequence[str], targets: Sequence[str], max_length: int
) -> dict[str, torch.Tensor]:
    """Padded ids, mask and labels (padding as -100) of a batch of pairs."""
    batch = tokenizer(
        list(sources),
        text_target=list(targets),
        max_length=max_length,
        truncation=True,
        padding=True,
        return_tensors="pt",
    )
    batch["labels"] = batch["labels"].masked_fill(batch["labels"] == tokenizer.pad_token_id, -100)
    return dict(batch)


@torch.no_grad()
def evaluate(
    model: Any,
    tokenizer: Any,
    cfg: MarianFineTune,
    held_out: tuple,
    test: tuple,
    device: torch.device,
) -> dict[str, float]:
    """Teacher-forced loss on the held-out pairs and sacreBLEU of beam search on the test."""
    import sacrebleu

    was_training = model.training
    model.eval()
    total, tokens = 0.0, 0
    for start in range(0, len(held_out[0]), cfg.batch_size):
        batch = encode(
            tokenizer,
            held_out[0][start : start + cfg.batch_size],
            held_out[1][start : start + cfg.batch_size],
            cfg.max_length,
        )
        batch = {k: v.to(device) for k, v in batch.items()}
        count = int((batch["labels"] != -100).sum())
        total += float(model(**batch).loss) * count
        tokens += count
    hypotheses = []
    for start in range(0, len(test[0]), cfg.batch_size):
        inputs = tokenizer(
            test[0][start : start + cfg.batch_size],
            max_length=cfg.max_length,
            truncation=True,
            padding=True,
            return_tensors="pt",
        ).to(device)
        ids = model.generate(**inputs, num_beams=cfg.num_beams, max_new_tokens=cfg.max_length)
        hypotheses += tokenizer.batch_decode(ids, skip_special_tokens=True)
    model.train(was_training)
    bleu = sacrebleu.corpus_bleu(hypotheses, [list(test[1])]).score
    return {"loss": total / max(tokens, 1), "bleu": float(bleu)}


def freeze_positions(model: Any) -> None:
    """Keep Marian's sinusoidal position tables fixed, as Marian defines them (transformers
    5 registers them as trainable parameters)."""
    for side in (model.model.encoder, model.model.decoder):
        side.embed_positions.weight.requires_grad_(False)


def _decay_groups(model: Any, weight_decay: float) -> list[dict[str, Any]]:
    """Decay weight matrices, not biases or norm gains (as Hugging Face's Trainer does)."""
    decay = [p for p in model.parameters() if p.requires_grad and p.ndim >= 2]
    rest = [p for p in model.parameters() if p.requires_grad and p.ndim < 2]
    return [{"params": decay, "weight_decay": weight_decay}, {"params": rest, "weight_decay": 0.0}]


def _save_state(run: RunDirectory, model: Any, optimizer: torch.optim.Optimizer, step: int) -> None:
    """``checkpoint/``: the model (safetensors), the optimiser state and the step; written
    beside and renamed over the old one, so a crash leaves one whole checkpoint."""
    fresh = run.path / ".checkpoint-new"
    shutil.rmtree(fresh, ignore_errors=True)
    save_bridged(model, fresh)
    state = optimizer.state_dict()
    tensors = {
        f"{i}.{k}": torch.as_tensor(v).detach().cpu().contiguous()
        for i, entries in state["state"].items()
        for k, v in entries.items()
    }
    save_file(tensors, fresh / "optimizer.safetensors")
    (fresh / "state.json").write_text(json.dumps({"step": step}))
    old = run.path / ".checkpoint-old"
    target = run.path / "checkpoint"
    shutil.rmtree(old, ignore_errors=True)
    if target.exists():
        os.replace(target, old)
    os.replace(fresh, target)
    shutil.rmtree(old, ignore_errors=True)


def _restore_optimizer(optimizer: torch.optim.Optimizer, directory: Path) -> None:
    tensors = load_file(str(directory / "optimizer.safetensors"))
    state: dict[int, dict[str, torch.Tensor]] = {}
    for key, value in tensors.items():
        index, name = key.split(".", 1)
        state.setdefault(int(index), {})[name] = value
    optimizer.load_state_dict(
        {"state": state, "param_groups": optimizer.state_dict()["param_groups"]}
    )


def fine_tune_marian(
    run_dir: str | Path,
    base: str,
    condition: str,
    cfg: MarianFineTune,
    device: str | torch.device = "cpu",
    quiet: bool = False,
) -> Path:
    """Fine-tune ``base`` in ``condition`` into ``run_dir`` (resumed from its checkpoint if
    interrupted, returned as it is if finished), holding the run directory's lock."""
    with RunLock(run_dir):
        return _fine_tune(run_dir, base, condition, cfg, device, quiet)


def _fine_tune(
    run_dir: str | Path, base: str, condition: str, cfg: MarianFineTune,
    device: str | torch.device, quiet: bool,
) -> Path:  # fmt: skip
    from transformers import AutoTokenizer

    from latentlens.progress import progress_bar

    if condition not in MARIAN_CONDITIONS:
        raise ValueError(
            f"condition={condition!r} is unknown; choose one of {list(MARIAN_CONDITIONS)}"
        )
    device = torch.device(device)
    run = RunDirectory(run_dir)
    init, pretrained = MARIAN_CONDITIONS[condition]
    train = cfg.to_dict()
    data = {k: train.pop(k) for k in ("dataset", "dataset_config", "source_lang", "target_lang")}
    config = {
        "model_kind": "marian-mt",
        "condition": condition,
        "model": {"base": base, "bridge": init, "pretrained": pretrained},
        "task": {"name": "parallel-corpus", "config": data},
        "train": train,
    }
    checkpoint = run.path / "checkpoint"
    if run.config_path.is_file() and json.loads(run.config_path.read_text()) != config:
        raise ValueError(f"{run.path} holds a different run; choose another directory")
    try:
        tokenizer = AutoTokenizer.from_pretrained(base)
    except (OSError, ValueError) as err:
        raise ValueError(
            f"--base {base} is neither a latentlens run directory nor a Hugging Face model "
            f"that loads ({type(err).__name__}); give a finished `latentlens train` run, a "
            "model folder, or a hub name such as Helsinki-NLP/opus-mt-de-en"
        ) from None
    sources, targets = load_pairs(cfg, "train", cfg.train_pairs)
    steps = cfg.total_steps(len(sources))
    if checkpoint.is_dir():
        model = load_bridged(checkpoint)
        step = json.loads((checkpoint / "state.json").read_text())["step"]
    else:
        model, step = condition_model(base, condition, cfg.seed), 0
        run.write_config(config)
    model.to(device).train()
    freeze_positions(model)
    optimizer = torch.optim.AdamW(_decay_groups(model, cfg.weight_decay), lr=cfg.lr)
    if step:
        _restore_optimizer(optimizer, checkpoint)
    held_out = load_pairs(cfg, "validation", cfg.eval_pairs)
    test = load_pairs(cfg, "test", cfg.test_pairs)
    routing_path = run.tracking / "routing_matrix.safetensors"
    run.tracking.mkdir(parents=True, exist_ok=True)
    recorded: list[tuple[int, torch.Tensor]] = []
    if step and routing_path.is_file():
        tracked = load_tracked(routing_path)
        recorded = [
            (s, torch.from_numpy(v))
            for s, v in zip(tracked.steps, tracked.values, strict=True)
            if s <= step
        ]
    if run.metrics_path.is_file():
        truncate_jsonl(run.metrics_path, step if step else -1)  # records past the checkpoint

    def record(at: int) -> None:
        run.append_metrics(
            [
                {
                    "step": at,
                    "split": "test",
                    **evaluate(model, tokenizer, cfg, held_out, test, device),
                }
            ]
        )
        recorded.append((at, routing_matrix(model)))
        values = torch.stack([v for _, v in recorded])
        atomic_write_bytes(
            routing_path,
            tracked_bytes([s for s, _ in recorded], values, ("decoder_layer", "encoder_layer")),
        )

    if step == 0:
        record(0)
    batches = Batches(tokenizer, sources, targets, cfg)
    with progress_bar(total=steps, initial=step, disable=quiet, desc=condition) as bar:
        while step < steps:
            for group in optimizer.param_groups:  # linear decay to 0, no warm-up
                group["lr"] = cfg.lr * (1.0 - step / steps)
            batch = {k: v.to(device) for k, v in batches(step).items()}
            loss = model(**batch).loss
            if not torch.isfinite(loss):
                raise ValueError(f"the loss became {float(loss)} at step {step}; lower --lr")
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            step += 1
            bar.update(1)
            if step % cfg.eval_every == 0 or step == steps:
                record(step)
                _save_state(run, model, optimizer, step)
    return run.path
