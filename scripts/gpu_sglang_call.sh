#!/usr/bin/env bash
# One device call (issue 37): the relay's overhead in front of the real SGLang 0.5.17 on a
# random Llama-3.2-1B shape (scripts/gpu_sglang_check.py: 30 interleaved pairs, 256 and 1,024
# new tokens, ids and text prompts) and, beside it on the same GPU, the Ling-3.0 deployment
# rehearsed on a random bailing_hybrid model (scripts/gpu_ling_rehearsal.py). The rehearsal's
# SGLang starts once the first one is up (their memory profiling must not race), and the
# GPU-heavy phases of the two take turns on one lock, so neither's numbers carry the other's
# kernels. Carry .sglang-kit and .gpu/daemon-wheels (docs/sglang.md); results in $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/out}
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .sglang-kit/wheels/*.whl || exit 1
# The daemon's wheels; those the kit has too (same files) may be left out of
# .gpu/daemon-wheels and named in its from-kit.txt, to keep the call under 64 MiB.
FROM_KIT=$(sed 's|^|.sglang-kit/wheels/|' .gpu/daemon-wheels/from-kit.txt 2>/dev/null)
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/dsite .gpu/daemon-wheels/*.whl $FROM_KIT || exit 1
export PYTHONUNBUFFERED=1
KIT=(--kit-site /tmp/site --kit-stubs "$PWD/.sglang-kit/stubs" --daemon-site /tmp/dsite)
LOCK=/tmp/gpu-turn.lock READY=/tmp/relay-check.ready
timeout ${REHEARSAL_S:-570} python3 scripts/gpu_ling_rehearsal.py "${KIT[@]}" --lock $LOCK \
  --wait-for $READY --runs ${REHEARSAL_RUNS:-6} --deadline-s ${REHEARSAL_DEADLINE_S:-555} \
  > "$OUT/rehearsal.log" 2>&1 &
REHEARSAL=$!
timeout ${CHECK_S:-575} python3 scripts/gpu_sglang_check.py "${KIT[@]}" --lock $LOCK \
  --ready-file $READY --runs ${RUNS:-30} --new-tokens ${NEW_TOKENS:-256 1024} 2>&1 \
  | grep --line-buffered -v "it/s" > "$OUT/gpu_check.log"
CHECK=$?
wait $REHEARSAL
echo "relay check exit $CHECK, rehearsal exit $?" | tee -a "$OUT/gpu_check.log"
