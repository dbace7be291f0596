"""K-composition in SmolLM2: which earlier heads write the key the induction heads read?
(:mod:`latentlens.pretrained.score_sources`), checked by ablation against random heads.

    python benchmarks/real_models/k_composition.py [--model smollm2-135m] [--sequences 32]
        [--atlas docs/atlas/smollm2-135m/results.json] [--top 3] [--draws 20]

Sequences: a BOS token and 20 random tokens repeated once. Pairs: a token of the second
copy (query) and the token after its first occurrence (the induction key). For each
induction head (the head detector's top three in the atlas's results): the score on the
induction key split over the key's residual components (and, printed after, over the
query's), averaged over pairs; then the
head's mean attention weight on the induction key with the ``--top`` source heads' outputs
zeroed (at every position), beside ``--draws`` draws of as many random heads of the same
earlier layers (their mean output norm at the keys is printed beside the top heads'), and
of random vectors of the removed outputs' norm at every position added in their place (the
equal-norm control).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

from latentlens.pretrained import model_folder
from latentlens.pretrained.score_sources import residual_components, score_sources
from latentlens.probes.head_types import top_heads

LENGTH = 20


def head_of(name: str) -> tuple[int, int]:
    """(layer, head) of a component named ``L{layer}H{head}``."""
    layer, head = name[1:].split("H")
    return int(layer), int(head)


def induction_batch(sequences: int, vocab: int, bos: int, seed: int) -> tuple:
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.randint(100, vocab, (sequences, LENGTH), generator=generator)
    ids = torch.cat([torch.full((sequences, 1), bos), tokens, tokens], 1)
    rows = [(s, 1 + LENGTH + i, 2 + i) for s in range(sequences) for i in range(LENGTH - 1)]
    return ids, torch.tensor(rows)


def weight_on_key(
    model, ids, pairs, layer: int, head: int, removed: list, noise: torch.Generator | None = None
) -> float:
    """Mean attention weight of (layer, head) on the pairs' keys, the outputs of the
    ``removed`` heads (``(layer, head)``) taken out of the residual stream at every
    position, or, given ``noise``, a random vector of the same norm at each position added
    in their place (the equal-norm control)."""
    dim = model.config.hidden_size // model.config.num_attention_heads
    by_layer: dict[int, list[int]] = {}
    for source_layer, source_head in removed:
        by_layer.setdefault(source_layer, []).append(source_head)
    handles = []
    for source_layer, chosen in by_layer.items():
        o_proj = model.model.layers[source_layer].self_attn.o_proj

        def perturb(module, args, output, chosen=chosen):
            z, weight = args[0], module.weight
            taken = sum(
                z[..., h * dim : (h + 1) * dim] @ weight[:, h * dim : (h + 1) * dim].T
                for h in chosen
            )
            if noise is None:
                return output - taken
            direction = torch.randn(output.shape, generator=noise, dtype=output.dtype)
            scale = taken.norm(dim=-1, keepdim=True) / direction.norm(dim=-1, keepdim=True)
            return output + direction * scale

        handles.append(o_proj.register_forward_hook(perturb))
    try:
        with torch.no_grad():
            pattern = model(input_ids=ids, output_attentions=True).attentions[layer][:, head]
    finally:
        for handle in handles:
            handle.remove()
    return float(pattern[pairs[:, 0], pairs[:, 1], pairs[:, 2]].mean())


def output_norms(model, ids, pairs, layer: int) -> dict[str, float]:
    """Mean norm of each earlier head's output at the pairs' keys."""
    parts, names = residual_components(model, ids, layer)
    b, k = pairs[:, 0], pairs[:, 2]
    return {n: float(p[b, k].norm(dim=-1).mean()) for n, p in zip(names, parts, strict=True)
            if "H" in n and "MLP" not in n}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--atlas", type=Path, default=Path("docs/atlas/smollm2-135m/results.json"))
    parser.add_argument("--sequences", type=int, default=32)
    parser.add_argument("--top", type=int, default=3)
    parser.add_argument("--draws", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    start = time.perf_counter()
    folder = model_folder(args.model)
    model = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager").eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    ids, pairs = induction_batch(args.sequences, min(len(tokenizer), 20_000),
                                 tokenizer.bos_token_id or 0, args.seed)  # fmt: skip
    types = json.loads(args.atlas.read_text())["head_types"]
    heads = [(layer, head) for layer, head, _ in top_heads(types, "induction_head")]
    rows = []
    for layer, head in heads:
        sources = score_sources(model, ids, layer, head, pairs)
        mean = sources.contributions.mean(0)
        error = sources.contributions.std(0) / len(pairs) ** 0.5
        order = torch.argsort(mean, descending=True)
        ranked = [(sources.names[i], float(mean[i]), float(error[i])) for i in order[:8]]
        on_query = score_sources(model, ids, layer, head, pairs, side="query").contributions
        query_mean = on_query.mean(0)
        query_ranked = [(sources.names[i], float(query_mean[i]))
                        for i in torch.argsort(query_mean, descending=True)[:5]]  # fmt: skip
        top = [name for name, _, _ in ranked if "H" in name and "MLP" not in name][: args.top]
        zeroed = [head_of(n) for n in top]
        norms = output_norms(model, ids, pairs, layer)
        baseline = weight_on_key(model, ids, pairs, layer, head, [])
        targeted = weight_on_key(model, ids, pairs, layer, head, zeroed)
        generator = torch.Generator().manual_seed(args.seed + 1)
        candidates = [n for n in norms if n not in top]
        random_weights, random_norms, noise_weights = [], [], []
        for _ in range(args.draws):
            drawn = [candidates[i] for i in torch.randperm(len(candidates), generator=generator)
                     [: args.top]]  # fmt: skip
            heads_drawn = [head_of(n) for n in drawn]
            random_weights.append(weight_on_key(model, ids, pairs, layer, head, heads_drawn))
            random_norms.append(statistics.mean(norms[n] for n in drawn))
            noise_weights.append(weight_on_key(model, ids, pairs, layer, head, zeroed, generator))
        row = {
            "head": f"L{layer}H{head}", "pairs": len(pairs),
            "score": float(sources.scores.mean()),
            "top_sources": ranked,
            "top_query_sources": query_ranked,
            "ablated": top, "ablated_norm": statistics.mean(norms[n] for n in top),
            "weight": baseline, "weight_top_ablated": targeted,
            "weight_random_ablated": statistics.mean(random_weights),
            "weight_random_se": statistics.stdev(random_weights) / args.draws**0.5,
            "random_norm": statistics.mean(random_norms),
            "weight_equal_norm_noise": statistics.mean(noise_weights),
            "weight_noise_se": statistics.stdev(noise_weights) / args.draws**0.5,
        }  # fmt: skip
        rows.append(row)
        print(json.dumps(row), flush=True)
    seconds = time.perf_counter() - start
    print(f"\n{args.model}, {args.sequences} sequences of {LENGTH} random tokens repeated, "
          f"{len(pairs)} induction pairs; {seconds:.0f} s\n")  # fmt: skip
    print(
        "| induction head | score on the induction key | largest key-side sources (mean "
        "score share) | weight on the key | top sources removed | random vectors of their "
        f"norm instead (± se over {args.draws}) | random heads removed (± se) | output norm: "
        "top / random heads |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        sources = ", ".join(f"{n} {v:+.2f}" for n, v, _ in row["top_sources"][:5])
        print(
            f"| {row['head']} | {row['score']:.2f} | {sources} | {row['weight']:.3f} | "
            f"{row['weight_top_ablated']:.3f} ({', '.join(row['ablated'])}) | "
            f"{row['weight_equal_norm_noise']:.3f} ± {row['weight_noise_se']:.3f} | "
            f"{row['weight_random_ablated']:.3f} ± {row['weight_random_se']:.3f} | "
            f"{row['ablated_norm']:.1f} / {row['random_norm']:.1f} |"
        )
    print("\nThe same scores split at the query (Q-composition):\n")
    for row in rows:
        sources = ", ".join(f"{n} {v:+.2f}" for n, v in row["top_query_sources"])
        print(f"- {row['head']}: {sources}")
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
