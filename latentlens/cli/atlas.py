"""``latentlens atlas MODEL``: the latent-code report of a language model."""

from __future__ import annotations

import argparse
from pathlib import Path

from latentlens.cli.choices import DEVICE_CHOICES, RELATION_SOURCES


def add_atlas_parser(commands: argparse._SubParsersAction) -> None:
    atlas = commands.add_parser(
        "atlas",
        help="the latent-code report of a Hugging Face language model on generated "
        "repeated-token pairs (decoding ID->OOD, clustering, heads, ablations)",
        description="Boot MODEL as a TransformerLens TransformerBridge (a hub name such as "
        "gpt2 needs internet once; a folder written with save_pretrained works offline), "
        "generate repeated-token pairs (duplicate / induction / unrelated keys at three "
        "distances, three combinations held out) and write the atlas of its latent codes: "
        "OUT/report.md, OUT/report.html, OUT/results.json and OUT/figures/.",
    )
    atlas.add_argument(
        "model",
        metavar="MODEL",
        help="a real model fetched with `latentlens models fetch` (smollm2-135m, minilm-l6), "
        "a hub name (e.g. gpt2) or a model folder",
    )
    atlas.add_argument("--out", type=Path, help="default: runs/atlas/<model name>")
    atlas.add_argument("--examples", type=int, default=3000, help="pairs (default: %(default)s)")
    atlas.add_argument("--seq-len", type=int, default=32, help="tokens per sequence (default: 32)")
    atlas.add_argument("--seed", type=int, default=0)
    atlas.add_argument(
        "--batch-size", type=int, default=128,
        help="pairs per forward pass when reading the codes (default: %(default)s; lower it "
        "where a large model or long text runs out of memory)",
    )  # fmt: skip
    atlas.add_argument(
        "--random-weights", action="store_true", help="the architecture with random weights"
    )
    atlas.add_argument(
        "--no-ablation", action="store_true",
        help="skip the per-head ablation table (a forward pass per head: long on a large "
        "model); the causal check of the detector's induction heads still runs",
    )  # fmt: skip
    atlas.add_argument(
        "--relation",
        choices=RELATION_SOURCES,
        default="repeated-tokens",
        help="repeated-tokens: random tokens with one repeat; text: natural sentences with a "
        "repeated one (previous / duplicate / induction / unrelated keys) (default: "
        "%(default)s)",
    )
    atlas.add_argument(
        "--padding-side", choices=("right", "left"), default="right",
        help="where --relation text pads shorter sequences (default: right)",
    )  # fmt: skip
    atlas.add_argument(
        "--ablation-examples", type=int, default=256,
        help="pairs each head's ablation is scored on (one forward pass per head; default: 256)",
    )  # fmt: skip
    atlas.add_argument(
        "--detector-stories", type=int, default=8,
        help="stories TransformerLens's head detector reads (0 skips it; default: 8)",
    )  # fmt: skip
    atlas.add_argument(
        "--induction-sequences", type=int, default=32,
        help="repeated random sequences the causal check of the detector's induction heads "
        "scores (a forward pass of them unablated, with those heads zeroed and with each "
        "random control; default: %(default)s)",
    )  # fmt: skip
    atlas.add_argument(
        "--prompt",
        help="the text the report's token-level attention viewer shows (default: a story "
        "of the text relations' grammar with a sentence repeated)",
    )
    atlas.add_argument("--device", choices=DEVICE_CHOICES, default="auto")
    atlas.set_defaults(handler=run_atlas_command)


def run_atlas_command(args: argparse.Namespace) -> int:
    from latentlens.reports.atlas import run_atlas  # noqa: PLC0415 (imports transformers)

    limits = (  # bounded before anything loads: 10**18 pairs would never return
        ("--examples", args.examples, 1, 1_000_000),
        ("--batch-size", args.batch_size, 1, 65_536),
        ("--seq-len", args.seq_len, 2, 8192),
        ("--ablation-examples", args.ablation_examples, 1, 4096),
        ("--detector-stories", args.detector_stories, 0, 256),
        ("--induction-sequences", args.induction_sequences, 2, 4096),
    )
    for option, value, low, high in limits:
        if not low <= value <= high:
            raise ValueError(f"{option} {value} is invalid: give an integer from {low} to {high}")
    out = args.out or Path("runs/atlas") / Path(args.model.rstrip("/")).name
    results = run_atlas(
        args.model, out, args.examples, args.seq_len, args.device, args.seed,
        args.random_weights, not args.no_ablation, args.relation, args.padding_side,
        args.detector_stories, args.ablation_examples, args.prompt, args.batch_size,
        args.induction_sequences,
    )  # fmt: skip
    overall = results["decoding"][0]
    print(
        f"relation decoded from every code: ID {overall['id_test']:.3f}, OOD "
        f"{overall['test']:.3f} (chance {overall['chance']:.3f}, shuffled labels "
        f"{overall['shuffled']:.3f})"
    )
    for note in results["degenerate"]:
        print(f"warning: {note}")
    print(f"report: {out / 'report.html'} and {out / 'report.md'}")
    return 0
