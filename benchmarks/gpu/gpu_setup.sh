# Sourced by the device scripts (gpu_ablations.sh, gpu_sraven_hyla.sh, gpu_sraven_lease.py's
# commands) from the repository root: the wheels the GPU image lacks, carried in .whl/
# (which, and how to fetch them: benchmarks/results/command_cuda_h200_2026-12-04/README.md),
# put on the import path (installed once per machine: a warm machine keeps /tmp/site
# between commands); unbuffered output; CUDA MPS, so that several training
# processes' small kernels overlap on the GPU; and the device's name and torch version into
# OUT/device.txt.
#   source benchmarks/gpu/gpu_setup.sh OUT
if ! python3 -c "import transformer_lens, plotly" 2>/dev/null; then
    if ! PYTHONPATH=/tmp/site python3 -c "import transformer_lens, plotly" 2>/dev/null; then
        python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
            --target /tmp/site .whl/*.whl || exit 1
    fi
    export PYTHONPATH=/tmp/site:$PWD
fi
export PYTHONUNBUFFERED=1
nvidia-cuda-mps-control -d 2>/dev/null && echo "CUDA MPS on" || echo "CUDA MPS not started (or already on)"
mkdir -p "$1"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$1/device.txt"
python3 -c "import torch; print('torch', torch.__version__)" | tee -a "$1/device.txt"
