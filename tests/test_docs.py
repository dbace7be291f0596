"""The documentation: a short README whose links resolve, and the docs site built strictly
(a broken link, a missing API reference or a failing notebook fails the build)."""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def test_the_readme_is_a_quick_start_of_at_most_150_lines() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= 150, f"README.md has {len(lines)} lines: move the detail to docs/"


def test_every_relative_link_of_the_readme_resolves() -> None:
    targets = re.findall(r"\]\(([^)#\s]+)[^)]*\)", README.read_text())
    local = [t for t in targets if "://" not in t]
    assert local, "the README links to its guides"
    missing = [t for t in local if not (ROOT / t).exists()]
    assert not missing, f"README.md links to missing files: {missing}"


PROGRESS = re.compile(r"\d+%\|")


def notebook_stderr(page: str) -> list[str]:
    """The lines a rendered notebook page shows as stderr output (nbconvert marks them with
    the stderr MIME type), tags stripped."""
    blocks = re.findall(
        r'data-mime-type="application/vnd\.jupyter\.stderr"[^>]*>\s*<pre>(.*?)</pre>', page, re.S
    )
    text = "\n".join(html.unescape(re.sub(r"<[^>]+>", "", block)) for block in blocks)
    lines: list[str] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        # a progress bar is one line however often it redrew (that depends on the load)
        if PROGRESS.search(line) and lines and PROGRESS.search(lines[-1]):
            lines[-1] = line
        else:
            lines.append(line)
    return lines


def test_notebook_stderr_is_read_from_a_rendered_page() -> None:
    page = (
        '<div class="jp-RenderedText" data-mime-type="application/vnd.jupyter.stderr">'
        "<pre>a &amp; b\n<span>warn</span>\n 12%|█ | 1/8\n100%|███| 8/8\n</pre></div>"
        '<div data-mime-type="text/plain"><pre>not this</pre></div>'
    )
    assert notebook_stderr(page) == ["a & b", "warn", "100%|███| 8/8"]


def test_the_docs_site_builds_strictly_with_notebooks_and_api_reference(tmp_path) -> None:
    exe = shutil.which("mkdocs")
    command = [exe] if exe else [sys.executable, "-m", "mkdocs"]
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run([*command, "build", "--strict", "-d", str(site)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=900)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    reference = (site / "reference" / "pretrained" / "index.html").read_text()
    assert "insert_bridge" in reference  # the API reference comes from the docstrings
    sraven = (site / "notebooks" / "02_sraven_latent_codes" / "index.html").read_text()
    assert "Plotly.newPlot" in sraven  # the embedding stays interactive
    pages = sorted((site / "notebooks").glob("*/index.html"))
    # every notebook executes here, and only here (allow_errors: false fails the build)
    assert [page.parent.name for page in pages] == sorted(
        notebook.stem for notebook in (ROOT / "notebooks").glob("*.ipynb")
    )
    for page in pages:
        stderr = notebook_stderr(page.read_text())
        # a few lines at most (TransformerLens's own patching bar in notebook 04), never a
        # warning: progress bars once filled pages with hundreds of red lines
        assert len(stderr) <= 4 and not any("Warning" in line for line in stderr), (
            page.parent.name,
            stderr[:10],
        )
    assert (site / "figures" / "fuzzy-logic-sweep.png").is_file()


# Files a user does not have: the project's specification lives outside the repository.
OUTSIDE = re.compile(
    r"reference/(?:hyla|icl_hyperteacher|fusion_gca)\.md|\.\./shared|shared/(?:DESIGN|reference)"
    r"|reference section \d"
)
CITABLE = (".py", ".md", ".ipynb", ".yml", ".toml")


def tracked_text_files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    if listed.returncode != 0:  # not a git checkout (an sdist): every file below the root
        return [p for p in ROOT.rglob("*") if p.suffix in CITABLE and ".git" not in p.parts]
    return [ROOT / name for name in listed.stdout.split() if name.endswith(CITABLE)]


def test_nothing_cites_a_file_outside_the_repository() -> None:
    """Equations, protocols and published numbers are cited from docs/methods/, which
    ships with the code; a citation of the off-repository specification is a dead end."""
    this = Path(__file__).resolve()
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()[:80]}"
        for path in tracked_text_files()
        if path.resolve() != this
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        if OUTSIDE.search(line)
    ]
    assert not found, "cite docs/methods/ instead:\n" + "\n".join(found)


def test_every_methods_page_a_file_cites_exists() -> None:
    cited = {
        match
        for path in tracked_text_files()
        for match in re.findall(r"docs/methods/[\w-]+\.md", path.read_text(errors="replace"))
    }
    assert cited, "the code cites its methods pages"
    missing = sorted(page for page in cited if not (ROOT / page).is_file())
    assert not missing, f"cited methods pages that do not exist: {missing}"


NUMBER_WORDS = ["no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]


def test_getting_started_counts_and_lists_every_notebook() -> None:
    notebooks = sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb"))
    guide = (ROOT / "docs" / "getting-started.md").read_text()
    said = re.search(r"`notebooks/` holds (\w+) notebooks", guide)
    assert said and said.group(1) == NUMBER_WORDS[len(notebooks)], "update the count"
    assert [n for n in notebooks if f"`{n}`" not in guide] == []


def test_no_notebook_types_the_demos_step_count() -> None:
    """Facts that change with the code are printed by it, not typed: a step count in the
    prose beside the demo went stale once (2,000 typed, 3,000 trained)."""
    for path in (ROOT / "notebooks").glob("*.ipynb"):
        cells = json.loads(path.read_text())["cells"]
        prose = "".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
        typed = re.findall(r"latentlens demo`?:? [\d,]+ steps", prose)
        assert not typed, f"{path.name} types the demo's steps: {typed}"
