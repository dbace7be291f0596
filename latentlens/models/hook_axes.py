"""The hook-name contract's axes: what each axis of a hooked activation is.

``hook_axes("blocks.0.attn.hook_pattern") == ("batch", "head", "query", "key")``. The
names follow TransformerLens (``pos``, ``head``, ``d_head``, ``d_model``, ``d_mlp``);
docs/guide/models.md lists the same contract in words.
"""

from __future__ import annotations

from latentlens.models.latent import ATTENTION_MODULES

RESIDUAL = ("batch", "pos", "d_model")
PER_HEAD = ("batch", "pos", "head", "d_head")
PAIRWISE = ("batch", "head", "query", "key")
VALUE_NETWORK = ("batch", "query", "key", "d_head")

# Keyed by the hook's own name, or by its module and name where the module decides.
HOOK_AXES: dict[str, tuple[str, ...]] = {
    **dict.fromkeys(
        (
            "hook_embed",
            "hook_pos_embed",
            "hook_resid_pre",
            "hook_resid_mid",
            "hook_resid_post",
            "hook_resid_cross",
            "hook_resid_fused",
            "hook_attn_out",
            "hook_cross_out",
            "hook_fuse_out",
            "hook_mlp_out",
        ),
        RESIDUAL,
    ),
    **{f"{m}.hook_{n}": PER_HEAD for m in ATTENTION_MODULES for n in "qkvz"},
    # a decoder's cross-attention reads its keys and values from the source positions
    "cross_attn.hook_k": ("batch", "source_pos", "head", "d_head"),
    "cross_attn.hook_v": ("batch", "source_pos", "head", "d_head"),
    **{
        f"{m}.hook_{n}": PAIRWISE
        for m in ("attn", "cross_attn")
        for n in ("attn_scores", "pattern")
    },
    **{
        f"{m}.hook_vnet_{n}": VALUE_NETWORK for m in ("attn", "cross_attn") for n in ("pre", "post")
    },
    "fuse.hook_pattern": ("batch", "head", "pos", "source_layer"),
    "mlp.hook_pre": ("batch", "pos", "d_mlp"),
    "mlp.hook_post": ("batch", "pos", "d_mlp"),
    "layer_connection.hook_memory": ("batch", "decoder_layer", "source_pos", "d_model"),
    "hook_task_latent": ("batch", "latent_dim"),
    "hook_task_weights": ("batch", "task_hidden", "d_x"),
    "hook_task_hidden": ("batch", "task_hidden"),
}


def hook_axes(name: str) -> tuple[str, ...] | None:
    """The names of the axes of hook ``name``'s activation, e.g. ``("batch", "pos",
    "d_model")`` for ``encoder.blocks.2.hook_resid_post``; ``None`` for a hook outside the
    contract (one a user added)."""
    parts = name.split(".")
    return HOOK_AXES.get(".".join(parts[-2:])) or HOOK_AXES.get(parts[-1])
