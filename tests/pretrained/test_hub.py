"""Offline, a hub name fails at once with the named error, not after the hub's retries."""

from __future__ import annotations

import os
import time

import pytest
from huggingface_hub import constants

from latentlens.pretrained import hub
from latentlens.pretrained.language_model import load_language_model


@pytest.fixture
def online_mode(monkeypatch):
    """Offline mode off, as on a user's machine (the suite itself runs offline)."""
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)


def test_an_unreachable_hub_turns_on_offline_mode_while_loading(online_mode, monkeypatch):
    monkeypatch.setattr(hub, "hub_reachable", lambda: False)
    with hub.offline_unless_reachable("some-org/some-model"):
        assert constants.HF_HUB_OFFLINE and os.environ["HF_HUB_OFFLINE"] == "1"
    assert not constants.HF_HUB_OFFLINE and "HF_HUB_OFFLINE" not in os.environ


def test_a_reachable_hub_or_a_folder_is_left_as_configured(online_mode, monkeypatch, tmp_path):
    monkeypatch.setattr(hub, "hub_reachable", lambda: True)
    with hub.offline_unless_reachable("some-org/some-model"):
        assert not constants.HF_HUB_OFFLINE
    monkeypatch.setattr(hub, "hub_reachable", lambda: pytest.fail("a folder needs no hub"))
    with hub.offline_unless_reachable(tmp_path):
        assert not constants.HF_HUB_OFFLINE


def test_a_hub_name_offline_is_refused_without_retries(online_mode, monkeypatch):
    monkeypatch.setattr(hub, "hub_reachable", lambda: False)
    start = time.perf_counter()
    with pytest.raises(ValueError, match="a hub name needs internet or the Hugging Face cache"):
        load_language_model("bogus-org/bogus-model", device="cpu")
    # the hub's own retries wait 1 + 2 + 4 + 8 + 8 s before the same error
    assert time.perf_counter() - start < 15


def test_an_unresolvable_endpoint_is_unreachable(monkeypatch):
    monkeypatch.setattr(constants, "ENDPOINT", "https://no-such-host.invalid")
    assert not hub.hub_reachable(timeout=1.0)
