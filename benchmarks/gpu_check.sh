#!/usr/bin/env bash
# The GPU check: on one CUDA GPU with its own PyTorch (no network needed), in about 6 minutes,
#   1. the cuda-marked tests (tests/test_cuda.py),
#   2. train-step tokens/s and MFU of the paper arms, bf16, eager and compiled (gpu_check.py),
#   3. the MoE dispatch benchmark at E = 4, 8, 16, 32, 64 on the GPU (moe_dispatch.py),
# each phase under its own time limit, so that a hang costs only that phase. Writes one JSON,
# $OUT/gpu_check.json (benchmarks/results/gpu_check.json when OUT is unset); the phases' own
# files and logs are kept in gpu_check_parts/ beside it.
#
#     bash benchmarks/gpu_check.sh        # or: make gpu-check
#
# Run from a checkout; moelab is imported from src/ (nothing is installed). The limits add up to
# 330 s (5.5 minutes, 20 s more if every phase needs killing); TESTS_S, TRAIN_S and DISPATCH_S
# change them.
set -u
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
DIR="${OUT:-benchmarks/results}"
PARTS="$DIR/gpu_check_parts"
mkdir -p "$PARTS"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"

# phase NAME LIMIT_S COMMAND...: run it, its output to PARTS/NAME.log, rc and seconds to
# PARTS/phase_NAME.json (timed_out when timeout killed it: rc 124 or 137).
phase() {
    local name=$1 limit=$2 start rc
    shift 2
    echo "== $name (limit ${limit}s): $*"
    start=$(date +%s)
    timeout --kill-after=5 "$limit" "$@" > "$PARTS/$name.log" 2>&1
    rc=$?
    tail -n 15 "$PARTS/$name.log"
    local timed_out=false
    if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then timed_out=true; fi
    printf '{"command": "%s", "rc": %d, "seconds": %d, "limit_s": %d, "timed_out": %s}\n' \
        "$*" "$rc" "$(( $(date +%s) - start ))" "$limit" "$timed_out" > "$PARTS/phase_$name.json"
}

phase env 20 "$PY" benchmarks/gpu_check.py env --out "$PARTS"
phase tests "${TESTS_S:-110}" "$PY" -m pytest -q -p no:cacheprovider -m cuda tests/test_cuda.py \
    --junitxml "$PARTS/tests.xml"
phase train "${TRAIN_S:-170}" "$PY" benchmarks/gpu_check.py train --out "$PARTS"
phase dispatch "${DISPATCH_S:-30}" "$PY" benchmarks/moe_dispatch.py --device cuda \
    --dtype bfloat16 --repeats 5 --warmup 2 --out "$PARTS/moe_dispatch_cuda.json"
"$PY" benchmarks/gpu_check.py merge --out "$DIR"
