"""No section of docs/RESULTS.md is silently stale: each names the commit whose code
measured it, and where the code that decides what a run computes
(``reproduction.runs.NUMERIC_SOURCES``, compared without docstrings and comments) has
changed since, the section must say so in a ``**Stale:**`` line, which goes once it is
regenerated. A reviewed change that computes the same (a presentation attribute) is
recorded in docs/results_reviews.json (``{section title: [{"commit", "note"}]}``, or in
the section as ``Reviewed unchanged in effect at commit X``) and counts from X."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from reproduction.runs import NUMERIC_SOURCES  # noqa: E402

RESULTS = ROOT / "docs" / "RESULTS.md"
REVIEWS = ROOT / "docs" / "results_reviews.json"
MEASURED = re.compile(r"Code: commit ([0-9a-f]{7,40})")
REVIEWED = re.compile(r"Reviewed unchanged in effect at commit ([0-9a-f]{7,40})")


def sections() -> dict[str, str]:
    parts = RESULTS.read_text().split("\n## ")[1:]
    return {part.splitlines()[0]: part for part in parts}


def reviews() -> dict[str, list[dict[str, str]]]:
    """Each section's reviews, oldest first (the file's)."""
    return json.loads(REVIEWS.read_text())


def git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout


def code_of(text: str) -> str:
    """A module's syntax tree without its docstrings (comments are not in it)."""
    tree = ast.parse(text)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(body, list) and body and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):  # fmt: skip
            node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree)


def changed_since(commit: str) -> list[str]:
    """The numeric sources whose code differs between ``commit`` and the working tree."""
    listed = git("ls-tree", "-r", "--name-only", commit, "--", *NUMERIC_SOURCES).split()
    then = {f for f in listed if f.endswith(".py")}
    now = {str(p.relative_to(ROOT)) for s in NUMERIC_SOURCES for p in
           ([ROOT / s] if s.endswith(".py") else (ROOT / s).rglob("*.py"))}  # fmt: skip
    changed = sorted(then ^ now)
    for name in sorted(then & now):
        if code_of(git("show", f"{commit}:{name}")) != code_of((ROOT / name).read_text()):
            changed.append(name)
    return changed


@pytest.mark.parametrize("title", list(sections()))
def test_no_results_section_is_silently_stale(title: str) -> None:
    text = sections()[title]
    recorded = [review["commit"] for review in reviews().get(title, [])]
    found = recorded or REVIEWED.findall(text) or MEASURED.findall(text)
    assert found, f"RESULTS section {title!r} names no 'Code: commit' that measured it"
    baseline = found[-1]
    try:
        git("cat-file", "-e", f"{baseline}^{{commit}}")
    except (OSError, subprocess.CalledProcessError):
        pytest.skip(f"commit {baseline} is not in this checkout (a shallow clone)")
    changed = changed_since(baseline)
    stale = "**Stale:**" in text
    assert bool(changed) == stale, (
        f"RESULTS section {title!r} was measured at {baseline}; since then {changed} changed: "
        "regenerate it (or mark it **Stale:**)"
        if changed
        else f"RESULTS section {title!r} says **Stale:** but no numeric source changed since "
        f"{baseline}: remove the line"
    )


def test_the_guard_sees_code_changes_and_not_docstrings() -> None:
    assert code_of('def f():\n    """one"""\n    return 1  # a\n') == code_of(
        'def f():\n    """two"""\n    return 1  # b\n'
    )
    assert code_of("def f():\n    return 1\n") != code_of("def f():\n    return 2\n")
    try:  # the initialisation fix changed what a run computes
        assert "latentlens/models/init.py" in changed_since("6ba4c21~1")
    except subprocess.CalledProcessError:
        pytest.skip("6ba4c21 is not in this checkout (a shallow clone)")


def test_every_review_names_a_section_of_the_results() -> None:
    """A review recorded for a section that is no longer there (renamed) would be lost."""
    assert set(reviews()) <= set(sections())
    for title, entries in reviews().items():
        assert all(MEASURED.pattern and len(e["commit"]) >= 7 and e["note"] for e in entries), title


def test_no_page_names_a_path_of_one_machine() -> None:
    """Commands in the docs name a user's paths (~/latentlens-runs/...), never the root
    home or the checkout of the machine that ran them."""
    pages = [ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]
    pattern = re.compile(r"(?<![\w.~])/(root|home/\w+|work)/")
    found = [f"{page.relative_to(ROOT)}: {m.group(0)}" for page in pages
             for m in pattern.finditer(page.read_text())]  # fmt: skip
    assert not found, found
