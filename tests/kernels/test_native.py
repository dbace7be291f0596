"""The kernels' operators' C++ bodies (operators.cpp) against their Python bodies.

Both call the same C kernels with the same arguments, so every output must be the same
tensor bit for bit, with the same shape and strides: any difference is a body that reads
or lays out something another way. The cases cover each branch of the bodies: optional
inputs given and not, both weight-gradient engines, both MLP engines, sums longer than
oneDNN's fixed chunk, a transposed input, empty inputs, the attention cores' generic and
specialised libraries, each normalisation and value network, a causal mask, queries from
a later position and a strided output gradient."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch

from latentlens.kernels import build, linear, native
from latentlens.kernels.attention_core import LANES
from latentlens.kernels.blas import sgemm_address

ops = torch.ops.latentlens


@pytest.fixture(scope="module", autouse=True)
def native_bodies() -> None:
    if native.cxx_compiler() is None:
        pytest.skip("no C++ compiler here: the operators keep their Python bodies")
    assert native.load(), "operators.cpp did not build or load (see the warning)"


def randn(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def assert_same(name: str, *args) -> None:
    """``latentlens::name`` (its C++ body) and its Python body give the same tensors."""
    native_out = getattr(ops, name)(*args)
    python_out = build.PYTHON_BODIES[name](*args)
    if isinstance(native_out, torch.Tensor):
        native_out, python_out = (native_out,), (python_out,)
    assert len(native_out) == len(python_out)
    for index, (ours, theirs) in enumerate(zip(native_out, python_out, strict=True)):
        where = f"{name} output {index}"
        assert ours.shape == theirs.shape, where
        assert ours.stride() == theirs.stride(), where
        assert ours.dtype == theirs.dtype, where
        assert torch.equal(ours, theirs), where


def test_every_operator_has_a_cpp_body() -> None:
    for name in build.PYTHON_BODIES:
        dump = torch._C._dispatch_dump(f"latentlens::{name}")
        cpu = next(line for line in dump.splitlines() if line.startswith("CPU:"))
        assert "operators.cpp" in cpu, name
    assert set(build.PYTHON_BODIES) == set(native.OPERATOR_NAMES)


@pytest.mark.parametrize("engine", ["onednn", "per-core"])
@pytest.mark.parametrize(
    "rows, d_in, d_out",
    [(37, 24, 40), (37, 40, 24), (5, 3, 6), (linear.ROWS_PER_SUM + 9, 16, 24), (0, 8, 8)],
)
def test_projection(engine, rows, d_in, d_out, monkeypatch) -> None:
    if engine == "per-core" and not linear.has_per_core():
        pytest.skip("this PyTorch exports no sgemm_")
    monkeypatch.setattr(linear.PER_CORE, "value", int(engine == "per-core"))
    x, weight, bias = randn(rows, d_in), randn(d_out, d_in, seed=1), randn(d_out, seed=2)
    dy = randn(rows, d_out, seed=3)
    for b in (bias, None):
        assert_same("projection", x, weight, b)
        assert_same("projection", x.view(1, rows, d_in), weight, b)
    assert_same("projection", randn(d_in, rows).T, weight, bias)  # a transposed view
    for biased in (True, False):
        assert_same("projection_backward", x, weight, dy, biased)
        assert_same("projection_backward", x.view(1, rows, d_in), weight, dy.view(1, rows, d_out),
                    biased)  # fmt: skip
    assert_same("column_sums", dy)
    assert_same("column_sums", dy.view(1, rows, d_out).transpose(0, 1))


def test_gelu() -> None:
    x, dy, bias = randn(3, 17, 40), randn(3, 17, 40, seed=1), randn(40, seed=2)
    assert_same("gelu_tanh", x)
    assert_same("gelu_tanh", x.transpose(0, 1))
    assert_same("gelu_tanh_backward", x, dy)
    assert_same("bias_gelu_tanh", x, bias)
    assert_same("bias_gelu_tanh_backward", x, bias, dy)


@pytest.mark.parametrize("has_delta", [True, False])
@pytest.mark.parametrize("has_delta_bias", [True, False])
def test_layer_norms(has_delta, has_delta_bias) -> None:
    shape = (3, 17, 40)
    x, weight, bias = randn(*shape), randn(40, seed=1), randn(40, seed=2)
    delta = randn(*shape, seed=3) if has_delta else None
    delta_bias = randn(40, seed=4) if has_delta_bias else None
    assert_same("add_layer_norm", x, delta, delta_bias, weight, bias, 1e-5)
    assert_same("kept_add_layer_norm", x, delta, delta_bias, weight, bias, 1e-5, 13)
    total, _, mean, rstd = ops.add_layer_norm(x, delta, delta_bias, weight, bias, 1e-5)
    d_normed, d_total = randn(*shape, seed=5), randn(*shape, seed=6)
    kept = randn(3, 4, 40, seed=7)
    for given in (d_total, None):
        assert_same("add_layer_norm_backward", total, mean, rstd, weight, d_normed, given)
        assert_same("kept_add_layer_norm_backward", total, mean, rstd, weight, d_normed, kept,
                    None if given is None else kept * 2, 13)  # fmt: skip
        assert_same("kept_add_layer_norm_backward", total, mean, rstd, weight, d_normed, None,
                    given if given is None else kept, 13)  # fmt: skip


def test_embedded_layer_norm() -> None:
    inputs, embed_weight, embed_bias = randn(3, 17, 5), randn(40, 5, seed=1), randn(40, seed=2)
    weight, bias = randn(40, seed=3), randn(40, seed=4)
    assert_same("embed_layer_norm", inputs, embed_weight, embed_bias, weight, bias, 1e-5)
    total, _, mean, rstd = ops.embed_layer_norm(inputs, embed_weight, embed_bias, weight, bias,
                                                1e-5)  # fmt: skip
    d_normed, d_total = randn(3, 17, 40, seed=5), randn(3, 17, 40, seed=6)
    for given in (d_total, None):
        assert_same("embed_layer_norm_backward", inputs, total, mean, rstd, weight, d_normed,
                    given)  # fmt: skip
    with pytest.raises(ValueError, match="last dimension must be 5"):
        ops.embed_layer_norm(randn(3, 17, 6), embed_weight, embed_bias, weight, bias, 1e-5)


@pytest.mark.parametrize("d_mlp", [64, 4])  # 4: narrower than MIN_OUTPUTS, the sgemm engine
def test_mlp(d_mlp) -> None:
    if d_mlp < linear.MIN_OUTPUTS and sgemm_address() is None:
        pytest.skip("this PyTorch exports no sgemm_")
    x, w_in, b_in = randn(3, 300, 24), randn(d_mlp, 24, seed=1), randn(d_mlp, seed=2)
    w_out, dout = randn(24, d_mlp, seed=3), randn(3, 300, 24, seed=4)
    assert_same("mlp", x, w_in, b_in, w_out)
    _, h, y = ops.mlp(x, w_in, b_in, w_out)
    assert_same("mlp_backward", x, w_in, b_in, w_out, h, y, dout)
    with pytest.raises(ValueError, match="the fused MLP needs x"):
        ops.mlp(x, w_in, b_in, w_out.T.contiguous())
    with pytest.raises(ValueError, match="float32 CPU"):
        ops.mlp(x.double(), w_in, b_in, w_out)


def padded_keys(keys: int) -> int:
    return -(-keys // LANES) * LANES


@pytest.mark.parametrize("batch", [2, 40])  # 40 x 24 keys x 5 heads: a specialised library
@pytest.mark.parametrize(
    "normalization, activation",
    [("softmax", None), ("rms_head", None), ("none", None), ("softmax", "relu"),
     ("rms_head", "identity")],
)  # fmt: skip
@pytest.mark.parametrize("causal, query_start", [(False, 0), (True, 0), (True, 20)])
def test_attention_cores(batch, normalization, activation, causal, query_start) -> None:
    positions, heads, d_q, d_k, d_v = 24, 5, 4, 4, 3 if activation is None else 4
    packed = randn(batch, positions, heads, d_q + d_k + d_v)
    queries = positions - query_start
    bias = torch.nn.functional.pad(randn(heads, queries, positions, seed=1),
                                   (0, padded_keys(positions) - positions))  # fmt: skip
    drop = (torch.rand(queries, padded_keys(positions), generator=torch.Generator().manual_seed(2))
            > 0.1).float() / 0.9  # fmt: skip
    options = (normalization, activation, causal, query_start, 1e-6)
    for b, d in ((None, None), (bias, drop)):
        assert_same("self_attention_core", packed, b, d, d_q, d_k, *options)
        z, rows = ops.self_attention_core(packed, b, d, d_q, d_k, *options)
        dz = randn(heads, batch, queries, z.shape[-1], seed=3).permute(1, 2, 0, 3)  # strided
        assert_same("self_attention_core_backward", packed, b, d, rows, dz, d_q, d_k, *options)
        q = packed[:, query_start:, :, :d_q].contiguous()
        kv = packed[..., d_q:].contiguous()
        assert_same("query_attention_core", q, kv, b, d, d_k, *options)
        z, rows = ops.query_attention_core(q, kv, b, d, d_k, *options)
        assert_same("query_attention_core_backward", q, kv, b, d, rows, dz, d_k, *options)
    with pytest.raises(ValueError, match="padded to 32 keys"):
        ops.self_attention_core(packed, bias[..., :positions], None, d_q, d_k, *options)


def test_a_large_attention_call_takes_a_library_built_for_its_sizes(monkeypatch) -> None:
    """As attention_core.kernels_for: from SPECIALISE_FROM (batch x keys x heads) on, the
    C++ body asks for the library built for the call's sizes and options (attention_core.
    FIXED's fields, in order), once; below, the generic one. Sizes no other test uses, so
    that the C++ body has not looked these up before."""
    asked = []
    loader = native.LIBRARIES["attention_core"]
    monkeypatch.setitem(native.LIBRARIES, "attention_core",
                        lambda values: asked.append(values) or loader(values))  # fmt: skip
    options = ("softmax", None, True, 0, 1e-6)
    small, large = randn(2, 23, 3, 4 + 4 + 5), randn(64, 23, 3, 4 + 4 + 5)
    for packed in (small, large, large):
        assert_same("self_attention_core", packed, None, None, 4, 4, *options)
    built_for = [values for values in asked if values]  # () asks for the generic one
    assert built_for == [(4, 5, 3, 23, 1, 0, 0)] * 2  # forward's and backward's, once


def run_python(code: str, **environment: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, env={**os.environ, **environment}, timeout=300)  # fmt: skip


FALLBACK = """
    import warnings, torch
    from latentlens.kernels import native
    from latentlens.kernels.linear import projection_values
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        print("loaded", native.load())
    print("warnings", [str(w.message) for w in caught])
    x, w = torch.randn(5, 8), torch.randn(9, 8)
    same = torch.equal(torch.ops.latentlens.projection(x, w, None), projection_values(x, w, None))
    print("same", same)
"""


def test_without_a_cpp_compiler_the_python_bodies_stay_with_a_warning(tmp_path) -> None:
    done = run_python(FALLBACK, CXX=str(tmp_path / "no-such-compiler"), PATH=str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert "loaded False" in done.stdout
    assert "keep their Python bodies (no C++ compiler was found" in done.stdout
    assert "same True" in done.stdout


def test_a_failed_build_keeps_the_python_bodies_with_the_compilers_error(tmp_path) -> None:
    compiler = tmp_path / "g++"
    compiler.write_text("#!/bin/sh\necho 'operators.cpp:1: error: no headers here' >&2\nexit 1\n")
    compiler.chmod(0o755)
    done = run_python(FALLBACK, CXX=str(compiler), LATENTLENS_CACHE=str(tmp_path / "cache"))
    assert done.returncode == 0, done.stderr
    assert "loaded False" in done.stdout
    assert "error: no headers here" in done.stdout
    assert "same True" in done.stdout


def test_the_switch_keeps_the_python_bodies_silently() -> None:
    done = run_python(FALLBACK, **{native.SWITCH: "0"})
    assert done.returncode == 0, done.stderr
    assert "loaded False" in done.stdout and "warnings []" in done.stdout
