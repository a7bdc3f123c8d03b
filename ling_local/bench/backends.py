"""What `bench serve` talks to, and how one streamed request is timed, the way
`sglang.bench_serving` times it:

- TTFT: from sending the request to the first chunk that carries text;
- ITL: the gap before each later chunk, spread evenly over the tokens it carries (token
  counts from SGLang's ``meta_info.completion_tokens``, or from per-chunk ``usage`` where an
  OpenAI-compatible server sends it (``continuous_usage_stats``), else one per chunk);
- latency: until ``[DONE]`` (or the end of the stream); TPOT is derived from these.

Backends: ``daemon`` (ours: /v1/completions, found like the SDK finds it), ``openai`` (any
OpenAI-compatible /v1/completions), ``sglang`` (native /generate with ``input_ids``). The
per-chunk work is one timestamp, one ``json.loads`` and a few lookups: the client is part
of what it measures.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import httpx

from ling_local import discovery
from ling_local.errors import ConfigError, DaemonUnavailable

__all__ = ["BACKENDS", "RequestOutput", "Target"]

BACKENDS = ("daemon", "openai", "sglang")
_DEFAULT_URL = {"daemon": "http://127.0.0.1:8741", "sglang": "http://127.0.0.1:30000"}


@dataclass(slots=True)
class RequestOutput:
    prompt_len: int
    ok: bool = False
    error: str = ""
    output_len: int = 0
    ttft_s: float = 0.0
    latency_s: float = 0.0
    itl_s: list[float] = field(default_factory=list)
    chunks: int = 0
    accept_length: float | None = None

    @property
    def tpot_s(self) -> float | None:
        """sglang.bench_serving: (latency − TTFT) / (output_len − 1)."""
        if self.output_len < 2:
            return None
        return (self.latency_s - self.ttft_s) / (self.output_len - 1)


async def _sse(response: httpx.Response) -> AsyncIterator[tuple[float, bytes]]:
    """(arrival time, payload) of each ``data:`` line, stamped when its bytes arrived."""
    buffer = b""
    async for raw in response.aiter_raw():
        t = time.perf_counter()
        buffer += raw
        if b"\n" not in raw:
            continue
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            if line.startswith(b"data:"):
                yield t, line[5:].strip()


def _message(error: object) -> str:
    return str(error.get("message", error)) if isinstance(error, dict) else str(error)


class _Timer:
    """Accumulates one request's timings from (arrival, tokens so far) observations."""

    def __init__(self, out: RequestOutput, start: float) -> None:
        self.out, self.start = out, start
        self.last_t, self.last_n = start, 0

    def text_chunk(self, t: float, n_total: int | None) -> None:
        out = self.out
        n = self.last_n + 1 if n_total is None else n_total
        if out.chunks == 0:
            out.ttft_s = t - self.start
        else:
            new = n - self.last_n
            if new <= 0:  # text held back and released without new tokens
                return
            out.itl_s.extend([(t - self.last_t) / new] * new)
        out.chunks += 1
        self.last_t, self.last_n = t, n

    def done(self, t: float, output_len: int | None) -> None:
        self.out.latency_s = t - self.start
        self.out.output_len = output_len if output_len is not None else self.last_n
        self.out.ok = self.out.chunks > 0 and not self.out.error


@dataclass
class Target:
    """A server to benchmark: backend, base URL (``unix:/path`` for a unix socket), auth."""

    backend: str
    base_url: str
    api_key: str | None = None
    model: str | None = None

    @classmethod
    def resolve(
        cls, backend: str, base_url: str | None, api_key: str | None, model: str | None
    ) -> Target:
        if backend not in BACKENDS:
            raise ConfigError(f"unknown backend {backend!r}; use one of {', '.join(BACKENDS)}")
        if backend == "daemon":
            base_url = base_url or discovery.daemon_url() or _DEFAULT_URL["daemon"]
            api_key = api_key or discovery.read_token()
        else:
            api_key = api_key or os.environ.get("OPENAI_API_KEY")  # as sglang.bench_serving
        if base_url is None:
            if backend == "openai":
                raise ConfigError("--backend openai needs --base-url (e.g. http://127.0.0.1:8000)")
            base_url = _DEFAULT_URL[backend]
        return cls(backend, base_url.rstrip("/"), api_key, model)

    def client(self, timeout: float) -> httpx.AsyncClient:
        url, transport = self.base_url, None
        if url.startswith("unix:"):
            transport = httpx.AsyncHTTPTransport(uds=url[5:])
            url = "http://localhost"
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        return httpx.AsyncClient(
            base_url=url,
            headers=headers,
            transport=transport,
            trust_env=False,
            timeout=httpx.Timeout(timeout, connect=10.0),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=None),
        )

    async def info(self, client: httpx.AsyncClient) -> dict:
        """What is being measured (model, engine), and the vocabulary size if known."""
        try:
            if self.backend == "sglang":
                r = await client.get("/get_model_info")
                if r.status_code == 404:  # not every SGLang-like server has it
                    return {}
                r.raise_for_status()
                data = r.json()
                return {"model": data.get("model_path"), "tokenizer": data.get("tokenizer_path")}
            r = await client.get(f"{self._v1}/models")
            r.raise_for_status()
            first = (r.json().get("data") or [{}])[0]
        except httpx.HTTPStatusError as err:
            raise DaemonUnavailable(
                f"{self.base_url} answered {err.response.status_code} to "
                f"{err.request.url.path}: {err.response.text[:200]}"
            ) from None
        except (httpx.HTTPError, ValueError) as err:
            raise DaemonUnavailable(f"cannot reach {self.base_url}: {err}") from None
        return {
            "model": first.get("id"),
            "engine": first.get("engine"),
            "profile": first.get("profile"),
            "vocab_size": first.get("vocab_size"),
            "context_length": first.get("context_length") or first.get("max_model_len"),
        }

    def request(self, ids: list[int], output_len: int) -> tuple[str, dict]:
        if self.backend == "sglang":
            params = {"max_new_tokens": output_len, "temperature": 0.0, "ignore_eos": True}
            return "/generate", {"input_ids": ids, "sampling_params": params, "stream": True}
        body: dict = {
            "prompt": ids,
            "max_tokens": output_len,
            "temperature": 0.0,
            "stream": True,
            "ignore_eos": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        }
        if self.model:
            body["model"] = self.model
        return f"{self._v1}/completions", body

    @property
    def _v1(self) -> str:
        """OpenAI base URLs are given with or without their /v1."""
        return "" if self.base_url.endswith("/v1") else "/v1"

    async def send(
        self, client: httpx.AsyncClient, ids: list[int], output_len: int
    ) -> RequestOutput:
        out = RequestOutput(prompt_len=len(ids))
        path, body = self.request(ids, output_len)
        start = time.perf_counter()
        timer = _Timer(out, start)
        try:
            async with client.stream("POST", path, json=body) as response:
                if response.status_code != 200:
                    text = (await response.aread()).decode("utf-8", "replace")
                    out.error = f"HTTP {response.status_code}: {text[:300]}"
                    return out
                parse = self._sglang_event if self.backend == "sglang" else self._openai_event
                total: int | None = None
                end = None
                async for t, data in _sse(response):
                    if data == b"[DONE]":
                        end = t
                        continue
                    total = parse(json.loads(data), t, timer, total)
                    if out.error:
                        return out
                timer.done(end or time.perf_counter(), total)
        except (httpx.HTTPError, ValueError) as err:
            out.error = f"{type(err).__name__}: {err}"
        return out

    @staticmethod
    def _openai_event(obj: dict, t: float, timer: _Timer, total: int | None) -> int | None:
        if "error" in obj:
            timer.out.error = _message(obj["error"])
            return total
        usage = obj.get("usage")
        n = usage.get("completion_tokens") if usage else None
        if (ling := obj.get("ling")) and ling.get("accept_length") is not None:
            timer.out.accept_length = ling["accept_length"]
        choices = obj.get("choices")
        if choices:
            c = choices[0]
            text = c.get("text") if "text" in c else (c.get("delta") or {}).get("content")
            if text:
                timer.text_chunk(t, n)
        return n if n is not None else total

    @staticmethod
    def _sglang_event(obj: dict, t: float, timer: _Timer, total: int | None) -> int | None:
        if "error" in obj:
            timer.out.error = _message(obj["error"])
            return total
        meta = obj.get("meta_info") or {}
        n = meta.get("completion_tokens")
        if meta.get("spec_accept_length") is not None:
            timer.out.accept_length = meta["spec_accept_length"]
        if obj.get("text"):
            timer.text_chunk(t, n)
        return n if n is not None else total
