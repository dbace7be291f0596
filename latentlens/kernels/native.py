"""The kernels' operators with C++ bodies (``operators.cpp``) in place of their Python ones.

A compiled step calls the kernels' operators (``torch.ops.latentlens``) some 30 times; in
Python each call's body (checks, allocations, ctypes converting up to eighteen arguments)
cost some 25-30 us, 7-9% of a fuzzy-logic step on a 2-core Zen 4
(``benchmarks/speed/operator_share.py``). ``operators.cpp`` does what each Python body
does (the same checks, the same tensors made, the same C kernel called with the same
arguments: the same numbers, bit for bit, which the tests hold it to) and :func:`load`
builds it against PyTorch's headers with the C++ compiler (about 10 s, once per machine
and PyTorch, cached as the C kernels are: :mod:`latentlens.kernels.build`) and registers
it in place of the Python bodies, for compiled steps and for the eager autograd functions,
which call the registered bodies (:func:`latentlens.kernels.build.body`). It finds each C
kernel through :func:`kernel_address`, which builds the kernel's library with its module,
once.

Where no C++ compiler builds it, the Python bodies stay, with one warning; set
``LATENTLENS_NATIVE_OPERATORS=0`` to keep them (the benchmarks time both).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import warnings
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path

import torch

from latentlens.kernels import attention_core, bias_add, gelu_tanh, layer_norm, linear, mlp
from latentlens.kernels.blas import sgemm_address
from latentlens.kernels.build import (
    HERE,
    PYTHON_BODIES,
    SLICES,
    cached_build,
    drop_python_bodies,
    first_line,
    use_python_bodies,
)

SOURCE = HERE / "operators.cpp"
SWITCH = "LATENTLENS_NATIVE_OPERATORS"  # "0": keep the Python bodies
# The operators operators.cpp gives a body (every one the kernels define)
OPERATOR_NAMES = (
    "projection", "projection_backward", "column_sums", "gelu_tanh", "gelu_tanh_backward",
    "bias_gelu_tanh", "bias_gelu_tanh_backward", "add_layer_norm", "add_layer_norm_backward",
    "kept_add_layer_norm", "kept_add_layer_norm_backward", "embed_layer_norm",
    "embed_layer_norm_backward", "mlp", "mlp_backward", "self_attention_core",
    "self_attention_core_backward", "query_attention_core", "query_attention_core_backward",
)  # fmt: skip

# Each C kernel library the C++ bodies call, by name: its module's loader, given the values
# of the sizes a library is built for (attention_core.FIXED's fields; none: generic).
LIBRARIES: dict[str, Callable[[tuple[int, ...]], ctypes.CDLL]] = {
    "attention_core": lambda values: (
        attention_core.library(attention_core.defines_of(values))
        if values
        else attention_core.library()
    ),
    "bias_add": lambda values: bias_add.library(),
    "gelu_tanh": lambda values: gelu_tanh.library(),
    "layer_norm": lambda values: layer_norm.library(),
    "mlp": lambda values: mlp.library(),
    "row_products": lambda values: linear.per_core_library(),
    "transpose": lambda values: linear.library(),
}


def cxx_compiler() -> str | None:
    """The C++ compiler the bodies are built with ($CXX, else g++, c++ or clang++)."""
    names = [os.environ["CXX"]] if os.environ.get("CXX") else ["g++", "c++", "clang++"]
    return next((found for name in names if (found := shutil.which(name))), None)


def constants() -> dict[str, int]:
    """The numbers the C++ bodies share with the kernels' Python (``-D`` flags)."""
    return {
        "SLICES": SLICES,
        "ROWS_PER_SUM": linear.ROWS_PER_SUM,
        "MIN_OUTPUTS": linear.MIN_OUTPUTS,
        "PARTS": linear.PARTS,
        "BLOCK_FLOATS": mlp.BLOCK_FLOATS,
        "BACKWARD_RUNS": mlp.BACKWARD_RUNS,
        "SPECIALISE_FROM": attention_core.SPECIALISE_FROM,
        "LANES": attention_core.LANES,
    }


def flags() -> list[str]:
    """The compiler's flags: PyTorch's headers, ABI and libraries, and :func:`constants`."""
    torch_dir = Path(torch.__file__).resolve().parent
    return [
        "-O2",
        "-std=c++20",
        "-fPIC",
        "-shared",
        f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
        *(f"-D{name}={value}" for name, value in constants().items()),
        f"-I{torch_dir / 'include'}",
        f"-L{torch_dir / 'lib'}",
        "-lc10",
        "-ltorch_cpu",
        f"-Wl,-rpath,{torch_dir / 'lib'}",
    ]


def kernel_address(library: bytes, symbol: bytes, values, count: int) -> int:
    """Where C kernel ``symbol`` of ``library`` lies (its library built for ``values[:count]``
    where given), for the C++ bodies (a ctypes callback); 0, with a warning saying why,
    where it cannot be loaded (the C++ body then raises, naming the kernel)."""
    try:
        loaded = LIBRARIES[library.decode()](tuple(values[:count]))
        return ctypes.cast(getattr(loaded, symbol.decode()), ctypes.c_void_p).value or 0
    except Exception as error:  # noqa: BLE001 -- a callback cannot raise into C++
        warnings.warn(f"{library.decode()}.c's {symbol.decode()}: {error}", stacklevel=1)
        return 0


RESOLVER = ctypes.CFUNCTYPE(
    ctypes.c_uint64, ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_int64), ctypes.c_int
)(kernel_address)  # held here: C++ keeps its address for the process's life


@cache
def load() -> bool:
    """Give the kernels' operators their C++ bodies (built on first use), once a process;
    whether they have them. Where they cannot (no C++ compiler, a failed build,
    ``LATENTLENS_NATIVE_OPERATORS=0``) the Python bodies stay, with a warning naming the
    cause and the fix unless the switch said so."""
    if os.environ.get(SWITCH) == "0":
        return False
    missing = set(OPERATOR_NAMES) - set(PYTHON_BODIES)
    if missing:
        raise RuntimeError(f"the kernels' operators {sorted(missing)} are not defined yet")
    compiler = cxx_compiler()
    if compiler is None:
        return declined("no C++ compiler was found (g++, c++ or clang++, or $CXX); install "
                        "one (e.g. apt install g++)")  # fmt: skip
    library, errors = cached_build(compiler, flags(), SOURCE, key=(torch.__version__,))
    if errors is not None:
        return declined(f"building operators.cpp with {compiler} failed: {first_line(errors)}")
    drop_python_bodies(list(OPERATOR_NAMES))
    try:
        torch.ops.load_library(str(library))
    except OSError as error:
        use_python_bodies(list(OPERATOR_NAMES))
        return declined(f"loading {library} failed: {error}")
    ctypes.CDLL(str(library)).latentlens_native_configure(
        RESOLVER, int(linear.has_onednn()), int(sgemm_address() is not None),
        ctypes.byref(linear.PER_CORE),
    )  # fmt: skip
    return True


def loaded() -> bool:
    """Whether the operators have their C++ bodies (:func:`load` ran and gave them)."""
    return load.cache_info().currsize > 0 and load()


@contextlib.contextmanager
def python_bodies() -> Iterator[None]:
    """Inside it, the operators run their Python bodies, over the C++ ones where
    :func:`load` gave them (the same numbers): for a side-by-side timing, or a test that
    watches what the Python bodies call."""
    if not loaded():
        yield
        return
    with warnings.catch_warnings():  # PyTorch's "Overriding a previously registered kernel"
        warnings.simplefilter("ignore")
        use_python_bodies(list(OPERATOR_NAMES))
    try:
        yield
    finally:
        drop_python_bodies(list(OPERATOR_NAMES))


def declined(why: str) -> bool:
    warnings.warn(
        f"the fused kernels' operators keep their Python bodies ({why}); each call costs "
        f"some 25 us more, the numbers are the same (set {SWITCH}=0 to silence this)",
        stacklevel=3,
    )
    return False
