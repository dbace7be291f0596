"""``latentlens zoo``: the converged models that ship with latentlens, and their cards."""

from __future__ import annotations

import argparse
import json


def add_zoo_parser(commands: argparse._SubParsersAction) -> None:
    zoo = commands.add_parser(
        "zoo",
        help="list the trained models that ship with latentlens (use one as zoo:NAME)",
        description="The model zoo: converged models with a model card each (config, task "
        "split, training command, machine, wall time, metrics with standard errors on a "
        "fixed evaluation set). Every command that reads a run directory takes zoo:NAME; in "
        "Python, latentlens.zoo.load(NAME) returns the hooked model and its task.",
    )
    zoo.add_argument("name", nargs="?", help="print this model's card (JSON) instead")
    zoo.set_defaults(handler=run_zoo)


def metric_cell(metrics: dict[str, dict[str, float]]) -> str:
    """Each split's main metric (R² or accuracy, else the loss) ± its standard error."""
    cells = []
    for split, values in metrics.items():
        name = next((k for k in ("r2", "accuracy") if k in values), "loss")
        cells.append(f"{split} {name} {values[name]:.3f} ± {values[f'{name}_se']:.3f}")
    return ", ".join(cells)


def run_zoo(args: argparse.Namespace) -> int:
    from latentlens import zoo

    if args.name:
        print(json.dumps(zoo.card(args.name), indent=1))
        return 0
    names = zoo.names()
    if not names:
        print("the zoo is empty in this installation")
        return 0
    print(f"{len(names)} models (use as zoo:NAME; `latentlens zoo NAME` prints a card)")
    sizes = sorted({zoo.card(name)["evaluation"]["examples_per_split"] for name in names})
    shown = " or ".join(f"{size:,}" for size in sizes)
    print(f"metrics: each run's fixed evaluation set, {shown} examples a split (± standard "
          "error over batches); `latentlens eval zoo:NAME` gives the same numbers")  # fmt: skip
    for name in names:
        card = zoo.card(name)
        attention = card["config"]["model"].get("attention", "-")
        paper = ", ".join(f"{k} {v}" for k, v in card["paper"].items() if k != "source")
        print(
            f"  {name:<28} {attention:<8} {card['training']['steps']:>7,} steps  "
            f"{metric_cell(card['evaluation']['metrics'])}  (paper: {paper})"
        )
    return 0
