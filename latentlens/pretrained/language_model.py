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
from latentlens.pretrained.real_models import REAL_MODELS, model_folder


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
    """A ``TransformerBridge`` (TransformerLens 4) of the Hugging Face model ``name``: a
    real model fetched with ``latentlens models fetch`` (``smollm2-135m``, ``minilm-l6``:
    see :mod:`latentlens.pretrained.real_models`), a hub name such as ``gpt2`` (needs
    internet or the local cache) or a folder written with ``save_pretrained``; in eval
    mode on ``device``. ``random_weights`` builds the architecture from its config with
    fresh random weights (no weights are read). Attention runs eagerly, so
    ``blocks.{l}.attn.hook_pattern`` holds the weights (one row per query head, also
    under grouped-query attention: :func:`key_value_groups` says which share keys)."""
    from transformer_lens.model_bridge import TransformerBridge  # noqa: PLC0415

    target = resolve_device(device)
    if name in REAL_MODELS:
        name = str(model_folder(name))
    if name.startswith(("/", "./", "../", "~")) and not Path(name).expanduser().is_dir():
        raise ValueError(f"no folder {name}: pass a Hugging Face hub name or an existing folder")
    if Path(name).expanduser().is_dir():
        check_weight_files(Path(name).expanduser())
    try:
        with quiet_transformers(), offline_unless_reachable(name):
            model = TransformerBridge.boot_transformers(
                name, device=target, load_weights=not random_weights
            )
    except Exception as err:  # noqa: BLE001 - safetensors' and the loaders' own errors too
        if not isinstance(err, (OSError, ValueError, KeyError)) and not type(
            err
        ).__module__.startswith("safetensors"):
            raise
        local = Path(name).exists()
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        if type(err).__module__.startswith("safetensors"):
            where = "its .safetensors weights are damaged or not a safetensors file"
        elif local:
            where = "the folder holds no Hugging Face model (config.json and weights)"
        else:
            where = (
                "a hub name needs internet or the Hugging Face cache; offline, pass a folder "
                "written with save_pretrained"
            )
        raise ValueError(f"could not load the model {name!r}: {reason} ({where})") from None
    return model.eval()  # boot_transformers placed it (a .to() would print a line)


def check_weight_files(folder: Path) -> None:
    """Refuse, in one line, a model folder whose weights only a pickle holds: reading a
    ``.bin`` (``torch.load``) can run code the file carries, and torch's own refusal ran to
    eight lines."""
    pickles = sorted(p.name for p in folder.glob("*.bin"))
    if pickles and not any(folder.glob("*.safetensors")):
        raise ValueError(
            f"{folder} holds its weights as {', '.join(pickles)}, a pickle that can run code "
            "when read; latentlens reads safetensors only: convert them on a machine you "
            "trust (save_pretrained(..., safe_serialization=True))"
        )


def key_value_groups(model: Any) -> list[int]:
    """For each query head, the key/value head it reads (``[n_heads]``): all different
    under plain multi-head attention; under grouped-query attention (e.g. SmolLM2: 9 query
    heads on 3 key/value heads) heads ``g * r .. (g + 1) * r - 1`` share key/value head
    ``g``, ``r = n_heads / n_key_value_heads``, as transformers' ``repeat_kv`` lays them
    out. The latent code of a pair is still the vector over every query head."""
    config = getattr(getattr(model, "original_model", model), "config", None)
    heads = getattr(config, "num_attention_heads", None) or getattr(model.cfg, "n_heads", None)
    if not heads:
        raise ValueError(f"a {type(model).__name__} does not say how many heads it has")
    shared = getattr(config, "num_key_value_heads", None) or heads
    if heads % shared:
        raise ValueError(f"{heads} query heads do not split into {shared} key/value groups")
    return [head // (heads // shared) for head in range(heads)]


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
