#!/usr/bin/env bash
# On the lent H200 (device `run`, carry .gpu/wheels): the embedded engine's GPU tests, the
# Triton kernels' tests on the real GPU, the per-step kernel profile (ours compiled vs the
# Triton kernels, with block-size variants) and `ling-local bench engine`, in one call of
# about 8 minutes, and `bench edit` on the GPU path. Writes logs and results to $OUT. Extra
# arguments go to `bench engine`.
#   bash scripts/gpu_engine.sh --baselines hf-static,gptfast --variants graphs,compiled,triton
# PROFILE_VARIANTS overrides the profile's variants (see scripts/gpu_engine_profile.py).
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/ours .gpu/wheels/*.whl || exit 1
export PYTHONPATH=/tmp/ours:$PWD PYTHONUNBUFFERED=1 LING_LOCAL_HOME=/tmp/ling-home
OUT=${OUT:-/tmp/out}
nvidia-smi --query-gpu=name,driver_version,memory.used,clocks.sm --format=csv | tee "$OUT/gpu.txt"
python3 -c "import torch, transformers, triton; print('torch', torch.__version__, 'transformers', transformers.__version__, 'triton', triton.__version__)" | tee -a "$OUT/gpu.txt"
timeout 120 python3 -m pytest -q -p no:cacheprovider -W ignore -m gpu tests/test_gpu_engine.py 2>&1 | tail -30 | tee "$OUT/gpu_tests.log"
timeout 90 python3 -m pytest -q -p no:cacheprovider -W ignore -x tests/test_triton_kernels.py 2>&1 | tail -30 | tee "$OUT/triton_tests.log"
VARIANTS=${PROFILE_VARIANTS:-compiled,triton,triton:down.split_k=1,triton:down.split_k=4,triton:attn.splits=8}
timeout 150 python3 scripts/gpu_engine_profile.py --variants "$VARIANTS" 2>&1 | grep -v "it/s" | tail -60 | tee "$OUT/profile.log"
timeout 200 python3 -m ling_local bench engine --device cuda --out "$OUT/eb" --repeats 3 "$@" 2>&1 | grep -v "it/s" | tail -30 | tee "$OUT/engine_bench.log"
# Prompt lookup and the draft on the GPU path (verify graphs), with the shipped tiny model:
# the random 1B model never copies its prompt, this one does.
LING_LOCAL_MODEL__DEVICE=cuda timeout 60 python3 -m ling_local bench edit --repeats 2 2>&1 | grep -v "it/s" | tail -30 | tee "$OUT/bench_edit.log"
