"""``latentlens connect``: seed 001's layer-connection experiment, the connection inserted
into a pretrained translation model and fine-tuned in four conditions."""

from __future__ import annotations

import argparse
from pathlib import Path

from latentlens.devices import DEVICE_CHOICES


def add_connect_parser(commands: argparse._SubParsersAction) -> None:
    connect = commands.add_parser(
        "connect",
        help="insert the encoder-decoder layer connection into a pretrained model and "
        "fine-tune it in the four conditions of its paper",
        description="Fine-tune a pretrained translation model in four conditions with one "
        "training config: the layer connection with the original initialisation (original), "
        "the model unmodified (unmodified), the connection with the GCA initialisation (gca), "
        "and every weight re-initialised with the connection (scratch). --base is a finished "
        "`latentlens train --task translation` run (or several, one per seed), or a Hugging "
        "Face MarianMT model name or folder with --dataset. Prints BLEU, CTER, loss and how "
        "far the routing moved, mean ± std over seeds, beside the paper's BLEU; writes "
        "OUT/connect.json and one run directory per condition and seed.",
    )
    connect.add_argument(
        "--base",
        nargs="+",
        required=True,
        metavar="RUN_OR_MODEL",
        help="finished translation run(s), or a MarianMT model (e.g. Helsinki-NLP/opus-mt-de-en)",
    )
    connect.add_argument(
        "--conditions",
        nargs="+",
        default=["all"],
        metavar="NAME",
        help="all (default) or some of: original unmodified gca scratch",
    )
    connect.add_argument("--out", type=Path, help="default: runs/connect-BASENAME")
    connect.add_argument(
        "--seeds", type=int, nargs="+", metavar="SEED", help="with one --base: these seeds"
    )
    connect.add_argument("--steps", type=int, help="default: a third of the base's steps")
    connect.add_argument("--lr", type=float, help="default: a tenth of the base's")
    connect.add_argument("--batch-size", type=int, help="default: the base's")
    connect.add_argument("--eval-every", type=int, help="default: half the steps")
    connect.add_argument("--device", choices=DEVICE_CHOICES, default="auto")
    connect.add_argument("--quiet", action="store_true", help="no progress bars")
    connect.set_defaults(handler=run_connect)


def run_connect(args: argparse.Namespace) -> int:
    from latentlens import connect

    conditions = connect.parse_conditions(args.conditions)
    out = args.out or Path("runs") / f"connect-{Path(args.base[0]).name}"
    runs = connect.plan(args.base, conditions, out, args.seeds)
    overrides = {"steps": args.steps, "lr": args.lr, "batch_size": args.batch_size,
                 "eval_every": args.eval_every}  # fmt: skip
    connect.run_conditions(runs, overrides, device=args.device, quiet=args.quiet)
    results = [connect.run_result(one) for one in runs]
    path = connect.write_results(out, results)
    print(connect.format_table(connect.summarise(results)))
    print(f"results: {path}")
    connected = [one for one in runs if connect.CONDITIONS[one.condition].connection != "none"]
    if connected:
        print(f"routing over training: latentlens figures {connected[-1].run}")
    return 0
