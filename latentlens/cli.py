"""The ``latentlens`` command: a thin layer over the Python API a notebook uses."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from latentlens import __version__
from latentlens.cli_analysis import add_analysis_parsers
from latentlens.cli_atlas import add_atlas_parser
from latentlens.cli_choices import (
    DEVICE_CHOICES,
    MODEL_CHOICES,
    TASK_ALIASES,
    TASK_CHOICES,
    VARIANT_NAMES,
)
from latentlens.cli_connect import add_connect_parser
from latentlens.cli_sweep import add_sweep_parser
from latentlens.cli_training import add_eval_parser, add_train_parser
from latentlens.threads import ENVIRONMENT, MAX_THREADS, use_threads


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="latentlens",
        description="Mechanistic interpretability of attention latent codes: hooked models, "
        "compositional tasks, probes and figures.",
    )
    parser.add_argument("--version", action="version", version=f"latentlens {__version__}")
    parser.add_argument(
        "--debug", action="store_true", help="show the Python traceback of an unexpected error"
    )
    parser.add_argument(
        "--threads",
        type=int,
        help=f"CPU threads (default: ${ENVIRONMENT}, else the CPUs this process may use, one "
        "for tiny models). A new training run records its count in config.json and computes "
        "with it again on resume, since another count rounds differently; commands that only "
        "read (probe, inspect) also leave out CPUs busy with other work",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    inspect = commands.add_parser(
        "inspect",
        help="build the reference model of a task for every attention variant, run it once "
        "with a cache and print parameter counts, hook shapes and a latent code",
        description="Build the reference's default model for a task, for each attention "
        "variant, run one batch of the task through run_with_cache and print what can be "
        "studied.",
    )
    inspect.add_argument(
        "--preset",
        choices=TASK_CHOICES,
        default="fuzzy-logic",
        help="which task's default model, fed that task's batch (default: %(default)s)",
    )
    inspect.add_argument(
        "--model",
        choices=MODEL_CHOICES,
        default="transformer",
        help="model kind, as for `latentlens train` (default: %(default)s)",
    )
    inspect.add_argument(
        "--attention",
        choices=["all", *VARIANT_NAMES],
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
    add_connect_parser(commands)
    add_sweep_parser(commands)
    add_analysis_parsers(commands)
    add_atlas_parser(commands)
    return parser


DEFAULT_VARIANT = "softmax"  # TransformerConfig's default attention


def run_inspect(args: argparse.Namespace) -> int:
    import torch

    from latentlens.devices import resolve_device
    from latentlens.models import VARIANTS, build_model, canonical_kind, hook_axes
    from latentlens.tasks import make_task
    from latentlens.training import model_for_task

    if args.batch <= 0:
        raise ValueError(f"--batch={args.batch} is invalid: it must be a positive integer")
    device = resolve_device(args.device)
    kind = canonical_kind(args.preset, args.model)
    variants = sorted(VARIANTS) if args.attention == "all" else [args.attention]
    task = make_task(args.preset, None, seed=args.seed, device=device)
    batch = task.sample(args.batch, "train", task.make_generator(args.seed))
    print(f"latentlens {__version__}: {args.model} preset {args.preset} on {device}\n")
    paper_width = 2 + max(len("paper name"), *(len(VARIANTS[n].paper_name) for n in variants))
    print(
        f"{'variant':<30}{'paper name':<{paper_width}}{'norm':<10}{'value net':<16}{'params':>10}"
    )
    # the hooks listed are the default model's (softmax attention) when it is among them
    shown = DEFAULT_VARIANT if DEFAULT_VARIANT in variants else variants[-1]
    cache: dict[str, torch.Tensor] = {}
    for name in variants:
        torch.manual_seed(args.seed)
        config = model_for_task(args.preset, None, args.model, attention=name)
        model = build_model(kind, config).to(device).eval()
        with torch.no_grad():
            _, variant_cache = model.run_with_cache(*task.model_inputs(batch))
        if name == shown:
            cache = variant_cache
        spec = VARIANTS[name]
        value_net = spec.value_network + (f" ({spec.activation})" if spec.activation else "")
        params = sum(p.numel() for p in model.parameters())
        print(
            f"{name:<30}{spec.paper_name:<{paper_width}}{spec.normalization:<10}{value_net:<16}"
            f"{params:>10,}"
        )
    print(f"\nhook points of {shown} (batch {args.batch}):")
    name_width = 2 + max(len(hook_name) for hook_name in cache)
    shape_width = 2 + max(len(str(list(act.shape))) for act in cache.values())
    for hook_name, act in cache.items():
        axes = ", ".join(hook_axes(hook_name) or ())
        print(f"  {hook_name:<{name_width}}{str(list(act.shape)):<{shape_width}}{axes}".rstrip())
    # The last self-attention to run (the decoder's, in an encoder-decoder): its pattern
    # [batch, head, query, key] read as the code of the last query on itself.
    last_pattern = [n for n in cache if n.endswith(".attn.hook_pattern")][-1]
    code = cache[last_pattern][0, :, -1, -1]
    values = ", ".join(f"{v:+.3f}" for v in code.tolist())
    print(f"\nlatent code of the last token attending to itself ({last_pattern}): [{values}]")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    if getattr(args, "task", None) in TASK_ALIASES:
        args.task = TASK_ALIASES[args.task]
    try:
        if args.threads is not None:
            if not 1 <= args.threads <= MAX_THREADS:
                raise ValueError(
                    f"--threads {args.threads} is invalid: give an integer from 1 to {MAX_THREADS}"
                )
            os.environ[ENVIRONMENT] = str(args.threads)  # for this run and its workers
        if args.command != "sweep":  # a sweep's runs get a core each, in their workers
            use_threads()
        return args.handler(args)
    except ValueError as err:
        print(f"latentlens {args.command}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as err:
        detail = f"; {err}" if str(err) else ""
        print(f"latentlens {args.command}: interrupted{detail}", file=sys.stderr)
        return 130  # the shell's code for a command stopped by Ctrl-C (SIGINT)
    except BrokenPipeError:
        # The reader went away (``latentlens inspect | head``): stop quietly, and point
        # stdout at /dev/null so that Python's exit flush does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except OSError as err:  # the file system: full disk, read-only, permissions
        if args.debug:
            raise
        where = f" ({err.filename})" if err.filename else ""
        print(f"latentlens {args.command}: error: {err.strerror or err}{where}", file=sys.stderr)
        return 1
    except Exception as err:  # noqa: BLE001 - the last line of defence: one line, not a trace
        if args.debug:
            raise
        print(
            f"latentlens {args.command}: unexpected error: {type(err).__name__}: {err} "
            "(run `latentlens --debug ...` for the traceback and report it)",
            file=sys.stderr,
        )
        return 1


if __name__ == "__main__":
    sys.exit(main())
