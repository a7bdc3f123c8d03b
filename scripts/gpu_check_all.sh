#!/usr/bin/env bash
# One device call (carry .sglang-kit and .gpu/daemon-wheels; move ling_local/models aside
# first, see docs/sglang.md): the daemon in front of the real SGLang (scripts/
# gpu_sglang_check.py), the embedded engine's GPU tests, a focused Triton kernel sweep
# around the last one's best (scripts/gpu_kernel_sweep.py --focused), and `bench engine`
# with the winners. Logs to $OUT/run.log, results beside it. About 9 minutes.
set -uo pipefail
OUT=${OUT:-/tmp/out}
LOG=$OUT/run.log
step() { echo "=== $(date -u +%T) $*" | tee -a "$LOG"; }
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .sglang-kit/wheels/*.whl || exit 1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/dsite .gpu/daemon-wheels/*.whl || exit 1
export PYTHONUNBUFFERED=1
step sglang check
timeout ${SGLANG_S:-300} python3 scripts/gpu_sglang_check.py --kit-site /tmp/site \
  --kit-stubs "$PWD/.sglang-kit/stubs" --daemon-site /tmp/dsite --runs ${RUNS:-16} 2>&1 \
  | grep -v "it/s" | tail -25 | tee -a "$LOG"
export PYTHONPATH=/tmp/dsite:$PWD LING_LOCAL_HOME=/tmp/ling-home
step engine GPU tests
timeout ${TESTS_S:-75} python3 -m pytest -q -p no:cacheprovider -W ignore -m gpu tests/test_gpu_engine.py 2>&1 | tail -8 | tee -a "$LOG"
step focused sweep
timeout ${SWEEP_S:-90} python3 scripts/gpu_kernel_sweep.py --out "$OUT" \
  --focused docs/bench/kernel_sweep_h200_run2.json 2>&1 | grep -v "it/s" | tail -30 | tee -a "$LOG"
if [ -s "$OUT/best.json" ]; then export LING_LOCAL_TRITON_CONFIGS=$OUT/best.json; fi
mkdir -p "$OUT/eb"
step bench engine
timeout ${BENCH_S:-75} python3 -m ling_local bench engine --device cuda --out "$OUT/eb" --repeats 3 \
  --baselines "" --variants triton 2>&1 | grep -v "it/s" | tail -12 | tee -a "$LOG"
rm -f "$OUT/eb/engine_bench.md"
step done
