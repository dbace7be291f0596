"""tracking_callbacks: what each task records over training, for the CLI and Python alike."""

from __future__ import annotations

import torch

from latentlens.probes import LatentDecodingTracker, tracking_callbacks
from latentlens.probes.official import LogicLatentsTracker
from latentlens.probes.task_tracking import mean_fuse_weights
from latentlens.probes.translation import TranslationQualityTracker
from latentlens.training import ActivationRecorder, QuantityRecorder, TrainConfig, Trainer
from latentlens.training import model_for_task as model_of


def run_config(task: str, kind: str = "transformer", **model) -> dict:
    return Trainer.resolve_config(
        task, model_of(task, None, kind, **model), TrainConfig.for_task(task, kind, steps=10)
    )


def test_each_task_gets_the_recorders_its_analysis_reads() -> None:
    (logic,) = tracking_callbacks(run_config("fuzzy-logic"))
    assert isinstance(logic, LogicLatentsTracker)
    assert tracking_callbacks(run_config("sraven")) == []
    config = run_config("modular-icl", "hypernetwork")
    (tracker,) = tracking_callbacks(config)
    assert isinstance(tracker, LatentDecodingTracker)
    assert tracker.examples == config["train"]["eval_examples"]
    plain = tracking_callbacks(run_config("translation", "encoder-decoder"))
    assert [type(c) for c in plain] == [TranslationQualityTracker]


def test_fusion_recorders_name_hooks_the_model_has() -> None:
    config = run_config("translation", "fusion", fuse="both", connection="gca")
    quality, fuse, routing = tracking_callbacks(config)
    assert isinstance(quality, TranslationQualityTracker)
    assert isinstance(fuse, ActivationRecorder) and isinstance(routing, QuantityRecorder)
    model = Trainer(None, config, device="cpu", quiet=True).model
    layers = config["model"]["n_layers_encoder"] + config["model"]["n_layers_decoder"]
    assert len(fuse.hook_names) == layers
    assert set(fuse.hook_names) <= set(model.hook_dict)
    assert fuse.hook_names[0].startswith("encoder.") and fuse.hook_names[-1].startswith("decoder.")
    assert routing.names == ["routing_matrix"]


def test_mean_fuse_weights_average_all_but_the_source_axis() -> None:
    pattern = torch.rand(3, 2, 5, 4)  # [batch, head, pos, source]
    expected = torch.stack([pattern[..., s].mean() for s in range(4)])
    torch.testing.assert_close(mean_fuse_weights(pattern), expected)
