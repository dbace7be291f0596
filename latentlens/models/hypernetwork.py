"""The hypernetwork transformer of docs/methods/models.md.

A transformer reads an episode's ``N - 1`` context tokens ``[x_i, y_i]`` followed by one
all-zero token (it never sees the query ``x``); the last token's output, projected linearly,
is the task latent ``z_hat`` ``[batch, latent_dim]`` (the bottleneck, ``hook_task_latent``).
A learned linear hypernetwork turns it into the first-layer weights
``W(z_hat) = sum_m z_hat_m theta_hat_m`` ``[batch, task_hidden, d_x]`` of a one-hidden-layer MLP
that is applied to the query ``x`` (the last token without its target slot):
``y_hat = readout(GELU(W(z_hat) x))``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from latentlens.configs import JsonConfig, require_choice, require_positive
from latentlens.models.attention import ACTIVATION_FUNCTIONS
from latentlens.models.config import ACTIVATIONS, TransformerConfig
from latentlens.models.hooked import HookedModel, HookPoint
from latentlens.models.init import init_linear_, lecun_normal_
from latentlens.models.transformer import DecoderTransformer
from latentlens.models.validation import check_dtype, check_input


@dataclass(frozen=True)
class HypernetworkConfig(JsonConfig):
    """Sizes of the hypernetwork transformer; defaults are the reference's (Table 3).

    ``n_ctx`` is the episode length ``N`` and ``d_input`` the token width ``d_x + d_output``
    (tokens are ``[x, y]``); the transformer fields mean what they mean in
    :class:`TransformerConfig` (no attention mask, bidirectional relative positions).
    """

    n_ctx: int
    d_input: int
    d_output: int = 1
    latent_dim: int = 6
    task_hidden: int = 32
    task_activation: str = "gelu"
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    qk_dim: int = 64
    v_dim: int = 64
    d_mlp: int = 256
    attention: str = "softmax"
    attention_dropout: float = 0.0
    ln_eps: float = 1e-6

    def __post_init__(self) -> None:
        owner = "HypernetworkConfig"
        for name in ("n_ctx", "d_input", "d_output", "latent_dim", "task_hidden"):
            require_positive(owner, name, getattr(self, name))
        if self.n_ctx < 2:
            raise ValueError(
                f"{owner}.n_ctx={self.n_ctx} is invalid: an episode needs a context pair "
                "and the query (n_ctx >= 2)"
            )
        if self.d_input <= self.d_output:
            raise ValueError(
                f"{owner}.d_input={self.d_input} must exceed d_output={self.d_output}: "
                "tokens are [x, y], so d_input = d_x + d_output"
            )
        require_choice(owner, "task_activation", self.task_activation, ACTIVATIONS)
        self.transformer_config()  # validates the transformer's fields

    @property
    def d_x(self) -> int:
        return self.d_input - self.d_output

    def transformer_config(self) -> TransformerConfig:
        """The context reader: a transformer whose output head gives ``z_hat``."""
        return TransformerConfig(
            n_ctx=self.n_ctx,
            d_input=self.d_input,
            d_output=self.latent_dim,
            d_model=self.d_model,
            n_layers=self.n_layers,
            n_heads=self.n_heads,
            qk_dim=self.qk_dim,
            v_dim=self.v_dim,
            d_mlp=self.d_mlp,
            attention=self.attention,
            causal=False,
            bidirectional_position=True,
            attention_dropout=self.attention_dropout,
            ln_eps=self.ln_eps,
        )

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> HypernetworkConfig:
        """The reference's hypernetwork transformer for ``modular-icl``."""
        if name != "modular-icl":
            raise ValueError(f"preset={name!r} is unknown; the hypernetwork has 'modular-icl'")
        return cls(**{"n_ctx": 32, "d_input": 17, **overrides})


class HypernetworkTransformer(HookedModel):
    """Transformer -> ``z_hat`` -> linear hypernetwork -> task MLP on the query.

    ``forward(inputs)`` takes ``[batch, N, d_x + d_output]`` episodes whose last token is
    the query ``[x_N, 0]`` and returns ``[batch, 1, d_output]`` (the prediction at the
    query, shaped like a transformer's last position).

    Hook points: ``transformer.*`` (every hook of :class:`DecoderTransformer`),
    ``hook_task_latent`` ``[batch, latent_dim]``, ``hook_task_weights``
    ``[batch, task_hidden, d_x]`` and ``hook_task_hidden`` ``[batch, task_hidden]`` (after
    the activation).
    """

    def __init__(self, cfg: HypernetworkConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.transformer = DecoderTransformer(cfg.transformer_config())
        self.hook_task_latent = HookPoint()
        self.task_modules = nn.Parameter(torch.empty(cfg.latent_dim, cfg.task_hidden, cfg.d_x))
        # fan-in d_x * latent_dim: W(z_hat) has unit-variance rows for z_hat ~ N(0, 1).
        lecun_normal_(self.task_modules, fan_in=cfg.d_x * cfg.latent_dim)
        self.hook_task_weights = HookPoint()
        self.activation = ACTIVATION_FUNCTIONS[cfg.task_activation]
        self.hook_task_hidden = HookPoint()
        self.readout = init_linear_(nn.Linear(cfg.task_hidden, cfg.d_output))
        self.setup()

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        cfg = self.cfg
        check_input("inputs", inputs, (None, None, cfg.d_input), "[batch, N, d_x + d_output]")
        check_dtype("inputs", inputs, self)
        if inputs.shape[1] < 2:
            raise ValueError(
                f"inputs hold {inputs.shape[1]} token(s): an episode needs context and a query"
            )
        query = inputs[:, -1, : cfg.d_x]
        context = torch.cat([inputs[:, :-1], torch.zeros_like(inputs[:, -1:])], dim=1)
        z_hat = self.hook_task_latent(self.transformer(context)[:, -1])
        weights = self.hook_task_weights(torch.einsum("bm,mhd->bhd", z_hat, self.task_modules))
        hidden = self.hook_task_hidden(self.activation(torch.einsum("bhd,bd->bh", weights, query)))
        return self.readout(hidden)[:, None, :]

    def task_mlp(self, z_hat: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """The generated MLP of latent ``z_hat`` ``[latent_dim]`` applied to ``x``
        ``[n, d_x]``: ``[n, d_output]`` (for probing what a latent computes)."""
        weights = torch.einsum("m,mhd->hd", z_hat, self.task_modules)
        return self.readout(self.activation(x @ weights.T))
