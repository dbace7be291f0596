"""Figures of arrays tracked over training: values, shapes and refusals."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from latentlens.figures import load_tracked, save_figure, tracked_array
from latentlens.figures.tracking import distance_to_last


def imaged_axes(figure) -> list:
    return [ax for ax in figure.axes if ax.images]


def titles(figure) -> list[str]:
    return [sub._suptitle.get_text() for sub in figure.subfigs]


def test_distance_to_last_is_relative_to_each_rows_last_norm() -> None:
    values = np.zeros((3, 2, 2))
    values[:, 0] = [[0, 4], [3, 0], [3, 4]]  # row 0 ends at [3, 4] (norm 5)
    values[:, 1] = [[1, 0], [0, 2], [0, 0]]  # row 1 ends at 0: absolute distances
    expected = [[3 / 5, 1.0], [4 / 5, 2.0], [0.0, 0.0]]
    np.testing.assert_allclose(distance_to_last(values), expected, rtol=1e-12)


def test_a_tracked_pattern_shows_each_rows_settling_and_its_last_value(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    pattern = rng.random((4, 3, 5, 5))  # [steps, head, query, key]
    figure = tracked_array([10, 20, 30, 40], pattern, "blocks.0.attn.hook_pattern")
    settling, *heads = imaged_axes(figure)
    np.testing.assert_allclose(settling.images[0].get_array(), distance_to_last(pattern).T)
    assert len(heads) == 3
    for head, panel in enumerate(heads):
        np.testing.assert_array_equal(panel.images[0].get_array(), pattern[-1, head])
    assert titles(figure) == [
        "blocks.0.attn.hook_pattern [3, 5, 5] per step",
        "at step 40: rows x columns",
    ]
    assert settling.get_ylabel() == "index (first axis)"
    assert heads[1].get_title() == "index 1"
    assert save_figure(figure, tmp_path / "pattern", ("png",))[0].stat().st_size > 1000

    named = tracked_array([10, 20, 30, 40], pattern, "p", axes=("head", "query", "key"))
    settling, *heads = imaged_axes(named)
    assert settling.get_ylabel() == "head" and heads[2].get_title() == "head 2"
    assert titles(named)[1] == "at step 40: query (rows) x key (columns)"

    many = tracked_array([1, 2], rng.random((2, 20, 4, 4)), "many heads")
    assert len(imaged_axes(many)) == 1 + 16
    assert titles(many)[1] == "at step 2, first 16 of 20: rows x columns"

    rows = rng.random((2, 6, 7))  # [steps, position, d_model]: the last value as one image
    resid = tracked_array([1, 2], rows, "resid", axes=("pos", "d_model"))
    settling, last = imaged_axes(resid)
    np.testing.assert_array_equal(last.images[0].get_array(), rows[-1])
    assert settling.get_ylabel() == "pos"
    assert titles(resid)[1] == "at step 2: pos (rows) x d_model (columns)"
    with pytest.raises(ValueError, match=r"axes \['head'\] name 1 axes, but each value has 2"):
        tracked_array([1, 2], rows, "resid", axes=("head",))


def test_scalars_and_vectors_are_drawn_as_values_over_training() -> None:
    weights = np.array([[0.5, 0.5], [0.2, 0.8], [0.1, 0.9]])  # fuse weights per source
    (heat,) = imaged_axes(tracked_array([1, 2, 3], weights, "fuse"))
    np.testing.assert_array_equal(heat.images[0].get_array(), weights.T)
    assert [t.get_text() for t in heat.get_yticklabels()] == ["index 0", "index 1"]
    (named,) = imaged_axes(tracked_array([1, 2, 3], weights, "fuse", axes=("source_layer",)))
    assert [t.get_text() for t in named.get_yticklabels()] == ["source_layer 0", "source_layer 1"]
    (scalar,) = imaged_axes(tracked_array([1, 2, 3], np.array([1.0, 2.0, 3.0]), "norm"))
    np.testing.assert_array_equal(scalar.images[0].get_array(), [[1.0, 2.0, 3.0]])
    with pytest.raises(ValueError, match=r"values must be \[steps, \.\.\.\] with 2 steps"):
        tracked_array([1, 2], np.ones((3, 4)), "x")


def test_load_tracked_reads_a_recorder_file_and_refuses_others(tmp_path: Path) -> None:
    values = torch.arange(12.0).reshape(3, 4)
    tensors = {"steps": torch.tensor([5, 10, 15]), "values": values}
    save_file(tensors, tmp_path / "a.safetensors")
    tracked = load_tracked(tmp_path / "a.safetensors")
    assert tracked.steps == [5, 10, 15] and tracked.axes is None
    np.testing.assert_array_equal(tracked.values, values.numpy())
    save_file(tensors, tmp_path / "named.safetensors", metadata={"axes": '["source_layer"]'})
    assert load_tracked(tmp_path / "named.safetensors").axes == ("source_layer",)
    save_file({"weights": values}, tmp_path / "b.safetensors")
    with pytest.raises(ValueError, match=r"b\.safetensors is not a tracked array"):
        load_tracked(tmp_path / "b.safetensors")
    save_file(tensors, tmp_path / "c.safetensors", metadata={"axes": '["head", "query"]'})
    with pytest.raises(ValueError, match=r'names axes \["head", "query"\] for values of shape'):
        load_tracked(tmp_path / "c.safetensors")
    for bad in ("head", '{"head": 1}', "[1]"):  # not JSON, or not a list of names
        save_file(tensors, tmp_path / "d.safetensors", metadata={"axes": bad})
        with pytest.raises(ValueError, match="the file is corrupt; record it again"):
            load_tracked(tmp_path / "d.safetensors")
