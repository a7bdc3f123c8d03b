#!/usr/bin/env bash
# On the lent H200 (device `run`, carry .gpu/daemon-wheels from scripts/gpu_wheels.sh), one
# call of about 6-8 minutes:
#   1. scripts/gpu_kernel_sweep.py: the Triton decode kernels' block sizes, the whole step
#      (PDL on/off, fused attention reduce on/off, T = 9), agreement with the PyTorch step;
#      its best block sizes go to $OUT/best.json and every later step uses them;
#   2. `bench engine` on the random Llama-3.2-1B-shaped model: transformers eager (the
#      reference) and static cache, the gpt-fast-style loop, our engine's Triton step;
#   3. `bench engine --model copy-1b --workload edit`: the same shape with the shipped tiny
#      model's weights inside (it copies its prompt): plain and prompt lookup, vs HF eager;
#   4. the Triton kernels' tests on the real GPU (and with GPU_TESTS=1 the engine's).
# STEPS picks and orders them (default "sweep bench copy tests"); SWEEP_ARGS goes to the
# sweep (e.g. --tune-step). Everything goes to $OUT/run.log; the JSON results beside it.
#   STEPS="tests sweep bench" SWEEP_ARGS=--tune-step bash scripts/gpu_engine.sh
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/ours .gpu/daemon-wheels/*.whl || exit 1
export PYTHONPATH=/tmp/ours:$PWD PYTHONUNBUFFERED=1 LING_LOCAL_HOME=/tmp/ling-home
OUT=${OUT:-/tmp/out}
LOG=$OUT/run.log
mkdir -p "$OUT/eb" "$OUT/ebc"
step() { echo "=== $(date -u +%T) $*" | tee -a "$LOG"; }
step gpu
nvidia-smi --query-gpu=name,driver_version,memory.used,clocks.sm,clocks.mem --format=csv 2>&1 | tee -a "$LOG"
python3 -c "import torch, transformers, triton; print('torch', torch.__version__, 'transformers', transformers.__version__, 'triton', triton.__version__)" 2>&1 | tee -a "$LOG"
sweep() {
  step sweep
  timeout ${SWEEP_S:-240} python3 scripts/gpu_kernel_sweep.py --out "$OUT" ${SWEEP_ARGS:-} 2>&1 | grep -v "it/s" | tee -a "$LOG"
  if [ -s "$OUT/best.json" ]; then export LING_LOCAL_TRITON_CONFIGS=$OUT/best.json; fi
}
bench() {
  step bench engine random-1b
  timeout ${BENCH_S:-200} python3 -m ling_local bench engine --device cuda --out "$OUT/eb" --repeats 3 \
    --baselines "${BASELINES-hf-static,gptfast}" --variants ${VARIANTS:-triton} 2>&1 | grep -v "it/s" | tail -20 | tee -a "$LOG"
}
copy() {
  step bench engine copy-1b edit
  timeout ${COPY_S:-150} python3 -m ling_local bench engine --device cuda --model copy-1b --workload edit \
    --new-tokens 256 --out "$OUT/ebc" --repeats 2 --baselines "" --variants triton,prompt-lookup-triton \
    2>&1 | grep -v "it/s" | tail -20 | tee -a "$LOG"
}
tests() {
  step triton tests on the GPU
  timeout ${TESTS_S:-100} python3 -m pytest -q -p no:cacheprovider -W ignore -x tests/test_triton_kernels.py tests/test_triton_persistent.py tests/test_triton_screen.py tests/test_token_ring.py 2>&1 | tail -15 | tee -a "$LOG"
  if [ -n "${GPU_TESTS:-}" ]; then
    step engine GPU tests
    timeout 150 python3 -m pytest -q -p no:cacheprovider -W ignore -m gpu tests/test_gpu_engine.py 2>&1 | tail -15 | tee -a "$LOG"
  fi
}
for s in ${STEPS:-sweep bench copy tests}; do "$s"; done
rm -f "$OUT/eb/engine_bench.md" "$OUT/ebc/engine_bench.md"
step done
