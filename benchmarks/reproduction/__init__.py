"""The experiments of ``benchmarks/reproduction/reproduce.py``: one module per experiment, each with
``TITLE``, ``SIZES``, ``plan(size, seeds, out)`` (the runs it needs) and
``report(out, size, seeds, device, figures)`` (its markdown section and figures)."""
