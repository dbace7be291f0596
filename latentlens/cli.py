"""The ``latentlens`` command: a thin layer over the Python API a notebook uses."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

import torch

from latentlens import __version__
from latentlens.cli_analysis import add_analysis_parsers
from latentlens.cli_training import add_eval_parser, add_train_parser
from latentlens.devices import DEVICE_CHOICES, resolve_device
from latentlens.models import VARIANTS, DecoderTransformer, TransformerConfig, latent_codes

PRESETS = ("fuzzy-logic", "sraven")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="latentlens",
        description="Mechanistic interpretability of attention latent codes: hooked models, "
        "compositional tasks, probes and figures.",
    )
    parser.add_argument("--version", action="version", version=f"latentlens {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    inspect = commands.add_parser(
        "inspect",
        help="build the reference model of a task for every attention variant, run it once "
        "with a cache and print parameter counts, hook shapes and a latent code",
        description="Build the reference's default model for a task, for each attention "
        "variant, run one batch through run_with_cache and print what can be studied.",
    )
    inspect.add_argument(
        "--preset",
        choices=PRESETS,
        default="fuzzy-logic",
        help="which task's default model (default: %(default)s)",
    )
    inspect.add_argument(
        "--attention",
        choices=["all", *sorted(VARIANTS)],
        default="all",
        help="attention variant, or all (default: %(default)s)",
    )
    inspect.add_argument("--batch", type=int, default=4, help="batch size (default: 4)")
    inspect.add_argument(
        "--device",
        choices=DEVICE_CHOICES,
        default="auto",
        help="device (default: auto = CUDA when present)",
    )
    inspect.add_argument("--seed", type=int, default=2024, help="seed (default: 2024)")
    inspect.set_defaults(handler=run_inspect)
    add_train_parser(commands)
    add_eval_parser(commands)
    add_analysis_parsers(commands)
    return parser


def run_inspect(args: argparse.Namespace) -> int:
    if args.batch <= 0:
        raise ValueError(f"--batch={args.batch} is invalid: it must be a positive integer")
    device = resolve_device(args.device)
    variants = sorted(VARIANTS) if args.attention == "all" else [args.attention]
    print(f"latentlens {__version__}: preset {args.preset} on {device}\n")
    paper_width = 2 + max(len(VARIANTS[name].paper_name) for name in variants)
    print(
        f"{'variant':<30}{'paper name':<{paper_width}}{'norm':<10}{'value net':<16}{'params':>10}"
    )
    last_cache = None
    for name in variants:
        torch.manual_seed(args.seed)
        cfg = TransformerConfig.preset(args.preset, attention=name)
        model = DecoderTransformer(cfg).to(device).eval()
        x = torch.rand(args.batch, cfg.n_ctx, cfg.d_input, device=device)
        with torch.no_grad():
            _, last_cache = model.run_with_cache(x)
        spec = VARIANTS[name]
        value_net = spec.value_network + (f" ({spec.activation})" if spec.activation else "")
        params = sum(p.numel() for p in model.parameters())
        print(
            f"{name:<30}{spec.paper_name:<{paper_width}}{spec.normalization:<10}{value_net:<16}"
            f"{params:>10,}"
        )
    assert last_cache is not None
    print(f"\nhook points of {variants[-1]} (batch {args.batch}):")
    for hook_name, act in last_cache.items():
        print(f"  {hook_name:<36}{list(act.shape)}")
    last = cfg.n_ctx - 1
    code = latent_codes(last_cache, layer=cfg.n_layers - 1)[0, last, last]
    values = ", ".join(f"{v:+.3f}" for v in code.tolist())
    print(f"\nlatent code of the last token attending to itself, last layer: [{values}]")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    try:
        return args.handler(args)
    except ValueError as err:
        print(f"latentlens {args.command}: error: {err}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader went away (``latentlens inspect | head``): stop quietly, and point
        # stdout at /dev/null so that Python's exit flush does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    sys.exit(main())
