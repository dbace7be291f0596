"""tracking_callbacks: what each task records over training, for the CLI and Python alike."""

from __future__ import annotations

import pytest
import torch

from latentlens.probes import LatentDecodingTracker, tracking_callbacks
from latentlens.probes.official import LogicLatentsTracker
from latentlens.probes.task_tracking import mean_fuse_weights
from latentlens.probes.translation import TranslationQualityTracker
from latentlens.training import ActivationRecorder, QuantityRecorder, TrainConfig, Trainer
from latentlens.training import model_for_task as model_of


def run_config(task: str, kind: str = "transformer", train: dict | None = None, **model) -> dict:
    return Trainer.resolve_config(
        task, model_of(task, None, kind, **model),
        TrainConfig.for_task(task, kind, steps=10, **(train or {})),
    )  # fmt: skip


def test_each_task_gets_the_recorders_its_analysis_reads() -> None:
    (logic,) = tracking_callbacks(run_config("fuzzy-logic"))
    assert isinstance(logic, LogicLatentsTracker)
    assert logic.examples == 16_000  # the official code's num_valid
    assert tracking_callbacks(run_config("sraven")) == []
    config = run_config("modular-icl", "hypernetwork")
    (tracker,) = tracking_callbacks(config)
    assert isinstance(tracker, LatentDecodingTracker)
    assert tracker.examples == config["train"]["eval_examples"]
    plain = tracking_callbacks(run_config("translation", "encoder-decoder"))
    assert [type(c) for c in plain] == [TranslationQualityTracker]


def test_tracking_examples_sets_each_trackers_sample_and_is_recorded() -> None:
    config = run_config("fuzzy-logic", train={"tracking_examples": 512})
    assert config["train"]["tracking_examples"] == 512
    assert tracking_callbacks(config)[0].examples == 512
    config = run_config("modular-icl", "hypernetwork", train={"tracking_examples": 256})
    assert tracking_callbacks(config)[0].examples == 256
    assert config["train"]["eval_examples"] == 16_000  # the evaluation keeps its own


@pytest.mark.parametrize("bad", [3, 2, 7, 0, -4, 2.0, True, "64", 10**8])
def test_a_tracking_sample_the_protocol_cannot_halve_is_refused_in_one_line(bad) -> None:
    with pytest.raises(
        ValueError,
        match=r"^TrainConfig.tracking_examples=.* is invalid: give an "
        r"even integer from 4 to 10,000,000 \(the tracker ",
    ):
        TrainConfig(tracking_examples=bad)


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
