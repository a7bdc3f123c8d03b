#!/usr/bin/env bash
# On the lent H200 (device `run`, carry .gpu/daemon-wheels from scripts/gpu_wheels.sh): the
# embedded engine's GPU numbers and tests. STEPS picks and orders them (default
# "serve tests"); everything goes to $OUT/run.log, the JSON results beside it.
#   serve - scripts/serve_vs_engine.py: a daemon started with the `local` profile on the
#           random Llama-3.2-1B-shaped model, TPOT through the streaming API, beside
#           `bench engine`'s Triton TPOT in the same call (the target: within 2 %); ~3 min
#   tests - the Triton kernel suite (every case: the interpreter's subset and the ones
#           marked gpu), the engine's GPU tests and the decode-path tests; ~2 min
#   bench - `bench engine` on the random 1B model: transformers eager (the reference) and
#           static cache, the gpt-fast-style loop, our engine's Triton step
#   copy  - `bench engine --model copy-1b --workload edit`: the same shape with the shipped
#           tiny model's weights inside (it copies its prompt): plain and prompt lookup
#   sweep - scripts/gpu_kernel_sweep.py (SWEEP_ARGS, e.g. "--tune-step --space keep"): block
#           sizes, the whole step, agreement with the PyTorch step; its best.json is for
#           LING_LOCAL_TRITON_CONFIGS by hand (the other steps run the shipped configs)
#   sweeptest - the sweep script's own GPU test (tests/bench/test_kernel_sweep_script.py)
#   STEPS="serve tests" bash scripts/gpu_engine.sh   (both fit one 10-minute device call)
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/ours .gpu/daemon-wheels/*.whl || exit 1
export PYTHONPATH=/tmp/ours:$PWD PYTHONUNBUFFERED=1 LING_LOCAL_HOME=/tmp/ling-home
OUT=${OUT:-/tmp/out}
LOG=$OUT/run.log
mkdir -p "$OUT/eb" "$OUT/ebc" "$OUT/serve"
step() { echo "=== $(date -u +%T) $*" | tee -a "$LOG"; }
step gpu
nvidia-smi --query-gpu=name,driver_version,memory.used,clocks.sm,clocks.mem --format=csv 2>&1 | tee -a "$LOG"
python3 -c "import torch, transformers, triton; print('torch', torch.__version__, 'transformers', transformers.__version__, 'triton', triton.__version__)" 2>&1 | tee -a "$LOG"
serve() {
  step serve vs engine
  timeout ${SERVE_S:-330} python3 scripts/serve_vs_engine.py --out "$OUT/serve" 2>&1 | grep -v "it/s" | tail -8 | tee -a "$LOG"
}
tests() {
  step Triton kernel suite, engine GPU tests, decode path
  timeout ${TESTS_S:-250} python3 -m pytest -q -n 0 -p no:cacheprovider -W ignore -x \
    tests/test_triton_kernels.py tests/test_triton_screen.py tests/test_token_ring.py \
    tests/test_gpu_engine.py tests/test_decode_path.py tests/test_gpu_prefill.py 2>&1 | tail -15 | tee -a "$LOG"
}
sweeptest() {
  step sweep script GPU test
  timeout ${SWEEPTEST_S:-400} python3 -m pytest -q -n 0 -p no:cacheprovider -W ignore -m gpu \
    tests/bench/test_kernel_sweep_script.py 2>&1 | tail -8 | tee -a "$LOG"
}
sweep() {
  step sweep
  timeout ${SWEEP_S:-240} python3 scripts/gpu_kernel_sweep.py --out "$OUT" ${SWEEP_ARGS:-} 2>&1 | grep -v "it/s" | tee -a "$LOG"
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
for s in ${STEPS:-serve tests}; do "$s"; done
rm -f "$OUT/eb/engine_bench.md" "$OUT/ebc/engine_bench.md" "$OUT/serve/engine/engine_bench.md"
step done
