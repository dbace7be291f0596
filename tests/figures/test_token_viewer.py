"""The token-level attention viewer: its weights are the model's attention weights, its
page is self-contained, and in headless Chromium hovering a token shows each head's
pattern over the keys, hovering a key the pair's code over layers and heads."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

from latentlens.figures.token_viewer import (
    MAX_TOKENS,
    TokenAttention,
    TokenViewer,
    shown,
    token_texts,
    with_dictionary,
)
from latentlens.pretrained import load_language_model
from latentlens.reports.report import Section, write_report

from ..browser import chromium, page  # noqa: F401 (fixtures)
from ..pretrained.tiny_models import write_tiny_llama

# Two float32 computations of the same attention weights (the bridge's hooks, transformers'
# eager path) in a different order; and the page's uint16 steps, half of 1/65535 at most.
ROUNDING = 1e-5
QUANTUM = 0.5 / 65535


def synthetic(layers: int = 3, heads: int = 4, tokens: int = 6, seed: int = 0) -> TokenAttention:
    """Causal attention weights: each row a random distribution over the keys up to it."""
    generator = torch.Generator().manual_seed(seed)
    scores = torch.randn(layers, heads, tokens, tokens, generator=generator)
    causal = torch.ones(tokens, tokens, dtype=torch.bool).tril()
    patterns = scores.masked_fill(~causal, float("-inf")).softmax(-1)
    words = tuple(f" w{i}" for i in range(tokens))
    return TokenAttention("synthetic", words, patterns, key_value_groups=(0, 0, 1, 1))


def page_weights(viewer: TokenViewer) -> np.ndarray:
    """The weights a viewer's page carries, decoded as its script decodes them."""
    found = re.search(r"<script type='application/json' id='[^']+'>(.*?)</script>", viewer.html())
    data = json.loads(found.group(1))
    raw = np.frombuffer(base64.b64decode(data["weights"]), dtype="<u2") / 65535
    return raw.reshape(data["layers"], data["heads"], len(data["tokens"]), -1)


def byte_level_tokenizer() -> PreTrainedTokenizerFast:
    """A byte-level BPE (SmolLM2's and GPT-2's kind) trained on ASCII alone: every byte of
    a character outside ASCII is a token of its own."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tokenizer.train_from_iterator(["the cafe is open", "the naive farmer"] * 20, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer)


def test_characters_split_over_tokens_are_kept_whole() -> None:
    """Decoded one by one, the byte tokens of é, 東 and 🙂 are U+FFFD each; the viewer's
    texts give each character to the token that completes it and join to the text."""
    tokenizer = byte_level_tokenizer()
    text = "the café 東京 is open 🙂!"
    ids = tokenizer(text)["input_ids"]
    assert "\ufffd" in "".join(tokenizer.decode([i]) for i in ids)  # the bug it replaces
    texts = token_texts(tokenizer, ids)
    assert "".join(texts) == text and len(texts) == len(ids)
    assert "\ufffd" not in "".join(texts)
    assert texts.count("") == (2 - 1) + 2 * (3 - 1) + (4 - 1)  # é, 東, 京, 🙂's leading bytes
    for given in ("a \ufffd b", "ends in \ufffd"):  # a U+FFFD of the text's own is kept
        assert "".join(token_texts(tokenizer, tokenizer(given)["input_ids"])) == given


def test_token_attention_is_transformers_attention_under_grouped_query_heads(
    tmp_path: Path,
) -> None:
    folder = write_tiny_llama(tmp_path / "llama", heads=4, kv_heads=2)
    bridge = load_language_model(str(folder), device="cpu")
    prompt = "The old farmer carried a heavy basket . The old farmer carried"
    viewer = TokenViewer.of(bridge, prompt, name="tiny llama")
    reference = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager").eval()
    tokens = bridge.to_tokens(prompt)
    with torch.no_grad():
        attentions = reference(input_ids=tokens, output_attentions=True).attentions
    expected = torch.stack([a[0] for a in attentions])
    torch.testing.assert_close(viewer.view.patterns, expected, atol=ROUNDING, rtol=0)
    assert viewer.view.tokens[0] == "<s>" and len(viewer.view.tokens) == tokens.shape[1]
    assert viewer.view.key_value_groups == (0, 0, 1, 1)
    torch.testing.assert_close(viewer.view.code(7, 3), expected[:, :, 7, 3])
    np.testing.assert_allclose(page_weights(viewer), expected.numpy(), atol=QUANTUM + 1e-7)


def test_bad_prompts_and_shapes_are_one_line_errors(tmp_path: Path) -> None:
    folder = write_tiny_llama(tmp_path / "llama")
    bridge = load_language_model(str(folder), device="cpu")
    with pytest.raises(ValueError, match=f"give 1 to {MAX_TOKENS}"):
        TokenViewer.of(bridge, list(range(5)) * 40)
    view = synthetic()
    with pytest.raises(ValueError, match=r"expected \[layer, head, query, key\]"):
        TokenAttention("x", view.tokens, view.patterns[0])
    with pytest.raises(ValueError, match="for 5 tokens"):
        TokenAttention("x", view.tokens[:5], view.patterns)
    with pytest.raises(ValueError, match="names 3 heads"):
        TokenAttention("x", view.tokens, view.patterns, key_value_groups=(0, 0, 1))


def test_hovering_a_token_shows_its_heads_patterns_and_a_key_the_code(
    tmp_path: Path,
    page,  # noqa: F811
) -> None:
    view = synthetic()
    layers, heads, n, _ = view.patterns.shape
    path = TokenViewer(view).save(tmp_path / "viewer.html")
    page.goto(path.as_uri())
    assert page.locator(".llv-pattern-table").count() == 0  # nothing hovered yet
    assert "hover a token" in page.inner_text(".llv-status")

    query = 4
    page.hover(f".llv-token[data-position='{query}']")
    assert "query 4 '·w4'" in page.inner_text(".llv-status")
    rows = page.locator(".llv-pattern-table tr")
    assert rows.count() == 1 + heads  # the key tokens, then a row per head
    assert page.inner_text(".llv-pattern-table tr:nth-child(2) th") == "h0 (kv0)"
    titles = page.locator(".llv-cell").evaluate_all("cells => cells.map(c => c.title)")
    last = layers - 1  # the viewer opens on the last layer
    expected = [
        f"h{h} (kv{h // 2}), key {k}: {shown(view.patterns[last, h, query, k])}"
        for h in range(heads)
        for k in range(n)
    ]
    assert titles == expected

    page.select_option(".llv-layer", "1")  # another layer: the same query, its patterns
    titles = page.locator(".llv-cell").evaluate_all("cells => cells.map(c => c.title)")
    assert titles[n + 2].endswith(shown(view.patterns[1, 1, query, 2]))

    key = 2
    page.hover(f".llv-cell[data-key='{key}'] >> nth=0")
    assert "a(l, h, q=4, k=2)" in page.inner_text(".llv-code-title")
    values = page.locator(".llv-value").evaluate_all("cells => cells.map(c => c.textContent)")
    assert values == [shown(v) for v in view.code(query, key).flatten().tolist()]

    page.click(".llv-token[data-position='5']")  # hold query 5, then hover a key token
    page.hover(".llv-token[data-position='1']")
    assert "query 5" in page.inner_text(".llv-status")
    assert "a(l, h, q=5, k=1)" in page.inner_text(".llv-code-title")
    assert page.errors == []


def test_a_report_carries_the_script_once_and_draws_every_viewer(
    tmp_path: Path,
    page,  # noqa: F811
) -> None:
    first, second = TokenViewer(synthetic(seed=1)), TokenViewer(synthetic(layers=2, seed=2))
    markdown, html = write_report(
        tmp_path, "viewers",
        [Section("one", viewers=[(first, "first")]), Section("two", viewers=[(second, "second")])],
    )  # fmt: skip
    text = html.read_text()
    assert text.count("window.latentlensTokenViewer = {") == 1
    assert "src=" not in text  # nothing loaded from elsewhere: it opens offline
    assert "*first: interactive, in report.html*" in markdown.read_text()
    page.goto(html.as_uri())
    assert page.locator("div.llv").count() == 2
    assert page.locator("div.llv >> nth=1").locator("option").count() == 2
    page.hover("div.llv >> nth=1 >> .llv-token[data-position='3']")
    assert page.locator("div.llv >> nth=1").locator(".llv-pattern-table").count() == 1
    assert page.locator("div.llv >> nth=0").locator(".llv-pattern-table").count() == 0
    assert page.errors == []


def test_names_and_tokens_that_look_like_html_leave_the_page_whole(
    tmp_path: Path,
    page,  # noqa: F811
) -> None:
    """Round three (#71): a model folder named m<!--<script> left the viewer empty (0
    tokens drawn): its name, written raw into the page's JSON script, opened a comment the
    parser read to the end of the page."""
    base = synthetic()
    tokens = ("<!--", "<script>", "</script>", "&amp;", " a", " b")
    view = TokenAttention("m<!--<script>", tokens, base.patterns, base.key_value_groups)
    path = TokenViewer(view).save(tmp_path / "viewer.html")
    page.goto(path.as_uri())
    assert page.locator(".llv-token").count() == 6
    assert page.locator(".llv-token").all_inner_texts()[:4] == ["<!--", "<script>", "</script>",
                                                                 "&amp;"]  # fmt: skip


def page_overflow(page) -> int:  # noqa: F811
    """How far the page is wider than its viewport (px; 0 when it fits)."""
    return page.evaluate("document.documentElement.scrollWidth - window.innerWidth")


def test_a_long_prompt_wraps_and_the_page_stays_as_wide_as_the_window(
    tmp_path: Path,
    page,  # noqa: F811
) -> None:
    """#67: the token row of a 60-token story was 2,282 px wide, so the page scrolled
    sideways and hovering a late token scrolled the report out of view."""
    view = synthetic(layers=2, heads=4, tokens=MAX_TOKENS)
    words = tuple(f" word{i:03d}" for i in range(MAX_TOKENS))
    viewer = TokenViewer(TokenAttention("long", words, view.patterns, view.key_value_groups))
    page.set_viewport_size({"width": 900, "height": 800})
    page.goto(viewer.save(tmp_path / "viewer.html").as_uri())
    assert page_overflow(page) <= 0
    row = page.locator(".llv-tokens").bounding_box()
    token = page.locator(".llv-token >> nth=0").bounding_box()
    assert row["width"] <= 900 and row["height"] > 4 * token["height"]  # several lines
    page.hover(f".llv-token[data-position='{MAX_TOKENS - 1}']")  # a late token
    assert page.locator(".llv-pattern-table tr").count() == 1 + 4
    assert page_overflow(page) <= 0  # the wide pattern scrolls inside its own box
    scroll = page.locator(".llv-pattern").evaluate("e => [e.scrollWidth, e.clientWidth]")
    assert scroll[0] > scroll[1]
    assert page.errors == []


def test_the_dictionarys_features_are_named_on_hover(
    tmp_path: Path,
    page,  # noqa: F811
) -> None:
    """#67: a pair's code decomposed over a dictionary's parts; hovering the pair lists its
    strongest features. Codes built from two parts are recovered exactly."""
    layers, heads, n = 2, 3, 6
    parts = torch.zeros(2, layers * heads, dtype=torch.float64)
    parts[0, 0] = 1.0  # L0H0 alone
    parts[1, [2, 4, 5]] = 1.0  # L0H2, L1H1 and L1H2 together
    generator = torch.Generator().manual_seed(0)
    weights = torch.rand(n, n, 2, generator=generator, dtype=torch.float64)
    weights[1, 0] = torch.tensor([0.0, 0.4])  # query 1 on key 0: the shared part alone
    codes = weights @ parts  # [query, key, layer x head]
    patterns = codes.reshape(n, n, layers, heads).permute(2, 3, 0, 1).float()
    view = TokenAttention("dict", tuple(f" t{i}" for i in range(n)), patterns)
    names = [{"name": "#0 single (L0H0)"}, {"name": "#1 shared (L0H2)"}]
    dictionary = {"components": parts.tolist(), "features": names}
    shown_view = with_dictionary(view, dictionary)
    torch.testing.assert_close(shown_view.feature_activations.double(), weights, atol=2e-3, rtol=0)
    page.goto(TokenViewer(shown_view).save(tmp_path / "viewer.html").as_uri())
    page.hover(".llv-token[data-position='1']")
    page.hover(".llv-cell[data-key='0'] >> nth=0")
    listed = page.inner_text(".llv-features")
    assert listed == "dictionary features of this code: #1 shared (L0H2) 0.400"
    with pytest.raises(ValueError, match="feature_activations must be \\[6, 6, 2\\]"):
        TokenAttention("x", view.tokens, patterns, None, ("a", "b"), torch.zeros(6, 6, 3))
    assert page.errors == []
