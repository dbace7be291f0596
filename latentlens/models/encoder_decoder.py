"""A hooked encoder-decoder transformer with optional fuse-attention (FUSION) and an
encoder-decoder layer connection (docs/methods/models.md).

Pre-LN blocks. Encoder layer: ``x + SelfAttn(LN x)``, then (with fusion) ``x + Fuse(LN x,
LN [h_0..h_{l-1}])``, then ``x + MLP(LN x)``. Decoder layer: causal self-attention,
cross-attention to its memory, (fusion), MLP. ``h_0`` is the embedding output and ``h_i``
layer i's output; fusion attends over them per position (``fuse.hook_pattern``
``[batch, head, pos, source_layer]``).

The memory of decoder layer j is the encoder's final layer norm of its last layer's output
(the plain model, ``connection="none"``), or, with a layer connection, ``W_j concat(LN e_1,
..., LN e_L)`` (``layer_connection.hook_memory`` ``[batch, decoder_layer, source_pos,
d_model]``); ``original`` initialises W_j to pick ``LN e_L``, so it computes exactly the
plain model.

Hook names follow DESIGN.md with ``encoder.`` / ``decoder.`` prefixes:
``encoder.hook_embed``, ``encoder.blocks.{l}.attn.hook_pattern``,
``decoder.blocks.{l}.cross_attn.hook_pattern``, ``decoder.blocks.{l}.fuse.hook_pattern``, ...
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from latentlens.configs import JsonConfig, require_choice, require_positive, require_probability
from latentlens.models.attention import Attention
from latentlens.models.config import AttentionConfig, resolve_variant
from latentlens.models.fusion import CONNECTIONS, FuseAttention, LayerConnection
from latentlens.models.hooked import HookedModel, HookPoint
from latentlens.models.init import init_linear_, truncated_normal_
from latentlens.models.layer_norm import LayerNorm
from latentlens.models.transformer import MLP
from latentlens.models.validation import check_input

FUSE_CHOICES = ("none", "encoder", "decoder", "both")


@dataclass(frozen=True)
class EncoderDecoderConfig(JsonConfig):
    """Sizes and switches of :class:`EncoderDecoderTransformer` (token ids in and out)."""

    vocab_size: int
    n_ctx_source: int
    n_ctx_target: int
    d_model: int = 128
    n_layers_encoder: int = 3
    n_layers_decoder: int = 3
    n_heads: int = 4
    qk_dim: int = 128
    v_dim: int = 128
    d_mlp: int = 256
    attention: str = "softmax"
    attention_dropout: float = 0.0
    fuse: str = "none"
    fuse_heads: int = 4
    connection: str = "none"
    pad_id: int = 0
    ln_eps: float = 1e-6

    def __post_init__(self) -> None:
        owner = "EncoderDecoderConfig"
        sizes = ("vocab_size", "n_ctx_source", "n_ctx_target", "d_model", "n_layers_encoder",
                 "n_layers_decoder", "n_heads", "qk_dim", "v_dim", "d_mlp",
                 "fuse_heads")  # fmt: skip
        for name in sizes:
            require_positive(owner, name, getattr(self, name))
        require_choice(owner, "fuse", self.fuse, FUSE_CHOICES)
        require_choice(owner, "connection", self.connection, CONNECTIONS)
        require_probability(owner, "attention_dropout", self.attention_dropout)
        object.__setattr__(self, "attention", resolve_variant(self.attention))
        if self.d_model % self.fuse_heads:
            raise ValueError(
                f"{owner}.fuse_heads={self.fuse_heads} must divide d_model={self.d_model}"
            )
        self.attention_config(causal=False, relative=True)  # validates widths

    def attention_config(
        self, causal: bool, relative: bool, cross: bool = False
    ) -> AttentionConfig:
        n_ctx = max(self.n_ctx_source, self.n_ctx_target)
        return AttentionConfig.from_variant(
            self.attention,
            d_model=self.d_model,
            n_heads=self.n_heads,
            qk_dim=self.qk_dim,
            v_dim=self.v_dim,
            causal=causal,
            relative_position=relative,
            bidirectional_position=not causal,
            num_buckets=n_ctx,
            max_distance=n_ctx,
            dropout=self.attention_dropout,
            d_kv_input=self.d_model if cross else None,
        )

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> EncoderDecoderConfig:
        """A small encoder-decoder for the synthetic ``translation`` task (CPU-trainable)."""
        if name != "translation":
            raise ValueError(f"preset={name!r} is unknown; the encoder-decoder has 'translation'")
        return cls(**{"vocab_size": 61, "n_ctx_source": 12, "n_ctx_target": 12, **overrides})


class EncoderDecoderBlock(nn.Module):
    """One encoder (``cross=False``) or decoder (``cross=True``) layer."""

    def __init__(self, cfg: EncoderDecoderConfig, causal: bool, cross: bool, fuse: bool) -> None:
        super().__init__()
        eps = cfg.ln_eps
        self.ln1 = LayerNorm(cfg.d_model, eps=eps)
        self.attn = Attention(cfg.attention_config(causal=causal, relative=True))
        self.hook_resid_pre, self.hook_attn_out, self.hook_resid_mid = (
            HookPoint(),
            HookPoint(),
            HookPoint(),
        )
        if cross:
            self.ln_cross = LayerNorm(cfg.d_model, eps=eps)
            self.cross_attn = Attention(cfg.attention_config(False, relative=False, cross=True))
            self.hook_cross_out, self.hook_resid_cross = HookPoint(), HookPoint()
        if fuse:
            self.ln_fuse = LayerNorm(cfg.d_model, eps=eps)
            self.ln_sources = LayerNorm(cfg.d_model, eps=eps)
            self.fuse = FuseAttention(cfg.d_model, cfg.fuse_heads)
            self.hook_fuse_out, self.hook_resid_fused = HookPoint(), HookPoint()
        self.ln2 = LayerNorm(cfg.d_model, eps=eps)
        self.mlp = MLP(cfg.d_model, cfg.d_mlp)
        self.hook_mlp_out, self.hook_resid_post = HookPoint(), HookPoint()

    def forward(
        self,
        x: torch.Tensor,
        history: list[torch.Tensor],
        key_mask: torch.Tensor | None,
        memory: torch.Tensor | None = None,
        memory_mask: torch.Tensor | None = None,
        query_start: int = 0,
    ) -> torch.Tensor:
        """``x`` ``[batch, pos, d_model]``; ``history``: ``h_0..h_{l-1}`` of the positions
        from ``query_start`` on (``[batch, pos - query_start, d_model]`` each). Returns the
        block's output at those positions: the positions before ``query_start`` serve as
        keys and values only (incremental decoding), and every hook but the attention's
        sees the new positions alone."""
        if query_start:
            x = torch.cat([x[:, :query_start], self.hook_resid_pre(x[:, query_start:])], dim=1)
        else:
            x = self.hook_resid_pre(x)
        attended = self.attn(self.ln1(x), key_mask=key_mask, query_start=query_start)
        x = self.hook_resid_mid(x[:, query_start:] + self.hook_attn_out(attended))
        if hasattr(self, "cross_attn"):
            cross = self.cross_attn(self.ln_cross(x), kv=memory, key_mask=memory_mask)
            x = self.hook_resid_cross(x + self.hook_cross_out(cross))
        if hasattr(self, "fuse"):
            sources = self.ln_sources(torch.stack(history, dim=2))  # [batch, pos, source, d]
            x = self.hook_resid_fused(x + self.hook_fuse_out(self.fuse(self.ln_fuse(x), sources)))
        return self.hook_resid_post(x + self.hook_mlp_out(self.mlp(self.ln2(x))))


class Stack(nn.Module):
    """The embedding hook, the blocks and the final layer norm of one side."""

    def __init__(self, cfg: EncoderDecoderConfig, layers: int, decoder: bool, fuse: bool) -> None:
        super().__init__()
        self.hook_embed = HookPoint()
        self.blocks = nn.ModuleList(
            EncoderDecoderBlock(cfg, causal=decoder, cross=decoder, fuse=fuse)
            for _ in range(layers)
        )
        self.ln_final = LayerNorm(cfg.d_model, eps=cfg.ln_eps)


class EncoderDecoderTransformer(HookedModel):
    """``forward(source, decoder_inputs)``: token ids ``[batch, S]`` and ``[batch, T]`` ->
    logits ``[batch, T, vocab]``; padding (``pad_id``) in the source is masked out."""

    def __init__(self, cfg: EncoderDecoderConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        truncated_normal_(self.embed.weight, std=1.0)
        self.encoder = Stack(
            cfg, cfg.n_layers_encoder, decoder=False, fuse=cfg.fuse in ("encoder", "both")
        )
        self.decoder = Stack(
            cfg, cfg.n_layers_decoder, decoder=True, fuse=cfg.fuse in ("decoder", "both")
        )
        if cfg.connection != "none":
            self.layer_connection = LayerConnection(
                cfg.connection, cfg.n_layers_decoder, cfg.n_layers_encoder, cfg.d_model
            )
        self.unembed = init_linear_(nn.Linear(cfg.d_model, cfg.vocab_size))
        self.setup()

    def _check(self, name: str, ids: torch.Tensor, n_ctx: int) -> None:
        check_input(name, ids, (None, None), "[batch, pos] token ids")
        if ids.dtype.is_floating_point or ids.dtype == torch.bool:
            raise ValueError(f"{name} must be integer token ids, got dtype {ids.dtype}")
        if ids.shape[1] > n_ctx:
            raise ValueError(
                f"{name} has {ids.shape[1]} positions; the model takes at most {n_ctx}"
            )

    def encode(self, source: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Every encoder layer's output after the final layer norm,
        ``[batch, enc_layer, S, d_model]``, and the source key mask ``[batch, S]``."""
        self._check("source", source, self.cfg.n_ctx_source)
        mask = source != self.cfg.pad_id
        x = self.encoder.hook_embed(self.embed(source))
        history = [x]
        for block in self.encoder.blocks:
            x = block(x, history, key_mask=mask)
            history.append(x)
        outputs = torch.stack([self.encoder.ln_final(h) for h in history[1:]], dim=1)
        return outputs, mask

    def memories(self, encoder_outputs: torch.Tensor) -> torch.Tensor:
        """Each decoder layer's cross-attention memory ``[batch, dec_layer, S, d_model]``."""
        if self.cfg.connection == "none":
            last = encoder_outputs[:, -1:]
            return last.expand(-1, self.cfg.n_layers_decoder, -1, -1)
        return self.layer_connection(encoder_outputs)

    def decode(
        self, decoder_inputs: torch.Tensor, memories: torch.Tensor, source_mask: torch.Tensor
    ) -> torch.Tensor:
        """Logits ``[batch, T, vocab]`` of the decoder given the memories."""
        self._check("decoder_inputs", decoder_inputs, self.cfg.n_ctx_target)
        x = self.decoder.hook_embed(self.embed(decoder_inputs))
        history = [x]
        for j, block in enumerate(self.decoder.blocks):
            x = block(x, history, key_mask=None, memory=memories[:, j], memory_mask=source_mask)
            history.append(x)
        return self.unembed(self.decoder.ln_final(x))

    def forward(self, source: torch.Tensor, decoder_inputs: torch.Tensor) -> torch.Tensor:
        encoder_outputs, mask = self.encode(source)
        return self.decode(decoder_inputs, self.memories(encoder_outputs), mask)

    def routing_matrix(self) -> torch.Tensor:
        """``[dec_layer, enc_layer]`` share of each encoder layer in each decoder layer's
        memory (the plain model reads only the last encoder layer)."""
        if self.cfg.connection == "none":
            routing = torch.zeros(self.cfg.n_layers_decoder, self.cfg.n_layers_encoder)
            routing[:, -1] = 1.0
            return routing
        return self.layer_connection.routing_matrix()

    @torch.no_grad()
    def greedy_decode(
        self, source: torch.Tensor, bos: int, eos: int, max_len: int | None = None
    ) -> torch.Tensor:
        """Greedy decoding: ``[batch, max_len]`` ids (after EOS: ``pad_id``).

        Incremental: each step runs the decoder on the newest position alone, its self-
        attention reading the earlier positions' block inputs, kept from the steps before
        (their keys and values are recomputed from them; a causal decoder's earlier
        positions never change). The logits are :meth:`decode`'s on the whole prefix, up to
        float summation order, at a fraction of the cost. Hooks see each position once, at
        the step that adds it."""
        max_len = max_len or self.cfg.n_ctx_target
        self._check("decoder_inputs", source.new_zeros(len(source), max_len), self.cfg.n_ctx_target)
        encoder_outputs, mask = self.encode(source)
        memories = self.memories(encoder_outputs)
        tokens = torch.full((len(source), 1), bos, dtype=torch.long, device=source.device)
        done = torch.zeros(len(source), dtype=torch.bool, device=source.device)
        inputs: list[torch.Tensor] = []  # block j's input stream, one position per step
        for position in range(max_len):
            x = self.decoder.hook_embed(self.embed(tokens[:, -1:]))
            history = [x]
            for j, block in enumerate(self.decoder.blocks):
                if position == 0:
                    inputs.append(x)
                else:
                    inputs[j] = torch.cat([inputs[j], x], dim=1)
                x = block(inputs[j], history, key_mask=None, memory=memories[:, j],
                          memory_mask=mask, query_start=position)  # fmt: skip
                history.append(x)
            step = self.unembed(self.decoder.ln_final(x))[:, -1].argmax(-1)
            step = torch.where(done, self.cfg.pad_id, step)
            done = done | (step == eos)
            tokens = torch.cat([tokens, step[:, None]], dim=1)
            if bool(done.all()):
                break
        return F.pad(tokens[:, 1:], (0, max_len + 1 - tokens.shape[1]), value=self.cfg.pad_id)
