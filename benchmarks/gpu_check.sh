#!/usr/bin/env bash
# The GPU check: on one CUDA GPU with its own PyTorch (no network needed), in about 6 minutes,
#   1. the machine: torch, CUDA, device name, power limit and the peak MFU is taken against,
#      the C compiler triton needs (gpu_check.py env),
#   2. the cuda-marked tests (tests/test_cuda.py, tests/test_host_syncs.py),
#   3. train-step tokens/s, MFU and compile time of the paper arms, bf16, compiled then eager
#      (gpu_check.py train),
#   4. the MoE dispatch benchmark at E = 4, 8, 16, 32, 64 on the GPU, bf16 (moe_dispatch.py),
#   5. how far a resumed bf16 run drifts from an uninterrupted one (gpu_check.py resume),
# each phase under its own time limit, so that a hang costs only that phase. Writes one JSON,
# $OUT/gpu_check.json (benchmarks/results/gpu_check.json when OUT is unset); the phases' own
# files and logs are kept in gpu_check_parts/ beside it. Exits 1 when any phase failed (the
# JSON's failed_phases says which), 0 when all passed.
#
#     bash benchmarks/gpu_check.sh            # or: make gpu-check
#     bash benchmarks/gpu_check.sh --quick    # a first look, within 2 minutes
#     bash benchmarks/gpu_check.sh --dry-run  # every phase on the CPU at toy sizes: the plumbing
#
# Run from a checkout; moelab is imported from src/ (nothing is installed). The limits add up to
# 325 s (350 s if every phase needs killing); --quick's to 95 s (115 s). ENV_S, TESTS_S, TRAIN_S,
# DISPATCH_S and RESUME_S change them.
set -u
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
DIR="${OUT:-benchmarks/results}"
PARTS="$DIR/gpu_check_parts"
MODE="${1:-full}"
case "$MODE" in
    full|--quick|--dry-run) ;;
    *) echo "gpu_check.sh: $MODE is invalid: allowed --quick, --dry-run or nothing" >&2; exit 2 ;;
esac
rm -rf "$PARTS"
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

TESTS=(tests/test_cuda.py tests/test_host_syncs.py)
TRAIN=()
DISPATCH=(--device cuda --dtype bfloat16 --repeats 5 --warmup 2)
RESUME=()
if [ "$MODE" = --dry-run ]; then  # a CPU is slow to start torch and to train: longer limits
    : "${ENV_S:=60}" "${TESTS_S:=120}" "${TRAIN_S:=300}" "${DISPATCH_S:=120}" "${RESUME_S:=240}"
    TRAIN=(--device cpu --tiny --compile-backend eager)
    DISPATCH=(--device cpu --dtype bfloat16 --experts 4 --batch 2 --seq-len 16 --d-model 32
              --d-expert 48 --repeats 1 --warmup 0)
    RESUME=(--device cpu --tiny)
fi

if [ "$MODE" = --quick ]; then
    phase env "${ENV_S:-10}" "$PY" benchmarks/gpu_check.py env --out "$PARTS"
    phase tests "${TESTS_S:-20}" "$PY" -m pytest -q -p no:cacheprovider -m cuda "${TESTS[@]}" \
        -k "never_waits or pinned" --junitxml "$PARTS/tests.xml"
    phase train "${TRAIN_S:-55}" "$PY" benchmarks/gpu_check.py train --out "$PARTS" \
        --arms dense_active,moe --modes compiled --steps 5 --warmup 2
    phase dispatch "${DISPATCH_S:-10}" "$PY" benchmarks/moe_dispatch.py "${DISPATCH[@]}" \
        --experts 8 64 --repeats 3 --warmup 1 --out "$PARTS/moe_dispatch_cuda.json"
else
    phase env "${ENV_S:-10}" "$PY" benchmarks/gpu_check.py env --out "$PARTS"
    phase tests "${TESTS_S:-70}" "$PY" -m pytest -q -p no:cacheprovider -m cuda "${TESTS[@]}" \
        --junitxml "$PARTS/tests.xml"
    phase train "${TRAIN_S:-190}" "$PY" benchmarks/gpu_check.py train --out "$PARTS" "${TRAIN[@]}"
    phase dispatch "${DISPATCH_S:-25}" "$PY" benchmarks/moe_dispatch.py "${DISPATCH[@]}" \
        --out "$PARTS/moe_dispatch_cuda.json"
    phase resume "${RESUME_S:-30}" "$PY" benchmarks/gpu_check.py resume --out "$PARTS" "${RESUME[@]}"
fi
"$PY" benchmarks/gpu_check.py merge --out "$DIR"
