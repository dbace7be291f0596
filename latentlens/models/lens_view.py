"""A latentlens model seen as a TransformerLens ``HookedTransformer`` by TransformerLens's
own tools: ``patching``'s activation-patching sweeps, ``head_detector.detect_head`` and the
CircuitsVis views.

Those tools expect one thing latentlens models do not give: a model whose forward takes
one ``[batch, pos]`` tensor of token ids, with ``cfg.n_layers``, ``cfg.n_heads``,
``cfg.device``, ``to_tokens`` and hook names ``blocks.{l}...`` at the root. The hook names
and shapes are already TransformerLens's (``blocks.{l}.attn.hook_pattern``
``[batch, head, query, key]``, ``hook_z`` ``[batch, pos, head, d_head]``, ...).
:class:`LensView` adds the rest without copying the model:

- a decoder-only token model (``vocab_size`` set): as it is;
- a continuous-input model: ``input_table`` ``[rows, d_input]``, and the "tokens" are row
  indices into it (``LensView.of_inputs(model, x)`` builds it for a batch ``x``);
- an encoder-decoder: one ``stack`` (``"encoder"`` or ``"decoder"``) is the view's
  ``blocks``; the other input is held fixed (``source`` for the decoder, ``decoder_inputs``
  for the encoder).

Example::

    view = LensView(model).eval()
    _, clean = view.run_with_cache(clean_tokens)
    effect = patching.get_act_patch_attn_head_pattern_all_pos(view, corrupt_tokens, clean, metric)
    scores = head_detector.detect_head(view, "3 5 7 3 5 7", "induction_head")
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from transformer_lens import ActivationCache

from latentlens.models.encoder_decoder import EncoderDecoderTransformer
from latentlens.models.hooked import HookedModel

STACKS = ("encoder", "decoder")


@dataclass(frozen=True)
class LensConfig:
    """The part of TransformerLens's ``HookedTransformerConfig`` its tools read."""

    n_layers: int
    n_heads: int
    n_ctx: int
    d_vocab: int
    device: torch.device
    dtype: torch.dtype
    n_key_value_heads: int | None = None
    default_prepend_bos: bool = False


class LensView(nn.Module):
    """``model`` behind TransformerLens's ``HookedTransformer`` surface (see the module's
    docstring). The view holds the model as a submodule: ``eval()`` reaches it, and hooks
    added through the view are the model's."""

    def __init__(
        self,
        model: HookedModel,
        stack: str | None = None,
        source: torch.Tensor | None = None,
        decoder_inputs: torch.Tensor | None = None,
        input_table: torch.Tensor | None = None,
    ) -> None:
        super().__init__()
        self.model = model
        is_encoder_decoder = isinstance(model, EncoderDecoderTransformer)
        if is_encoder_decoder and stack not in STACKS:
            raise ValueError(
                f"stack={stack!r}: an encoder-decoder is viewed one stack at a time; pass "
                f"stack='encoder' (with decoder_inputs) or stack='decoder' (with source)"
            )
        if not is_encoder_decoder and stack is not None:
            raise ValueError(f"stack={stack!r} is for an encoder-decoder; leave it out")
        if stack == "decoder" and source is None:
            raise ValueError("the decoder stack needs the fixed source: pass source=[batch, S] ids")
        if stack == "encoder" and decoder_inputs is None:
            raise ValueError("the encoder stack needs decoder_inputs=[batch, T] ids to run")
        self.prefix = f"{stack}." if stack else ""
        self.stack = stack
        self.source, self.decoder_inputs = source, decoder_inputs
        cfg = model.cfg
        self.continuous = getattr(cfg, "vocab_size", None) is None
        if self.continuous and input_table is None:
            raise ValueError(
                "the model takes continuous inputs: pass input_table=[rows, d_input] (the "
                "view's tokens index its rows), or build the view with LensView.of_inputs"
            )
        self.input_table = input_table
        self.hook_dict = {
            name[len(self.prefix) :]: hook
            for name, hook in model.hook_dict.items()
            if name.startswith(self.prefix)
        }
        self.mod_dict = self.hook_dict

    @classmethod
    def of_inputs(cls, model: HookedModel, inputs: torch.Tensor) -> tuple[LensView, torch.Tensor]:
        """A view of a continuous-input model for the batch ``inputs``
        ``[batch, pos, d_input]``, and the tokens ``[batch, pos]`` that stand for it."""
        batch, pos, _ = inputs.shape
        tokens = torch.arange(batch * pos, device=inputs.device).reshape(batch, pos)
        return cls(model, input_table=inputs.reshape(batch * pos, -1)), tokens

    @property
    def cfg(self) -> LensConfig:
        cfg = self.model.cfg
        if self.stack:
            layers = cfg.n_layers_encoder if self.stack == "encoder" else cfg.n_layers_decoder
            n_ctx = cfg.n_ctx_source if self.stack == "encoder" else cfg.n_ctx_target
        else:
            layers, n_ctx = cfg.n_layers, cfg.n_ctx
        vocab = len(self.input_table) if self.continuous else cfg.vocab_size
        parameter = next(self.model.parameters())
        return LensConfig(layers, cfg.n_heads, n_ctx, vocab, parameter.device, parameter.dtype)

    # -- inputs -------------------------------------------------------------------------
    def _inputs(self, tokens: torch.Tensor) -> tuple[torch.Tensor, ...]:
        if tokens.ndim != 2:
            raise ValueError(f"tokens must be [batch, pos] ids, got shape {list(tokens.shape)}")
        if self.continuous:
            return (self.input_table[tokens],)
        if self.stack == "decoder":
            return (self._fixed(self.source, tokens, "source"), tokens)
        if self.stack == "encoder":
            return (tokens, self._fixed(self.decoder_inputs, tokens, "decoder_inputs"))
        return (tokens,)

    @staticmethod
    def _fixed(value: torch.Tensor, tokens: torch.Tensor, name: str) -> torch.Tensor:
        """The held-fixed input for a batch of ``tokens``: as given, or one row repeated."""
        if len(value) == len(tokens):
            return value
        if len(value) == 1:
            return value.expand(len(tokens), -1)
        raise ValueError(
            f"{name} has {len(value)} rows for {len(tokens)} token rows: give 1 or as many"
        )

    def to_tokens(self, text: str | Sequence[str] | torch.Tensor) -> torch.Tensor:
        """``[batch, pos]`` ids from whitespace-separated integers (``"3 5 7 3 5 7"``),
        a list of such strings of equal length, or a tensor (a 1-D one gets a batch axis)."""
        if isinstance(text, torch.Tensor):
            return text[None] if text.ndim == 1 else text
        rows = [text] if isinstance(text, str) else list(text)
        try:
            ids = [[int(word) for word in row.split()] for row in rows]
        except ValueError:
            raise ValueError(
                f"{rows[0][:40]!r}: a latentlens model has no tokenizer; write its token ids as "
                "whitespace-separated integers, e.g. '3 5 7 3 5 7'"
            ) from None
        if len({len(row) for row in ids}) != 1:
            raise ValueError("the strings hold different numbers of tokens; give equal lengths")
        return torch.tensor(ids, device=self.cfg.device)

    def to_str_tokens(self, tokens: torch.Tensor | str) -> list[str]:
        """The tokens of one sequence as strings (what CircuitsVis labels its axes with)."""
        tokens = self.to_tokens(tokens)
        return [str(int(t)) for t in tokens[0]]

    # -- forward and hooks ----------------------------------------------------------------
    def forward(self, tokens: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        return self.model(*self._inputs(tokens), **kwargs)

    def _name(self, name: str | Callable[[str], bool]) -> str | Callable[[str], bool]:
        if callable(name):
            prefix = self.prefix
            return lambda full: full.startswith(prefix) and name(full[len(prefix) :])
        if name not in self.hook_dict:
            raise ValueError(
                f"{name!r} is not a hook point of this view (e.g. {next(iter(self.hook_dict))})"
            )
        return self.prefix + name

    def run_with_hooks(
        self, tokens: torch.Tensor, fwd_hooks: Sequence[tuple[Any, Callable]] = (), **kwargs: Any
    ) -> torch.Tensor:
        hooks = [(self._name(name), fn) for name, fn in fwd_hooks]
        return self.model.run_with_hooks(*self._inputs(tokens), fwd_hooks=hooks, **kwargs)

    def run_with_cache(
        self, tokens: torch.Tensor, names_filter: Any = None, **kwargs: Any
    ) -> tuple[torch.Tensor, ActivationCache]:
        """Forward pass caching the view's hook points (``names_filter``: a name, a list
        of names or a predicate, in the view's names)."""
        if names_filter is None:
            keep = None
        elif isinstance(names_filter, str):
            keep = [self._name(names_filter)]
        elif callable(names_filter):
            keep = self._name(names_filter)
        else:
            keep = [self._name(name) for name in names_filter]
        prefix = self.prefix
        keep = keep or (lambda full: full.startswith(prefix))
        output, cache = self.model.run_with_cache(*self._inputs(tokens), names_filter=keep,
                                                  **kwargs)  # fmt: skip
        has_batch_dim = not kwargs.get("remove_batch_dim", False)
        renamed = {name[len(prefix) :]: value for name, value in cache.items()}
        return output, ActivationCache(renamed, self, has_batch_dim=has_batch_dim)

    def reset_hooks(self, *args: Any, **kwargs: Any) -> None:
        self.model.reset_hooks(*args, **kwargs)
