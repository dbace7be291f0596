"""``python -m latentlens.cli``: the command line."""

import sys

from latentlens.cli.main import main

sys.exit(main())
