#!/usr/bin/env bash
# One device command (a lease of 15 device-minutes): why did HYLA not learn SRAVEN at
# Table A1's 4-layer setting on the H100 lease of 2026-11-25 (benchmarks/results/
# h100_2026-11-25/sraven-main), while softmax and linear did? Five processes at once under
# CUDA MPS, each on the paper's schedule (156,250 steps, warm-up 1,000, cosine) and stopped
# by the budget, evaluated every 1,000 steps:
#
#   hyla-lr1e-3        the lease's runs again (a compiled, CUDA-graphed seed group, 3 seeds)
#   hyla-lr1e-3-eager  its seed 2 (the one stuck at a uniform answer) alone, eager: the
#                      seed-group, compile and graph paths out of the way
#   hyla-lr3e-4        the reference's other learning rates (its sweeps use 3e-4 and 3e-3)
#   hyla-lr3e-3
#   softmax-lr1e-3     the control that learned on the lease
#
# Round 2 separates what round 1 found (the eager run learned, every graphed group's seed
# failed or collapsed): the same groups eager, more eager single seeds, the graphed path for
# one seed alone, and the graphed group without attention dropout.
#
# Round 3 (a second H200 lease of 2026-11-26) ran the two fast paths apart on seed 2:
# --cuda-graphs alone, --compile alone, and an eager control, all single runs, after the
# CUDA tests that compare them with eager steps (tests/training/test_cuda.py). --compile
# was the cause. It is now refused for HYLA on CUDA: the rounds' compiled runs no longer
# start, and this script records how the three rounds ran.
#
#   bash benchmarks/gpu/gpu_sraven_hyla.sh OUT SECONDS [1|2|3]
#
# OUT gets each run's config.json and metrics.jsonl (runs.tgz), the logs and a summary.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=$1 budget=$2 round=${3:-1}
runs=${RUNS:-/tmp/latentlens-runs}/sraven-hyla
source benchmarks/gpu/gpu_setup.sh "$out"
mkdir -p "$runs"
common=(--task sraven --n-layers 4 --d-model 128 --n-heads 16 --qk-dim 64 --v-dim 64
        --d-mlp 256 --steps 156250 --eval-every 1000 --eval-examples 1024 --device cuda
        --quiet --time-budget "$budget")
train() {
    local name=$1
    shift
    python3 -m latentlens train "${common[@]}" --run-dir "$runs/$name" "$@" \
        >"$out/$name.log" 2>&1
    echo "$name: exit $?"
}
graphed=(--compile --cuda-graphs)
if [[ $round == 1 ]]; then
    train hyla-lr1e-3 --attention hyla --lr 1e-3 "${graphed[@]}" --seeds 0 1 2 &
    train hyla-lr1e-3-eager --attention hyla --lr 1e-3 --seed 2 &
    train hyla-lr3e-4 --attention hyla --lr 3e-4 "${graphed[@]}" --seeds 0 1 2 &
    train hyla-lr3e-3 --attention hyla --lr 3e-3 "${graphed[@]}" --seeds 0 1 2 &
    train softmax-lr1e-3 --attention softmax --lr 1e-3 "${graphed[@]}" --seeds 0 1 2 &
elif [[ $round == 3 ]]; then
    python3 -m pytest -q -o addopts="" -p no:cacheprovider tests/training/test_cuda.py \
        -k hyla 2>&1 | tail -30 | tee "$out/test_cuda.txt"
    train hyla-graphs-only --attention hyla --lr 1e-3 --cuda-graphs --seed 2 &
    train hyla-compile-only --attention hyla --lr 1e-3 --compile --seed 2 &
    train hyla-eager --attention hyla --lr 1e-3 --seed 2 &
else
    train hyla-eager-group --attention hyla --lr 1e-3 --seeds 0 1 2 &
    train hyla-eager-s0 --attention hyla --lr 1e-3 --seed 0 &
    train hyla-eager-s1 --attention hyla --lr 1e-3 --seed 1 &
    train hyla-graphed-s2 --attention hyla --lr 1e-3 "${graphed[@]}" --seed 2 &
    train hyla-graphed-no-dropout --attention hyla --lr 1e-3 --attention-dropout 0 \
        "${graphed[@]}" --seeds 0 1 2 &
fi
wait
python3 benchmarks/gpu/sraven_curves.py "$runs" | tee "$out/summary.md"
tar -C "$runs" -czf "$out/runs.tgz" --exclude=checkpoints --exclude=tracking .
ls -la "$out"
