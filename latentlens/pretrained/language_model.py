"""Pretrained language models as hooked models: a TransformerLens ``TransformerBridge``
over a Hugging Face model, loaded by name or from a local folder, and a tiny random
GPT-2 written to a folder (what the offline tests, the notebook and a first try use).

TransformerLens is imported when these functions run, never at ``import latentlens``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from latentlens.devices import resolve_device
from latentlens.pretrained.hub import offline_unless_reachable


@contextlib.contextmanager
def quiet_transformers() -> Iterator[None]:
    """Without transformers' "Loading weights" progress bars (they are not the caller's
    progress); their setting as it was afterwards."""
    from transformers.utils import logging as hf_logging  # noqa: PLC0415

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


def load_language_model(name: str, device: str = "auto", random_weights: bool = False) -> Any:
    """A ``TransformerBridge`` (TransformerLens 4) of the Hugging Face model ``name`` (a hub
    name such as ``gpt2``, which needs internet or the local cache, or a folder written
    with ``save_pretrained``), in eval mode on ``device``. ``random_weights`` builds the
    architecture from its config with fresh random weights (no weights are read).
    Attention runs eagerly, so ``blocks.{l}.attn.hook_pattern`` holds the weights."""
    from transformer_lens.model_bridge import TransformerBridge  # noqa: PLC0415

    target = resolve_device(device)
    if name.startswith(("/", "./", "../", "~")) and not Path(name).expanduser().is_dir():
        raise ValueError(f"no folder {name}: pass a Hugging Face hub name or an existing folder")
    try:
        with quiet_transformers(), offline_unless_reachable(name):
            model = TransformerBridge.boot_transformers(
                name, device=target, load_weights=not random_weights
            )
    except (OSError, ValueError, KeyError) as err:
        local = Path(name).exists()
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        where = (
            "the folder holds no Hugging Face model (config.json and weights)"
            if local
            else "a hub name needs internet or the Hugging Face cache; offline, pass a folder "
            "written with save_pretrained"
        )
        raise ValueError(f"could not load the model {name!r}: {reason} ({where})") from None
    return model.eval()  # boot_transformers placed it (a .to() would print a line)


def write_tiny_gpt2(
    folder: str | Path,
    vocab_size: int = 96,
    n_layer: int = 2,
    n_head: int = 4,
    n_embd: int = 64,
    n_positions: int = 64,
    seed: int = 0,
) -> Path:
    """A GPT-2 of the given size with random weights and a word-level tokenizer over
    ``<eos>``, ``<unk>`` and ``t0`` ... (``vocab_size`` tokens in all), saved to
    ``folder`` (made if missing) for :func:`load_language_model`: no download."""
    import torch  # noqa: PLC0415
    from tokenizers import Tokenizer, models, pre_tokenizers  # noqa: PLC0415
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast  # noqa: PLC0415

    if vocab_size < 3:
        raise ValueError(f"vocab_size={vocab_size} is too small: give at least 3")
    words = ["<eos>", "<unk>", *(f"t{i}" for i in range(vocab_size - 2))]
    word_level = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    word_level.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=word_level, eos_token="<eos>", bos_token="<eos>", unk_token="<unk>",
        pad_token="<eos>",
    )  # fmt: skip
    config = GPT2Config(
        vocab_size=vocab_size, n_positions=n_positions, n_embd=n_embd, n_layer=n_layer,
        n_head=n_head, bos_token_id=0, eos_token_id=0,
    )  # fmt: skip
    with torch.random.fork_rng(devices=[]):  # seeded weights, the caller's RNG untouched
        torch.manual_seed(seed)
        model = GPT2LMHeadModel(config)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    with quiet_transformers():
        model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
