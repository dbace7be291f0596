"""Nothing in the tests reaches the network: Hugging Face libraries run offline, so a test
that would download fails at once instead of hanging or passing on a cached file."""

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
