"""``python -m latentlens``: the command line (what ``torchrun -m latentlens`` launches)."""

import sys

from latentlens.cli import main

sys.exit(main())
