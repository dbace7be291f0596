"""Test-session settings.

- Nothing reaches the network: Hugging Face libraries run offline, so a test that would
  download fails at once instead of hanging or passing on a cached file.
- One thread count for the whole session, chosen once at its start as the command line
  chooses (``latentlens.threads``: the CPUs free then, shared among pytest-xdist's
  workers) and given to every process the tests start (``LATENTLENS_THREADS``,
  ``OMP_NUM_THREADS``: the notebooks' kernels, the CLI subprocesses). On a busy machine
  the tests then take the free cores instead of fighting the neighbours for all of them;
  and a test comparing two runs bit for bit never sees their thread counts differ. The
  tests of the thread choice take ``unpinned_threads``: the count unset, and restored.
- New runs compute their step eagerly (``LATENTLENS_PATH``) instead of timing each path
  first (``latentlens.training.fast_path``); the tests of that choice unset it.
- ``one_ray_instance``: a local Ray instance shared by a module's tests that train on Ray
  in the pytest process (a sweep, or ``ray_map``, joins the instance running in its
  process), so that Ray starts, and its workers import torch and latentlens, once per
  module instead of once per call.
"""

import os
from collections.abc import Iterator

import pytest
import torch

from latentlens.threads import ENVIRONMENT, choose_threads
from latentlens.training.fast_path import ENVIRONMENT as PATH_ENVIRONMENT

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
# Under pytest-xdist (pyproject's addopts run a worker per CPU) the free CPUs are shared out
# among the workers: a worker's tests compute with its share.
WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
THREADS = max(1, choose_threads() // WORKERS)
os.environ[ENVIRONMENT] = str(THREADS)
os.environ.setdefault("OMP_NUM_THREADS", str(THREADS))
torch.set_num_threads(THREADS)
os.environ[PATH_ENVIRONMENT] = "eager"


@pytest.fixture
def unpinned_threads() -> Iterator[None]:
    """The test runs without ``LATENTLENS_THREADS`` (pinned above: a run given a count
    records and keeps it, where the tests of the thread choice need a run to choose), and
    torch's threads and the variable (``--threads`` sets it) are left as they were."""
    pinned = os.environ.pop(ENVIRONMENT, None)
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)
    os.environ.pop(ENVIRONMENT, None)
    if pinned is not None:
        os.environ[ENVIRONMENT] = pinned


@pytest.fixture(scope="module")
def one_ray_instance() -> Iterator[None]:
    """A local Ray instance of 2 CPUs, running from the first test of the module that asks
    for it to the module's end (then shut down, its processes reaped)."""
    from latentlens.sweep.reaper import ray_instance
    from latentlens.sweep.run import QUIET_INIT, require_ray

    ray = require_ray()  # the dev extra holds Ray: its absence fails, naming the extra
    with ray_instance(ray, num_cpus=2, **QUIET_INIT) as started:
        assert started, "Ray was already running in this process"
        yield
