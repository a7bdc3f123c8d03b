"""The consumers `bench overhead` times, all with the same code: the token source iterated
in-process (the floor), the daemon through a bare HTTP connection (the daemon's cost alone),
and the daemon through the SDK (what the editor and the TUI see). Each returns a `Trace`."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from ling_local.bench.daemon_proc import cpu_seconds
from ling_local.bench.rawhttp import SSEConnection
from ling_local.bench.token_source import Cadence, TokenSource, count_tokens
from ling_local.engines.base import GenerationRequest, SamplingParams

__all__ = ["Trace", "inprocess_stream", "raw_stream", "sdk_stream"]


@dataclass(slots=True)
class Trace:
    """One stream as the consumer saw it: (seconds since the request, tokens so far)."""

    arrivals: list[tuple[float, int]]
    end_s: float
    cpu_s: float = 0.0
    """Consumer-side CPU (this process) during the stream."""
    daemon_cpu_s: float = 0.0

    @property
    def tokens(self) -> int:
        return self.arrivals[-1][1] if self.arrivals else 0

    @property
    def ttft_s(self) -> float:
        return self.arrivals[0][0]

    @property
    def tpot_s(self) -> float:
        """sglang.bench_serving: (latency − TTFT) / (output_len − 1)."""
        return (self.end_s - self.ttft_s) / max(1, self.tokens - 1)

    def lags(self, cadence: Cadence) -> list[float]:
        """How late each chunk's newest token arrived, against the source's schedule."""
        return [t - cadence.due(n - 1) for t, n in self.arrivals]

    def growth_s(self, cadence: Cadence) -> float:
        """Mean lag of the last 10 % of chunks minus that of the first 10 %."""
        lags = self.lags(cadence)
        k = max(1, len(lags) // 10)
        return sum(lags[-k:]) / k - sum(lags[:k]) / k


async def inprocess_stream(source: TokenSource, n_tokens: int) -> Trace:
    request = GenerationRequest(prompt="x", sampling=SamplingParams(max_tokens=n_tokens))
    arrivals: list[tuple[float, int]] = []
    tokens = 0
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    async for delta in source.stream(request):
        t = time.perf_counter() - t0
        if delta.text:
            tokens += count_tokens(delta.text)
            arrivals.append((t, tokens))
    end = time.perf_counter() - t0
    return Trace(arrivals, end, time.process_time() - cpu0)


def _body(endpoint: str, n_tokens: int) -> tuple[str, dict]:
    """The request the SDK sends, for the raw client."""
    body: dict = {"max_tokens": n_tokens, "stream": True, "stream_options": {"include_usage": True}}
    if endpoint == "chat":
        return "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], **body}
    return "/v1/completions", {"prompt": "x", **body}


def _event_text(data: bytes) -> str:
    if data == b"[DONE]":
        return ""
    choices = json.loads(data).get("choices")
    if not choices:
        return ""
    c = choices[0]
    return c["text"] if "text" in c else (c.get("delta") or {}).get("content") or ""


async def raw_stream(conn: SSEConnection, endpoint: str, n_tokens: int, daemon_pid: int) -> Trace:
    """One streamed request over a bare HTTP connection: the daemon's cost alone."""
    path, body = _body(endpoint, n_tokens)
    arrivals: list[tuple[float, int]] = []
    tokens = 0
    dcpu0, cpu0 = cpu_seconds(daemon_pid), time.process_time()
    t0 = time.perf_counter()
    async for data in conn.events(path, body):
        t = time.perf_counter() - t0
        text = _event_text(data)
        if text:
            tokens += count_tokens(text)
            arrivals.append((t, tokens))
    end = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    return Trace(arrivals, end, cpu, cpu_seconds(daemon_pid) - dcpu0)


async def sdk_stream(client, endpoint: str, n_tokens: int, daemon_pid: int) -> Trace:
    """One streamed request through the SDK, timed exactly like `inprocess_stream`."""
    arrivals: list[tuple[float, int]] = []
    tokens = 0
    dcpu0, cpu0 = cpu_seconds(daemon_pid), time.process_time()
    t0 = time.perf_counter()
    if endpoint == "chat":
        messages = [{"role": "user", "content": "x"}]
        stream = await client.stream_chat(messages, max_tokens=n_tokens)
    else:
        stream = await client.stream_complete("x", max_tokens=n_tokens)
    async for chunk in stream:
        t = time.perf_counter() - t0
        if chunk.text:
            tokens += count_tokens(chunk.text)
            arrivals.append((t, tokens))
    end = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    return Trace(arrivals, end, cpu, cpu_seconds(daemon_pid) - dcpu0)
