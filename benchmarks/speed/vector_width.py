"""What the kernels' vector width costs on this CPU: the embedding layer norm built for
8-float vectors (AVX2's registers) and for 16-float ones (AVX-512's), side by side.

The kernel holds a block of 16 columns in registers. Built with 16-float vectors on a CPU
without AVX-512, GCC lowers each vector through the stack; built for the machine's own
width (what ``latentlens.kernels.layer_norm`` now does), it keeps them in registers. Both
builds compute the same bits (``tests/kernels/test_layer_norm.py``), so only the time
differs. The forward pass is timed at fuzzy logic's shapes (batch 128, T = 16 and Table
A1's T = 32; 5 input columns to d_model 128), the builds alternating in rounds, median
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
from latentlens.kernels import layer_norm
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
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
