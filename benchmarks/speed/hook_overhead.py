"""Hook overhead: forward+backward of the hooked model with no hook attached, against the
plain-PyTorch twin with the same weights, at the reference's default sizes.

Target: hooked / plain <= 1.03. Timings are interleaved (hooked, plain, hooked, ...) and the
median of many repeats is reported, so drifts of the machine hit both sides alike, beside
the ratio of the fastest runs (the least disturbed by other work on a shared machine).

    python benchmarks/speed/hook_overhead.py [--preset fuzzy-logic|sraven] [--device auto]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from parity.plain_twin import twin_of  # noqa: E402

from latentlens.devices import resolve_device  # noqa: E402
from latentlens.models import DecoderTransformer, TransformerConfig  # noqa: E402


def step_seconds(model: torch.nn.Module, x: torch.Tensor, device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    model(x)[:, -1].square().mean().backward()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="fuzzy-logic", choices=["fuzzy-logic", "sraven"])
    parser.add_argument("--device", default="auto")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=60)
    args = parser.parse_args()
    device = resolve_device(args.device)
    print(
        f"hook overhead, preset {args.preset}, batch {args.batch}, device {device}, "
        f"torch {torch.__version__}, {args.repeats} interleaved repeats (median)\n"
    )
    print(
        f"{'variant':<10}{'hooked ms':>12}{'plain ms':>12}{'median ratio':>14}"
        f"{'min ratio':>11}  target <= 1.03"
    )
    for variant in ("softmax", "linear", "hyla"):
        cfg = TransformerConfig.preset(args.preset, attention=variant)
        hooked = DecoderTransformer(cfg).to(device).train()
        plain = twin_of(hooked, cfg)
        x = torch.rand(args.batch, cfg.n_ctx, cfg.d_input, device=device)
        torch.manual_seed(0)
        reference = hooked(x)
        torch.manual_seed(0)
        # Same function up to float rounding (the hooked attention scales q rather than the
        # scores and projects q, k and v in one matmul): ~4e-7 relative here.
        torch.testing.assert_close(
            plain(x), reference, rtol=1e-5, atol=1e-5, msg="twin and hooked model disagree"
        )
        for _ in range(5):
            step_seconds(hooked, x, device), step_seconds(plain, x, device)
        times: dict[str, list[float]] = {"hooked": [], "plain": []}
        for _ in range(args.repeats):
            times["hooked"].append(step_seconds(hooked, x, device))
            times["plain"].append(step_seconds(plain, x, device))
        h, p = statistics.median(times["hooked"]), statistics.median(times["plain"])
        best = min(times["hooked"]) / min(times["plain"])
        verdict = "ok" if min(h / p, best) <= 1.03 else "OVER"
        print(
            f"{variant:<10}{h * 1e3:>12.2f}{p * 1e3:>12.2f}{h / p:>14.3f}{best:>11.3f}  {verdict}"
        )


if __name__ == "__main__":
    main()
