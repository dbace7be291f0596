"""Progress bars that read cleanly wherever they show.

A terminal gets tqdm's text bar. A Jupyter kernel gets tqdm's widget, one bar updated in
place, where ipywidgets is installed; without it no bar, since tqdm's text fallback writes
a line per update into the cell (hundreds of red lines in an executed notebook) after a
``TqdmWarning``.
"""

from __future__ import annotations

import importlib.util
import sys
from typing import Any

from tqdm import tqdm


def in_notebook() -> bool:
    """Whether this process is a Jupyter kernel (IPython's kernel app is running)."""
    if "IPython" not in sys.modules:  # a kernel has imported it; a script need not pay for it
        return False
    from IPython import get_ipython  # noqa: PLC0415

    shell = get_ipython()
    return shell is not None and "IPKernelApp" in getattr(shell, "config", {})


def progress_bar(**kwargs: Any) -> tqdm:
    """``tqdm(**kwargs)``, as a notebook widget in a kernel with ipywidgets, disabled in a
    kernel without it, a text bar elsewhere."""
    if in_notebook():
        if importlib.util.find_spec("ipywidgets") is not None:
            from tqdm.notebook import tqdm as widget  # noqa: PLC0415

            return widget(**kwargs)
        kwargs["disable"] = True
    return tqdm(**kwargs)
