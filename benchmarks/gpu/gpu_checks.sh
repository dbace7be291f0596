#!/usr/bin/env bash
# Every check that needs a GPU, in as few commands as a short GPU lease allows: the CUDA
# tests, then the training-throughput tables of one run and of seed groups. Each check
# writes its raw output to OUT/NAME.txt (the README's GPU tables are read off these).
#
#   bash benchmarks/gpu/gpu_checks.sh OUT [CHECK ...]
#
# CHECKs (all, in this order, when none is named; name one per call on a short lease).
# tf32 comes first: it is the official code's arithmetic (JAX's default), so its SRAVEN
# table is the like-for-like reading of issue 8's 3x target. Arithmetic is not what limits
# a step (benchmarks/speed/step_flops.py: 9.5-9.7 GFLOP a SRAVEN step, 0.14 ms at an H100's
# float32 peak, of the 1.6 ms the target allows): kernel latency is.
#   tf32      one run per model, --cuda-graphs --compile --precision tf32 (matmuls on TF32
#             tensor cores, JAX's default on Ampere and Hopper), both tasks, beside the twin
#   tests     the CUDA tests of the trainer and the seed group
#   single    the same as tf32 in strict float32
#   autotune  SRAVEN, tf32, with inductor's GEMM autotuning (Triton matmul templates with
#             fused epilogues instead of cuBLAS calls, where faster): fewer, tuned kernels
#   seeds     8 seeds at once vs one run, SRAVEN, --cuda-graphs with and without --compile
#   seeds-fl  the same on fuzzy logic
#   kernels   kernel launches per compiled forward + backward (Triton), beside the twin
#   profile   device busy time and costliest kernels of graphed, compiled steps
#   command   `latentlens train --device cuda` at its defaults, as a user types it, beside the
#             official code on the card (command_side_by_side.py --device cuda), one round
#             per variant of each task in TASKS (default fuzzy-logic; also fuzzy-logic-a1,
#             sraven), each run to the steps in LENGTHS (default 20000 50000: about 4 min a
#             fuzzy-logic variant; name fewer VARIANTS and shorter LENGTHS on a short lease,
#             e.g. TASKS=sraven VARIANTS=hyla LENGTHS="10000 30000"; a run of under 5000
#             steps compiles nothing, so the script refuses it); needs OFFICIAL, a
#             checkout of smonsays/hypernetwork-attention carried to the machine, and the
#             wheels the image lacks on the import path (as gpu_setup.sh puts them). Not in
#             the default list: it needs that checkout.
set -uo pipefail
cd "$(dirname "$0")/../.."
if [[ $# -lt 1 ]]; then
    echo "usage: bash benchmarks/gpu/gpu_checks.sh OUT [tf32|tests|single|autotune|seeds|seeds-fl|kernels|profile|command ...]" >&2
    exit 2
fi
out=$1
shift
checks=("$@")
[[ ${#checks[@]} -eq 0 ]] && checks=(tf32 tests single autotune seeds seeds-fl kernels profile)
python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" || {
    echo "no CUDA device: these checks need a GPU" >&2
    exit 2
}
mkdir -p "$out"
status=0

# run NAME COMMAND...: the command and its output, to the screen and to OUT/NAME.txt.
run() {
    local name=$1
    shift
    {
        echo "\$ $*"
        "$@" 2>&1
    } | tee "$out/$name.txt"
    [[ ${PIPESTATUS[0]} -eq 0 ]] || status=1
}

throughput=(python3 benchmarks/speed/train_throughput.py --device cuda)
for check in "${checks[@]}"; do
    case $check in
    tests)
        # addopts holds -n auto: the two CUDA test files run in one process.
        run tests python3 -m pytest -q -o addopts="" -p no:cacheprovider \
            tests/training/test_cuda.py tests/training/test_multiseed.py
        ;;
    single | tf32)
        # SRAVEN first, each task to its own file: a lease cut short keeps what finished.
        precision=fp32
        [[ $check == tf32 ]] && precision=tf32
        for task in sraven fuzzy-logic; do
            run "${check}_${task/-/_}" "${throughput[@]}" --task "$task" --steps 500 \
                --cuda-graphs --compile --precision "$precision"
        done
        ;;
    autotune)
        # Inductor reads TORCHINDUCTOR_MAX_AUTOTUNE_GEMM at import; its cuda graphs stay
        # off (the Trainer captures the step itself).
        run autotune_sraven env TORCHINDUCTOR_MAX_AUTOTUNE_GEMM=1 "${throughput[@]}" \
            --task sraven --steps 500 --cuda-graphs --compile --precision tf32
        ;;
    seeds)
        run seeds_sraven_graphs "${throughput[@]}" --task sraven --seeds 8 --steps 200 \
            --cuda-graphs
        run seeds_sraven_graphs_compile "${throughput[@]}" --task sraven --seeds 8 \
            --steps 200 --cuda-graphs --compile
        ;;
    seeds-fl)
        run seeds_fuzzy_logic_graphs_compile "${throughput[@]}" --task fuzzy-logic --seeds 8 \
            --steps 200 --cuda-graphs --compile
        ;;
    kernels)
        run kernels python3 benchmarks/speed/step_kernels.py --device cuda
        ;;
    profile)
        for model in sraven:hyla sraven:softmax fuzzy-logic:softmax; do
            run "profile_${model/:/_}" python3 benchmarks/speed/step_profile.py --device cuda \
                --task "${model%%:*}" --attention "${model##*:}" --compile --cuda-graphs
        done
        ;;
    command)
        # rows are written to OUT/command_TASKS.json as they finish: a lease cut short keeps them
        read -ra variants <<< "${VARIANTS:-softmax linear hyla}"
        read -ra tasks <<< "${TASKS:-fuzzy-logic}"
        read -ra lengths <<< "${LENGTHS:-20000 50000}"
        name="command_$(IFS=_; echo "${tasks[*]//-/_}")"
        run "$name" python3 benchmarks/speed/command_side_by_side.py \
            --official "${OFFICIAL:?set OFFICIAL to a checkout of smonsays/hypernetwork-attention}" \
            --device cuda --tasks "${tasks[@]}" --variants "${variants[@]}" --rounds 1 \
            --lengths "${lengths[@]}" --out "$out/$name.json"
        ;;
    *)
        echo "unknown check '$check': choose from tf32, tests, single, autotune, seeds, seeds-fl, kernels, profile, command" >&2
        exit 2
        ;;
    esac
done
exit $status
