"""``latentlens sweep --fused``: each cell trains with the fused CPU kernels, as
``train --fused`` does; refused with seed groups or off the CPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from latentlens.cli import main
from latentlens.sweep import SweepSpec, run_sweep
from latentlens.sweep.run import train_cell
from latentlens.training import trainer as trainer_module
from tests.sweep.test_sweep import BASE


def test_a_fused_cell_trains_with_the_kernels(tmp_path: Path, monkeypatch) -> None:
    switched = []
    original = trainer_module.use_fused_kernels_on_cpu
    monkeypatch.setattr(trainer_module, "use_fused_kernels_on_cpu",
                        lambda model, device: switched.append(original(model, device)))  # fmt: skip
    spec = SweepSpec.from_dict({"task": "fuzzy-logic", "base": BASE, "axes": {"train.seed": [0]}})
    cell = spec.cells()[0]
    result = train_cell(str(tmp_path / cell.name), cell.config, "cpu", None, fused=True)
    assert switched == [None] and result["finished"]


def test_fused_sweeps_are_refused_with_seed_groups_or_a_gpu(tmp_path: Path, capsys) -> None:
    spec = SweepSpec.from_dict({"task": "fuzzy-logic", "base": BASE, "axes": {"train.seed": [0]}})
    for options in ({"group_seeds": True}, {"device": "cuda"}):
        with pytest.raises(ValueError, match="--fused trains each cell alone on a CPU core"):
            run_sweep(spec, tmp_path / "out", fused=True, **options)
    assert not (tmp_path / "out").exists()
    path = tmp_path / "spec.json"
    path.write_text(json.dumps({"task": "fuzzy-logic", "base": BASE, "axes": {"train.seed": [0]}}))
    assert main(["sweep", str(path), "--fused", "--seeds", "--out", str(tmp_path / "o")]) == 2
    assert "drop --seeds" in capsys.readouterr().err
