#!/usr/bin/env bash
# Wheels the daemon needs on the lent GPU machine (Python 3.12, no package registry there)
# that its image lacks, at the versions this venv runs. The image has torch, transformers,
# tokenizers, httpx, aiohttp, rich, jinja2 and prometheus-client, but no FastAPI/pydantic
# stack: the SGLang kit brings fastapi 0.118 + starlette 0.48 for SGLang, and the daemon
# needs fastapi >= 0.135 (fastapi.sse). anyio and typer are pinned to the versions tested;
# orjson is the sglang extra's; httptools is what the daemon parses HTTP with (the image has
# uvloop but not httptools); pytest-asyncio runs the engine's GPU tests (the image has
# pytest). The device command installs these into a --target directory
# that only the daemon process has on its path (the SGLang child keeps the kit's).
#   bash scripts/gpu_wheels.sh        -> .gpu/daemon-wheels/ (git-ignored, about 3.6 MB)
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=${DEST:-.gpu/daemon-wheels}
mkdir -p "$DEST"
PLAT=(--only-binary=:all: --python-version 3.12 --implementation cp
      --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64
      --platform manylinux2014_x86_64 --platform any)
python3 -m pip download -q --no-deps "${PLAT[@]}" -d "$DEST" \
  fastapi==0.165.0 starlette==1.10.0 pydantic==2.14.4 pydantic-core==2.50.5 \
  pydantic-settings==2.16.3 python-dotenv==1.2.4 uvicorn==0.54.0 annotated-types==0.8.0 \
  typing-inspection==0.4.5 annotated-doc==0.0.7 typing-extensions==4.16.0 \
  opentelemetry-api==1.45.2 anyio==4.16.0 sniffio==1.3.1 typer==0.29.2 orjson==3.13.0 \
  httptools==0.9.0 pytest-asyncio==1.5.0
du -sh "$DEST"
