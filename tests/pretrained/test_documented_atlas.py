"""Every `latentlens atlas` command the docs show on a real model (SmolLM2-135M, MiniLM),
run as written but at a small size, so that a documented command that fails fails CI
(#67: the natural-text atlas of docs/atlas/smollm2-135m crashed on its second batch).
Small: three batches of codes per split, two detector stories, four sequences for the
causal check of the induction heads (its seven forward passes of 32 took 90 of the 170
seconds each command took on a 2-core EPYC), and no per-head ablation table (on SmolLM2 its
270 forward passes take minutes on a CPU; the table is tested on tiny models). Skipped where
the models are not fetched, except under LATENTLENS_REQUIRE_REAL_MODELS=1 (.ci/run fetches
them and sets it)."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from latentlens.cli import main
from latentlens.pretrained.real_models import fetched

from .test_real_weights import REQUIRED

DOCS = Path(__file__).resolve().parents[2] / "docs"
COMMAND = re.compile(r"latentlens atlas (?:smollm2-135m|minilm-l6)[^`\n#]*")
SMALL = {
    "--examples": "120", "--batch-size": "16", "--detector-stories": "2",
    "--induction-sequences": "4",
}  # fmt: skip


def small(command: str) -> list[str]:
    """``command``'s arguments at :data:`SMALL`'s sizes (replacing or adding them), without
    the ablation table."""
    words = shlex.split(command)[1:]
    for option, value in SMALL.items():
        if option in words:
            words[words.index(option) + 1] = value
        else:
            words += [option, value]
    return words if "--no-ablation" in words else [*words, "--no-ablation"]


def documented_commands() -> list[str]:
    """The real-model atlas commands of docs/ (code blocks and inline code), one of each
    that :func:`small` makes the same."""
    found: dict[tuple[str, ...], str] = {}
    for page in sorted(DOCS.rglob("*.md")):
        if "report" in page.name:  # the reports the commands wrote, not the docs
            continue
        for match in COMMAND.findall(page.read_text()):
            found.setdefault(tuple(sorted(small(match.strip()))), match.strip())
    return sorted(found.values())


def test_the_docs_show_the_natural_text_atlas_of_both_real_models() -> None:
    commands = documented_commands()
    assert any("smollm2-135m --relation text" in c for c in commands), commands
    assert any("minilm-l6 --relation text" in c for c in commands), commands


@pytest.mark.parametrize("command", documented_commands())
def test_a_documented_atlas_command_runs(command: str, tmp_path: Path, capsys) -> None:
    model = shlex.split(command)[2]
    if not fetched(model):
        message = f"{model} is not fetched: run `latentlens models fetch {model}`"
        if REQUIRED:
            pytest.fail(message)
        pytest.skip(message)
    arguments = [*small(command), "--out", str(tmp_path), "--device", "cpu"]
    assert main(arguments) == 0, capsys.readouterr().err
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["decoding"][0]["permutations"] == 20
    if "induction_ablation" in results:  # causal models: the check ran at the size asked
        assert results["induction_ablation"]["sequences"] == 4
    assert (tmp_path / "report.html").is_file()
