"""Every benchmark script imports: they are run by hand (and on a lent GPU), not by CI, so
a renamed library function would otherwise break them unnoticed."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPTS = sorted((Path(__file__).resolve().parents[1] / "benchmarks").glob("*.py"))


def test_the_benchmarks_are_found() -> None:
    assert {"train_throughput", "step_kernels", "reproduce"} <= {s.stem for s in SCRIPTS}


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda path: path.stem)
def test_benchmark_script_imports(script: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(script.parent))  # as `python benchmarks/X.py` has it
    spec = importlib.util.spec_from_file_location(f"benchmark_{script.stem}", script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # registered first, as an import does: a dataclass looks its module up in sys.modules
    # (parity.py's failed alone, and passed only where another test had imported it)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)  # runs the imports, not main(): __name__ is not __main__
    if 'if __name__ == "__main__":' in script.read_text():  # a script, not a helper module
        assert callable(getattr(module, "main", None)), f"{script.name} has no main()"


def test_every_script_is_in_the_index() -> None:
    """benchmarks/README.md names each script once: a newcomer finds which table it backs."""
    folder = SCRIPTS[0].parent
    index = (folder / "README.md").read_text()
    scripts = [p.name for p in folder.iterdir() if p.suffix in (".py", ".sh")]
    assert [name for name in scripts if f"`{name}`" not in index] == []
