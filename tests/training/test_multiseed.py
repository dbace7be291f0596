"""Several seeds trained at once (SeedGroup): each seed as its own run would train,
exact group resume, clear errors, and the ``--seeds`` CLI."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from latentlens.cli import main
from latentlens.training import (
    RunDirectory,
    SeedGroup,
    TrainConfig,
    Trainer,
    list_checkpoints,
    model_for_task,
    seed_configs,
    train_group_or_resume,
)


def assert_same_metrics(a: dict[str, Any], b: dict[str, Any], rel: float, abs: float) -> None:
    """Two metrics rows agree: the same keys, numbers within the tolerances, every other
    field (the split's name) exactly. pytest.approx refuses a dict holding a string."""
    assert a.keys() == b.keys()
    for key, value in a.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            assert value == pytest.approx(b[key], rel=rel, abs=abs), key
        else:
            assert value == b[key], key


needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

TINY = dict(d_model=16, n_heads=4, qk_dim=8, v_dim=8, d_mlp=32)
TASKS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "fuzzy-logic": ({}, {**TINY, "attention": "hyla"}),
    "sraven": ({"num_features": 2, "num_values": 5}, {**TINY, "n_layers": 2}),
    "modular-icl": ({}, {}),
    "translation": ({}, dict(d_model=16, n_heads=2, qk_dim=16, v_dim=16, d_mlp=32,
                             n_layers_encoder=2, n_layers_decoder=2)),
}  # fmt: skip


def tiny_config(
    task: str, dropout: float = 0.0, steps: int = 30, track: tuple[str, ...] = ()
) -> dict[str, Any]:
    task_config, model = TASKS[task]
    if task != "translation":
        model = {**model, "attention_dropout": dropout}
    return Trainer.resolve_config(
        task,
        model_for_task(task, task_config, **model),
        TrainConfig.for_task(
            task,
            steps=steps,
            batch_size=16,
            warmup_steps=5,
            eval_every=15,
            eval_examples=32,
            track=track,
        ),  # fmt: skip
        task_config,
    )


@pytest.mark.parametrize("task", sorted(TASKS))
def test_each_seed_trains_as_its_own_run_would(task: str, tmp_path: Path) -> None:
    configs = seed_configs(tiny_config(task, track=("*blocks.0.attn.hook_pattern",)), [0, 1])
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
            # order (measured differences <= 2.4e-7 on values of order 1, 7.2e-7 relative on
            # an untrained fuzzy-logic R² of -20, where float32 rounding scales with it, and
            # 5.4e-6 relative on modular ICL's untrained R² of -3.5 after 30 steps: 2.0e-6
            # with PyTorch's own softmax backward, whose rows summed in another order)
            assert_same_metrics(a, b, rel=1e-5, abs=1e-5)
        # --track's recorder, from the initialisation (step 0) on, as the run alone records
        tracked = sorted((tmp_path / f"g{seed}/tracking").glob("*.safetensors"))
        assert tracked, "the --track recorder wrote nothing"
        for path in tracked:
            grouped_file = load_file(str(path))
            alone_file = load_file(str(tmp_path / f"single{seed}/tracking" / path.name))
            assert grouped_file["steps"].tolist() == alone_file["steps"].tolist() == [0, 15, 30]
            grouped_values, alone_values = grouped_file["values"], alone_file["values"]
            torch.testing.assert_close(grouped_values, alone_values, atol=1e-5, rtol=0)
            assert torch.equal(grouped_values[0], alone_values[0])  # the same initialisation
        if task == "fuzzy-logic":
            for (name, p), (_, q) in zip(group.trainers[seed].model.named_parameters(),
                                         single.model.named_parameters(), strict=True):  # fmt: skip
                torch.testing.assert_close(p, q, atol=1e-5, rtol=0, msg=name)


def trained_group(tmp_path: Path, seeds: list[int]) -> tuple[list, list[Path], list, list]:
    """A finished two-seed group: its configs, runs, final weights and metrics."""
    configs = seed_configs(tiny_config("fuzzy-logic", dropout=0.1), seeds)
    runs = [tmp_path / "a", tmp_path / "b"]
    group = SeedGroup.create(runs, configs, device="cpu", quiet=True)
    group.train(quiet=True)
    ended = [{k: v.clone() for k, v in t.model.state_dict().items()} for t in group.trainers]
    return configs, runs, ended, [RunDirectory(run).read_metrics() for run in runs]


def test_a_group_resumed_from_its_checkpoints_ends_bit_for_bit(tmp_path: Path) -> None:
    _, runs, ended, metrics = trained_group(tmp_path, [3, 4])
    for run in runs:  # as if killed between the evaluations at steps 15 and 30
        list_checkpoints(RunDirectory(run).checkpoints)[-1][1].unlink()
    resumed = SeedGroup.resume(runs, device="cpu", quiet=True)
    assert resumed.step == 15
    resumed.train(quiet=True)
    for trainer, weights, before, run in zip(resumed.trainers, ended, metrics, runs, strict=True):
        for name, value in trainer.model.state_dict().items():
            assert torch.equal(value, weights[name]), name
        assert RunDirectory(run).read_metrics() == before


def test_a_group_killed_between_its_seeds_checkpoint_writes_resumes_bit_for_bit(
    tmp_path: Path,
) -> None:
    # #42 item 4: seed a wrote its step-30 checkpoint, seed b did not. The group resume was
    # refused, and the advised one-by-one resumes did not end where the group would have.
    configs, runs, ended, metrics = trained_group(tmp_path, [7, 8])
    list_checkpoints(RunDirectory(runs[1]).checkpoints)[-1][1].unlink()
    paths = train_group_or_resume(runs, configs, device="cpu", quiet=True)  # what the CLI does
    assert paths == runs
    for run, weights, before in zip(runs, ended, metrics, strict=True):
        trainer = Trainer.load(run, device="cpu")
        for name, value in trainer.model.state_dict().items():
            assert torch.equal(value, weights[name]), name
        assert RunDirectory(run).read_metrics() == before
    # with no checkpoint in common, the group says so and leaves the runs for one-by-one
    for run, dropped in zip(runs, (slice(0, -1), slice(-1, None)), strict=True):
        for _, path in list_checkpoints(RunDirectory(run).checkpoints)[dropped]:
            path.unlink()  # a holds only its newest, b all but its newest
    with pytest.raises(ValueError, match="hold no checkpoint in common; resume them one by"):
        SeedGroup.resume(runs, device="cpu", quiet=True)


def test_bad_groups_give_clear_errors_and_write_nothing(tmp_path: Path) -> None:
    config = tiny_config("fuzzy-logic")
    with pytest.raises(ValueError, match="distinct seeds"):
        seed_configs(config, [1, 1])
    other = {**config, "train": {**config["train"], "lr": 0.5, "seed": 1}}
    with pytest.raises(ValueError, match="differ in more than train.seed"):
        SeedGroup.create([tmp_path / "x", tmp_path / "y"], [config, other], device="cpu")
    runs = [tmp_path / "p", tmp_path / "q"]
    with pytest.raises(ValueError, match="--cuda-graphs .* needs a CUDA device"):
        SeedGroup.create(runs, seed_configs(config, [0, 1]), device="cpu", cuda_graphs=True)
    assert not any(run.exists() for run in runs)
    Trainer.create(runs[1], config, device="cpu")
    with pytest.raises(ValueError, match="already hold runs"):
        SeedGroup.create(runs, seed_configs(config, [0, 1]), device="cpu")
    assert not runs[0].exists()


def test_a_refused_group_resume_leaves_the_runs_untouched(tmp_path: Path) -> None:
    runs = [tmp_path / "a", tmp_path / "b"]
    SeedGroup.create(runs, seed_configs(tiny_config("sraven"), [0, 1]), device="cpu",
                     quiet=True).train(quiet=True)  # fmt: skip
    for run in runs:  # killed between the evaluations at steps 15 and 30
        list_checkpoints(RunDirectory(run).checkpoints)[-1][1].unlink()
    before = [RunDirectory(run).metrics_path.read_bytes() for run in runs]
    with pytest.raises(ValueError, match="--cuda-graphs .* needs a CUDA device"):
        SeedGroup.resume(runs, device="cpu", cuda_graphs=True)
    assert [RunDirectory(run).metrics_path.read_bytes() for run in runs] == before


def group_of(task: str, seeds: list[int], **options: Any) -> SeedGroup:
    configs = seed_configs(tiny_config(task), seeds)
    return SeedGroup([Trainer(None, c, device="cuda", quiet=True) for c in configs], **options)


@needs_cuda
@pytest.mark.parametrize("task", ["fuzzy-logic", "sraven", "translation"])
@pytest.mark.parametrize(
    "options", [dict(cuda_graphs=True), dict(compile=True), dict(compile=True, cuda_graphs=True)]
)
def test_a_graphed_or_compiled_group_steps_as_the_eager_group(task: str, options: dict) -> None:
    """Capture and replay (and inductor's kernels) compute the eager group's steps: same
    batches (each seed's generator advances in the graph), losses and weights."""
    eager, fast = group_of(task, [0, 1]), group_of(task, [0, 1], **options)
    eager_losses = torch.stack([eager.train_step() for _ in range(12)])
    fast_losses = torch.stack([fast.train_step() for _ in range(12)])
    if options.get("cuda_graphs"):
        assert fast.graphed is not None and fast.graphed.graph is not None
    # compile may fuse and reorder float sums: its tolerance is the single run's
    tolerance = dict(rtol=1e-3, atol=1e-4) if options.get("compile") else dict(rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(fast_losses, eager_losses, **tolerance)
    softmax = eager.trainers[0].config["model"].get("attention") == "softmax"
    for name, stacked in eager.params.items():
        if options.get("compile") and softmax and name.endswith("attn.b_K"):
            # its gradient is 0 up to rounding (it shifts all of a query's scores alike),
            # which AdamW's normalised step turns into lr-sized moves on either path
            continue
        torch.testing.assert_close(fast.params[name], stacked, **tolerance, msg=name)
    eager.sync()
    fast.sync()  # the evaluation machinery still reads each seed's model
    torch.testing.assert_close(
        fast.trainers[1].evaluate("train", examples=32)["loss"],
        eager.trainers[1].evaluate("train", examples=32)["loss"],
        **tolerance,
    )


@needs_cuda
def test_a_graphed_group_resumed_ends_as_an_uninterrupted_one(tmp_path: Path) -> None:
    configs = seed_configs(tiny_config("fuzzy-logic", dropout=0.1), [3, 4])
    runs = [tmp_path / "a", tmp_path / "b"]
    SeedGroup.create(runs, configs, device="cuda", quiet=True, cuda_graphs=True).train(True)
    metrics = [RunDirectory(run).read_metrics() for run in runs]
    for run in runs:
        list_checkpoints(RunDirectory(run).checkpoints)[-1][1].unlink()
    resumed = SeedGroup.resume(runs, device="cuda", quiet=True, cuda_graphs=True)
    resumed.train(quiet=True)
    for run, before in zip(runs, metrics, strict=True):
        after = RunDirectory(run).read_metrics()
        assert [(r["step"], r["split"]) for r in after] == [(r["step"], r["split"]) for r in before]
        for a, b in zip(after, before, strict=True):
            assert_same_metrics(a, b, rel=1e-5, abs=1e-6)


def test_the_cli_trains_and_resumes_seeds_together(tmp_path: Path, capsys) -> None:
    base = tmp_path / "sweep"
    flags = ["--task", "fuzzy-logic", "--attention", "linear", "--d-model", "16", "--steps",
             "20", "--eval-every", "10", "--eval-examples", "32", "--tracking-examples", "256",
             "--batch-size", "16", "--device", "cpu", "--quiet"]  # fmt: skip
    assert main(["train", *flags, "--seeds", "0", "5", "--run-dir", str(base)]) == 0
    out = capsys.readouterr().out
    for seed in (0, 5):
        run = RunDirectory(f"{base}-s{seed}")
        assert run.read_config()["train"]["seed"] == seed
        assert {r["step"] for r in run.read_metrics()} == {0, 10, 20}
        assert f"run directory: {run.path}" in out
    assert "mean ± std over 2 seeds" in out
    summary = out[out.index("mean ± std over 2 seeds") :]
    assert main(["train", "--resume", f"{base}-s0", f"{base}-s5", "--device", "cpu"]) == 0
    # eval of the seeds' runs ends with the same summary (same checkpoints, same eval draws)
    capsys.readouterr()
    assert main(["eval", f"{base}-s0", f"{base}-s5", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert out.count("checkpoint step 20") == 2 and out.endswith(summary)
    assert main(["eval", f"{base}-s0", str(tmp_path / "missing"), "--device", "cpu"]) == 2
    assert "missing is not a run directory" in capsys.readouterr().err
    assert main(["train", *flags, "--seeds", "1", "2", "--seed", "3"]) == 2
    assert "drop --seed" in capsys.readouterr().err
    refused = ["train", *flags, "--seeds", "1", "2", "--cuda-graphs", "--run-dir", str(base)]
    assert main(refused) == 2
    assert "--cuda-graphs captures the whole step" in capsys.readouterr().err
    assert not Path(f"{base}-s1").exists()
