"""The fit check's parameter count: exact without building every layer."""

from __future__ import annotations

import dataclasses
import time

import pytest

from latentlens.models.config import TransformerConfig
from latentlens.models.encoder_decoder import EncoderDecoderConfig
from latentlens.models.hypernetwork import HypernetworkConfig
from latentlens.training.memory import built_parameter_count, parameter_count


def transformer(attention: str, layers: int) -> TransformerConfig:
    return dataclasses.replace(
        TransformerConfig.preset("sraven", attention=attention), n_layers=layers
    )


CONFIGS = [
    *[("transformer", transformer(a, n)) for a in ("softmax", "linear", "hyla") for n in (1, 2, 5)],
    ("hypernetwork", HypernetworkConfig(n_ctx=32, d_input=17, n_layers=3)),
    *[
        ("encoder-decoder", EncoderDecoderConfig(
            vocab_size=50, n_ctx_source=12, n_ctx_target=12, n_layers_encoder=e,
            n_layers_decoder=d, connection=connection, fuse=fuse))
        for connection in ("none", "original", "gca", "layerwise", "uniform")
        for fuse in ("none", "both")
        for e, d in ((3, 3), (4, 3), (5, 2))
    ],
]  # fmt: skip


@pytest.mark.parametrize(("kind", "config"), CONFIGS)
def test_the_count_equals_the_built_models(kind: str, config) -> None:
    # the slow obvious reference: the whole model built on the meta device
    assert parameter_count(kind, config) == built_parameter_count(kind, config)


def test_a_model_of_the_most_layers_a_config_allows_is_counted_at_once() -> None:
    most = 2**31 - 1  # configs refuse more (require_positive's MAX_SIZE)
    start = time.perf_counter()
    one, two = (parameter_count("transformer", transformer("hyla", n)) for n in (1, 2))
    huge = parameter_count("transformer", transformer("hyla", most))
    assert huge == one + (most - 1) * (two - one)
    assert time.perf_counter() - start < 30  # the full build never returned
