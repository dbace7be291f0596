"""``--fused`` (the fused CPU kernels of :mod:`latentlens.kernels`): a run trains as its
PyTorch step does, to float32 rounding. Dropout stays on: both paths draw the same masks
from the global generator, reseeded alike. Over 12 AdamW steps, rounding differences of
~1e-7 relative grow as training amplifies them, so losses and weights are compared at 1e-4
relative."""

from __future__ import annotations

import contextlib
import ctypes
from pathlib import Path

import pytest
import torch

from latentlens.kernels import attention_core, build, gelu_tanh, layer_norm, mlp, native
from latentlens.models import transformer
from latentlens.training import SeedGroup, Trainer, seed_configs
from tests.training.test_trainer import tiny_config

TOLERANCE = dict(rtol=1e-4, atol=1e-5)


class CountingLibrary:
    """A kernel library whose functions record their names in ``calls`` when called."""

    def __init__(self, library: ctypes.CDLL, calls: list[str]) -> None:
        self.library, self.calls = library, calls

    @classmethod
    def of(cls, library: ctypes.CDLL, calls: list[str]):
        """A stand-in for a module's ``library()``."""
        return lambda: cls(library, calls)

    def __getattr__(self, name: str):
        function = getattr(self.library, name)
        return lambda *args: self.calls.append(name) or function(*args)


@pytest.mark.parametrize("attention", ["softmax", "linear", "hyla"])
def test_a_fused_run_trains_as_the_pytorch_run(tmp_path: Path, attention: str) -> None:
    config = tiny_config(steps=20, attention=attention)
    plain = Trainer.create(tmp_path / "plain", config, device="cpu", quiet=True)
    fused = Trainer.create(tmp_path / "fused", config, device="cpu", quiet=True, fused=True)
    assert fused.model.fused
    assert all(layer.attn.fused and layer.mlp.fused for layer in fused.model.blocks)
    torch.manual_seed(1)  # dropout draws from the global generator: the same masks
    fused_losses = torch.stack([fused.train_step().detach() for _ in range(12)])
    torch.manual_seed(1)
    plain_losses = torch.stack([plain.train_step().detach() for _ in range(12)])
    torch.testing.assert_close(fused_losses, plain_losses, **TOLERANCE)
    weights = fused.model.state_dict()
    for name, weight in plain.model.state_dict().items():
        if attention == "softmax" and name.endswith("attn.b_K"):
            # its gradient is 0 up to rounding (it shifts all of a query's scores alike),
            # which AdamW's normalised step turns into lr-sized moves on either path
            continue
        torch.testing.assert_close(weights[name], weight, **TOLERANCE, msg=name)
    assert fused.evaluate("test", examples=64)["r2"] == pytest.approx(
        plain.evaluate("test", examples=64)["r2"], rel=1e-4, abs=1e-5
    )


def test_the_eager_kernels_run_the_operators_registered_bodies(tmp_path: Path) -> None:
    """An eager fused step's autograd functions call the operators' registered bodies
    (``build.body``, below autograd): with the C++ bodies no Python body calls a kernel of
    the GELU, the layer norms or the MLP, with the Python bodies each does, and both train
    to the same bits."""
    if native.cxx_compiler() is None:
        pytest.skip("no C++ compiler here: the operators keep their Python bodies")
    config = tiny_config(steps=20, attention="hyla")
    losses, calls = {}, {}
    for bodies in ("cpp", "python"):
        trainer = Trainer.create(tmp_path / bodies, config, device="cpu", quiet=True, fused=True)
        assert native.loaded()
        torch.manual_seed(1)
        first = trainer.train_step().detach()  # the C++ bodies find their kernels here
        seen = calls[bodies] = []
        chosen = native.python_bodies() if bodies == "python" else contextlib.nullcontext()
        with pytest.MonkeyPatch.context() as patch, chosen:
            for module in (gelu_tanh, layer_norm, mlp):
                patch.setattr(module, "library", CountingLibrary.of(module.library(), seen))
            later = [trainer.train_step().detach() for _ in range(5)]
        losses[bodies] = torch.stack([first, *later])
    assert calls["cpp"] == []
    gelu = "bias_gelu_tanh" if mlp.engine() == "onednn" else "mlp"
    for name in ("embed_layer_norm", "add_layer_norm", gelu):
        assert f"{name}_forward" in calls["python"], name
        assert f"{name}_backward" in calls["python"], name
    assert torch.equal(losses["cpp"], losses["python"])


@pytest.mark.parametrize("attention, stream", [("softmax", False), ("hyla", True)])
def test_a_compiled_fused_run_trains_as_the_eager_run(
    tmp_path: Path, attention: str, stream: bool
) -> None:
    """``--fused --compile``: the compiled step calls self-attention's kernel and the
    GELU's as PyTorch operators, and the residual stream's where it holds at least
    ``layer_norm.COMPILED_FROM`` numbers (lowered here to 1 for ``stream``; this model's
    stream, 32 x 16 x 32, is below the default). Dropout is off and the tolerance is
    ``--compile``'s (tests/training/test_cpu_compile.py: inductor draws its own random
    numbers and may reorder float sums). The kernels' calls are counted on the operators'
    Python bodies; the C++ bodies (latentlens.kernels.native) train a third run to the
    same bits."""
    config = tiny_config(steps=20, attention=attention)
    config = {**config, "model": {**config["model"], "attention_dropout": 0.0}}
    eager = Trainer.create(tmp_path / "eager", config, device="cpu", quiet=True)
    both = Trainer.create(tmp_path / "both", config, device="cpu", quiet=True, fused=True,
                          compile=True)  # fmt: skip
    calls = []
    kernel = attention_core.core_forward
    with pytest.MonkeyPatch.context() as patch, native.python_bodies():
        patch.setattr(attention_core, "core_forward", lambda *a: calls.append("core") or kernel(*a))
        for module in (gelu_tanh, layer_norm, mlp):
            patch.setattr(module, "library", CountingLibrary.of(module.library(), calls))
        if stream:
            patch.setattr(transformer, "COMPILED_FROM", 1)
        both_losses = torch.stack([both.train_step().detach() for _ in range(12)])
    # each kernel ran in every layer's step, forward and backward: the attention core,
    # the GELU (on the stream's path the whole MLP: its bias and GELU pass between oneDNN's
    # matmuls, or the sgemm kernel's blocks of rows), and on the stream's
    # path the residual add and layer norm before each sublayer and the readout, the first
    # the embedding's (fuzzy logic's inputs have 5 columns), the last block's first giving
    # out the loss's position apart
    layers = len(both.model.blocks)
    gelu = "gelu_tanh" if not stream else "bias_gelu_tanh" if mlp.engine() == "onednn" else "mlp"
    norms, once = (2 * layers, 1) if stream else (0, 0)
    for name, count in [("core", layers), (f"{gelu}_forward", layers),
                        (f"{gelu}_backward", layers), ("add_layer_norm_forward", norms),
                        ("add_layer_norm_backward", norms),
                        ("embed_layer_norm_forward", once),
                        ("embed_layer_norm_backward", once)]:  # fmt: skip
        assert calls.count(name) == 12 * count, name
    if native.loaded():
        cpp = Trainer.create(tmp_path / "cpp", config, device="cpu", quiet=True, fused=True,
                             compile=True)  # fmt: skip
        with pytest.MonkeyPatch.context() as patch:
            if stream:
                patch.setattr(transformer, "COMPILED_FROM", 1)
            cpp_losses = torch.stack([cpp.train_step().detach() for _ in range(12)])
        assert torch.equal(cpp_losses, both_losses)
    eager_losses = torch.stack([eager.train_step().detach() for _ in range(12)])
    torch.testing.assert_close(both_losses, eager_losses, rtol=1e-3, atol=1e-4)
    weights = both.model.state_dict()
    for name, weight in eager.model.state_dict().items():
        if attention == "softmax" and name.endswith("attn.b_K"):
            continue  # see test_a_fused_run_trains_as_the_pytorch_run
        torch.testing.assert_close(weights[name], weight, rtol=1e-3, atol=1e-4, msg=name)


@pytest.fixture(params=["python", "cpp"])
def operator_bodies(request):
    """The kernels' operators on their Python bodies, then on their C++ ones."""
    if request.param == "python":
        with native.python_bodies():
            yield
    elif native.cxx_compiler() is None:
        pytest.skip("no C++ compiler here: the operators keep their Python bodies")
    else:
        assert native.load()
        yield


@pytest.mark.usefixtures("operator_bodies")
def test_the_kernel_operators_are_registered_completely() -> None:
    """torch.library's checks of the operators compiled steps call: their fake (shape)
    functions, autograd formulas and schemas against the kernels themselves, with either
    body."""
    gen = torch.Generator().manual_seed(0)
    packed = torch.randn(2, 19, 3, 2 + 2 + 3, generator=gen, requires_grad=True)
    bias = torch.randn(3, 19 - 4, 19, generator=gen, requires_grad=True)
    drop = (torch.rand(19 - 4, 19, generator=gen) > 0.2) / 0.8
    for options in [("softmax", None, False, 4, 1e-6), ("rms_head", "relu", True, 4, 1e-6)]:
        args = (packed, attention_core.padded(bias), attention_core.padded(drop), 2, 2, *options)
        results = torch.library.opcheck(attention_core.self_attention_core, args)
        assert set(results) >= {"test_schema", "test_autograd_registration", "test_faketensor"}
        assert all(outcome == "SUCCESS" for outcome in results.values()), results
    x = torch.randn(5, 3, 7, generator=gen).transpose(0, 2).requires_grad_()  # strided
    dy = torch.randn(7, 3, 5, generator=gen)
    bias = torch.randn(5, generator=gen, requires_grad=True)
    stream = torch.randn(4, 6, 5, generator=gen).transpose(0, 1).requires_grad_()  # strided
    delta = torch.randn(6, 4, 5, generator=gen, requires_grad=True)
    weight, ln_bias = torch.randn(5, generator=gen), torch.randn(5, generator=gen)
    total, _, mean, rstd = layer_norm.forward_values(stream, delta, bias, weight, ln_bias, 1e-6)
    d_total = torch.randn(6, 4, 5, generator=gen)
    inputs = torch.randn(4, 6, 3, generator=gen).transpose(0, 1)  # strided
    embed = torch.randn(5, 3, generator=gen, requires_grad=True)
    embedded, _, embedded_mean, embedded_rstd = layer_norm.embed_forward_values(
        inputs, embed, bias, weight, ln_bias, 1e-6
    )
    embedded_statistics = (embedded, embedded_mean, embedded_rstd, weight, d_total)
    d_kept = torch.randn(6, 2, 5, generator=gen)  # the kept positions, 2 on
    kv = torch.randn(2, 19, 3, 2 + 3, generator=gen, requires_grad=True)
    queries = torch.randn(2, 19 - 4, 3, 2, generator=gen, requires_grad=True)
    core_options = (2, "softmax", None, True, 4, 1e-6)
    _, rows = attention_core.query_attention_core(queries, kv, None, None, *core_options)
    dz = torch.randn(2, 19 - 4, 3, 3, generator=gen)
    mlp_in = torch.randn(3, 4, 5, generator=gen).transpose(0, 1).requires_grad_()  # strided
    w_in = torch.randn(7, 5, generator=gen, requires_grad=True)
    b_in = torch.randn(7, generator=gen, requires_grad=True)
    w_out = torch.randn(5, 7, generator=gen, requires_grad=True)
    d_mlp_out = torch.randn(4, 3, 5, generator=gen)
    for operator, args in [
        (gelu_tanh.gelu_tanh, (x,)),
        (gelu_tanh.gelu_tanh_backward, (x.detach(), dy)),
        (gelu_tanh.bias_gelu_tanh, (x, bias)),
        (gelu_tanh.bias_gelu_tanh_backward, (x.detach(), bias.detach(), dy)),
        (mlp.mlp, (mlp_in, w_in, b_in, w_out)),
        (mlp.mlp_backward, (mlp_in.detach(), w_in.detach(), b_in.detach(), w_out.detach(),
                            *(t.detach() for t in mlp.mlp(mlp_in, w_in, b_in, w_out)[1:]),
                            d_mlp_out)),
        (layer_norm.add_layer_norm, (stream, delta, bias, weight, ln_bias, 1e-6)),
        (layer_norm.add_layer_norm, (stream, None, None, weight, ln_bias, 1e-6)),
        (layer_norm.add_layer_norm_backward, (total, mean, rstd, weight, d_total, d_total)),
        (layer_norm.add_layer_norm_backward, (total, mean, rstd, weight, d_total, None)),
        (layer_norm.embed_layer_norm, (inputs, embed, bias, weight, ln_bias, 1e-6)),
        (layer_norm.embed_layer_norm_backward, (inputs, *embedded_statistics, d_total)),
        (layer_norm.embed_layer_norm_backward, (inputs, *embedded_statistics, None)),
        (layer_norm.kept_add_layer_norm, (stream, delta, bias, weight, ln_bias, 1e-6, 2)),
        (layer_norm.kept_add_layer_norm_backward,
         (total, mean, rstd, weight, d_total, d_kept, d_kept, 2)),
        (layer_norm.kept_add_layer_norm_backward,
         (total, mean, rstd, weight, d_total, None, None, 2)),
        (attention_core.query_attention_core, (queries, kv, None, None, *core_options)),
        (attention_core.query_attention_core_backward,
         (queries.detach(), kv.detach(), None, None, rows.detach(), dz, *core_options)),
    ]:  # fmt: skip
        results = torch.library.opcheck(operator, args)
        assert set(results) >= {"test_schema", "test_autograd_registration", "test_faketensor"}
        assert all(outcome == "SUCCESS" for outcome in results.values()), results


def test_fused_is_refused_where_it_cannot_apply(tmp_path: Path) -> None:
    config = tiny_config()
    runs = [tmp_path / "s0", tmp_path / "s1"]
    with pytest.raises(ValueError, match="drop --seeds"):
        SeedGroup.create(runs, seed_configs(config, [0, 1]), device="cpu", quiet=True,
                         fused=True)  # fmt: skip
    assert not any(path.exists() for path in runs)


def test_fused_without_a_c_compiler_is_a_one_line_error(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("LATENTLENS_CACHE", str(tmp_path / "cache"))  # nothing built there
    monkeypatch.setattr(build, "c_compiler", lambda: None)
    build.load.cache_clear()
    try:
        message = "C compiler and none was found .* or train without --fused"
        with pytest.raises(RuntimeError, match=message):
            build.load("gelu_tanh")
    finally:
        build.load.cache_clear()


def test_a_compiler_without_openmp_builds_one_thread_kernels(tmp_path: Path, monkeypatch) -> None:
    """Where the compiler cannot build OpenMP (here: an option it refuses in its place),
    the kernel is built without it, says so once, and runs on one thread; the failed
    setting is remembered rather than recompiled in every process."""
    monkeypatch.setenv("LATENTLENS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(build, "OPENMP", "-fno-such-openmp-option")
    built, compile_source = [], build.build
    monkeypatch.setattr(build, "build", lambda *a: built.append(a[1]) or compile_source(*a))
    build.load.cache_clear()
    try:
        with pytest.warns(UserWarning, match="built without OpenMP .* runs on one thread"):
            library = build.load("attention_core")
        library.threads_used.argtypes = [ctypes.c_int]
        assert library.threads_used(3) == 1
        build.load.cache_clear()
        with pytest.warns(UserWarning, match="built without OpenMP"):
            build.load("attention_core")
        assert [flags[-1] for flags in built] == ["-fno-such-openmp-option", "-fopenmp-simd"]
    finally:
        build.load.cache_clear()


def test_an_edited_header_builds_a_new_library(tmp_path: Path, monkeypatch) -> None:
    """A kernel's cached library is keyed by its source and the headers beside it that it
    includes, and theirs in turn: editing a shared header (gelu_tanh.h, which mlp.c
    includes; cephes_exp.h, which gelu_tanh.h includes) builds the library again."""
    monkeypatch.setenv("LATENTLENS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(build, "HERE", tmp_path)
    (tmp_path / "kernel.c").write_text('#include "outer.h"\nint value(void) { return VALUE; }\n')
    (tmp_path / "outer.h").write_text('#include "inner.h"\n')
    (tmp_path / "inner.h").write_text("#define VALUE 1\n")
    assert [p.name for p in build.local_includes(tmp_path / "kernel.c")] == ["outer.h", "inner.h"]
    build.load.cache_clear()
    try:
        assert build.load("kernel").value() == 1
        (tmp_path / "inner.h").write_text("#define VALUE 2\n")
        build.load.cache_clear()
        assert build.load("kernel").value() == 2
    finally:
        build.load.cache_clear()


def test_train_fused_from_the_command_line(tmp_path: Path, capsys) -> None:
    from latentlens.cli import main

    flags = ["train", "--task", "fuzzy-logic", "--attention", "hyla", "--d-model", "16",
             "--steps", "4", "--warmup-steps", "1", "--eval-every", "2", "--device", "cpu",
             "--quiet", "--fused", "--tracking-examples", "256"]  # fmt: skip
    assert main([*flags, "--run-dir", str(tmp_path / "run")]) == 0
    assert (tmp_path / "run" / "config.json").is_file()
    assert main([*flags, "--seeds", "0", "1", "--run-dir", str(tmp_path / "group")]) == 2
    err = capsys.readouterr().err
    assert "drop --seeds" in err and "Traceback" not in err


def test_a_resumed_fused_run_continues_as_an_uninterrupted_one(tmp_path: Path) -> None:
    """``--fused``'s AdamW step (one kernel call) works on the optimizer's own state: a
    fused run checkpointed at step 10 and resumed ends with the weights of one trained
    straight through, bit for bit."""
    config = tiny_config(steps=20)
    whole = Trainer.create(tmp_path / "whole", config, device="cpu", quiet=True, fused=True)
    whole.train()
    part = Trainer.create(tmp_path / "part", config, device="cpu", quiet=True, fused=True)
    part.evaluate_initialisation()
    for _ in range(10):
        part.train_step()
    part.checkpoint(evaluate=True)
    part.close()
    resumed = Trainer.resume(tmp_path / "part", device="cpu", quiet=True, fused=True)
    assert resumed.step == 10
    pytorch_steps = []
    step = resumed.optimizer.step
    resumed.optimizer.step = lambda: pytorch_steps.append(1) or step()
    resumed.train()
    assert pytorch_steps == []  # every step the kernel's, on the state the checkpoint held
    weights = resumed.model.state_dict()
    for name, weight in whole.model.state_dict().items():
        assert torch.equal(weights[name], weight), name
