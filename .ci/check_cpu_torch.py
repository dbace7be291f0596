"""Fail when a machine without an NVIDIA GPU was given a CUDA build of PyTorch (several GB
of nvidia-* packages a CPU user never uses): the README's install line must pick the CPU
build there."""

import shutil
import sys
from importlib.metadata import distributions

if shutil.which("nvidia-smi") is None:
    import torch

    cuda_packages = sorted(
        d.metadata["Name"] for d in distributions() if d.metadata["Name"].startswith("nvidia-")
    )
    if torch.version.cuda is not None or cuda_packages:
        sys.exit(
            f"README's install line gave this CPU machine torch {torch.__version__} "
            f"(CUDA {torch.version.cuda}) and {len(cuda_packages)} nvidia packages "
            f"{cuda_packages[:3]}: pin the CPU build in README's quick start"
        )
    print(f"torch {torch.__version__}: CPU build, no nvidia packages")
