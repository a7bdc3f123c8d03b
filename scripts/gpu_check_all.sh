#!/usr/bin/env bash
# One device call with the SGLang kit (carry .sglang-kit and .gpu/daemon-wheels, from
# ../shared/tools/sglang-gpu-kit/build.sh and scripts/gpu_wheels.sh; move ling_local/models
# aside first: docs/sglang.md): STEPS (default all four, in this order)
#   sglang - the daemon in front of the real SGLang (scripts/gpu_sglang_check.py, RUNS pairs,
#            NEW_TOKENS; both of issue 37's lengths and the Ling rehearsal: gpu_sglang_call.sh)
#   tests  - the embedded engine's GPU tests and the Triton kernel suite on the GPU
#   sweep  - a Triton sweep around docs/bench/kernel_sweep_h200_run3.json's best (its
#            best.json is for LING_LOCAL_TRITON_CONFIGS by hand)
#   bench  - `bench engine` (Triton step, the shipped block sizes)
# Logs to $OUT/run.log, results beside it. About 9 minutes for all four.
# (scripts/gpu_engine.sh is the engine-only call, without the kit.)
set -uo pipefail
OUT=${OUT:-/tmp/out}
LOG=$OUT/run.log
STEPS=${STEPS:-sglang tests sweep bench}
step() { echo "=== $(date -u +%T) $*" | tee -a "$LOG"; }
wants() { [[ " $STEPS " == *" $1 "* ]]; }
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .sglang-kit/wheels/*.whl || exit 1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/dsite .gpu/daemon-wheels/*.whl || exit 1
export PYTHONUNBUFFERED=1
if wants sglang; then
  step sglang check
  timeout ${SGLANG_S:-300} python3 scripts/gpu_sglang_check.py --kit-site /tmp/site \
    --kit-stubs "$PWD/.sglang-kit/stubs" --daemon-site /tmp/dsite --runs ${RUNS:-16} \
    --new-tokens ${NEW_TOKENS:-256} 2>&1 \
    | grep -v "it/s" | tail -25 | tee -a "$LOG"
fi
export PYTHONPATH=/tmp/dsite:$PWD LING_LOCAL_HOME=/tmp/ling-home
if wants tests; then
  step engine and Triton GPU tests
  timeout ${TESTS_S:-90} python3 -m pytest -q -n 0 -p no:cacheprovider -W ignore -m gpu \
    tests/test_gpu_engine.py 2>&1 | tail -8 | tee -a "$LOG"
  timeout 200 python3 -m pytest -q -n 0 -p no:cacheprovider -W ignore tests/test_triton_kernels.py \
    tests/test_triton_screen.py tests/test_token_ring.py \
    2>&1 | tail -4 | tee -a "$LOG"
fi
if wants sweep; then
  step focused sweep
  timeout ${SWEEP_S:-90} python3 scripts/gpu_kernel_sweep.py --out "$OUT" \
    --focused docs/bench/kernel_sweep_h200_run3.json 2>&1 | grep -v "it/s" | tail -30 | tee -a "$LOG"
fi
if wants bench; then
  mkdir -p "$OUT/eb"
  step bench engine
  timeout ${BENCH_S:-75} python3 -m ling_local bench engine --device cuda --out "$OUT/eb" \
    --repeats 3 --baselines "" --variants triton 2>&1 | grep -v "it/s" | tail -12 | tee -a "$LOG"
  rm -f "$OUT/eb/engine_bench.md"
fi
step done
