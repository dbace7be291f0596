"""Trainer: learning, exact resume after SIGKILL, NaN stop, corrupt checkpoints, schedule."""

from __future__ import annotations

import hashlib
import math
import shutil
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from latentlens.cli import main
from latentlens.figures import load_tracked
from latentlens.models import TransformerConfig
from latentlens.training import (
    ActivationRecorder,
    Callback,
    CheckpointError,
    TrainConfig,
    Trainer,
    TrainingDiverged,
    list_checkpoints,
    load_checkpoint,
    model_for_task,
    precision_scope,
    train_or_resume,
    weight_decay_groups,
)
from latentlens.training.loop import NO_BAD_STEP, first_nonfinite

TINY_MODEL = dict(d_model=32, n_heads=4, qk_dim=8, v_dim=8, d_mlp=64, n_layers=2)
TINY_FLAGS = ["--d-model", "32", "--n-heads", "4", "--qk-dim", "8", "--v-dim", "8",
              "--d-mlp", "64", "--batch-size", "32", "--eval-examples", "64",
              "--tracking-examples", "256", "--warmup-steps", "5"]  # fmt: skip


def tiny_config(steps: int = 40, attention: str = "softmax", **train) -> dict:
    return Trainer.resolve_config(
        "fuzzy-logic",
        TransformerConfig.preset("fuzzy-logic", attention=attention, **TINY_MODEL),
        TrainConfig.for_task(
            "fuzzy-logic",
            steps=steps,
            eval_every=20,
            batch_size=32,
            eval_examples=64,
            tracking_examples=256,
            warmup_steps=5,
            **train,
        ),
    )


def digest(directory: Path) -> dict[str, str]:
    """The run's files by content; not ``.lock``, whose holder record (PID, host, the
    second it was taken) every writer rewrites, a refused one too: the test once failed
    when a refused resume's second differed from the last writer's."""
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.rglob("*"))
        if p.is_file() and p.name != ".lock"
    }


def learning_config(**train) -> dict:
    """The fuzzy-logic learning test's config (d_model 64, 600 steps of batch 64, lr 3e-3)."""
    return Trainer.resolve_config(
        "fuzzy-logic",
        TransformerConfig.preset("fuzzy-logic", d_model=64, d_mlp=128, attention_dropout=0.0),
        TrainConfig.for_task(
            "fuzzy-logic",
            steps=600,
            eval_every=600,
            batch_size=64,
            warmup_steps=50,
            eval_examples=512,
            lr=3e-3,
            **train,
        ),
    )


def test_fuzzy_logic_model_learns(tmp_path: Path) -> None:
    config = learning_config()
    trainer = Trainer.create(tmp_path / "run", config, quiet=True)
    before = trainer.evaluate("train")["r2"]
    records = trainer.train()
    after = next(r for r in records if r["split"] == "train")["r2"]
    # seeded: a fresh model is worse than predicting the mean (R² < 0); 600 steps reach ~0.33
    assert before < 0.0
    assert after > 0.2


def test_sraven_model_learns_below_chance(tmp_path: Path) -> None:
    task = {"num_features": 2, "num_values": 4}
    config = Trainer.resolve_config(
        "sraven",
        model_for_task(
            "sraven",
            task,
            d_model=64,
            n_heads=4,
            qk_dim=16,
            v_dim=16,
            d_mlp=128,
            attention_dropout=0.0,
        ),  # fmt: skip
        TrainConfig.for_task(
            "sraven",
            steps=1000,
            eval_every=1000,
            batch_size=64,
            warmup_steps=20,
            eval_examples=512,
            lr=3e-3,
        ),
        task,
    )
    records = Trainer.create(tmp_path / "run", config, quiet=True).train()
    train = next(r for r in records if r["split"] == "train")
    chance = math.log(4)  # uniform logits over 4 values
    # seeded: 1000 steps reach a loss of ~1.16 (0.84 of chance) and ~46% of features right
    assert train["loss"] < 0.9 * chance
    assert train["feature_accuracy"] > 0.35  # chance 0.25


def test_model_for_task_sizes_the_model_to_the_task_config() -> None:
    task = {"num_features": 2, "num_values": 4}
    cfg = model_for_task("sraven", task, d_model=64)
    assert (cfg.n_ctx, cfg.d_input, cfg.d_output, cfg.d_model) == (18, 4, 4, 64)
    with pytest.raises(ValueError, match="model.n_ctx=36 but the task needs 18"):
        Trainer.resolve_config("sraven", model_for_task("sraven"), TrainConfig(), task)


def test_bf16_autocast_trains_and_keeps_fp32_weights(tmp_path: Path) -> None:
    """bf16 runs the matmuls in bfloat16 (CPU autocast here, CUDA the same code path)."""
    config = tiny_config(steps=40, precision="bf16")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # this CPU's bf16 may be emulated (next test)
        trainer = Trainer.create(tmp_path / "run", config, quiet=True)
    with trainer.precision_scope():
        assert trainer.model(trainer.task.sample(2).inputs).dtype == torch.bfloat16
    before = trainer.evaluate("train")["loss"]
    records = trainer.train()
    after = next(r for r in records if r["split"] == "train")["loss"]
    assert all(p.dtype == torch.float32 for p in trainer.model.parameters())
    assert math.isfinite(after) and after < 0.8 * before


@pytest.mark.parametrize("native", [True, False])
def test_bf16_on_a_cpu_without_bfloat16_arithmetic_warns(native: bool, monkeypatch) -> None:
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: native)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        Trainer(None, tiny_config(precision="bf16"), device="cpu", quiet=True)
        Trainer(None, tiny_config(), device="cpu", quiet=True)  # fp32: never
    emulated = [w for w in caught if "no bfloat16 arithmetic" in str(w.message)]
    assert len(emulated) == (0 if native else 1)


def test_tf32_scope_sets_and_restores_the_matmul_precision() -> None:
    """tf32 asks for TF32 matmuls on CUDA only, and restores the process's setting on
    exit, an exception included (the setting is process-wide: a notebook keeps its own)."""
    previous = torch.get_float32_matmul_precision()
    seen = {}
    for device in ("cuda", "cpu"):
        with precision_scope("tf32", torch.device(device), graphed=False):
            seen[device] = torch.get_float32_matmul_precision()
        assert torch.get_float32_matmul_precision() == previous
    assert seen == {"cuda": "high", "cpu": previous}
    with pytest.raises(KeyError), precision_scope("tf32", torch.device("cuda"), graphed=False):
        raise KeyError("inside")
    assert torch.get_float32_matmul_precision() == previous


def test_tf32_on_the_cpu_is_strict_float32(tmp_path: Path) -> None:
    """On the CPU a tf32 run computes the fp32 run's losses and weights bit for bit."""
    runs = {}
    for precision in ("fp32", "tf32"):
        trainer = Trainer.create(
            tmp_path / precision, tiny_config(steps=10, precision=precision), quiet=True
        )
        losses = [float(trainer.train_step()) for _ in range(10)]
        runs[precision] = (losses, trainer.model.state_dict())
    assert runs["tf32"][0] == runs["fp32"][0]
    for name, weight in runs["fp32"][1].items():
        assert torch.equal(runs["tf32"][1][name], weight), name


def test_schedule_warms_up_then_decays_to_a_tenth() -> None:
    cfg = TrainConfig(steps=1000, warmup_steps=100, lr=1e-3)
    assert cfg.learning_rate(0) == 0.0
    assert cfg.learning_rate(50) == pytest.approx(5e-4)
    assert cfg.learning_rate(100) == pytest.approx(1e-3)
    assert cfg.learning_rate(500) == pytest.approx(
        1e-4 + 0.9e-3 * 0.5 * (1 + math.cos(math.pi * 0.5))
    )
    assert cfg.learning_rate(900) == pytest.approx(1e-4)
    assert cfg.learning_rate(999) == pytest.approx(1e-4)


def test_weight_decay_skips_one_dimensional_parameters() -> None:
    from latentlens.models import DecoderTransformer

    model = DecoderTransformer(TransformerConfig.preset("fuzzy-logic"))
    decay, no_decay = weight_decay_groups(model, 0.1)
    names = {id(p): n for n, p in model.named_parameters()}
    decayed = {names[id(p)] for p in decay["params"]}
    assert "blocks.0.attn.b_Q" in decayed and "blocks.0.attn.rel_pos.table" in decayed
    assert not {names[id(p)] for p in no_decay["params"]} & decayed
    assert "blocks.0.attn.b_O" in {names[id(p)] for p in no_decay["params"]}


def run_cli(*args: str) -> subprocess.Popen:
    exe = shutil.which("latentlens")
    command = [exe] if exe else [sys.executable, "-m", "latentlens.cli"]
    return subprocess.Popen(
        [*command, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def test_sigkill_then_resume_equals_an_uninterrupted_run(tmp_path: Path) -> None:
    flags = [
        "train",
        "--task",
        "fuzzy-logic",
        "--attention",
        "hyla",
        "--steps",
        "200",
        "--eval-every",
        "20",
        "--quiet",
        "--device",
        "cpu",
        *TINY_FLAGS,
        "--track",
        "blocks.*.attn.hook_pattern",
    ]
    whole = run_cli(*flags, "--run-dir", str(tmp_path / "whole"))
    _, err = whole.communicate(timeout=300)
    assert whole.returncode == 0, err

    killed_dir = tmp_path / "killed"
    victim = run_cli(*flags, "--run-dir", str(killed_dir))
    deadline = time.time() + 300
    while not list_checkpoints(killed_dir / "checkpoints") and time.time() < deadline:
        time.sleep(0.02)
    time.sleep(0.3)
    victim.send_signal(signal.SIGKILL)
    victim.communicate(timeout=60)
    assert victim.returncode == -signal.SIGKILL, "the run finished before it could be killed"
    interrupted_at = list_checkpoints(killed_dir / "checkpoints")[-1][0]
    assert interrupted_at < 200

    resumed = run_cli("train", "--resume", str(killed_dir), "--quiet", "--device", "cpu")
    _, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, err
    assert (killed_dir / "metrics.jsonl").read_text() == (
        tmp_path / "whole/metrics.jsonl"
    ).read_text()
    final_a = load_file(str(list_checkpoints(tmp_path / "whole/checkpoints")[-1][1]))
    final_b = load_file(str(list_checkpoints(killed_dir / "checkpoints")[-1][1]))
    assert final_a.keys() == final_b.keys()
    for key in final_a:
        assert torch.equal(final_a[key], final_b[key]), key
    for layer in (0, 1):  # the --track recorder, rebuilt from the stored config, too
        name = f"tracking/blocks.{layer}.attn.hook_pattern.safetensors"
        tracked_a, tracked_b = (
            load_file(str(tmp_path / "whole" / name)),
            load_file(str(killed_dir / name)),
        )
        assert tracked_a["steps"].tolist() == list(range(0, 201, 20))  # from the initialisation
        assert all(torch.equal(tracked_a[k], tracked_b[k]) for k in ("steps", "values"))


def test_ctrl_c_stops_with_the_newest_checkpoint_and_how_to_resume(tmp_path: Path) -> None:
    run = tmp_path / "run"
    flags = ["train", "--steps", "100000", "--eval-every", "20", "--quiet", "--device", "cpu",
             *TINY_FLAGS, "--run-dir", str(run)]  # fmt: skip
    exe = shutil.which("latentlens")
    victim = subprocess.Popen(
        [*([exe] if exe else [sys.executable, "-m", "latentlens.cli"]), *flags],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # SIGINT's default handling (Python's KeyboardInterrupt), even where this test's
        # own process inherited it ignored (a background job of a shell)
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.time() + 300
    while len(list_checkpoints(run / "checkpoints")) < 2 and time.time() < deadline:
        time.sleep(0.02)
    victim.send_signal(signal.SIGINT)
    _, err = victim.communicate(timeout=60)
    newest = list_checkpoints(run / "checkpoints")[-1][0]
    assert victim.returncode == 130, err
    assert err.startswith("latentlens train: interrupted at step ") and "Traceback" not in err
    assert f"the newest checkpoint of {run} is step {newest}" in err
    assert f"`latentlens train --resume {run}` continues" in err


class PoisonWeights(Callback):
    def __init__(self, at_step: int) -> None:
        self.at_step = at_step

    def on_step(self, trainer, step, loss) -> None:
        if step == self.at_step:
            with torch.no_grad():
                trainer.model.unembed.weight.fill_(float("nan"))


def test_nan_loss_stops_with_step_and_last_good_checkpoint(tmp_path: Path) -> None:
    trainer = Trainer.create(
        tmp_path / "run", tiny_config(steps=60), quiet=True, callbacks=[PoisonWeights(at_step=30)]
    )
    with pytest.raises(
        TrainingDiverged, match=r"at step 31 became NaN.*is step 20 \(.*step_00000020"
    ):
        trainer.train()
    assert [s for s, _ in list_checkpoints(tmp_path / "run/checkpoints")] == [20]


def test_the_first_nonfinite_loss_of_a_window_is_found() -> None:
    """The loop checks its losses every LOG_EVERY steps at once: the step of the first NaN
    or infinity among them (by the obvious loop), else NO_BAD_STEP."""
    cases = [[0.5, 0.4, 0.3], [0.5, float("inf"), float("nan")], [float("nan"), 0.1],
             [0.2, 0.1, float("-inf")], [0.2]]  # fmt: skip
    for losses in cases:
        slow = next((26 + i for i, x in enumerate(losses) if not math.isfinite(x)), NO_BAD_STEP)
        found = first_nonfinite(torch.tensor(losses), first_step=26)
        assert found.ndim == 0 and int(found) == slow, losses
    # a seed group's losses [steps, seeds]: each run's own first bad step
    group = torch.tensor([[0.5, 0.5, 0.5], [float("nan"), 0.4, 0.4], [0.3, float("inf"), 0.3]])
    assert first_nonfinite(group, first_step=26).tolist() == [27, 28, NO_BAD_STEP]


def test_a_damaged_checkpoint_is_skipped_for_the_newest_good_one(tmp_path: Path) -> None:
    Trainer.create(tmp_path / "run", tiny_config(steps=40), quiet=True).train()
    (_, older), (_, newest) = list_checkpoints(tmp_path / "run/checkpoints")
    data = bytearray(newest.read_bytes())
    data[-5] ^= 0x01  # one flipped bit in the tensor data, past the header
    newest.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"step_00000040\.safetensors fails its checksum"):
        load_checkpoint(newest)
    with pytest.warns(UserWarning, match=r"skipped .*step_00000040.*; resuming from step 20"):
        trainer = Trainer.resume(tmp_path / "run", quiet=True)
    assert trainer.step == 20
    trainer.close()
    older.write_bytes(older.read_bytes()[:100])
    before = digest(tmp_path / "run")
    with pytest.raises(CheckpointError, match=r"no checkpoint in .* can be resumed: .*is corrupt"):
        Trainer.resume(tmp_path / "run", quiet=True)
    assert digest(tmp_path / "run") == before


def test_checkpoint_metadata_must_agree_with_its_file(tmp_path: Path) -> None:
    Trainer.create(tmp_path / "run", tiny_config(steps=20), quiet=True).train()
    ((_, path),) = list_checkpoints(tmp_path / "run/checkpoints")
    moved = path.with_name("step_00000030.safetensors")
    path.rename(moved)
    with pytest.raises(CheckpointError, match=r"says it is step 20, not the step of its file"):
        load_checkpoint(moved)


def test_missing_checkpoint_and_occupied_run_dir(tmp_path: Path) -> None:
    Trainer.create(tmp_path / "run", tiny_config(), quiet=True).close()
    with pytest.raises(ValueError, match="killed before its first checkpoint"):
        Trainer.create(tmp_path / "run", tiny_config(), quiet=True)
    Trainer.resume(tmp_path / "run", quiet=True).train()  # from step 0
    with pytest.raises(ValueError, match="already holds a run"):
        Trainer.create(tmp_path / "run", tiny_config(), quiet=True)
    with pytest.raises(ValueError, match="not a run directory"):
        Trainer.resume(tmp_path / "nothing", quiet=True)


def test_recorder_tracks_mean_attention_pattern(tmp_path: Path) -> None:
    recorder = ActivationRecorder(["blocks.0.attn.hook_pattern"], examples=16)
    Trainer.create(
        tmp_path / "run", tiny_config(steps=40), quiet=True, callbacks=[recorder]
    ).train()
    stored = load_file(str(tmp_path / "run/tracking/blocks.0.attn.hook_pattern.safetensors"))
    assert stored["steps"].tolist() == [0, 20, 40]  # the initialisation, then each evaluation
    assert stored["values"].shape == (3, 4, 16, 16)
    torch.testing.assert_close(stored["values"].sum(-1), torch.ones(3, 4, 16))  # softmax rows
    tracked = load_tracked(tmp_path / "run/tracking/blocks.0.attn.hook_pattern.safetensors")
    assert tracked.axes == ("head", "query", "key")  # the hook's axes, less the batch mean's


def test_recorder_names_the_axes_of_a_custom_reduction(tmp_path: Path) -> None:
    def per_head(pattern: torch.Tensor) -> torch.Tensor:
        return pattern.mean(dim=(0, 2, 3))

    hooks = ["blocks.0.attn.hook_pattern", "blocks.1.attn.hook_pattern"]
    recorders = [
        ActivationRecorder(hooks[:1], examples=8, reduce=per_head, axes=("head",)),
        ActivationRecorder(hooks[1:], examples=8, reduce=per_head),  # unnamed: no axes
    ]
    Trainer.create(tmp_path / "run", tiny_config(steps=20), quiet=True, callbacks=recorders).train()
    tracking = tmp_path / "run/tracking"
    assert load_tracked(tracking / f"{hooks[0]}.safetensors").axes == ("head",)
    assert load_tracked(tracking / f"{hooks[1]}.safetensors").axes is None
    wrong = ActivationRecorder(hooks[:1], examples=8, reduce=per_head, axes=("head", "query"))
    trainer = Trainer.create(
        tmp_path / "other", tiny_config(steps=20), quiet=True, callbacks=[wrong]
    )
    with pytest.raises(ValueError, match=r"shape \[4\] but its axes are named \['head', 'query'\]"):
        trainer.train()


def test_a_loaded_run_builds_no_optimiser_and_refuses_to_train(tmp_path: Path) -> None:
    """Trainer.load is for analysis: no AdamW, whose construction imports torch._dynamo
    (about 2 s of a probe's start), and a one-line error, naming the resume, where it is
    asked to train, checkpoint or restore an optimiser state."""
    run = tmp_path / "run"
    Trainer.create(run, tiny_config(steps=4), quiet=True).train()
    probe = (
        "import sys\n"
        "from latentlens.training import Trainer\n"
        f"trainer = Trainer.load({str(run)!r}, device='cpu')\n"
        "assert trainer.evaluate('test')['loss'] > 0\n"
        "print('torch._dynamo' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == "False", done.stderr[-2000:]
    loaded = Trainer.load(run)
    assert loaded.optimizer is None and loaded.objective is not None and loaded.step == 4
    resume = f"continue the run with Trainer.resume('{run}') or `latentlens train --resume {run}`"
    newest = load_checkpoint(list_checkpoints(run / "checkpoints")[-1][1])
    refusals = (loaded.train, lambda: loaded.checkpoint(evaluate=False),
                lambda: loaded.restore(newest))  # fmt: skip
    for refused in refusals:
        with pytest.raises(RuntimeError, match="loaded for analysis") as err:
            refused()
        assert resume in str(err.value) and "\n" not in str(err.value)


def test_train_track_records_the_mean_of_the_hooks_it_names(tmp_path: Path) -> None:
    """``train.track`` patterns expand to the model's hooks, each recorded on a fixed batch
    of the first split: the last record is the mean pattern of the final model on it."""
    config = tiny_config(steps=40, attention="hyla", track=["blocks.*.attn.hook_pattern"])
    assert config["train"]["track"] == ["blocks.*.attn.hook_pattern"]  # as config.json holds it
    Trainer.create(tmp_path / "run", config, quiet=True).train()
    files = sorted(p.name for p in (tmp_path / "run/tracking").iterdir())
    assert files == [f"blocks.{layer}.attn.hook_pattern.safetensors" for layer in (0, 1)]
    trainer = Trainer.load(tmp_path / "run")
    recorder = trainer.callbacks[-1]
    assert isinstance(recorder, ActivationRecorder) and recorder.split == "train"
    batch = trainer.task.sample(
        recorder.examples, "train", trainer.task.make_generator(recorder.seed)
    )
    with torch.no_grad():
        _, cache = trainer.model.run_with_cache(
            *trainer.task.model_inputs(batch), names_filter=recorder.hook_names
        )
    for layer in (0, 1):
        name = f"blocks.{layer}.attn.hook_pattern"
        stored = load_file(str(tmp_path / f"run/tracking/{name}.safetensors"))
        assert stored["steps"].tolist() == [0, 20, 40]
        torch.testing.assert_close(stored["values"][-1], cache[name].mean(0), rtol=0, atol=1e-6)
        assert not torch.equal(stored["values"][1], stored["values"][2])  # it trained
    # Step 0 is the initialisation: the same seed's untrained model on the same batch.
    untrained = Trainer.create(tmp_path / "untrained", config, quiet=True)
    with torch.no_grad():
        _, cache = untrained.model.eval().run_with_cache(
            *trainer.task.model_inputs(batch), names_filter=recorder.hook_names
        )
    stored = load_file(str(tmp_path / "run/tracking/blocks.1.attn.hook_pattern.safetensors"))
    torch.testing.assert_close(
        stored["values"][0], cache["blocks.1.attn.hook_pattern"].mean(0), rtol=0, atol=1e-6
    )


def test_recording_leaves_training_bit_for_bit_unchanged(tmp_path: Path) -> None:
    """The recorders draw their batch from their own generator and run the model without
    dropout: a run that tracks trains exactly as one that does not."""
    plain = tiny_config(steps=40, attention="hyla")
    tracked = tiny_config(steps=40, attention="hyla", track=["blocks.*.attn.hook_pattern"])
    for name, config in (("plain", plain), ("tracked", tracked)):
        Trainer.create(tmp_path / name, config, quiet=True).train()
    assert (tmp_path / "plain/metrics.jsonl").read_text() == (
        tmp_path / "tracked/metrics.jsonl"
    ).read_text()
    weights = [
        load_file(str(list_checkpoints(tmp_path / name / "checkpoints")[-1][1]))
        for name in ("plain", "tracked")
    ]
    assert all(torch.equal(weights[0][key], weights[1][key]) for key in weights[0])


def test_train_track_refuses_what_it_cannot_record_before_writing(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"'blocks\.\*\.mlp' matches no hook of this model"):
        Trainer.create(tmp_path / "run", tiny_config(track=["blocks.*.mlp"]), quiet=True)
    assert not (tmp_path / "run").exists()
    taken = ActivationRecorder(["blocks.0.attn.hook_pattern"])
    with pytest.raises(ValueError, match=r"already records \['blocks\.0\.attn\.hook_pattern'\]"):
        Trainer.create(tmp_path / "run", tiny_config(track=["blocks.0.*"]), callbacks=[taken])
    assert not (tmp_path / "run").exists()
    for bad in ("blocks.0.attn.hook_pattern", [""], [3]):
        with pytest.raises(ValueError, match=r"TrainConfig\.track=.* must be a list of hook names"):
            TrainConfig(track=bad)
    assert TrainConfig.from_json('{"track": ["hook_embed"]}').track == ("hook_embed",)


def test_train_and_eval_commands(tmp_path: Path, capsys) -> None:
    run = tmp_path / "cli"
    proc = run_cli(
        "train",
        "--task",
        "sraven",
        "--steps",
        "20",
        "--eval-every",
        "10",
        "--quiet",
        "--n-layers",
        "1",
        *TINY_FLAGS,
        "--run-dir",
        str(run),
    )
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert "feature_accuracy" in out
    proc = run_cli("eval", str(run), "--split", "ood", "--checkpoint", "10")
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert "checkpoint step 10" in out and "ood" in out
    capsys.readouterr()
    assert main(["train", "--resume", str(run), "--steps", "30"]) == 2  # in-process
    assert "train.steps=30 (the run has 20)" in capsys.readouterr().err
    assert main(["train", "--resume", str(run), "--track", "blocks.0.attn.hook_pattern"]) == 2
    assert "train.track=['blocks.0.attn.hook_pattern'] (the run has [])" in capsys.readouterr().err
    assert main(["eval", str(run), "--examples", "0", "--device", "cpu"]) == 2
    assert "examples=0: evaluate at least 1 example" in capsys.readouterr().err


def test_train_or_resume_reuses_resumes_and_refuses_another_run(tmp_path: Path) -> None:
    run = tmp_path / "run"
    config = tiny_config(steps=40)
    train_or_resume(run, config, quiet=True)
    finished = digest(run / "checkpoints")
    train_or_resume(run, config, quiet=True)  # finished: reused, nothing rewritten
    assert digest(run / "checkpoints") == finished
    (run / "checkpoints" / "step_00000040.safetensors").unlink()  # as if killed after 20
    train_or_resume(run, config, quiet=True)
    assert list_checkpoints(run / "checkpoints")[-1][0] == 40
    with pytest.raises(ValueError, match="holds a different run"):
        train_or_resume(run, tiny_config(steps=60), quiet=True)
