"""`latentlens atlas` through the real entry point, on a tiny GPT-2 the test writes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from latentlens.pretrained import write_tiny_gpt2


def latentlens(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "latentlens", *args], capture_output=True,
                          text=True, timeout=600, env=env)  # fmt: skip


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory):
    return write_tiny_gpt2(tmp_path_factory.mktemp("gpt2"), vocab_size=64)


def test_atlas_writes_its_report(folder, tmp_path) -> None:
    out = tmp_path / "atlas"
    done = latentlens("atlas", str(folder), "--out", str(out), "--examples", "600",
                      "--device", "cpu")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "relation decoded from every code: ID" in done.stdout
    results = json.loads((out / "results.json").read_text())
    assert results["layers"] == 2 and results["heads"] == 4
    assert results["pairs"] == {"id": 400, "ood": 200}
    assert len(results["ablation"]) == 8
    dictionary = results["dictionary"]  # 8 codes of 2 layers x 4 heads: at most 8 parts
    assert len(dictionary["features"]) == 8 and 0 < dictionary["explained"] <= 1
    assert all(len(f["top_tokens"]) == 8 and " -> " in f["top_tokens"][0]
               for f in dictionary["features"])  # fmt: skip
    page = (out / "report.html").read_text()
    # four figures, each once: three static, the embedding interactive in its place
    assert page.count("<img src='data:image/png;base64,") == 3
    assert page.count("Plotly.newPlot") == 1 and "relation (interactive:" in page
    assert "Moving model to device" not in done.stdout  # no stray library prints
    markdown = (out / "report.md").read_text()
    assert "## A dictionary of codes" in markdown and "features are single heads" in markdown
    for figure in ("decoding_by_head", "relation_weights", "code_embedding", "head_ablation"):
        assert f"figures/{figure}.png" in markdown
        assert (out / "figures" / f"{figure}.png").is_file()


def test_atlas_refuses_bad_input_in_one_line(tmp_path, capsys) -> None:
    """In-process (the entry point is `main`; the test above runs the real command): each
    refusal is one line on stderr with exit code 2."""
    from latentlens.cli import main

    for args, message in (
        (["/no/such/model"], "no folder /no/such/model"),
        ([str(tmp_path)], "the folder holds no Hugging Face model"),
        (["gpt2"], "a hub name needs internet or the Hugging Face cache"),
        # #42: sizes are bounded before the model loads (10**18 pairs never returned)
        (["gpt2", "--examples", str(10**18)], "--examples 1000000000000000000 is invalid"),
        (["gpt2", "--seq-len", "0"], "--seq-len 0 is invalid: give an integer from 2 to 8192"),
        (["gpt2", "--induction-sequences", "1"], "--induction-sequences 1 is invalid"),
    ):
        code = main(["atlas", *args, "--out", str(tmp_path / "out"), "--device", "cpu"])
        err = capsys.readouterr().err
        assert code == 2 and message in err and "Traceback" not in err
        assert len(err.strip().splitlines()) == 1, err


def test_the_commands_sizes_default_to_the_librarys() -> None:
    """The parser holds its defaults as literals (building it imports no torch); each is
    run_atlas's own, so that `latentlens atlas` and the Python call compute the same atlas."""
    import inspect

    from latentlens.cli.main import build_parser
    from latentlens.reports.atlas import run_atlas

    parsed = build_parser().parse_args(["atlas", "gpt2"])
    library = inspect.signature(run_atlas).parameters
    for name in ("examples", "seq_len", "seed", "relation", "padding_side", "detector_stories",
                 "ablation_examples", "batch_size", "induction_sequences"):  # fmt: skip
        assert getattr(parsed, name) == library[name].default, name
