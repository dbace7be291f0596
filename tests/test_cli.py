"""The ``latentlens`` console command, through the installed entry point."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from latentlens.cli import main


def run_cli(*args: str) -> subprocess.CompletedProcess:
    exe = shutil.which("latentlens")
    command = [exe, *args] if exe else [sys.executable, "-m", "latentlens.cli", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


def test_help_through_the_console_script() -> None:
    result = run_cli("--help")
    assert result.returncode == 0
    assert "inspect" in result.stdout and "usage: latentlens" in result.stdout


def test_inspect_prints_reference_parameter_counts_and_hooks() -> None:
    result = run_cli("inspect", "--preset", "sraven", "--attention", "hyla", "--batch", "2")
    assert result.returncode == 0, result.stderr
    assert "402,824" in result.stdout
    assert "blocks.3.attn.hook_vnet_post        [2, 36, 36, 4]" in result.stdout


def test_inspect_all_variants_in_process(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", "--batch", "1", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert out.count("151,009") == 8


def test_bad_argument_gives_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", "--batch", "0"]) == 2
    assert "--batch=0 is invalid" in capsys.readouterr().err
