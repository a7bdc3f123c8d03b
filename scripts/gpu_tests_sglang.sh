#!/usr/bin/env bash
# One device call (carry .sglang-kit and .gpu/daemon-wheels, models moved aside): the
# embedded engine's GPU tests and the Triton kernels' tests on the GPU, then the daemon in
# front of the real SGLang again (scripts/gpu_sglang_check.py, RUNS interleaved runs).
set -uo pipefail
OUT=${OUT:-/tmp/out}
LOG=$OUT/run.log
step() { echo "=== $(date -u +%T) $*" | tee -a "$LOG"; }
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .sglang-kit/wheels/*.whl || exit 1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/dsite .gpu/daemon-wheels/*.whl || exit 1
export PYTHONUNBUFFERED=1
step engine and Triton GPU tests
export LING_LOCAL_HOME=/tmp/ling-home
PYTHONPATH=/tmp/dsite:$PWD timeout ${TESTS_S:-90} python3 -m pytest -q -p no:cacheprovider -W ignore \
  -m gpu tests/test_gpu_engine.py 2>&1 | tail -8 | tee -a "$LOG"
PYTHONPATH=/tmp/dsite:$PWD timeout 60 python3 -m pytest -q -p no:cacheprovider -W ignore \
  tests/test_triton_kernels.py 2>&1 | tail -4 | tee -a "$LOG"
step sglang check
timeout ${SGLANG_S:-330} python3 scripts/gpu_sglang_check.py --kit-site /tmp/site \
  --kit-stubs "$PWD/.sglang-kit/stubs" --daemon-site /tmp/dsite --runs ${RUNS:-30} 2>&1 \
  | grep -v "it/s" | tail -16 | tee -a "$LOG"
step done
