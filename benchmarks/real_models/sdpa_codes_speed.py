"""Codes of chosen query-key pairs: read beside SDPA (``sdpa_pair_codes``) against the
``output_attentions`` loop (eager attention, every layer's full pattern, then the pairs
picked out), side by side on one machine, at 1,000 and 10,000 pairs and sequence lengths
256 and 2,048: pairs/s and peak memory above the loaded model.

    python benchmarks/real_models/sdpa_codes_speed.py [--model smollm2-135m] [--sequences 2]
        [--lengths 256 2048] [--pairs 1000 10000] [--rounds 2]

Each measurement runs in its own process (the model loaded and run once on 8 tokens, then
the peak resident memory reset through /proc/self/clear_refs, so the peak is the method's
own); the two methods
alternate within each round, and the table gives each one's median over rounds. The pairs
are spread over ``--sequences`` random token sequences, fed one at a time (batch 1),
queries drawn uniformly and keys at or before the query (a causal model's nonzero codes).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

METHODS = ("output_attentions", "sdpa_pair_codes")


def resident_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def measure(model_name: str, method: str, length: int, count: int, sequences: int) -> dict:
    """One measurement, in this process: seconds and peak extra memory (MiB)."""
    import torch
    from transformers import AutoModelForCausalLM

    from latentlens.pretrained import model_folder, sdpa_pair_codes

    torch.manual_seed(0)
    attention = "eager" if method == "output_attentions" else "sdpa"
    model = AutoModelForCausalLM.from_pretrained(
        model_folder(model_name), attn_implementation=attention
    ).eval()
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(100, 20_000, (sequences, length), generator=generator)
    which = torch.randint(0, sequences, (count,), generator=generator)
    queries = torch.randint(0, length, (count,), generator=generator)
    keys = (torch.rand(count, generator=generator) * (queries + 1)).long()
    with torch.no_grad():  # touch every weight (mapped from the file) before the peak
        model(input_ids=ids[:1, :8])
    Path("/proc/self/clear_refs").write_text("5")  # the peak from here on
    start_rss = resident_kib("VmRSS")
    start = time.perf_counter()
    found = 0
    for s in range(sequences):
        chosen = which == s
        pairs = torch.stack([torch.zeros_like(queries[chosen]), queries[chosen], keys[chosen]], 1)
        if method == "output_attentions":
            with torch.no_grad():
                full = model(input_ids=ids[s : s + 1], output_attentions=True).attentions
            codes = torch.stack([a[0, :, pairs[:, 1], pairs[:, 2]].T for a in full], 1)
            del full
        else:
            codes = sdpa_pair_codes(model, ids[s : s + 1], pairs)
        found += len(codes)
    seconds = time.perf_counter() - start
    peak = (resident_kib("VmHWM") - start_rss) / 1024
    assert found == count
    return {"method": method, "length": length, "pairs": count, "seconds": seconds,
            "pairs_per_s": count / seconds, "peak_mib": peak}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--sequences", type=int, default=2)
    parser.add_argument("--lengths", type=int, nargs="+", default=[256, 2048])
    parser.add_argument("--pairs", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--one", nargs=3, metavar=("METHOD", "LENGTH", "PAIRS"))
    args = parser.parse_args(argv)
    if args.one:
        method, length, count = args.one[0], int(args.one[1]), int(args.one[2])
        print(json.dumps(measure(args.model, method, length, count, args.sequences)))
        return 0
    rows: dict[tuple, list[dict]] = {}
    for _ in range(args.rounds):
        for length in args.lengths:
            for count in args.pairs:
                for method in METHODS:
                    done = subprocess.run(
                        [sys.executable, __file__, "--model", args.model, "--sequences",
                         str(args.sequences), "--one", method, str(length), str(count)],
                        capture_output=True, text=True, check=True,
                    )  # fmt: skip
                    row = json.loads(done.stdout.strip().splitlines()[-1])
                    rows.setdefault((length, count, method), []).append(row)
                    print(json.dumps(row), flush=True)
    print(f"\n{args.model}, {args.sequences} sequences of each length, batch 1, median of "
          f"{args.rounds} rounds:\n")  # fmt: skip
    print(
        "| length | pairs | output_attentions pairs/s | sdpa_pair_codes pairs/s | speed-up "
        "| output_attentions peak MiB | sdpa_pair_codes peak MiB |"
    )
    print("|---|---|---|---|---|---|---|")
    for length in args.lengths:
        for count in args.pairs:
            eager, fast = (rows[(length, count, m)] for m in METHODS)
            rate = [statistics.median(r["pairs_per_s"] for r in rs) for rs in (eager, fast)]
            peak = [statistics.median(r["peak_mib"] for r in rs) for rs in (eager, fast)]
            print(
                f"| {length:,} | {count:,} | {rate[0]:,.0f} | {rate[1]:,.0f} | "
                f"{rate[1] / rate[0]:.2f}x | {peak[0]:,.0f} | {peak[1]:,.0f} |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
