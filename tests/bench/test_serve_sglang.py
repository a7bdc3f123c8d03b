"""`bench serve --backend sglang` against the project's SGLang stand-in
(tests/sglang_standin.py, which reached main late in this work) and against a minimal one
written here from shared/reference/sglang.md, whose token pattern the assertions know:
SSE events ``data: {"text", "output_ids", "meta_info"}`` with cumulative text, several
tokens per event when speculating, speculation stats and a finish_reason object on the last
event, ``data: [DONE]``, and ``--api-key`` on everything but /health."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from ling_local.bench.serve import ServeConfig, run_serve
from ling_local.errors import DaemonUnavailable
from tests.support import REPO

API_KEY = "sglang-test-key"
ACCEPTS = (3, 2, 4)
"""Tokens per verify step (after the prefill's single token), cycled."""


def standin(received: list[dict]) -> Starlette:
    def authorized(request: Request) -> bool:
        return request.headers.get("authorization") == f"Bearer {API_KEY}"

    async def generate(request: Request):
        if not authorized(request):
            return JSONResponse({"error": {"message": "Unauthorized"}}, status_code=401)
        body = await request.json()
        received.append(body)
        ids, params = body["input_ids"], body["sampling_params"]
        total = params["max_new_tokens"]

        async def events():
            out, steps, t0 = [], 0, time.perf_counter()
            await asyncio.sleep(0.003)  # prefill
            while len(out) < total:
                n = 1 if not out else ACCEPTS[(steps - 1) % len(ACCEPTS)]
                steps += 0 if not out else 1
                out += [7 + (len(ids) + len(out) + k) % 50 for k in range(min(n, total - len(out)))]
                meta = {
                    "id": "rid-1",
                    "finish_reason": None,
                    "prompt_tokens": len(ids),
                    "completion_tokens": len(out),
                    "cached_tokens": 0,
                    "e2e_latency": time.perf_counter() - t0,
                }
                if len(out) == total:
                    meta["finish_reason"] = {"type": "length", "length": total}
                    meta["spec_verify_ct"] = steps + 1
                    meta["spec_accept_length"] = len(out) / (steps + 1)
                    meta["spec_accept_rate"] = 0.6
                text = "".join(f"t{i} " for i in out)  # cumulative, as SGLang streams it
                event = {"text": text, "output_ids": out, "meta_info": meta}
                yield f"data: {json.dumps(event)}\n\n".encode()
                await asyncio.sleep(0.002)
            yield b"data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    async def model_info(request: Request):
        if not authorized(request):
            return JSONResponse({"error": {"message": "Unauthorized"}}, status_code=401)
        return JSONResponse(
            {"model_path": "stand-in/model", "tokenizer_path": None, "is_generation": True}
        )

    return Starlette(
        routes=[
            Route("/generate", generate, methods=["POST"]),
            Route("/get_model_info", model_info),
        ]
    )


@contextmanager
def serving(app: Starlette) -> Iterator[str]:
    """A real uvicorn server on a free loopback port, in a thread."""
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        port = server.servers[0].sockets[0].getsockname()[1]
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


@pytest.fixture(scope="module")
def sglang() -> Iterator[tuple[str, list[dict]]]:
    received: list[dict] = []
    with serving(standin(received)) as url:
        yield url, received


def test_sglang_backend_spreads_itl_and_reads_accept_length(sglang) -> None:
    url, received = sglang
    received.clear()
    cfg = ServeConfig(
        backend="sglang",
        base_url=url,
        api_key=API_KEY,
        input_len=40,
        output_len=20,
        num_prompts=3,
        warmup=1,
        vocab_size=500,
    )
    result = run_serve(cfg, progress=False)
    run = result.runs[0]
    assert (run.completed, run.failed) == (3, 0)
    measured = received[1:]  # the first was the warm-up
    assert len(measured) == 3
    for body in measured:  # token ids, exact length, ignore_eos, streaming
        assert len(body["input_ids"]) == 40 and max(body["input_ids"]) < 500
        assert body["sampling_params"]["ignore_eos"] is True
        assert body["sampling_params"]["max_new_tokens"] == 20 and body["stream"] is True
    for r in run.requests:
        assert r["output_len"] == 20
        # first event: the prefill's one token; then 3, 2, 4, ... tokens per event
        assert r["chunks"] == 1 + 7  # 19 tokens in steps of 3,2,4,3,2,4,1
        assert r["accept_length"] == pytest.approx(20 / 8)
    # ITL: every token after the first gets a sample (gaps spread over multi-token events)
    assert run.itl_ms.n == 3 * 19
    assert run.accept_length == pytest.approx(20 / 8)


def test_sglang_backend_without_the_key_fails_clearly(sglang, monkeypatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    url, _ = sglang
    cfg = ServeConfig(backend="sglang", base_url=url, input_len=8, output_len=4, num_prompts=1)
    with pytest.raises(DaemonUnavailable, match="401"):
        run_serve(cfg, progress=False)


@pytest.fixture(scope="module")
def shared_standin(model_dir) -> Iterator[str]:
    """The project's SGLang stand-in (tests/sglang_standin.py), launched the way the daemon
    launches SGLang: ``python -m sglang.launch_server`` with the shim first on the path."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, STANDIN_LOAD_S="0", STANDIN_TOKEN_S="0.002")
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "tests" / "sglang_shim"), str(REPO)])
    cmd = [sys.executable, "-m", "sglang.launch_server", "--model-path", str(model_dir)]
    cmd += ["--port", str(port), "--api-key", API_KEY, "--speculative-algorithm", "DSPARK"]
    proc = subprocess.Popen(
        cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        else:
            raise RuntimeError("the SGLang stand-in did not start")
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # the stand-in starts a worker in its group
        proc.wait(10)


def test_sglang_backend_against_the_project_standin(shared_standin, model_dir) -> None:
    cfg = ServeConfig(
        backend="sglang",
        base_url=shared_standin,
        api_key=API_KEY,
        input_len=32,
        output_len=16,
        num_prompts=2,
        tokenizer=str(model_dir),  # no /get_model_info there: the vocabulary from here
    )
    result = run_serve(cfg, progress=False)
    run = result.runs[0]
    assert (run.completed, run.failed) == (2, 0)
    assert result.target["vocab_from"] == f"tokenizer {model_dir}"
    for r in run.requests:
        assert r["output_len"] == 16 and r["prompt_len"] == 32
        assert 1 < r["chunks"] < 16  # several tokens per event: it speculates
        assert r["accept_length"] == pytest.approx(16 / r["chunks"])  # one event per step
    assert run.itl_ms.n < 2 * 16 and run.accept_length > 1
