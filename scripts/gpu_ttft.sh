#!/usr/bin/env bash
# Issue 29 on the lent H200, one call (about 5.5 minutes; every stage time-boxed, the whole
# run kept under BUDGET_S = 350 s, each stage's results written as they come, a stage that
# fails or runs out of time loses only itself):
#   setup   - wheels, a random Qwen2.5-0.5B-shaped checkpoint and its profiles
#             (scripts/gpu_ttft_setup.py)                                          ~25 s
#   tests   - tests/test_gpu_prefill.py: flash attention for the prompt, a cached prefix
#             extended (eager and graph step, PyTorch and Triton kernels) = the full
#             prefill's logits in bf16, nothing captured or new after the warm-up  ~60 s
#   triton  - `bench keystroke` on the Triton-kernels profile through a fresh daemon:
#             first request after ready, cold 2,000-token prompt, 16 new tokens on a
#             cached 1,500-token prefix (client + engine TTFT, per-phase trace), TPOT ~40 s
#   torch   - the same on the PyTorch-kernels profile                            ~35 s
#   engine  - `bench engine --no-tpot`: the TTFT columns for transformers' static cache,
#             the gpt-fast-style model and the engine (Triton, PyTorch), same model ~60 s
#   sglang  - `bench engine --baselines sglang` (needs .sglang-kit): SGLang 0.5.17 on the
#             same checkpoint, TTFT columns and TPOT at its /generate       ~110-150 s
#   summary - scripts/gpu_ttft_summary.py: the numbers against issue 29's targets
# Carry .gpu/daemon-wheels (bash scripts/gpu_wheels.sh) and, for the sglang stage,
# .sglang-kit (bash ../shared/tools/sglang-gpu-kit/build.sh; move ling_local/models aside
# so the tree stays under 64 MiB). STEPS picks stages (default all, in this order).
# Results in $OUT: run.log, keystroke_triton.json, keystroke_torch.json,
# engine/engine_bench.json, sglang/engine_bench.json, summary.txt.
# A dry run of the stages' logic on a CPU: SHAPE=tiny DEVICE=cpu STEPS="torch engine".
set -uo pipefail
OUT=${OUT:-/tmp/out}
LOG=$OUT/run.log
mkdir -p "$OUT"
T0=$(date +%s)
BUDGET=${BUDGET_S:-350}
STEPS=${STEPS:-tests triton torch engine sglang}
WORK=/tmp/ttft
SHAPE=${SHAPE:-qwen-0.5b}
DEVICE=${DEVICE:-cuda}
step() { echo "=== $(date -u +%T) +$(( $(date +%s) - T0 ))s $*" | tee -a "$LOG"; }
# seconds a stage may run: its own box, or what is left of the budget (minus the summary's)
box() { local left=$(( BUDGET - 10 - ($(date +%s) - T0) )); (( left < $1 )) && echo $(( left > 5 ? left : 5 )) || echo "$1"; }
run() { local s=$1; shift; timeout -k 5 "$(box "$s")" "$@" 2>&1 | grep -v -e "it/s" -e "s/it" | tee -a "$LOG"; }

step setup
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/ours .gpu/daemon-wheels/*.whl 2>&1 | tail -2 | tee -a "$LOG"
KIT=()
if [ -d .sglang-kit ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .sglang-kit/wheels/*.whl 2>&1 | tail -2 | tee -a "$LOG"
  KIT=(--kit "$PWD/.sglang-kit")
fi
export PYTHONPATH=/tmp/ours:$PWD PYTHONUNBUFFERED=1 LING_LOCAL_HOME=/tmp/ling-home
nvidia-smi --query-gpu=name,driver_version,memory.used,clocks.sm,clocks.mem --format=csv 2>&1 | tee -a "$LOG"
python3 -c "import torch, transformers, triton; print('torch', torch.__version__, 'transformers', transformers.__version__, 'triton', triton.__version__)" 2>&1 | tee -a "$LOG"
run 90 python3 scripts/gpu_ttft_setup.py --out "$WORK" --shape "$SHAPE" --device "$DEVICE" "${KIT[@]}"
KEYSTROKE=(--prefix-tokens 1500 --new-prompt-tokens 16 --cold-tokens 2000 --repeats 7 --decode-tokens 128)

for s in $STEPS; do
  case $s in
    tests)
      step GPU tests: prefill, cached extension, warm-up coverage
      run 90 python3 -m pytest -q -n 0 -p no:cacheprovider -W ignore -m gpu tests/test_gpu_prefill.py ;;
    triton|torch)
      step "bench keystroke, $s kernels, fresh daemon"
      run $([ "$s" = triton ] && echo 120 || echo 90) python3 -m ling_local bench keystroke \
        --profile "$WORK/ttft-$s.toml" "${KEYSTROKE[@]}" --out "$OUT/keystroke_$s.json" | tail -45 ;;
    engine)
      step bench engine TTFT columns
      mkdir -p "$OUT/engine"
      run 100 python3 -m ling_local bench engine --device "$DEVICE" --model "$WORK/model-$SHAPE" \
        --out "$OUT/engine" --repeats 5 --no-tpot --baselines hf-static,gptfast --variants triton,graphs | tail -14 ;;
    sglang)
      if [ ! -d .sglang-kit ]; then step sglang skipped: no .sglang-kit; continue; fi
      if (( $(box 400) < 120 )); then step "sglang skipped: $(box 400)s left"; continue; fi
      step bench engine SGLang row
      mkdir -p "$OUT/sglang"
      run 400 python3 -m ling_local bench engine --device "$DEVICE" --model "$WORK/model-$SHAPE" \
        --out "$OUT/sglang" --repeats 5 --no-tpot --new-tokens 128 --baselines sglang --variants "" \
        --sglang-profile "$WORK/ttft-sglang.toml" | tail -8 ;;
    *) step "unknown stage $s" ;;
  esac
done
rm -f "$OUT"/engine/engine_bench.md "$OUT"/sglang/engine_bench.md
step summary
python3 scripts/gpu_ttft_summary.py "$OUT" 2>&1 | tee "$OUT/summary.txt" | tee -a "$LOG"
step done
