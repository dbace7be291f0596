"""The health checks: a dead value network, codes that never vary and a task not learned
are each named, and a healthy model is not flagged; through `latentlens probe` too."""

from __future__ import annotations

import re

import torch

from latentlens.cli import main
from latentlens.models import DecoderTransformer, TransformerConfig
from latentlens.probes.health import constant_codes, dead_value_networks, not_learned
from latentlens.tasks import make_task
from latentlens.training.callbacks import Callback


def _hyla(seed: int = 0) -> DecoderTransformer:
    torch.manual_seed(seed)
    cfg = TransformerConfig.preset("fuzzy-logic", attention="hyla", d_model=32, d_mlp=64)
    return DecoderTransformer(cfg).eval()


def _kill_layer_0(model: torch.nn.Module) -> None:
    """No value reaches layer 0's value network: its ReLU outputs are all exactly 0."""
    attention = model.blocks[0].attn
    with torch.no_grad():
        attention.W_V.zero_()
        attention.b_V.zero_()


def test_a_dead_value_network_is_named_and_a_live_one_is_not() -> None:
    task = make_task("fuzzy-logic", None, seed=0)
    batch = task.sample(256, "test", task.make_generator(1))
    model = _hyla()
    assert dead_value_networks(model, task, batch) == []
    _kill_layer_0(model)
    notes = dead_value_networks(model, task, batch)
    assert [n.where for n in notes] == ["blocks.0.attn.hook_vnet_post"]
    assert "100.0% of its ReLU outputs are exactly 0" in notes[0].message
    softmax = DecoderTransformer(TransformerConfig.preset("fuzzy-logic", d_model=32))
    assert dead_value_networks(softmax, task, batch) == []  # no value network to die


def test_constant_codes_and_an_unlearned_task_are_named() -> None:
    codes = torch.rand(50, 2, 4, 1)
    assert constant_codes(codes, "test") == []
    codes[:, 1] = 0.25
    assert [n.where for n in constant_codes(codes, "test")] == ["test, layer 1"]
    assert not_learned("fuzzy-logic", {"r2": 0.4, "r2_se": 0.02}, "test") == []
    assert (
        "has not learned fuzzy-logic: test R² 0.050"
        in not_learned("fuzzy-logic", {"r2": 0.05, "r2_se": 0.02}, "test")[0].message
    )
    chance = 1 / 8
    assert not_learned("sraven", {"feature_accuracy": 0.9}, "ood", chance) == []
    assert not_learned("sraven", {"feature_accuracy": 0.15}, "ood", chance)[0].kind == "not_learned"


class KillAtEnd(Callback):
    """Zero layer 0's value weights at the last evaluation, before the checkpoint."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_eval(self, trainer, step, records) -> None:
        if step == self.step:
            _kill_layer_0(trainer.model)


def test_latentlens_probe_warns_about_a_dead_untrained_model(tmp_path, capsys) -> None:
    from latentlens.training import TrainConfig, Trainer, model_for_task

    config = Trainer.resolve_config(
        "fuzzy-logic",
        model_for_task("fuzzy-logic", attention="hyla", d_model=16, n_heads=4, qk_dim=8,
                       v_dim=8, d_mlp=32),
        TrainConfig.for_task("fuzzy-logic", steps=4, eval_every=4, batch_size=16,
                             eval_examples=64),
    )  # fmt: skip
    run = tmp_path / "dead"
    Trainer.create(run, config, device="cpu", quiet=True, callbacks=[KillAtEnd(4)]).train()
    assert main(["probe", str(run), "--examples", "64", "--quiet", "--device", "cpu"]) == 0
    printed = capsys.readouterr().out
    assert "warning: blocks.0.attn.hook_vnet_post is dead at the query" in printed
    assert "warning: the model has not learned fuzzy-logic" in printed
    assert re.search(r"test: r2 -?\d+\.\d{3} ± \d+\.\d{3}", printed)
