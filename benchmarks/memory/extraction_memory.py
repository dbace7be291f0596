"""Streaming extraction keeps memory bounded by the batch, not the number of examples.

Extracts the last token's residual stream after every layer and the last token's latent
code of every layer (fuzzy logic, default model) for 10,000 and 100,000 examples, each in a
fresh process, and reports the peak resident memory above the process's baseline *minus
the kept output itself* (examples x kept floats x 4 bytes): flat means the batches' caches
never pile up. Beside it: what an unfiltered, unstreamed cache of the same examples would
take (one full forward's activations per example, measured on one batch).

    python benchmarks/memory/extraction_memory.py [--examples 10000 100000] [--batch 256]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

WORKER = r"""
import json, resource, sys, torch
from latentlens.models import DecoderTransformer, TransformerConfig
from latentlens.probes import extract
from latentlens.tasks import make_task
examples, batch = int(sys.argv[1]), int(sys.argv[2])
torch.manual_seed(0)
model = DecoderTransformer(TransformerConfig.preset("fuzzy-logic")).eval()
task = make_task("fuzzy-logic", None, seed=0)
names = [f"blocks.{l}.hook_resid_post" for l in range(2)]
names += [f"blocks.{l}.attn.hook_pattern" for l in range(2)]
select = {n: (lambda a, b: a[:, :, -1, -1]) for n in names if n.endswith("pattern")}
extract(model, task, "test", names, examples=batch, batch_size=batch, select=select)  # warm-up
baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
got = extract(model, task, "test", names, examples=examples, batch_size=batch, select=select)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
kept = sum(t.numel() * t.element_size() for t in got.activations.values())
kept += sum(t.numel() * t.element_size() for t in got.labels.values())
with torch.no_grad():
    _, cache = model.run_with_cache(task.sample(batch, "test").inputs)
full = sum(t.numel() * t.element_size() for t in cache.values()) / batch
print(json.dumps({"baseline": baseline, "peak": peak, "kept": kept, "full_per_example": full}))
"""


def measure(examples: int, batch: int) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, "-c", WORKER, str(examples), str(batch)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--batch", type=int, default=256)
    args = parser.parse_args()
    print(
        f"streaming extraction, fuzzy-logic default model, batch {args.batch}: 2 residual "
        "streams and 2 latent codes at the last token\n"
    )
    print(f"{'examples':>10}{'kept MiB':>10}{'peak above baseline MiB':>25}"
          f"{'minus kept MiB':>16}{'unstreamed full cache MiB':>27}")  # fmt: skip
    mib = 2**20
    for examples in args.examples:
        m = measure(examples, args.batch)
        growth = m["peak"] - m["baseline"]
        print(
            f"{examples:>10,}{m['kept'] / mib:>10.1f}{growth / mib:>25.1f}"
            f"{(growth - m['kept']) / mib:>16.1f}{m['full_per_example'] * examples / mib:>27.0f}"
        )


if __name__ == "__main__":
    main()
