"""Capture a whole training step in one CUDA graph and replay it.

Eager PyTorch spends most of a small model's step launching kernels from Python; a CUDA
graph records the step's kernels once and replays them with a single launch. The step must
be capturable: static shapes, data made on the device, no host synchronisation, a learning
rate held in a device tensor, and an optimiser that keeps its step count on the device
(fused or ``capturable`` AdamW).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

WARMUP_CALLS = 3


class GraphedStep:
    """Call ``prepare()`` then ``step()`` eagerly on a side stream for the first
    ``warmup`` calls (lazy initialisation: optimiser state, cuBLAS workspaces,
    torch.compile), then ``prepare()`` once and capture ``step()`` in a CUDA graph; every
    later call replays it.

    ``step`` returns a tensor (e.g. the loss); each call returns a fresh copy of it.
    ``prepare`` typically sets the gradients to None, so that the captured backward writes
    them instead of accumulating. ``generators`` are the custom ``torch.Generator`` objects
    the step draws from (the device's default generator is handled by PyTorch): each
    replay advances them as an eager call would.
    """

    def __init__(
        self,
        step: Callable[[], torch.Tensor],
        prepare: Callable[[], None],
        generators: Sequence[torch.Generator] = (),
        warmup: int = WARMUP_CALLS,
    ) -> None:
        if not torch.cuda.is_available():
            raise ValueError("CUDA graphs need a CUDA device; drop --cuda-graphs on the CPU")
        if warmup < 1:
            raise ValueError(f"warmup={warmup} must be at least 1 (capture needs a warm step)")
        self.step, self.prepare, self.generators = step, prepare, list(generators)
        self.warmup = warmup
        self.calls = 0
        self.graph: torch.cuda.CUDAGraph | None = None
        self.output: torch.Tensor | None = None

    def __call__(self) -> torch.Tensor:
        if self.graph is None and self.calls < self.warmup:
            self.calls += 1
            return self.eager()
        if self.graph is None:
            self.capture()
        assert self.graph is not None and self.output is not None
        self.graph.replay()
        return self.output.clone()

    def eager(self) -> torch.Tensor:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            self.prepare()
            output = self.step()
        torch.cuda.current_stream().wait_stream(side)
        return output

    def capture(self) -> None:
        graph = torch.cuda.CUDAGraph()
        if self.generators and not hasattr(graph, "register_generator_state"):
            raise RuntimeError(
                f"torch {torch.__version__} cannot capture draws from a custom generator in "
                "a CUDA graph (CUDAGraph.register_generator_state); upgrade torch or drop "
                "--cuda-graphs"
            )
        for generator in self.generators:
            graph.register_generator_state(generator)
        self.prepare()
        with torch.cuda.graph(graph):
            self.output = self.step()
        self.graph = graph
