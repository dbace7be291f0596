"""A plain-PyTorch twin of DecoderTransformer: same math and parameter names, no hook points.

It is the reference the hook-overhead benchmark compares against: load the hooked model's
state dict into it (strict) and both compute the same function. Like the official code, it
computes every position; its training objective (:class:`PlainObjective`) reads the loss's
positions from the full output, where latentlens's model computes only those positions.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from latentlens.models import ACTIVATION_FUNCTIONS, TransformerConfig, relative_position_buckets
from latentlens.tasks.base import Draws
from latentlens.training.objective import TrainingObjective


class PlainAttention(nn.Module):
    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        acfg = cfg.attention_config()
        self.acfg = acfg
        h, d, dv, m = acfg.n_heads, acfg.d_head, acfg.d_head_v, acfg.d_model
        self.W_Q, self.W_K = nn.Parameter(torch.empty(h, m, d)), nn.Parameter(torch.empty(h, m, d))
        self.W_V, self.W_O = (
            nn.Parameter(torch.empty(h, m, dv)),
            nn.Parameter(torch.empty(h, dv, m)),
        )
        self.b_Q, self.b_K = nn.Parameter(torch.empty(h, d)), nn.Parameter(torch.empty(h, d))
        self.b_V, self.b_O = nn.Parameter(torch.empty(h, dv)), nn.Parameter(torch.empty(m))
        self.rel_pos = nn.Module()
        self.rel_pos.table = nn.Parameter(torch.empty(h, cfg.n_ctx))
        buckets = relative_position_buckets(cfg.n_ctx, cfg.n_ctx, cfg.n_ctx, cfg.n_ctx)
        self.register_buffer("buckets", buckets, persistent=False)
        self.phi = ACTIVATION_FUNCTIONS[acfg.activation] if acfg.value_network == "mlp" else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = x.shape[1]
        q = torch.einsum("bpm,hmd->bphd", x, self.W_Q) + self.b_Q
        k = torch.einsum("bpm,hmd->bphd", x, self.W_K) + self.b_K
        v = torch.einsum("bpm,hmd->bphd", x, self.W_V) + self.b_V
        s = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(self.acfg.d_head)
        s = s + self.rel_pos.table[:, self.buckets[:t, :t]]
        if self.acfg.normalization == "softmax":
            a = torch.softmax(s, dim=-1)
        elif self.acfg.normalization == "rms_head":
            a = s * torch.rsqrt(s.square().mean(dim=1, keepdim=True) + self.acfg.rms_eps)
        else:
            a = s
        if self.training and self.acfg.dropout > 0:
            keep = torch.rand(1, 1, t, t, device=x.device) >= self.acfg.dropout
            a = a * keep.to(a.dtype) / (1.0 - self.acfg.dropout)
        if self.phi is None:
            z = torch.einsum("bhqk,bkhd->bqhd", a, v)
        else:
            u = self.phi(torch.einsum("bhqk,bkhd->bqkd", a, v))
            z = torch.einsum("bhqk,bqkd->bqhd", a, u)
        return torch.einsum("bqhd,hdm->bqm", z, self.W_O) + self.b_O


class PlainMLP(nn.Module):
    def __init__(self, d_model: int, d_mlp: int) -> None:
        super().__init__()
        self.fc_in, self.fc_out = nn.Linear(d_model, d_mlp), nn.Linear(d_mlp, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc_out(F.gelu(self.fc_in(x), approximate="tanh"))


class PlainBlock(nn.Module):
    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.d_model, eps=cfg.ln_eps)
        self.attn = PlainAttention(cfg)
        self.ln2 = nn.LayerNorm(cfg.d_model, eps=cfg.ln_eps)
        self.mlp = PlainMLP(cfg.d_model, cfg.d_mlp)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class PlainTransformer(nn.Module):
    """Continuous-input decoder with relative positions and no mask (the tasks' setting)."""

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.embed = nn.Linear(cfg.d_input, cfg.d_model)
        self.blocks = nn.ModuleList(PlainBlock(cfg) for _ in range(cfg.n_layers))
        self.ln_final = nn.LayerNorm(cfg.d_model, eps=cfg.ln_eps)
        self.unembed = nn.Linear(cfg.d_model, cfg.d_output)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.embed(x)
        for block in self.blocks:
            x = block(x)
        return self.unembed(self.ln_final(x))


def twin_of(model: nn.Module, cfg: TransformerConfig) -> PlainTransformer:
    """The plain twin of the hooked ``model`` (built from ``cfg``): its weights, device
    and train/eval mode."""
    twin = PlainTransformer(cfg).to(next(model.parameters()).device).train(model.training)
    twin.load_state_dict(model.state_dict(), strict=True)
    return twin


class PlainObjective(TrainingObjective):
    """The training objective of a plain twin: its predictions at every position, of which
    the task's loss reads its own."""

    def forward(self, draws: Draws) -> torch.Tensor:
        batch = self.task.assemble(draws, "train")
        return self.task.loss(self.model(*self.task.model_inputs(batch)).float(), batch)
