"""``latentlens inspect``: every attention variant of a task's default model, run once with a
cache: parameter counts, hook shapes and a latent code."""

from __future__ import annotations

import argparse

from latentlens import __version__
from latentlens.cli.choices import DEVICE_CHOICES, MODEL_CHOICES, TASK_CHOICES, VARIANT_NAMES

# inspect runs one cached forward pass per attention variant: a look, not an evaluation
MAX_INSPECT_BATCH = 4_096


def add_inspect_parser(commands: argparse._SubParsersAction) -> None:
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


DEFAULT_VARIANT = "softmax"  # TransformerConfig's default attention


def run_inspect(args: argparse.Namespace) -> int:
    import torch

    from latentlens.devices import resolve_device
    from latentlens.models import VARIANTS, build_model, canonical_kind, hook_axes
    from latentlens.tasks import make_task
    from latentlens.training import model_for_task

    if args.batch <= 0:
        raise ValueError(f"--batch={args.batch} is invalid: it must be a positive integer")
    if args.batch > MAX_INSPECT_BATCH:  # one forward pass with a cache, for a quick look
        raise ValueError(f"--batch={args.batch:,} is invalid: at most {MAX_INSPECT_BATCH:,}")
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
