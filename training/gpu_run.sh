#!/usr/bin/env bash
# The one training run on a lent GPU machine (see MODEL_CARD.md), from the repository root:
# .gpu/ holds this folder as .gpu/training and the bundle made by training.prepare as
# .gpu/bundle. Results go to $OUT as they are ready: the weights in parts of <= 15 MB,
# everything else in bundle.tar.gz, and this log.
set -u
REPO="$PWD"
# run from .gpu/ so that `python -m` finds .gpu/training before the repository's training/
export PYTHONUNBUFFERED=1 PYTHONPATH="$REPO/.gpu:$REPO" TOKENIZERS_PARALLELISM=false
OUT="${OUT:-/tmp/out}"
cd "$REPO/.gpu"
mkdir -p "$OUT"
{
  date -u; nproc; nvidia-smi --query-gpu=name,memory.total --format=csv 2>&1
  python3 -c "import torch, transformers, tokenizers; print(torch.__version__, transformers.__version__, tokenizers.__version__)"
  timeout -s TERM "${TRAIN_TIMEOUT:-585}" python3 -m training.train --bundle bundle \
    --out /tmp/ling-run --export "$OUT" --deadline-s "${DEADLINE_S:-540}" "$@"
  echo "exit $?"; date -u
} 2>&1 | tee "$OUT/log.txt"
