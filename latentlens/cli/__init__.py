"""The ``latentlens`` command line: a thin layer over the Python API a notebook uses, one
module per command group (``training``: train and eval; ``analysis``: probe, figures and
demo; ``atlas``; ``connect``; ``sweep``; ``inspect``), the parser and entry point in
``main``."""

from latentlens.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
