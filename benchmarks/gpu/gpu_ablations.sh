#!/usr/bin/env bash
# One device command (a lease of 15 device-minutes): a section set beside Table A1's
# fuzzy-logic runs, its seed groups at once on one GPU under CUDA MPS, beside the committed
# full-variant runs (benchmarks/results/h100_2026-11-25/fuzzy-logic-a1), then the run
# directories (last checkpoint only) packed into OUT for the zoo and RESULTS.md. SECTION:
# fuzzy-logic-a1-ablations (Table A1's HYLA ablations, the default) or
# fuzzy-logic-a1-one-head (Fig. 5C: one head, the same parameters).
#
#   [SECTION=NAME] bash benchmarks/gpu/gpu_ablations.sh OUT SECONDS [gpu_sections.py option ...]
#
# Wheels the GPU image lacks travel in .whl/ (docs/benchmarks.md); the same command with the
# same OUT/runs continues runs a budget stopped.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=$1 budget=$2 section=${SECTION:-fuzzy-logic-a1-ablations}
shift 2
runs=${RUNS:-/tmp/latentlens-runs}
source benchmarks/gpu/gpu_setup.sh "$out"
mkdir -p "$runs"
cp -rn benchmarks/results/h100_2026-11-25/fuzzy-logic-a1 "$runs/"
# runs a earlier lease finished, carried back in (ignored) .gpuruns/: found, not retrained
[[ -d .gpuruns ]] && cp -rn .gpuruns/. "$runs/"
python3 benchmarks/gpu/gpu_sections.py --out "$runs" --time-budget "$budget" \
    "$@" "$section" 2>&1 | tee "$out/log.txt"
status=${PIPESTATUS[0]}
# each run's newest checkpoint only (all a resume or the zoo needs), then everything the
# section wrote, in pieces under the 16 MB a returned file may hold
for dir in "$runs"/"$section"/*/checkpoints; do
    ls "$dir"/step_* 2>/dev/null | sort | head -n -1 | xargs -r rm
done
tar -C "$runs" -czf /tmp/runs.tgz --exclude=./fuzzy-logic-a1 .
split -b 15M -d /tmp/runs.tgz "$out/runs.tgz."
ls -la "$out"
exit "$status"
