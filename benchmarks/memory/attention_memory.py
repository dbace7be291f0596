"""Activation memory of forward+backward against sequence length, softmax vs linear vs HYLA.

HYLA's value network materialises u[batch, query, key, d_head], which grows with T^2 d,
beside the [batch, head, query, key] of every variant. On any device this prints the bytes
autograd saves for the backward pass (measured with saved-tensor hooks); on CUDA also the
peak allocated memory of one step.

    python benchmarks/memory/attention_memory.py [--preset fuzzy-logic] [--device auto]
"""

from __future__ import annotations

import argparse

import torch

from latentlens.devices import resolve_device
from latentlens.models import DecoderTransformer, TransformerConfig

VARIANTS = ("softmax", "linear", "hyla")


def saved_bytes(model: torch.nn.Module, x: torch.Tensor) -> int:
    """Bytes of the distinct tensors autograd keeps for the backward pass of one step."""
    seen: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = model(x)[:, -1].square().mean()
    loss.backward()
    return sum(seen.values())


def cuda_peak_bytes(model: torch.nn.Module, x: torch.Tensor) -> int:
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    model(x)[:, -1].square().mean().backward()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - base


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="fuzzy-logic", choices=["fuzzy-logic", "sraven"])
    parser.add_argument("--device", default="auto")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--lengths", type=int, nargs="+", default=[16, 32, 64, 96, 128])
    args = parser.parse_args()
    device = resolve_device(args.device)
    print(
        f"activation memory (MiB) saved for backward, preset {args.preset}, "
        f"batch {args.batch}, device {device}"
    )
    columns = [*VARIANTS, "hyla/softmax"]
    print(f"{'T':>6}" + "".join(f"{c:>14}" for c in columns))
    peaks: dict[tuple[int, str], float] = {}
    for length in args.lengths:
        row = {}
        for variant in VARIANTS:
            cfg = TransformerConfig.preset(args.preset, attention=variant, n_ctx=length)
            model = DecoderTransformer(cfg).to(device).train()
            x = torch.rand(args.batch, length, cfg.d_input, device=device)
            row[variant] = saved_bytes(model, x) / 2**20
            if device.type == "cuda":
                model.zero_grad(set_to_none=False)
                peaks[length, variant] = cuda_peak_bytes(model, x) / 2**20
        ratio = row["hyla"] / row["softmax"]
        print(f"{length:>6}" + "".join(f"{row[v]:>14.1f}" for v in VARIANTS) + f"{ratio:>14.2f}")
    if peaks:
        print("\nCUDA peak allocated during one step (MiB)")
        print(f"{'T':>6}" + "".join(f"{v:>14}" for v in VARIANTS))
        for length in args.lengths:
            print(f"{length:>6}" + "".join(f"{peaks[length, v]:>14.1f}" for v in VARIANTS))


if __name__ == "__main__":
    main()
