"""The atlas's code extraction on a real model beside a plain transformers loop.

For SmolLM2-135M (fetched with ``latentlens models fetch smollm2-135m``) and N labelled
pairs (the atlas's repeated-token pairs: duplicate / induction / unrelated keys), each
method computes every pair's code a(l, h, q, k) over all 30 layers and 9 query heads:

- ``latentlens``: :func:`latentlens.probes.pair_codes` on the TransformerBridge (hooks keep
  the pair's slice of each layer's pattern as it is made; the pass stops after the last
  layer's pattern);
- ``output_attentions``: the same batches through transformers' own model (eager
  attention) with ``output_attentions=True``, the codes gathered from the attentions.

Each runs in a fresh process, after one unmeasured forward pass that touches every
(memory-mapped) weight; it prints pairs per second and the peak resident memory above the
process at that point (``ru_maxrss``), the largest difference between the two methods'
codes, and the ratios.

    python benchmarks/real_models/atlas_speed.py [--pairs 1000 10000] [--batch 64] [--seq-len 32]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

WORKER = r"""
import json, resource, sys, time, torch
from latentlens.threads import use_threads
from latentlens.pretrained import load_language_model, model_folder
from latentlens.probes import pair_codes
from latentlens.reports.atlas import atlas_pairs
method, out = sys.argv[1], sys.argv[5]
pairs_n, batch, seq_len = (int(v) for v in sys.argv[2:5])
use_threads()
bridge = load_language_model("smollm2-135m", "cpu")
pairs = atlas_pairs(bridge, "repeated-tokens", pairs_n, seq_len, 0, "right")
if method == "output_attentions":
    from transformers import AutoModelForCausalLM
    del bridge
    model = AutoModelForCausalLM.from_pretrained(model_folder("smollm2-135m"),
                                                 attn_implementation="eager").eval()
warm = pairs.tokens[:1, :4]  # one short pass: the memory-mapped weights are read, little else
with torch.no_grad():
    (bridge if method == "latentlens" else model)(warm)
baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
start = time.perf_counter()
codes = []
for split in ("id", "ood"):
    if method == "latentlens":
        codes.append(pair_codes(bridge, pairs, split, batch_size=batch).codes)
        continue
    with torch.no_grad():
        for b in pairs.labelled_batches(split, None, batch):
            attentions = model(input_ids=b.inputs, output_attentions=True).attentions
            rows = torch.arange(len(b))
            query, keys = b.labels["query"], b.labels["keys"]
            per_layer = [a[rows, :, query].gather(
                2, keys[:, None, :].expand(-1, a.shape[1], -1)) for a in attentions]
            codes.append(torch.stack(per_layer, dim=1))
seconds = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
codes = torch.cat(codes)
torch.save(codes, out)
print(json.dumps({"seconds": seconds, "peak_above_model": peak - baseline,
                  "pairs": len(codes), "threads": torch.get_num_threads()}))
"""


def measure(method: str, pairs: int, batch: int, seq_len: int, out: Path) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", WORKER, method, str(pairs), str(batch), str(seq_len), str(out)],
        capture_output=True, text=True,
    )  # fmt: skip
    if done.returncode:
        raise SystemExit(f"{method} at {pairs} pairs failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, nargs="+", default=[1_000, 10_000])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--seq-len", type=int, default=32)
    args = parser.parse_args()
    import torch  # noqa: PLC0415

    print(f"SmolLM2-135M, repeated-token pairs of {args.seq_len} tokens, batch {args.batch}, "
          "CPU\n")  # fmt: skip
    header = (f"{'pairs':>7} {'method':>18} {'pairs/s':>9} {'peak MiB above model':>21} "
              f"{'max |difference|':>17}")  # fmt: skip
    print(header)
    with tempfile.TemporaryDirectory() as folder:
        for pairs in args.pairs:
            got = {}
            for method in ("latentlens", "output_attentions"):
                got[method] = measure(method, pairs, args.batch, args.seq_len,
                                      Path(folder) / f"{method}.pt")  # fmt: skip
            ours_codes = torch.load(Path(folder) / "latentlens.pt")
            plain_codes = torch.load(Path(folder) / "output_attentions.pt")
            difference = float((ours_codes - plain_codes).abs().max())
            for method, m in got.items():
                print(f"{m['pairs']:>7} {method:>18} {m['pairs'] / m['seconds']:>9.1f} "
                      f"{m['peak_above_model'] / 2**20:>21.0f} {difference:>17.1e}")  # fmt: skip
            ours, plain = got["latentlens"], got["output_attentions"]
            print(f"{'':>7} {'ratio':>18} {plain['seconds'] / ours['seconds']:>8.2f}x "
                  f"{ours['peak_above_model'] / max(plain['peak_above_model'], 1):>20.2f}x "
                  f"({ours['threads']} threads)")  # fmt: skip


if __name__ == "__main__":
    main()
