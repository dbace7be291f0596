"""The README's Python examples run as written and say what they compute: documentation
that drifts from the API is a defect a reader meets first."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def check_model_example(names: dict[str, Any]) -> None:
    """The shapes its comments state; the head ablation changes the output."""
    assert names["codes"].shape == (32, 16, 16, 8)  # [batch, query, key, head]
    assert names["last_self_code"].shape == (32, 8)
    assert names["ablated"].shape == names["out"].shape
    assert not torch.allclose(names["ablated"], names["out"])


def check_tasks_example(names: dict[str, Any]) -> None:
    """The fuzzy-logic shapes and the SRAVEN split sizes its comments state."""
    logic_batch = names["logic"].sample(128, split="test")
    assert logic_batch.inputs.shape == (128, 16, 5)
    assert logic_batch.labels["term_bits"].shape == (128, 2, 4)
    split = names["raven"].describe()
    assert len(split["in_distribution_multisets"]) + len(split["ood_multisets"]) == 330
    assert len(split["ood_multisets"]) == 82
    assert len(names["batch"]) == 128


# Per block: the names it must define, and the check of what it says they hold.
CHECKS: list[tuple[set[str], Callable[[dict[str, Any]], None]]] = [
    ({"model", "codes", "last_self_code", "out", "ablated"}, check_model_example),
    ({"logic", "raven", "batch"}, check_tasks_example),
]


def test_every_readme_example_has_its_check() -> None:
    assert len(BLOCKS) == len(CHECKS), "a README python block was added or removed: check it"


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_python_example_runs(
    index: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # anything an example writes stays out of the checkout
    names: dict[str, Any] = {}
    exec(compile(BLOCKS[index], f"README.md, python example {index + 1}", "exec"), names)
    defined, check = CHECKS[index]
    missing = defined - names.keys()
    assert not missing, f"README python example {index + 1} no longer defines {sorted(missing)}"
    check(names)


def test_ci_runs_the_readme_quick_start_and_the_docs_repeat_it() -> None:
    """.ci/run executes the lines .ci/readme_quick_start.py reads from the README, which
    are the quick-start block; getting-started shows the same block, with the CPU pin."""
    import subprocess
    import sys

    root = README.parent
    printed = subprocess.run(
        [sys.executable, str(root / ".ci/readme_quick_start.py"), str(README)],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    block = re.search(r"## Quick start\n\n```bash\n(.*?)```", README.read_text(), flags=re.S)
    assert block and printed == block.group(1).strip()
    assert "torch==2.13.0" in printed.splitlines()[0]  # a CPU machine gets the CPU build
    assert "pytest" in printed.splitlines()  # CI runs the tests from this block
    assert "readme_quick_start.py README.md" in (root / ".ci/run").read_text()
    guide = (root / "docs/getting-started.md").read_text()
    assert f"```bash\n{printed}\n```" in guide


def test_readme_quick_start_extraction_names_the_file_without_a_block(tmp_path: Path) -> None:
    import subprocess
    import sys

    bad = tmp_path / "README.md"
    bad.write_text("# x\n\n## Quick start\n\nno block\n\n## Next\n")
    done = subprocess.run(
        [sys.executable, str(README.parent / ".ci/readme_quick_start.py"), str(bad)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 1 and str(bad) in done.stderr and "Traceback" not in done.stderr
