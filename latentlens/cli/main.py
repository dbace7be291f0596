"""The ``latentlens`` command's parser and entry point: each command group's parser and
handler live in their own module of :mod:`latentlens.cli`."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from latentlens import __version__
from latentlens.cli.analysis import add_analysis_parsers
from latentlens.cli.atlas import add_atlas_parser
from latentlens.cli.choices import TASK_ALIASES
from latentlens.cli.connect import add_connect_parser
from latentlens.cli.inspect import add_inspect_parser
from latentlens.cli.models import add_models_parser
from latentlens.cli.sweep import add_sweep_parser
from latentlens.cli.training import add_eval_parser, add_train_parser
from latentlens.cli.zoo import add_zoo_parser
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

    add_inspect_parser(commands)
    add_train_parser(commands)
    add_eval_parser(commands)
    add_connect_parser(commands)
    add_sweep_parser(commands)
    add_analysis_parsers(commands)
    add_atlas_parser(commands)
    add_zoo_parser(commands)
    add_models_parser(commands)
    return parser


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
