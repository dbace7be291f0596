"""Test-session settings.

- Nothing reaches the network: Hugging Face libraries run offline, so a test that would
  download fails at once instead of hanging or passing on a cached file.
- The command line's thread choice is pinned (``LATENTLENS_THREADS``, to the CPUs this
  process may use): left to itself it reads how busy the machine is, and a test comparing
  two runs bit for bit must not see their thread counts differ.
"""

import os

from latentlens.threads import ENVIRONMENT, available_cpus

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault(ENVIRONMENT, str(available_cpus()))
