"""The hooked decoder-only transformer of docs/methods/attention.md.

Pre-LN blocks ``x = x + Attn(LN1(x)); x = x + MLP(LN2(x))`` with a GELU (tanh) MLP, a final
LayerNorm and a linear readout. Inputs are continuous vectors (linear embedding) or token
ids (embedding table).

Hook points (shapes), following TransformerLens's names:

- ``hook_embed``, ``hook_pos_embed`` (absolute position only): ``[batch, pos, d_model]``
- ``blocks.{l}.hook_resid_pre``, ``hook_resid_mid``, ``hook_resid_post``:
  ``[batch, pos, d_model]``
- ``blocks.{l}.hook_attn_out``, ``blocks.{l}.hook_mlp_out``: ``[batch, pos, d_model]``
- ``blocks.{l}.mlp.hook_pre``, ``hook_post``: ``[batch, pos, d_mlp]``
- ``blocks.{l}.attn.*``: see :mod:`latentlens.models.attention`

With ``forward(..., last_positions=n)`` the last block's hooks of queries hold n positions
in place of ``pos``: ``attn.hook_q``, the scores, the pattern, ``attn.hook_z`` and every
hook after the attention; its keys and values keep every position.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from latentlens.kernels import compiling, kernels_apply
from latentlens.kernels.bias_add import fused_bias_add
from latentlens.kernels.gelu_tanh import fused_bias_gelu_tanh, fused_gelu_tanh
from latentlens.kernels.layer_norm import (
    COMPILED_FROM,
    EMBEDDED_UP_TO,
    fused_add_layer_norm,
    fused_embed_layer_norm,
    fused_kept_add_layer_norm,
)
from latentlens.kernels.linear import projection, projects
from latentlens.kernels.mlp import fused_mlp
from latentlens.models.attention import Attention
from latentlens.models.config import AttentionConfig, TransformerConfig
from latentlens.models.hooked import HookedModel, HookPoint, any_hooked
from latentlens.models.init import embedding_normal_, init_linear_
from latentlens.models.layer_norm import LayerNorm
from latentlens.models.position import sinusoidal_encoding
from latentlens.models.validation import check_dtype, check_input


class MLP(nn.Module):
    """``Linear(d_model -> d_mlp) . GELU(tanh) . Linear(d_mlp -> d_model)``, with biases."""

    def __init__(self, d_model: int, d_mlp: int) -> None:
        super().__init__()
        self.fc_in = init_linear_(nn.Linear(d_model, d_mlp))
        self.fc_out = init_linear_(nn.Linear(d_mlp, d_model))
        self.hook_pre = HookPoint()
        self.hook_post = HookPoint()
        # Set by latentlens.models.use_fused_kernels: the GELU on the fused CPU kernel
        # (the same function to float32 rounding) for float32 CPU tensors, and the fused
        # stream's MLP on latentlens.kernels.mlp where one of its engines runs.
        self.fused = False
        self.fused_blocks = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``[batch, pos, d_model] -> [batch, pos, d_model]``."""
        pre = self.hook_pre(self.fc_in(x))
        fused = self.fused and kernels_apply(pre, compiles=True)
        hidden = fused_gelu_tanh(pre) if fused else F.gelu(pre, approximate="tanh")
        return self.fc_out(self.hook_post(hidden))

    def unbiased(self, x: torch.Tensor) -> torch.Tensor:
        """``[batch, pos, d_model] -> [batch, pos, d_model]``: the output less
        ``fc_out``'s bias, with ``fc_in``'s bias added in the fused GELU's pass, or the
        whole MLP a block of rows at a time (:attr:`fused_blocks`) (float32 CPU tensors;
        the hooks do not run: for :meth:`DecoderTransformer`'s fused stream)."""
        if self.fused_blocks:
            return fused_mlp(x, self.fc_in.weight, self.fc_in.bias, self.fc_out.weight)
        hidden = fused_bias_gelu_tanh(F.linear(x, self.fc_in.weight), self.fc_in.bias)
        return F.linear(hidden, self.fc_out.weight)


class TransformerBlock(nn.Module):
    """One pre-LN block: attention then MLP, each added to the residual stream."""

    def __init__(self, attn_cfg: AttentionConfig, d_mlp: int, ln_eps: float) -> None:
        super().__init__()
        d_model = attn_cfg.d_model
        self.ln1 = LayerNorm(d_model, eps=ln_eps)
        self.attn = Attention(attn_cfg)
        self.ln2 = LayerNorm(d_model, eps=ln_eps)
        self.mlp = MLP(d_model, d_mlp)
        self.hook_resid_pre = HookPoint()
        self.hook_attn_out = HookPoint()
        self.hook_resid_mid = HookPoint()
        self.hook_mlp_out = HookPoint()
        self.hook_resid_post = HookPoint()

    def forward(
        self,
        resid: torch.Tensor,
        key_mask: torch.Tensor | None = None,
        last_positions: int | None = None,
    ) -> torch.Tensor:
        """``[batch, pos, d_model] -> [batch, pos, d_model]``; with ``last_positions`` n,
        the last n positions only, ``[batch, n, d_model]`` (their queries still attend to
        every position)."""
        resid = self.hook_resid_pre(resid)
        normed = self.ln1(resid)
        if last_positions is None:
            attn_out = self.attn(normed, key_mask=key_mask)
        else:
            start = resid.shape[1] - last_positions
            resid = resid[:, start:]
            attn_out = self.attn(normed, key_mask=key_mask, query_start=start)
        resid = self.hook_resid_mid(resid + self.hook_attn_out(attn_out))
        return self.hook_resid_post(resid + self.hook_mlp_out(self.mlp(self.ln2(resid))))


class DecoderTransformer(HookedModel):
    """Decoder-only transformer with every quantity of the hook-name contract hooked.

    ``forward(inputs)`` takes ``[batch, pos, d_input]`` floats (continuous inputs) or
    ``[batch, pos]`` integer token ids and returns ``[batch, pos, d_output]``.

    Example::

        cfg = TransformerConfig.preset("fuzzy-logic", attention="hyla")
        model = DecoderTransformer(cfg)
        out, cache = model.run_with_cache(x, names_filter=lambda n: n.endswith("pattern"))
        codes = latentlens.latent_codes(cache, layer=0)  # [batch, query, key, head]
    """

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.cfg = cfg
        if cfg.vocab_size is not None:
            self.embed: nn.Module = nn.Embedding(cfg.vocab_size, cfg.d_model)
            embedding_normal_(self.embed.weight, fan_in=cfg.d_model)
        else:
            self.embed = init_linear_(nn.Linear(cfg.d_input, cfg.d_model))
        self.hook_embed = HookPoint()
        if cfg.absolute_position:
            self.register_buffer(
                "pos_encoding", sinusoidal_encoding(cfg.n_ctx, cfg.d_model), persistent=False
            )
            self.hook_pos_embed = HookPoint()
        attn_cfg = cfg.attention_config()
        self.blocks = nn.ModuleList(
            TransformerBlock(attn_cfg, cfg.d_mlp, cfg.ln_eps) for _ in range(cfg.n_layers)
        )
        self.ln_final = LayerNorm(cfg.d_model, eps=cfg.ln_eps)
        self.unembed = init_linear_(nn.Linear(cfg.d_model, cfg.d_output))
        # Set by latentlens.models.use_fused_kernels: the residual stream's adds and
        # layer norms on the fused CPU kernels (the same function to float32 rounding).
        self.fused = False
        self.setup()

    def forward(
        self,
        inputs: torch.Tensor,
        key_mask: torch.Tensor | None = None,
        last_positions: int | None = None,
        start_at_layer: int | None = None,
    ) -> torch.Tensor:
        """Outputs ``[batch, pos, d_output]``; ``key_mask`` ``[batch, pos]`` bool marks real
        (True) and padding (False) positions.

        ``last_positions`` n returns the outputs of the last n positions only,
        ``[batch, n, d_output]``, equal to ``forward(inputs)[:, -n:]``: the last block
        computes its queries, MLP and readout at those positions alone (its keys and values
        at every position), which is all a loss on them needs. Its hooks after the
        attention then hold those n positions.

        ``start_at_layer`` l (TransformerLens's argument of that name): ``inputs`` is the
        residual stream entering block l, ``[batch, pos, d_model]`` (e.g. a cache's
        ``blocks.{l}.hook_resid_pre``), and only blocks l, l + 1, ... run on it, on the
        unfused path: an intervention from block l on needs nothing before it recomputed.
        """
        if start_at_layer is None:
            inputs = self._check_inputs(inputs)
        else:
            self._check_residual(inputs, start_at_layer)
        pos = inputs.shape[1]
        if last_positions is not None and not 1 <= last_positions <= pos:
            raise ValueError(
                f"last_positions={last_positions} is not in [1, {pos}] (the input's "
                "positions); pass None for every position"
            )
        if start_at_layer is not None:
            resid, start_at = inputs, start_at_layer
        elif self._fused_stream_applies(inputs):
            return self._fused_stream(inputs, key_mask, last_positions)
        else:
            resid, start_at = self.hook_embed(self.embed(inputs)), 0
            if self.cfg.absolute_position:
                positions = self.pos_encoding[:pos].expand(inputs.shape[0], -1, -1)
                resid = resid + self.hook_pos_embed(positions)
        final = len(self.blocks) - 1
        for layer in range(start_at, len(self.blocks)):
            keep = last_positions if layer == final and last_positions != pos else None
            resid = self.blocks[layer](resid, key_mask=key_mask, last_positions=keep)
        return self.unembed(self.ln_final(resid))

    def _check_residual(self, resid: torch.Tensor, layer: int) -> None:
        """A clear error unless ``resid`` can enter block ``layer``."""
        if not 0 <= layer < len(self.blocks):
            raise ValueError(
                f"start_at_layer={layer} is not a block of this {len(self.blocks)}-layer model"
            )
        check_input("inputs", resid, (None, None, self.cfg.d_model), "[batch, pos, d_model]")
        check_dtype("inputs", resid, self)
        if resid.shape[1] > self.cfg.n_ctx:
            raise ValueError(
                f"inputs has {resid.shape[1]} positions, more than the model's "
                f"n_ctx={self.cfg.n_ctx}"
            )

    def _stream_hooks(self) -> list[HookPoint]:
        """The hook points on the residual stream and in the MLPs (not the attention's)."""
        points = [self.hook_embed] + ([self.hook_pos_embed] if self.cfg.absolute_position else [])
        for block in self.blocks:
            points += [block.hook_resid_pre, block.hook_attn_out, block.hook_resid_mid,
                       block.hook_mlp_out, block.hook_resid_post, block.mlp.hook_pre,
                       block.mlp.hook_post]  # fmt: skip
        return points

    def _fused_stream_applies(self, inputs: torch.Tensor) -> bool:
        """Whether this pass runs the residual stream on the fused kernels (:attr:`fused`
        set by :func:`~latentlens.models.use_fused_kernels`, no hook on the stream or
        the MLPs, float32 weights on the CPU; compiled, a stream of at least
        :data:`~latentlens.kernels.layer_norm.COMPILED_FROM` numbers)."""
        streamed = inputs.shape[0] * inputs.shape[1] * self.cfg.d_model
        return (
            self.fused
            and not any_hooked(self._stream_hooks())
            and kernels_apply(self.unembed.weight, compiles=True)
            and (not compiling() or streamed >= COMPILED_FROM)
        )

    def _fused_stream(
        self, inputs: torch.Tensor, key_mask: torch.Tensor | None, last_positions: int | None
    ) -> torch.Tensor:
        """:meth:`forward` with each residual add and the layer norm after it one fused
        pass (:mod:`latentlens.kernels.layer_norm`), the embedding's, the attention's and
        ``fc_out``'s biases added there, and ``fc_in``'s in the GELU's pass: the same
        function to float32 rounding, with fewer passes over the stream. A linear
        embedding of at most :data:`~latentlens.kernels.layer_norm.EMBEDDED_UP_TO` input
        columns is computed in the first layer norm's pass (not for inputs that need a
        gradient), and the last block projects its queries at the kept positions alone."""
        embedded = (
            isinstance(self.embed, nn.Linear)
            and not self.cfg.absolute_position
            and self.cfg.d_input <= EMBEDDED_UP_TO
            and not inputs.requires_grad
        )
        if embedded:
            stream: tuple = ()  # the first layer norm's pass embeds the inputs
        elif isinstance(self.embed, nn.Linear):
            stream = (F.linear(inputs, self.embed.weight), None, self.embed.bias)
        else:
            stream = (self.embed(inputs), None, None)
        if self.cfg.absolute_position:
            positions = self.pos_encoding[: inputs.shape[1]].expand(stream[0].shape)
            stream = (stream[0], positions, stream[2])
        pos, final = inputs.shape[1], len(self.blocks) - 1
        start = 0 if last_positions is None else pos - last_positions
        for layer, block in enumerate(self.blocks):
            keep_from = start if layer == final else 0  # the queries and residual kept
            if layer == 0 and embedded:
                resid, normed = fused_embed_layer_norm(inputs, self.embed, block.ln1)
                queries = normed
                if keep_from:  # a one-block model
                    resid, queries = resid[:, keep_from:], normed[:, keep_from:]
            elif keep_from:
                resid, normed, queries = fused_kept_add_layer_norm(*stream, block.ln1, keep_from)
            else:
                resid, normed = fused_add_layer_norm(*stream, block.ln1)
                queries = normed
            kv = normed if keep_from else None
            attn_out = block.attn(queries, kv=kv, key_mask=key_mask, query_start=keep_from,
                                  unbiased=True)  # fmt: skip
            resid, normed = fused_add_layer_norm(resid, attn_out, block.attn.b_O, block.ln2)
            stream = (resid, block.mlp.unbiased(normed), block.mlp.fc_out.bias)
        normed = fused_add_layer_norm(*stream, self.ln_final)[1]
        # the weight's and bias's gradients the same on any thread count
        if projects(self.cfg.d_output):
            return projection(normed, self.unembed.weight, self.unembed.bias)
        return fused_bias_add(F.linear(normed, self.unembed.weight), self.unembed.bias)

    def _check_inputs(self, inputs: torch.Tensor) -> torch.Tensor:
        cfg = self.cfg
        if cfg.vocab_size is not None:
            check_input("inputs", inputs, (None, None), "[batch, pos] token ids")
            if inputs.dtype.is_floating_point or inputs.dtype == torch.bool:
                raise ValueError(
                    f"inputs must be integer token ids for a model with vocab_size="
                    f"{cfg.vocab_size}, got dtype {inputs.dtype}"
                )
            # A range check syncs with the device; compiled (captured) steps skip it.
            in_range = compiling() or not inputs.numel()
            if not in_range and (inputs.min() < 0 or inputs.max() >= cfg.vocab_size):
                raise ValueError(
                    f"inputs hold token ids in [{int(inputs.min())}, {int(inputs.max())}], "
                    f"outside the vocabulary [0, {cfg.vocab_size - 1}]"
                )
        else:
            check_input("inputs", inputs, (None, None, cfg.d_input), "[batch, pos, d_input]")
            if not inputs.dtype.is_floating_point:
                raise ValueError(
                    f"inputs must be floating point for a model with d_input={cfg.d_input}, "
                    f"got dtype {inputs.dtype}"
                )
            check_dtype("inputs", inputs, self)
        if inputs.shape[1] > cfg.n_ctx:
            raise ValueError(
                f"inputs has {inputs.shape[1]} positions (shape {list(inputs.shape)}), more "
                f"than the model's n_ctx={cfg.n_ctx} (the size of its position tables); "
                f"build the model with n_ctx >= {inputs.shape[1]}"
            )
        return inputs
