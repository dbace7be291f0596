"""`latentlens sweep --address` against a real two-node Ray cluster, started as a user
starts one: `ray start --head`, then a second node joined with `ray start --address`,
token authentication on (Ray's default for a cluster). Both nodes run on this machine, one
CPU each, in their own temporary folder, and are stopped by killing their processes alone
(`ray stop` would stop every Ray on the machine, other tests' too)."""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from latentlens.training import RunDirectory

from .test_sweep import BASE

RAY = Path(sys.executable).parent / "ray"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def two_node_cluster() -> Iterator[tuple[str, dict[str, str]]]:
    """The address of a running two-node cluster and the environment that reaches it."""
    if not RAY.is_file():
        pytest.skip("the ray command is not installed (pip install 'latentlens[sweep]')")
    # a short folder: Ray's socket paths under it must fit in 107 characters
    temp = Path(tempfile.mkdtemp(prefix="ray", dir="/tmp"))
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
    address = f"127.0.0.1:{free_port()}"
    common = ["--num-cpus", "1", "--temp-dir", str(temp), "--disable-usage-stats"]
    try:
        for command in (
            [str(RAY), "start", "--head", "--port", address.split(":")[1],
             "--include-dashboard", "false", *common],
            [str(RAY), "start", "--address", address, *common],
        ):  # fmt: skip
            done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
            assert done.returncode == 0, done.stderr[-2000:]
        yield address, env
    finally:
        subprocess.run(["pkill", "-9", "-f", str(temp)], check=False)
        subprocess.run(["rm", "-rf", str(temp)], check=False)


def test_a_sweep_runs_on_a_two_node_cluster_through_address(
    tmp_path: Path, two_node_cluster: tuple[str, dict[str, str]]
) -> None:
    address, env = two_node_cluster
    alive = (
        f"import json, ray; ray.init(address={address!r}, log_to_driver=False); "
        "print(json.dumps([n['Resources'].get('CPU') for n in ray.nodes() if n['Alive']]))"
    )
    nodes = subprocess.run(
        [sys.executable, "-c", alive], env=env, capture_output=True, text=True, timeout=300
    )
    assert json.loads(nodes.stdout.strip().splitlines()[-1]) == [1.0, 1.0], nodes.stderr[-2000:]
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"task": "fuzzy-logic", "base": BASE,
                                "axes": {"model.attention": ["softmax", "hyla"]}}))  # fmt: skip
    out = tmp_path / "sweep"
    sweep = subprocess.run(
        [sys.executable, "-m", "latentlens", "sweep", str(spec), "--out", str(out),
         "--address", address],
        env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert sweep.returncode == 0, sweep.stderr[-2000:]
    assert "2 cells: 2 done, 0 failed, 0 not finished" in sweep.stdout
    for name in ("attention=softmax", "attention=hyla"):
        assert RunDirectory(out / name).read_metrics()[-1]["step"] == BASE["train"]["steps"]
