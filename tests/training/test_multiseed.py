"""Several seeds trained at once (SeedGroup): each seed as its own run would train,
exact group resume, clear errors, and the ``--seeds`` CLI."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from latentlens.cli import main
from latentlens.training import (
    RunDirectory,
    SeedGroup,
    TrainConfig,
    Trainer,
    list_checkpoints,
    model_for_task,
    seed_configs,
)

TINY = dict(d_model=16, n_heads=4, qk_dim=8, v_dim=8, d_mlp=32)
TASKS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "fuzzy-logic": ({}, {**TINY, "attention": "hyla"}),
    "sraven": ({"num_features": 2, "num_values": 5}, {**TINY, "n_layers": 2}),
    "modular-icl": ({}, {}),
    "translation": ({}, dict(d_model=16, n_heads=2, qk_dim=16, v_dim=16, d_mlp=32,
                             n_layers_encoder=2, n_layers_decoder=2)),
}  # fmt: skip


def tiny_config(task: str, dropout: float = 0.0, steps: int = 30) -> dict[str, Any]:
    task_config, model = TASKS[task]
    if task != "translation":
        model = {**model, "attention_dropout": dropout}
    return Trainer.resolve_config(
        task,
        model_for_task(task, task_config, **model),
        TrainConfig.for_task(
            task, steps=steps, batch_size=16, warmup_steps=5, eval_every=15, eval_examples=32
        ),  # fmt: skip
        task_config,
    )


@pytest.mark.parametrize("task", sorted(TASKS))
def test_each_seed_trains_as_its_own_run_would(task: str, tmp_path: Path) -> None:
    configs = seed_configs(tiny_config(task), [0, 1])
    group = SeedGroup.create([tmp_path / "g0", tmp_path / "g1"], configs, device="cpu", quiet=True)
    group.train(quiet=True)
    for seed, config in enumerate(configs):
        single = Trainer.create(tmp_path / f"single{seed}", config, device="cpu", quiet=True)
        single.train()
        grouped = RunDirectory(tmp_path / f"g{seed}").read_metrics()
        alone = RunDirectory(tmp_path / f"single{seed}").read_metrics()
        assert [(r["step"], r["split"]) for r in grouped] == [
            (r["step"], r["split"]) for r in alone
        ]
        for a, b in zip(grouped, alone, strict=True):
            # the same data, init and updates; vmapped kernels only sum floats in another
            # order (measured differences <= 2.4e-7)
            assert a == pytest.approx(b, abs=1e-5)
        if task == "fuzzy-logic":
            for (name, p), (_, q) in zip(group.trainers[seed].model.named_parameters(),
                                         single.model.named_parameters(), strict=True):  # fmt: skip
                torch.testing.assert_close(p, q, atol=1e-5, rtol=0, msg=name)


def test_a_group_resumed_from_its_checkpoints_ends_bit_for_bit(tmp_path: Path) -> None:
    configs = seed_configs(tiny_config("fuzzy-logic", dropout=0.1), [3, 4])
    runs = [tmp_path / "a", tmp_path / "b"]
    group = SeedGroup.create(runs, configs, device="cpu", quiet=True)
    group.train(quiet=True)
    ended = [{k: v.clone() for k, v in t.model.state_dict().items()} for t in group.trainers]
    metrics = [RunDirectory(run).read_metrics() for run in runs]
    for run in runs:  # as if killed between the evaluations at steps 15 and 30
        list_checkpoints(RunDirectory(run).checkpoints)[-1][1].unlink()
    resumed = SeedGroup.resume(runs, device="cpu", quiet=True)
    assert resumed.step == 15
    resumed.train(quiet=True)
    for trainer, weights, before, run in zip(resumed.trainers, ended, metrics, runs, strict=True):
        for name, value in trainer.model.state_dict().items():
            assert torch.equal(value, weights[name]), name
        assert RunDirectory(run).read_metrics() == before


def test_bad_groups_give_clear_errors_and_write_nothing(tmp_path: Path) -> None:
    config = tiny_config("fuzzy-logic")
    with pytest.raises(ValueError, match="distinct seeds"):
        seed_configs(config, [1, 1])
    other = {**config, "train": {**config["train"], "lr": 0.5, "seed": 1}}
    with pytest.raises(ValueError, match="differ in more than train.seed"):
        SeedGroup.create([tmp_path / "x", tmp_path / "y"], [config, other], device="cpu")
    runs = [tmp_path / "p", tmp_path / "q"]
    with pytest.raises(ValueError, match="drop --compile and --cuda-graphs"):
        SeedGroup.create(runs, seed_configs(config, [0, 1]), device="cpu", cuda_graphs=True)
    assert not any(run.exists() for run in runs)
    Trainer.create(runs[1], config, device="cpu")
    with pytest.raises(ValueError, match="already hold runs"):
        SeedGroup.create(runs, seed_configs(config, [0, 1]), device="cpu")
    assert not runs[0].exists()


def test_the_cli_trains_and_resumes_seeds_together(tmp_path: Path, capsys) -> None:
    base = tmp_path / "sweep"
    flags = ["--task", "fuzzy-logic", "--attention", "linear", "--d-model", "16", "--steps",
             "20", "--eval-every", "10", "--eval-examples", "32", "--batch-size", "16",
             "--device", "cpu", "--quiet"]  # fmt: skip
    assert main(["train", *flags, "--seeds", "0", "5", "--run-dir", str(base)]) == 0
    out = capsys.readouterr().out
    for seed in (0, 5):
        run = RunDirectory(f"{base}-s{seed}")
        assert run.read_config()["train"]["seed"] == seed
        assert {r["step"] for r in run.read_metrics()} == {10, 20}
        assert f"run directory: {run.path}" in out
    assert main(["train", "--resume", f"{base}-s0", f"{base}-s5", "--device", "cpu"]) == 0
    assert main(["train", *flags, "--seeds", "1", "2", "--seed", "3"]) == 2
    assert "drop --seed" in capsys.readouterr().err
