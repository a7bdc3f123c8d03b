#!/usr/bin/env bash
# On the lent H200 (device `run`, carry .gpu/wheels): the embedded engine's GPU tests and
# `ling-local bench engine` in one call. Writes logs and results to $OUT.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/ours .gpu/wheels/*.whl || exit 1
export PYTHONPATH=/tmp/ours:$PWD PYTHONUNBUFFERED=1 LING_LOCAL_HOME=/tmp/ling-home
OUT=${OUT:-/tmp/out}
nvidia-smi --query-gpu=name,driver_version,memory.used,clocks.sm --format=csv | tee "$OUT/gpu.txt"
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)" | tee -a "$OUT/gpu.txt"
timeout 200 python3 -m pytest -q -p no:cacheprovider -W ignore -m gpu tests/test_gpu_engine.py 2>&1 | tail -40 | tee "$OUT/gpu_tests.log"
timeout 340 python3 -m ling_local bench engine --device cuda --out "$OUT/eb" --repeats 3 "$@" 2>&1 | grep -v "it/s" | tail -40 | tee "$OUT/engine_bench.log"
