#!/usr/bin/env bash
# Wheels the daemon needs on the lent GPU machine (Python 3.12, no package registry there)
# that its image lacks, at the versions this venv runs: the GPU image has torch,
# transformers, tokenizers, httpx, anyio, typer, rich, jinja2 and prometheus-client, but no
# FastAPI/pydantic stack (and anyio/typer are pinned here to the versions tested) (the SGLang kit brings fastapi 0.118 + starlette 0.48 for SGLang;
# the daemon needs fastapi >= 0.135 for fastapi.sse). scripts/gpu_sglang_check.py installs
# these into a --target directory used by the daemon process only.
#   bash scripts/gpu_wheels.sh        -> .gpu/wheels/ (git-ignored)
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=${DEST:-.gpu/wheels}
mkdir -p "$DEST"
PLAT=(--only-binary=:all: --python-version 3.12 --implementation cp
      --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64
      --platform manylinux2014_x86_64 --platform any)
python3 -m pip download -q --no-deps "${PLAT[@]}" -d "$DEST" \
  fastapi==0.165.0 starlette==1.10.0 pydantic==2.14.4 pydantic-core==2.50.5 \
  pydantic-settings==2.16.3 python-dotenv==1.2.4 uvicorn==0.54.0 annotated-types==0.8.0 \
  typing-inspection==0.4.5 annotated-doc==0.0.7 typing-extensions==4.16.0 \
  opentelemetry-api==1.45.2 anyio==4.16.0 sniffio==1.3.1 typer==0.29.2
du -sh "$DEST"
