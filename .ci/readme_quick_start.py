"""Print the shell lines of README.md's quick-start block (the first ```bash block under
'## Quick start'), one per line, for .ci/run to execute as written. Exit 1, naming the
README, if there is none."""

import re
import sys
from pathlib import Path

readme = Path(sys.argv[1])
section = re.search(r"^## Quick start\n(.*?)(?=^## )", readme.read_text(), flags=re.S | re.M)
block = re.search(r"```bash\n(.*?)```", section.group(1), flags=re.S) if section else None
if block is None:
    sys.exit(f"{readme}: no ```bash block under '## Quick start': CI runs that block")
print(block.group(1).rstrip("\n"))
