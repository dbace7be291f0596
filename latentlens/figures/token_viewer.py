"""A token-level attention viewer for one prompt: hover a query token to see each head's
pattern over the keys, and a key in that pattern to see the pair's latent code
a(l, h, q, k) across every layer and head.

Self-contained HTML (no network): the weights travel as base64 ``uint16`` (steps of
1/65535, below the three decimals shown) inside the page, and the viewer's script is
:data:`VIEWER_SCRIPT`, once per page. In a notebook a :class:`TokenViewer` shows itself
(``_repr_html_``); ``write_atlas`` puts one in the atlas report.
"""

from __future__ import annotations

import base64
import html
import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Any

import numpy as np
import torch

from latentlens.training.checkpoint import atomic_write_bytes

VIEWER_SCRIPT = files("latentlens.figures").joinpath("token_viewer.js").read_text()
VIEWER_STYLE = (
    ".llv{font-family:sans-serif;font-size:13px;margin:1em 0}"
    ".llv-title{font-weight:bold}.llv-controls{margin:.4em 0}.llv-status{margin-left:1em;"
    "color:#555}.llv-tokens{display:flex;flex-wrap:wrap;gap:2px;line-height:2;margin:.4em 0}"
    ".llv-scroll{overflow-x:auto;max-width:100%}.llv-token{padding:2px 3px;margin:1px;"
    "border:1px solid #ddd;border-radius:3px;cursor:pointer;font-family:monospace;"
    "white-space:pre}.llv-query{outline:2px solid #d62728}.llv-key{outline:2px solid #2ca02c}"
    ".llv table{border-collapse:collapse;margin:.4em 0}.llv th,.llv td{border:1px solid #eee;"
    "padding:1px 3px;font-size:11px}.llv-cell{width:14px;height:14px}.llv-pattern-table th"
    "{font-family:monospace;font-weight:normal;white-space:pre}.llv-value{text-align:right}"
)
MAX_TOKENS = 128


@dataclass(frozen=True)
class TokenAttention:
    """A prompt's attention weights: ``patterns`` ``[layer, head, query, key]`` (float32,
    on the CPU), its ``tokens`` as text, the ``model``'s name and, under grouped-query
    attention, the key/value head each query head reads (``key_value_groups``)."""

    model: str
    tokens: tuple[str, ...]
    patterns: torch.Tensor
    key_value_groups: tuple[int, ...] | None = None
    # a dictionary of codes (latentlens.probes.code_dictionary): each feature's name and
    # its activation on every pair, ``[query, key, feature]`` (see :func:`with_dictionary`)
    features: tuple[str, ...] = ()
    feature_activations: torch.Tensor | None = None

    def __post_init__(self) -> None:
        if self.patterns.ndim != 4:
            raise ValueError(
                f"patterns have shape {tuple(self.patterns.shape)}: expected "
                "[layer, head, query, key]"
            )
        layers, heads, queries, keys = self.patterns.shape
        if not queries == keys == len(self.tokens):
            raise ValueError(
                f"patterns cover {queries} queries and {keys} keys for {len(self.tokens)} tokens"
            )
        if self.key_value_groups is not None and len(self.key_value_groups) != heads:
            raise ValueError(
                f"key_value_groups names {len(self.key_value_groups)} heads; the patterns "
                f"have {heads}"
            )

        if self.features and (
            self.feature_activations is None
            or tuple(self.feature_activations.shape) != (queries, keys, len(self.features))
        ):
            raise ValueError(
                f"feature_activations must be [{queries}, {keys}, {len(self.features)}] for "
                f"{len(self.features)} features"
            )

    def code(self, query: int, key: int) -> torch.Tensor:
        """The latent code of the pair (``query``, ``key``): ``[layer, head]``."""
        return self.patterns[:, :, query, key]


@torch.no_grad()
def token_attention(
    model: Any, prompt: str | Sequence[int] | torch.Tensor, name: str | None = None
) -> TokenAttention:
    """The attention weights of every layer and head of ``model`` on ``prompt``: text
    (tokenised by the model's own tokenizer, with its BOS token where it prepends one) or
    token ids. ``model``: a hooked model with ``blocks.{l}.attn.hook_pattern`` (a
    TransformerLens ``TransformerBridge`` from
    :func:`~latentlens.pretrained.load_language_model`, or a latentlens model fed token
    ids)."""
    names = sorted(
        (n for n in model.hook_dict if n.startswith("blocks.") and n.endswith("attn.hook_pattern")),
        key=lambda n: int(n.split(".")[1]),
    )
    if not names:
        raise ValueError(f"a {type(model).__name__} has no blocks.{{l}}.attn.hook_pattern hooks")
    if isinstance(prompt, str):
        if getattr(model, "tokenizer", None) is None:
            raise ValueError("a text prompt needs the model's tokenizer; pass token ids instead")
        tokens = model.to_tokens(prompt)
    else:
        tokens = torch.as_tensor(prompt, dtype=torch.long).reshape(1, -1)
    if not 1 <= tokens.shape[1] <= MAX_TOKENS:
        raise ValueError(
            f"the prompt is {tokens.shape[1]} tokens long: give 1 to {MAX_TOKENS} (the page "
            "holds layers x heads x tokens² weights)"
        )
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        _, cache = model.run_with_cache(tokens.to(device), names_filter=lambda n: n in names)
    finally:
        model.train(was_training)
    patterns = torch.stack([cache[n][0] for n in names]).float().cpu()
    tokenizer = getattr(model, "tokenizer", None)
    ids = tokens[0].tolist()
    texts = token_texts(tokenizer, ids) if tokenizer is not None else tuple(map(str, ids))
    groups = _key_value_groups(model)
    label = name or getattr(getattr(model, "cfg", None), "model_name", None) or type(model).__name__
    return TokenAttention(label, texts, patterns, groups)


def token_texts(tokenizer: Any, ids: Sequence[int]) -> tuple[str, ...]:
    """The text of each token of ``ids``, joined the text the tokenizer decodes them to.

    A byte-level tokenizer splits a character of several UTF-8 bytes (é, 東, 🙂) over
    tokens, and each token decoded alone is U+FFFD. Here every prefix is decoded and each
    token is what its prefix adds once the prefix's unfinished character (its trailing
    U+FFFD) is set aside: the character goes to the token that completes it, and a token
    that only begins one is ``""``. Where a decoder rewrites earlier text (the prefix is no
    longer a prefix), that token's own decoding is used. Quadratic in the tokens, which
    :data:`MAX_TOKENS` bounds."""
    texts: list[str] = []
    done = ""
    for end in range(1, len(ids) + 1):
        text = tokenizer.decode(ids[:end])
        stable = text if end == len(ids) else text.rstrip("\ufffd")
        if stable.startswith(done):
            texts.append(stable[len(done) :])
            done = stable
        else:
            texts.append(tokenizer.decode(ids[end - 1 : end]))
            done = text
    return tuple(texts)


def _key_value_groups(model: Any) -> tuple[int, ...] | None:
    """Which key/value head each query head reads, under grouped-query attention only."""
    if not hasattr(model, "original_model"):
        return None
    from latentlens.pretrained.language_model import key_value_groups  # noqa: PLC0415

    groups = key_value_groups(model)
    return tuple(groups) if len(set(groups)) < len(groups) else None


def shown(weight: float) -> str:
    """A weight as the page shows it: rounded to its uint16 step, held as a float32 (the
    script's ``Float32Array``), three decimals."""
    clamped = min(max(float(weight), 0.0), 1.0)
    step = float(np.float32(np.rint(clamped * 65535) / 65535))
    return f"{step:.3f}"


def script_json(data: Any) -> str:
    """``data`` as JSON safe inside a ``<script>`` element of any type: every ``<``, ``>``
    and ``&`` written as its JSON escape, so no name or token can close the element or
    open an HTML comment in it (a model folder named ``m<!--<script>`` left the viewer
    empty: ``<!--`` then ``<script`` made the parser swallow the rest of the page)."""
    text = json.dumps(data)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def with_dictionary(view: TokenAttention, dictionary: dict[str, Any]) -> TokenAttention:
    """``view`` with the features of ``dictionary`` (:func:`~latentlens.probes.
    code_dictionary.code_dictionary`'s result) active on each of its pairs: the non-negative
    activations W that reconstruct every pair's code from the dictionary's parts H (its
    ``components``, held fixed), so hovering a pair names the features it uses."""
    from sklearn.decomposition import non_negative_factorization  # noqa: PLC0415

    parts = np.asarray(dictionary["components"], dtype=np.float64)
    layers, heads, queries, keys = view.patterns.shape
    if parts.shape[1] != layers * heads:
        raise ValueError(
            f"the dictionary's features span {parts.shape[1]} heads; the view has "
            f"{layers} x {heads}"
        )
    codes = view.patterns.permute(2, 3, 0, 1).reshape(queries * keys, -1).double().numpy()
    activations, _, _ = non_negative_factorization(
        codes, H=parts, n_components=len(parts), update_H=False, max_iter=500
    )
    names = tuple(feature["name"] for feature in dictionary["features"])
    return TokenAttention(
        view.model, view.tokens, view.patterns, view.key_value_groups, names,
        torch.from_numpy(activations).float().reshape(queries, keys, len(parts)),
    )  # fmt: skip


def _payload(view: TokenAttention) -> str:
    """The viewer's data as JSON, safe inside a <script> element."""
    layers, heads = view.patterns.shape[:2]
    quantised = np.rint(view.patterns.clamp(0, 1).numpy() * 65535).astype("<u2")
    data = {
        "model": view.model,
        "tokens": list(view.tokens),
        "layers": layers,
        "heads": heads,
        "key_value_groups": list(view.key_value_groups) if view.key_value_groups else None,
        "weights": base64.b64encode(quantised.tobytes()).decode(),
    }
    if view.features:
        activations = view.feature_activations.numpy()
        scale = float(max(activations.max(), 1e-12))
        data["features"] = list(view.features)
        data["feature_scale"] = scale
        data["feature_activations"] = base64.b64encode(
            np.rint(activations / scale * 65535).astype("<u2").tobytes()
        ).decode()
    return script_json(data)


class TokenViewer:
    """The viewer of a :class:`TokenAttention` (or of ``model`` on ``prompt``, through
    :func:`token_attention`). Shows itself in a notebook; :meth:`save` writes a page that
    opens offline; :meth:`html` is the element for a page that carries
    :data:`VIEWER_SCRIPT` once."""

    def __init__(self, view: TokenAttention) -> None:
        self.view = view
        self.element_id = f"llv-{uuid.uuid4().hex[:12]}"

    @classmethod
    def of(
        cls, model: Any, prompt: str | Sequence[int] | torch.Tensor, name: str | None = None
    ) -> TokenViewer:
        return cls(token_attention(model, prompt, name))

    def html(self, with_script: bool = False) -> str:
        """The viewer's element and data; ``with_script`` adds its style and script (a
        page with several viewers needs them once, after the last)."""
        parts = [
            f"<div class='llv' data-llv='{self.element_id}'></div>",
            f"<script type='application/json' id='{self.element_id}'>{_payload(self.view)}"
            "</script>",
        ]
        if with_script:
            parts += [f"<style>{VIEWER_STYLE}</style>", f"<script>{VIEWER_SCRIPT}</script>"]
        return "\n".join(parts)

    def _repr_html_(self) -> str:
        return self.html(with_script=True)

    def save(self, path: str | Path) -> Path:
        """A page of its own at ``path`` (``.html``), self-contained."""
        path = Path(path)
        page = (
            "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
            f"<title>{html.escape(self.view.model)}: attention</title></head><body>"
            f"{self.html(with_script=True)}</body></html>\n"
        )
        atomic_write_bytes(path, page.encode())
        return path
