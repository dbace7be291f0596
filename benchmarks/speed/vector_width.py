"""What the kernels' vector width costs on this CPU: the embedding layer norm and the
attention core built for 8-float vectors (AVX2's registers) and for 16-float ones
(AVX-512's), side by side.

Both kernels hold blocks of 16 floats (columns; keys) in vectors. Built with 16-float
vectors on a CPU without AVX-512, GCC lowers each vector through the stack; built for the
machine's own width (what the kernels now do), it keeps them in registers. Both builds
compute the same bits (``tests/kernels/test_layer_norm.py``, ``test_attention_core.py``),
so only the time differs. Timed at fuzzy logic's shapes (batch 128, T = 16 and Table A1's
T = 32): the embedding's forward pass (5 input columns to d_model 128), and the
self-attention core's forward and backward pass (8 heads of 2, the library built for the
sizes, as a training step takes it), the builds alternating in rounds, median
microseconds a call, on one thread and on every core, with the allocator setting the
command uses.

    python benchmarks/speed/vector_width.py [--calls 300] [--rounds 7]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from latentlens.allocator import keep_freed_memory
from latentlens.kernels import attention_core, layer_norm
from latentlens.threads import available_cpus

WIDTHS = (8, 16)  # floats a vector: AVX2's register, AVX-512's


def per_call(lanes: int, inputs: torch.Tensor, params: tuple, calls: int) -> float:
    """Microseconds a forward call with the ``lanes``-float build."""
    library = layer_norm.library((("LANES", lanes),))
    original = layer_norm.library
    layer_norm.library = lambda: library
    try:
        layer_norm.embed_forward_values(inputs, *params, 1e-6)  # warm
        began = time.perf_counter()
        for _ in range(calls):
            layer_norm.embed_forward_values(inputs, *params, 1e-6)
        return (time.perf_counter() - began) / calls * 1e6
    finally:
        layer_norm.library = original


def core_per_call(lanes: int, packed: torch.Tensor, dz: torch.Tensor, options: tuple,
                  calls: int) -> float:  # fmt: skip
    """Microseconds a forward and backward call of the self-attention core with the
    ``lanes``-float library built for its sizes."""

    def built(spec: attention_core.Spec):
        return attention_core.library((*attention_core.fixed_defines(spec), ("LANES", lanes)))

    original = attention_core.kernels_for
    attention_core.kernels_for = built
    try:
        z, rows = attention_core.self_attention_core(packed, None, None, *options)  # warm
        began = time.perf_counter()
        for _ in range(calls):
            z, rows = attention_core.self_attention_core(packed, None, None, *options)
            attention_core.self_attention_core_backward(packed, None, None, rows, dz, *options)
        return (time.perf_counter() - began) / calls * 1e6
    finally:
        attention_core.kernels_for = original


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    keep_freed_memory()
    gen = torch.Generator().manual_seed(0)
    embed = torch.randn(128, 5, generator=gen)
    params = (embed, *(torch.randn(128, generator=gen) for _ in range(3)))
    print(f"embedding layer norm forward, torch {torch.__version__}; median us a call over "
          f"{args.rounds} rounds of {args.calls}")  # fmt: skip
    print(f"{'positions':>9} {'threads':>7} {'8 floats':>9} {'16 floats':>9} {'16 / 8':>7}")
    for positions in (16, 32):
        inputs = torch.randn(128, positions, 5, generator=gen)
        for threads in sorted({1, available_cpus()}):
            torch.set_num_threads(threads)
            times: dict[int, list[float]] = {lanes: [] for lanes in WIDTHS}
            for round_ in range(args.rounds):
                for lanes in WIDTHS if round_ % 2 == 0 else WIDTHS[::-1]:
                    times[lanes].append(per_call(lanes, inputs, params, args.calls))
            narrow, wide = (statistics.median(times[lanes]) for lanes in WIDTHS)
            print(f"{positions:>9} {threads:>7} {narrow:>9.1f} {wide:>9.1f} "
                  f"{wide / narrow:>6.2f}x")  # fmt: skip
    calls = max(1, args.calls // 3)
    print(f"\nself-attention core forward and backward (8 heads of 2, softmax; HYLA's rms "
          f"and relu), median us a call over {args.rounds} rounds of {calls}")  # fmt: skip
    print(f"{'positions':>9} {'attention':>9} {'threads':>7} {'8 floats':>9} "
          f"{'16 floats':>9} {'16 / 8':>7}")  # fmt: skip
    for positions in (16, 32):
        packed = torch.randn(128, positions, 8, 6, generator=gen)  # q, k and v of 2
        dz = torch.randn(128, positions, 8, 2, generator=gen)
        for name, normalization, activation in (("softmax", "softmax", None),
                                                ("hyla", "rms_head", "relu")):  # fmt: skip
            options = (2, 2, normalization, activation, False, 0, 1e-6)
            for threads in sorted({1, available_cpus()}):
                torch.set_num_threads(threads)
                times = {lanes: [] for lanes in WIDTHS}
                for round_ in range(args.rounds):
                    for lanes in WIDTHS if round_ % 2 == 0 else WIDTHS[::-1]:
                        times[lanes].append(core_per_call(lanes, packed, dz, options, calls))
                narrow, wide = (statistics.median(times[lanes]) for lanes in WIDTHS)
                print(f"{positions:>9} {name:>9} {threads:>7} {narrow:>9.0f} {wide:>9.0f} "
                      f"{wide / narrow:>6.2f}x")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
