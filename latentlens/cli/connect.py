"""``latentlens connect``: seed 001's layer-connection experiment, the connection inserted
into a pretrained translation model and fine-tuned in four conditions."""

from __future__ import annotations

import argparse
from pathlib import Path

from latentlens.cli.choices import DEVICE_CHOICES


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
    marian = connect.add_argument_group(
        "a Hugging Face MarianMT --base (defaults: the author's wmt16 de-en settings)"
    )
    marian.add_argument(
        "--dataset",
        default="wmt16:de-en",
        help="a `datasets` name[:config], or a local folder of train/validation/test "
        ".jsonl/.json/.csv files of pairs (default: %(default)s)",
    )
    marian.add_argument("--source-lang", default="de", help="default: %(default)s")
    marian.add_argument("--target-lang", default="en", help="default: %(default)s")
    marian.add_argument("--train-pairs", type=int, help="first N training pairs (1,000,000)")
    marian.add_argument("--eval-pairs", type=int, help="validation pairs for the loss (1,000)")
    marian.add_argument("--test-pairs", type=int, help="test pairs for BLEU (all)")
    marian.add_argument("--num-beams", type=int, help="beam size (4)")
    marian.add_argument("--max-length", type=int, help="tokens (128)")
    connect.add_argument("--device", choices=DEVICE_CHOICES, default="auto")
    connect.add_argument("--quiet", action="store_true", help="no progress bars")
    connect.set_defaults(handler=run_connect)


def run_connect(args: argparse.Namespace) -> int:
    from latentlens import connect

    conditions = connect.parse_conditions(args.conditions)
    out = args.out or Path("runs") / f"connect-{Path(args.base[0]).name}"
    if connect.is_latentlens_run(args.base[0]):
        runs = connect.plan(args.base, conditions, out, args.seeds)
        overrides = {"steps": args.steps, "lr": args.lr, "batch_size": args.batch_size,
                     "eval_every": args.eval_every}  # fmt: skip
        connect.run_conditions(runs, overrides, device=args.device, quiet=args.quiet)
        results = [connect.run_result(one) for one in runs]
    else:
        results = run_marian(args, conditions, out)
    path = connect.write_results(out, results)
    print(connect.format_table(connect.summarise(results)))
    print(f"results: {path}")
    connected = [r["run"] for r in results if r["routing"] is not None]
    if connected:
        print(f"routing over training: latentlens figures {connected[-1]}")
    return 0


def run_marian(args: argparse.Namespace, conditions: list[str], out: Path) -> list[dict]:
    """The four conditions on a Hugging Face MarianMT model."""
    from latentlens import connect
    from latentlens.devices import resolve_device
    from latentlens.pretrained.finetune import MarianFineTune, fine_tune_marian
    from latentlens.pretrained.hub import offline_unless_reachable

    if len(args.base) > 1:
        raise ValueError("give one Hugging Face --base (a name or folder); --seeds for seeds")
    name, _, dataset_config = args.dataset.partition(":")
    given = {"train_pairs": args.train_pairs, "eval_pairs": args.eval_pairs,
             "test_pairs": args.test_pairs, "num_beams": args.num_beams,
             "max_length": args.max_length, "steps": args.steps, "lr": args.lr,
             "batch_size": args.batch_size, "eval_every": args.eval_every}  # fmt: skip
    settings = {k: v for k, v in given.items() if v is not None}
    runs = connect.plan_marian(args.base[0], conditions, out, args.seeds)
    device = resolve_device(args.device)
    with offline_unless_reachable(args.base[0]):  # no half-minute of hub retries offline
        for one in runs:
            cfg = MarianFineTune(dataset=name, dataset_config=dataset_config or None,
                                 source_lang=args.source_lang, target_lang=args.target_lang,
                                 seed=one.seed, **settings)  # fmt: skip
            fine_tune_marian(one.run, args.base[0], one.condition, cfg, device, quiet=args.quiet)
    return [connect.marian_result(one) for one in runs]
