"""Progress bars: a text bar in a terminal, none in a kernel without ipywidgets (tqdm's text
fallback would print a line per update into the cell, after a warning)."""

from __future__ import annotations

import importlib.util
import warnings

import pytest

from latentlens import progress


def test_a_script_gets_a_text_bar() -> None:
    assert not progress.in_notebook()
    with progress.progress_bar(total=3, disable=False) as bar:
        assert not bar.disable and type(bar).__module__ == "tqdm.std"


def test_a_kernel_without_ipywidgets_gets_no_bar_and_no_warning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(progress, "in_notebook", lambda: True)
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "ipywidgets" else real(name)
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # tqdm's TqdmWarning would fail here
        bar = progress.progress_bar(total=3, disable=False)
    assert bar.disable
    bar.close()
