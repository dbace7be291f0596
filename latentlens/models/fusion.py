"""Fuse-attention over previous layers (FUSION) and the encoder-decoder layer connection
(docs/methods/models.md)."""

from __future__ import annotations

import math

import torch
from torch import nn

from latentlens.models.hooked import HookPoint
from latentlens.models.init import lecun_normal_
from latentlens.models.softmax import softmax

CONNECTIONS = ("none", "original", "gca", "layerwise", "uniform")


class FuseAttention(nn.Module):
    """Multi-head attention over the *layer axis*, separately at every position.

    ``forward(query, sources)``: ``query`` ``[batch, pos, d_model]`` (the current layer's
    attention sub-layer output), ``sources`` ``[batch, pos, source_layer, d_model]`` (the
    embedding output and every previous layer's output at the same position). Returns
    ``[batch, pos, d_model]``. ``hook_pattern``: the fuse weights
    ``[batch, head, pos, source_layer]`` (softmax over source layers).
    """

    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"fuse heads: d_model={d_model} is not divisible by n_heads={n_heads}")
        self.n_heads, self.d_head = n_heads, d_model // n_heads
        self.W_Q = nn.Parameter(torch.empty(n_heads, d_model, self.d_head))
        self.W_K = nn.Parameter(torch.empty(n_heads, d_model, self.d_head))
        self.W_V = nn.Parameter(torch.empty(n_heads, d_model, self.d_head))
        self.W_O = nn.Parameter(torch.empty(n_heads, self.d_head, d_model))
        for weight in (self.W_Q, self.W_K, self.W_V):
            lecun_normal_(weight, fan_in=d_model)
        lecun_normal_(self.W_O, fan_in=d_model)
        self.hook_pattern = HookPoint()
        self.hook_z = HookPoint()

    def forward(self, query: torch.Tensor, sources: torch.Tensor) -> torch.Tensor:
        q = torch.einsum("bpm,hmd->bphd", query, self.W_Q)
        k = torch.einsum("bpsm,hmd->bpshd", sources, self.W_K)
        v = torch.einsum("bpsm,hmd->bpshd", sources, self.W_V)
        scores = torch.einsum("bphd,bpshd->bhps", q, k) / math.sqrt(self.d_head)
        pattern = self.hook_pattern(softmax(scores))
        z = self.hook_z(torch.einsum("bhps,bpshd->bphd", pattern, v))
        return torch.einsum("bphd,hdm->bpm", z, self.W_O)


def connection_init(kind: str, dec_layers: int, enc_layers: int, d_model: int) -> torch.Tensor:
    """Initial weights ``[dec_layers, d_model, enc_layers * d_model]`` of the layer
    connection: decoder layer j reads ``m_j = W_j concat(e_1..e_L)``.

    - ``original``: every W_j selects the last encoder layer (the vanilla transformer);
    - ``gca``: decoder layer j (from 1) reads encoder layer L - j + 1 (top to bottom);
    - ``layerwise``: decoder layer j reads encoder layer j;
    - ``uniform``: every encoder layer with weight 1/L.
    ``gca`` and ``layerwise`` give each decoder layer its own encoder layer, so they need
    ``dec_layers <= enc_layers``.
    """
    if kind not in CONNECTIONS[1:]:
        raise ValueError(
            f"connection={kind!r} has no initialisation; choose one of {CONNECTIONS[1:]}"
        )
    if kind in ("gca", "layerwise") and dec_layers > enc_layers:
        raise ValueError(
            f"connection={kind!r} maps each of the {dec_layers} decoder layers to its own "
            f"encoder layer but the encoder has {enc_layers}; use 'original' or 'uniform', "
            "or a decoder no deeper than the encoder"
        )
    eye = torch.eye(d_model)
    weight = torch.zeros(dec_layers, d_model, enc_layers * d_model)
    for j in range(dec_layers):
        if kind == "uniform":
            weight[j] = torch.cat([eye / enc_layers] * enc_layers, dim=1)
            continue
        source = {"original": enc_layers - 1, "gca": enc_layers - 1 - j, "layerwise": j}[kind]
        weight[j, :, source * d_model : (source + 1) * d_model] = eye
    return weight


class LayerConnection(nn.Module):
    """A bias-free fully connected layer per decoder layer over the concatenated encoder
    layer outputs. ``forward(encoder_outputs)``: ``[batch, enc_layer, source_pos, d_model]``
    -> memories ``[batch, dec_layer, source_pos, d_model]`` (``hook_memory``)."""

    def __init__(self, kind: str, dec_layers: int, enc_layers: int, d_model: int) -> None:
        super().__init__()
        self.kind, self.enc_layers, self.d_model = kind, enc_layers, d_model
        self.weight = nn.Parameter(connection_init(kind, dec_layers, enc_layers, d_model))
        self.hook_memory = HookPoint()

    def forward(self, encoder_outputs: torch.Tensor) -> torch.Tensor:
        batch, layers, pos, d_model = encoder_outputs.shape
        stacked = encoder_outputs.permute(0, 2, 1, 3).reshape(batch, pos, layers * d_model)
        return self.from_concatenated(stacked)

    def from_concatenated(self, stacked: torch.Tensor) -> torch.Tensor:
        """``[batch, source_pos, enc_layer * d_model]`` (the encoder layers concatenated on
        the feature axis, layer 1 first) -> memories ``[batch, dec_layer, source_pos,
        d_model]``."""
        return self.hook_memory(torch.einsum("bpi,joi->bjpo", stacked, self.weight))

    def routing_matrix(self) -> torch.Tensor:
        """``R[j, i] = ||W_j block i||_F / sum_i ||W_j block i||_F``: ``[dec_layer, enc_layer]``,
        how much decoder layer j draws from encoder layer i."""
        blocks = self.weight.detach().unflatten(2, (self.enc_layers, self.d_model))
        norms = blocks.square().sum(dim=(1, 3)).sqrt()  # [dec, enc]
        return norms / norms.sum(dim=1, keepdim=True).clamp_min(1e-12)
