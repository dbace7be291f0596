"""Position information: T5-style relative position biases and sinusoidal encodings.

docs/methods/attention.md: no absolute position by default; every attention layer adds
its own learned bias table ``[n_heads, num_buckets]`` to the scores, looked up by the
bucket of the key's distance from the query.
"""

from __future__ import annotations

import math

import torch
from torch import nn


def relative_position_buckets(
    q_len: int,
    k_len: int,
    num_buckets: int,
    max_distance: int,
    bidirectional: bool = False,
    device: torch.device | str | None = None,
    query_start: int = 0,
) -> torch.Tensor:
    """T5 bucket index of every (query, key) pair. Returns ``[q_len, k_len]`` int64.

    Queries sit at positions ``query_start, ..., query_start + q_len - 1`` and keys at
    ``0, ..., k_len - 1`` (``query_start`` > 0: a trailing slice of the queries).

    With ``bidirectional=False`` keys after the query share the bucket of distance 0.
    Distances below ``num_buckets // 2`` (halved again when bidirectional) get one bucket
    each; larger ones are binned logarithmically up to ``max_distance``, beyond which all
    fall in the last bucket. The arithmetic is float32, like T5's.
    """
    query_pos = torch.arange(query_start, query_start + q_len, device=device)[:, None]
    key_pos = torch.arange(k_len, device=device)[None, :]
    distance = query_pos - key_pos  # n = -(key - query)
    offset = torch.zeros_like(distance)
    if bidirectional:
        num_buckets //= 2
        offset = (distance < 0).long() * num_buckets
        distance = distance.abs()
    else:
        distance = distance.clamp(min=0)
    max_exact = num_buckets // 2
    eps = torch.finfo(torch.float32).eps
    log_ratio = torch.log(distance.float() / max_exact + eps) / math.log(max_distance / max_exact)
    large = max_exact + (log_ratio * (num_buckets - max_exact)).long()
    large = large.clamp(max=num_buckets - 1)
    return offset + torch.where(distance < max_exact, distance, large)


class RelativePositionBias(nn.Module):
    """Learned T5 relative position bias of one attention layer.

    Parameter ``table``: ``[n_heads, num_buckets]``. ``forward(q_len, k_len, query_start)``
    returns the bias ``[n_heads, q_len, k_len]`` that is added to the attention scores of
    queries at positions ``query_start, ...`` and keys at ``0, ...``.
    """

    def __init__(
        self, n_heads: int, num_buckets: int, max_distance: int, bidirectional: bool = False
    ) -> None:
        super().__init__()
        self.num_buckets = num_buckets
        self.max_distance = max_distance
        self.bidirectional = bidirectional
        self.table = nn.Parameter(torch.empty(n_heads, num_buckets))
        # Buckets of the first max_distance positions, precomputed so that the forward pass
        # is a slice and a gather (static, no host work: friendly to torch.compile). They
        # are computed on the CPU and moved to the device the module is built on: built on
        # the meta device (latentlens.training.memory counts parameters so), the arithmetic
        # would run through torch's decompositions and import torch._dynamo (about 2 s).
        grid = relative_position_buckets(
            max_distance, max_distance, num_buckets, max_distance, bidirectional, device="cpu"
        )
        self.register_buffer("bucket_grid", grid.to(torch.get_default_device()), persistent=False)

    def forward(self, q_len: int, k_len: int, query_start: int = 0) -> torch.Tensor:
        q_end = query_start + q_len
        if q_end <= self.bucket_grid.shape[0] and k_len <= self.bucket_grid.shape[1]:
            buckets = self.bucket_grid[query_start:q_end, :k_len]
        else:
            buckets = relative_position_buckets(
                q_len,
                k_len,
                self.num_buckets,
                self.max_distance,
                self.bidirectional,
                self.table.device,
                query_start,
            )
        # table @ one-hot(buckets) is the gather exactly (one product with 1, the rest
        # zeros); its gradient is a matmul, summed the same on any number of CPU threads
        # where the gather's scatter-add is not
        slots = torch.arange(self.num_buckets, device=buckets.device)
        one_hot = (buckets.unsqueeze(-1) == slots).to(self.table.dtype)  # no host sync
        return torch.einsum("hn,qkn->hqk", self.table, one_hot)


def sinusoidal_encoding(n_ctx: int, d_model: int) -> torch.Tensor:
    """Absolute sinusoidal position encodings ``[n_ctx, d_model]`` (sines, then cosines).

    Frequencies are geometric from 1 to 1/10000 over ``d_model // 2`` channels, the layout
    of the official code's optional absolute position.
    """
    half = d_model // 2
    position = torch.arange(n_ctx, dtype=torch.float64)[:, None]
    scale = -math.log(10000.0) / max(half - 1, 1)
    frequency = torch.exp(torch.arange(half, dtype=torch.float64) * scale)
    encoding = torch.zeros(n_ctx, d_model, dtype=torch.float64)
    encoding[:, :half] = torch.sin(position * frequency)
    encoding[:, half : 2 * half] = torch.cos(position * frequency)
    return encoding.float()
