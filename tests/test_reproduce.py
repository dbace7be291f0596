"""benchmarks/reproduce.py end to end at the tiny size: every number it writes is measured."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "reproduce.py"


@pytest.fixture(scope="module")
def reproduce():
    spec = importlib.util.spec_from_file_location("reproduce", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["reproduce"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_tiny_reproduction_writes_the_measured_numbers(tmp_path: Path, reproduce) -> None:
    results = tmp_path / "RESULTS.md"
    args = ["--size", "tiny", "--seeds", "1", "--device", "cpu", "--out", str(tmp_path / "runs")]
    reproduce.main([*args, "--results", str(results)])
    text = results.read_text()
    assert "## Fuzzy logic" in text and "python benchmarks/reproduce.py --size tiny" in text
    for variant in ("softmax", "linear", "hyla"):
        run = tmp_path / "runs" / "fuzzy-logic" / f"{variant}-frac0.5-s0"
        measured = reproduce.final_r2(run)
        row = next(
            line
            for line in text.splitlines()
            if line.startswith(f"| {reproduce.VARIANTS[variant]} |")
        )
        assert f"| {measured['test']:.3f} |" in row and f"| {measured['ood']:.3f} |" in row
    # a second call reuses the finished runs and writes the same tables
    reproduce.main([*args, "--results", str(tmp_path / "again.md")])

    def tables(markdown: str) -> list[str]:
        return [line for line in markdown.splitlines() if line.startswith("|")]

    assert tables((tmp_path / "again.md").read_text()) == tables(text)
    assert len(tables(text)) == 2 * (2 + 3)  # two tables: header, rule, three variants


def test_bad_arguments(reproduce) -> None:
    with pytest.raises(SystemExit):
        reproduce.main(["--seeds", "0"])
    with pytest.raises(SystemExit):
        reproduce.main(["--only", "chess"])
