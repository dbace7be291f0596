"""Greedy decoding's speed: the incremental decoder (``greedy_decode``: the newest position
alone at each step) against re-decoding the whole prefix at every step (the definition,
and what ``greedy_decode`` did before), on the translation task's test sentences with
untrained weights. Prints sentences per second of each and their ratio; the ids are
checked equal.

    python benchmarks/speed/greedy_decode.py [--sentences 1000] [--d-model 64] [--threads 2]
"""

from __future__ import annotations

import argparse
import time

import torch

from latentlens.models import EncoderDecoderConfig, EncoderDecoderTransformer
from latentlens.tasks import make_task
from latentlens.tasks.translation import BOS, EOS


@torch.no_grad()
def whole_prefix_decode(model: EncoderDecoderTransformer, source: torch.Tensor) -> torch.Tensor:
    """The reference: every step decodes the whole prefix (``[batch, n_ctx_target]`` ids)."""
    max_len = model.cfg.n_ctx_target
    encoder_outputs, mask = model.encode(source)
    memories = model.memories(encoder_outputs)
    tokens = torch.full((len(source), 1), BOS, dtype=torch.long)
    done = torch.zeros(len(source), dtype=torch.bool)
    for _ in range(max_len):
        step = model.decode(tokens, memories, mask)[:, -1].argmax(-1)
        step = torch.where(done, model.cfg.pad_id, step)
        done = done | (step == EOS)
        tokens = torch.cat([tokens, step[:, None]], dim=1)
        if bool(done.all()):
            break
    padding = max_len + 1 - tokens.shape[1]
    return torch.nn.functional.pad(tokens[:, 1:], (0, padding), value=model.cfg.pad_id)


def timed(decode, model, source: torch.Tensor, chunk: int) -> tuple[float, torch.Tensor]:
    start = time.perf_counter()
    ids = torch.cat([decode(model, source[i : i + chunk]) for i in range(0, len(source), chunk)])
    return len(source) / (time.perf_counter() - start), ids


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sentences", type=int, default=1000)
    parser.add_argument("--d-model", type=int, default=64)
    parser.add_argument("--chunk", type=int, default=256, help="sentences decoded at once")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    task = make_task("translation", None, seed=0)
    width = args.d_model
    config = EncoderDecoderConfig(**task.model_io(), d_model=width, qk_dim=width, v_dim=width,
                                  d_mlp=2 * width, n_heads=4)  # fmt: skip
    model = EncoderDecoderTransformer(config).eval()
    source, _ = task.model_inputs(task.sample(args.sentences, "test"))

    def incremental(m, s):
        return m.greedy_decode(s, BOS, EOS)

    # untrained weights rarely draw EOS: every sentence runs the full n_ctx_target steps
    slow, slow_ids = timed(whole_prefix_decode, model, source, args.chunk)
    fast, fast_ids = timed(incremental, model, source, args.chunk)
    assert torch.equal(fast_ids, slow_ids), "the two decoders disagree"
    print(f"{args.sentences} sentences, {config.n_ctx_target} target positions, d_model "
          f"{width}, {args.threads} threads, torch {torch.__version__}")  # fmt: skip
    print(f"whole prefix each step: {slow:8.1f} sentences/s")
    print(f"incremental:            {fast:8.1f} sentences/s  ({fast / slow:.2f}x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
