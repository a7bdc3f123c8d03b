"""A protocol-level stand-in for SGLang's HTTP server, for tests on machines without a GPU.

It follows shared/reference/sglang.md and SGLang 0.5.17's source: the same command line
(parsed strictly, so a bad flag fails the start like the real server), the HTTP port bound
only once the model is loaded, then SGLang's own warm-up (a keyed request to its own URL)
unless ``--skip-server-warmup``, ``/health`` and ``/health_generate`` (503 until warmed
up), ``/generate`` streaming cumulative ``text``/``output_ids`` with ``meta_info`` (token
counts, cached tokens, speculation stats on the last event, finish_reason objects), or
with ``--incremental-streaming-output`` each event's new text and ids only (a backlog of
events coalesced into one, as SGLang's tokenizer manager does; without the flag only the
newest of a backlog is sent), ``/abort_request`` by rid prefix, and ``--api-key`` on
everything but ``/health*`` (given on the command line or, as the daemon does, in a
``--config`` YAML file).
Tokens come from the model's real tokenizer; their choice is a deterministic hash.

Test-only knobs (environment): STANDIN_LOAD_S (time spent "loading"), STANDIN_TOKEN_S
(time per decode step), STANDIN_FAIL_START (exit during start-up), STANDIN_EOS_AT (emit
EOS at this step). ``POST /standin/crash`` exits at once (the worker child stays behind,
as a crashed server's workers can); ``GET /standin/requests`` lists the bodies received (and the client port of each).
Run through ``tests/sglang_shim/sglang/launch_server.py`` as ``python -m
sglang.launch_server``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path

import uvicorn
import yaml
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from tokenizers import Tokenizer


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="sglang.launch_server (stand-in)")
    p.add_argument("--model-path", required=True)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--api-key")
    p.add_argument("--tp-size", type=int, default=1)
    p.add_argument("--ep-size", type=int, default=1)
    p.add_argument("--trust-remote-code", action="store_true")
    p.add_argument("--mem-fraction-static", type=float)
    p.add_argument("--context-length", type=int)
    p.add_argument("--speculative-algorithm", choices=["EAGLE", "EAGLE3", "NEXTN", "DSPARK"])
    p.add_argument("--speculative-draft-model-path")
    p.add_argument("--speculative-num-steps", type=int)
    p.add_argument("--speculative-eagle-topk", type=int)
    p.add_argument("--speculative-num-draft-tokens", type=int)
    p.add_argument("--enable-linear-replayssm-spec", action="store_true")
    p.add_argument("--linear-replayssm-cache-len", type=int)
    p.add_argument("--mamba-radix-cache-strategy", choices=["auto", "no_buffer", "extra_buffer"])
    p.add_argument("--disable-radix-cache", action="store_true")
    p.add_argument("--attention-backend", choices=["triton", "fa3", "flashinfer", "trtllm_mla"])
    p.add_argument("--flashinfer-allreduce-fusion-backend")
    p.add_argument("--sampling-backend", choices=["pytorch", "flashinfer"])
    p.add_argument("--grammar-backend", choices=["xgrammar", "outlines", "llguidance", "none"])
    p.add_argument("--disable-piecewise-cuda-graph", action="store_true")
    p.add_argument("--cuda-graph-max-bs", type=int)
    p.add_argument(
        "--incremental-streaming-output", "--stream-output", action="store_true"
    )  # --stream-output: SGLang's deprecated alias of the same setting
    p.add_argument("--skip-server-warmup", action="store_true")
    p.add_argument("--log-level", default="info")
    return p.parse_args(_merge_config(p, argv))


def _merge_config(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """``--config FILE.yaml`` as SGLang >= 0.5 reads it (server_args_config_parser): each
    key becomes a flag (true booleans of store_true flags bare), placed before the other
    arguments so the command line wins; one file, with a .yaml/.yml name, that exists."""
    if "--config" not in argv:
        return argv
    if argv.count("--config") > 1:
        raise SystemExit("Multiple config files specified! Only one allowed.")
    at = argv.index("--config")
    if at == len(argv) - 1:
        raise SystemExit("No config file specified after --config flag!")
    path = Path(argv[at + 1])
    if path.suffix.lower() not in (".yaml", ".yml"):
        raise SystemExit(f"Config file must be YAML format, got: {path.suffix}")
    if not path.exists():
        raise SystemExit(f"Config file not found: {path}")
    data = yaml.safe_load(path.read_text()) or {}
    flags = {a.dest for a in parser._actions if isinstance(a, argparse._StoreTrueAction)}
    merged: list[str] = []
    for key, value in data.items():
        if isinstance(value, bool):
            if key.replace("-", "_") in flags:
                merged += [f"--{key}"] if value else []
            else:
                merged += [f"--{key}", str(value).lower()]
        elif isinstance(value, list):
            merged += [f"--{key}", *map(str, value)] if value else []
        else:
            merged += [f"--{key}", str(value)]
    return merged + argv[:at] + argv[at + 2 :]


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


class StandIn:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.tok = Tokenizer.from_file(str(Path(args.model_path) / "tokenizer.json"))
        self.vocab = self.tok.get_vocab_size()
        self.loaded = False
        self.running: dict[str, dict] = {}
        self.seen_rids: set[str] = set()
        self.prompts: list[list[int]] = []
        self.requests: list[dict] = []
        self.peers: list[int] = []
        """The client port of each /generate: which requests shared a connection."""
        self.tasks: set[asyncio.Task] = set()
        self.eos_at = int(os.environ.get("STANDIN_EOS_AT", "0"))
        self.token_s = float(os.environ.get("STANDIN_TOKEN_S", "0.002"))

    def authorized(self, request: Request) -> bool:
        if not self.args.api_key:
            return True
        return request.headers.get("authorization", "") == f"Bearer {self.args.api_key}"

    def cached_tokens(self, ids: list[int]) -> int:
        if self.args.disable_radix_cache:
            return 0
        best = 0
        for old in self.prompts[-16:]:
            n = 0
            for a, b in zip(old, ids, strict=False):
                if a != b:
                    break
                n += 1
            best = max(best, n)
        self.prompts.append(ids)
        return min(best, len(ids) - 1)

    def next_token(self, ids: list[int]) -> int:
        return 5 + (ids[-1] * 7919 + len(ids) * 104729) % (self.vocab - 5)

    async def generate(self, body: dict):
        """Yields the output dicts SGLang would stream for this request."""
        params = dict(body.get("sampling_params") or {})
        known = {
            "max_new_tokens",
            "temperature",
            "top_p",
            "top_k",
            "stop",
            "stop_token_ids",
            "ignore_eos",
            "sampling_seed",
            "json_schema",
            "skip_special_tokens",
            "no_stop_trim",
            "min_p",
        }
        if unknown := set(params) - known:
            raise ValueError(f"unexpected sampling params: {sorted(unknown)}")
        rid = body.get("rid") or secrets.token_hex(16)
        if rid in self.seen_rids:
            raise ValueError(f"Duplicate request ID {rid}")
        self.seen_rids.add(rid)
        if body.get("input_ids") is not None:
            prompt = list(body["input_ids"])
        elif body.get("text") is not None:
            prompt = self.tok.encode(body["text"], add_special_tokens=False).ids
        else:
            raise ValueError("Either text or input_ids should be provided.")
        if not prompt:
            raise ValueError("The input is empty.")
        max_new = int(params.get("max_new_tokens", 128))
        stops = params.get("stop") or []
        stops = [stops] if isinstance(stops, str) else stops
        stop_ids = set(params.get("stop_token_ids") or [])
        if not params.get("ignore_eos"):
            stop_ids.add(0)
        spec = self.args.speculative_algorithm is not None
        state = {"aborted": False}
        self.running[rid] = state
        meta = {
            "id": rid,
            "finish_reason": None,
            "prompt_tokens": len(prompt),
            "cached_tokens": self.cached_tokens(prompt),
            "completion_tokens": 0,
            "weight_version": "default",
            "num_retractions": 0,
        }
        # Like SGLang's tokenizer manager: deltas only on a stream, whole text otherwise.
        incremental = self.args.incremental_streaming_output and bool(body.get("stream"))
        ids, out, steps, t0, sent = list(prompt), [], 0, time.perf_counter(), ""
        sent_ids = 0
        try:
            await asyncio.sleep(self.token_s)  # prefill
            while True:
                steps += 1
                finish = None
                for _ in range(1 + (steps % 4 if spec else 0)):
                    token = self.next_token(ids)
                    if self.eos_at and len(out) + 1 == self.eos_at:
                        token = 0
                    ids.append(token)
                    out.append(token)
                    if token in stop_ids:
                        finish = {"type": "stop", "matched": token}
                        out.pop()
                        break
                    if len(out) >= max_new:
                        finish = {"type": "length", "length": max_new}
                        break
                text = self.tok.decode(out, skip_special_tokens=True)
                for s in stops:
                    if s and s in text:
                        finish, text = {"type": "stop", "matched": s}, text[: text.index(s)]
                if finish is None:  # like SGLang: hold back an incomplete UTF-8 character
                    text = text.rstrip("\ufffd")
                text = text if len(text) >= len(sent) else sent
                delta, sent = text[len(sent) :], text
                if state["aborted"] and finish is None:
                    finish = {
                        "type": "abort",
                        "message": "Aborted",
                        "status_code": None,
                        "err_type": None,
                    }
                meta = {
                    **meta,
                    "completion_tokens": len(out)
                    + (finish is not None and finish.get("matched") in stop_ids),
                    "e2e_latency": time.perf_counter() - t0,
                    "finish_reason": finish,
                }
                if finish is not None and spec:
                    meta["spec_verify_ct"] = steps
                    meta["spec_accept_length"] = meta["completion_tokens"] / steps
                    meta["spec_accept_rate"] = 0.5
                if incremental:
                    yield {"text": delta, "output_ids": out[sent_ids:], "meta_info": meta}
                    sent_ids = len(out)
                else:
                    yield {"text": text, "output_ids": list(out), "meta_info": meta}
                if finish is not None:
                    return
                await asyncio.sleep(self.token_s)
        finally:
            self.running.pop(rid, None)

    # ------------------------------------------------------------------ routes
    async def health(self, request: Request) -> Response:
        return Response(status_code=200 if self.loaded else 503)

    async def generate_route(self, request: Request) -> Response:
        if not self.authorized(request):
            return JSONResponse({"error": "Unauthorized"}, status_code=401)
        body = await request.json()
        self.requests.append(body)
        self.peers.append(request.client.port if request.client else 0)
        if not body.get("stream"):
            try:
                outs = [out async for out in self.generate(body)]
                return JSONResponse(outs[-1])
            except ValueError as err:
                return JSONResponse({"error": {"message": str(err)}}, status_code=400)

        # Like SGLang, the generation runs on its own: a client that disconnects does not
        # stop it; SGLang aborts such a request only ~2 s later (create_abort_task).
        queue: asyncio.Queue = asyncio.Queue()

        async def produce() -> None:
            try:
                async for out in self.generate(body):
                    queue.put_nowait(out)
            except ValueError as err:
                queue.put_nowait(err)
            queue.put_nowait(None)

        task = asyncio.create_task(produce())
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

        async def events():
            try:
                while (out := await self.next_output(queue)) is not None:
                    if isinstance(out, ValueError):
                        error = {"message": str(out), "type": "invalid_request_error", "code": 400}
                        yield b"data: " + json.dumps({"error": error}).encode() + b"\n\n"
                        break
                    yield b"data: " + json.dumps(out).encode() + b"\n\n"
            except asyncio.CancelledError:
                rid = body.get("rid", "")
                log(f"client disconnected rid={rid}")
                asyncio.get_running_loop().call_later(2.0, self.disconnect_abort, rid)
                raise
            yield b"data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    async def next_output(self, queue: asyncio.Queue):
        """The next event of a stream: everything queued since the last one, as SGLang's
        tokenizer manager drains it (deltas concatenated, or the newest cumulative one)."""
        outs = [await queue.get()]
        while outs[-1] is not None and not isinstance(outs[-1], Exception) and not queue.empty():
            outs.append(queue.get_nowait())
        if outs[-1] is None or isinstance(outs[-1], Exception):
            end = outs.pop()
            if not outs:
                return end
            queue.put_nowait(end)  # seen after this event
        out = dict(outs[-1])
        if self.args.incremental_streaming_output and len(outs) > 1:  # (streams only)
            out["text"] = "".join(o["text"] for o in outs)
            out["output_ids"] = [i for o in outs for i in o["output_ids"]]
        return out

    def disconnect_abort(self, rid: str) -> None:
        if rid in self.running:
            self.running[rid]["aborted"] = True
            log(f"aborting disconnected request rid={rid}")

    async def abort(self, request: Request) -> Response:
        if not self.authorized(request):
            return JSONResponse({"error": "Unauthorized"}, status_code=401)
        rid = (await request.json()).get("rid", "")
        if not rid:
            return Response(status_code=200)
        for running, state in self.running.items():
            if running.startswith(rid):
                state["aborted"] = True
                log(f"Abort request rid={running}")
        return Response(status_code=200)

    async def crash(self, request: Request) -> Response:
        if not self.authorized(request):
            return JSONResponse({"error": "Unauthorized"}, status_code=401)
        log("crashing on request")
        os._exit(3)

    async def load(self, request: Request) -> Response:
        """SGLang's /get_load shape (one data-parallel rank)."""
        if not self.authorized(request):
            return JSONResponse({"error": "Unauthorized"}, status_code=401)
        return JSONResponse(
            [
                {
                    "dp_rank": 0,
                    "num_reqs": len(self.running),
                    "num_waiting_reqs": 0,
                    "num_tokens": 0,
                    "num_pending_tokens": 0,
                    "ts_tic": time.perf_counter(),
                }
            ]
        )

    async def model_info(self, request: Request) -> Response:
        if not self.authorized(request):
            return JSONResponse({"error": "Unauthorized"}, status_code=401)
        return JSONResponse(
            {
                "model_path": self.args.model_path,
                "is_generation": True,
                "has_image_understanding": False,
            }
        )

    async def requests_route(self, request: Request) -> Response:
        if not self.authorized(request):
            return JSONResponse({"error": "Unauthorized"}, status_code=401)
        return JSONResponse(
            {"requests": self.requests, "running": list(self.running), "peers": self.peers}
        )

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/health", self.health),
                Route("/health_generate", self.health),
                Route("/generate", self.generate_route, methods=["POST", "PUT"]),
                Route("/abort_request", self.abort, methods=["POST"]),
                Route("/get_load", self.load),
                Route("/model_info", self.model_info),
                Route("/get_model_info", self.model_info),
                Route("/standin/crash", self.crash, methods=["POST"]),
                Route("/standin/requests", self.requests_route),
            ]
        )


async def serve(args: argparse.Namespace) -> None:
    standin = StandIn(args)
    load_s = float(os.environ.get("STANDIN_LOAD_S", "0.3"))
    log("Load weight begin. avail mem=79.10 GB")
    shards = 4
    for i in range(1, shards + 1):
        await asyncio.sleep(load_s / shards)
        pct = 100 * i // shards
        sys.stdout.write(
            f"\rLoading safetensors checkpoint shards: {pct:3d}% Completed | "
            f"{i}/{shards} [00:01<00:01,  1.00it/s]"
        )
        sys.stdout.flush()
    print(flush=True)
    if os.environ.get("STANDIN_FAIL_START"):
        log("RuntimeError: CUDA out of memory. Tried to allocate 20.00 GiB (stand-in)")
        os._exit(1)
    log("Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, mem usage=2.1 GB")
    # Like SGLang, the HTTP port is bound only now, after the model is loaded.
    config = uvicorn.Config(
        standin.app(), host=args.host, port=args.port, log_level="warning", access_log=False
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():  # the port was taken: uvicorn logged it and gave up
            log(f"could not bind {args.host}:{args.port}; exiting")
            os._exit(1)
        await asyncio.sleep(0.01)
    if not args.skip_server_warmup:
        await asyncio.to_thread(self_warmup, args)
    standin.loaded = True
    log("The server is fired up and ready to roll!")
    await task


def self_warmup(args: argparse.Namespace) -> None:
    """SGLang's own warm-up (_execute_server_warmup): a request to its own URL, with its
    API key, which reaches whatever process answers on that port."""
    import urllib.request

    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    url = f"http://{args.host}:{args.port}/model_info"
    try:
        urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=5).read()
    except OSError as err:
        log(f"warmup request failed: {err}")


def main(argv: list[str] | None = None) -> None:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    # Like SGLang, which logs its whole ServerArgs, the API key included.
    log(
        f"server_args=ServerArgs(model_path={args.model_path!r}, port={args.port}, "
        f"tp_size={args.tp_size}, api_key={args.api_key!r})"
    )
    # A worker process in the server's process group, like SGLang's scheduler.
    subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(1)"])
    asyncio.run(serve(args))


if __name__ == "__main__":
    main()
