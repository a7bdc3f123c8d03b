"""The consumers `bench overhead` times, all with the same code: the token source iterated
in-process (the floor), the daemon through a bare HTTP connection (the daemon's cost alone),
and the daemon through the SDK (what the editor and the TUI see). Each returns a `Trace`.

Every request carries a marker in its prompt, so the token source's record of when it
started the stream and let each burst go can be joined to what the consumer saw. Both sides
use `time.perf_counter` (CLOCK_MONOTONIC: one clock for every process on the machine).
"""

from __future__ import annotations

import itertools
import json
import time
from dataclasses import dataclass, field

from ling_local.bench.daemon_proc import cpu_seconds
from ling_local.bench.rawhttp import SSEConnection
from ling_local.bench.token_source import Cadence, TokenSource, count_tokens, marker
from ling_local.engines.base import GenerationRequest, SamplingParams

__all__ = ["Trace", "inprocess_stream", "raw_stream", "sdk_stream"]

_markers = itertools.count(1)


@dataclass(slots=True)
class Trace:
    """One stream as the consumer saw it, joined to the source's record of it."""

    marker: int
    t0: float
    """When the consumer sent the request (perf_counter)."""
    arrivals: list[tuple[float, int]]
    """(seconds since t0, tokens so far) per chunk with text."""
    end_s: float
    cpu_s: float = 0.0
    """Consumer-side CPU (this process) during the stream."""
    daemon_cpu_s: float = 0.0
    source_start: float | None = None
    """When the token source began the stream (perf_counter), once joined."""
    emits: dict[int, float] = field(default_factory=dict)
    """tokens so far -> when the source let that burst go (perf_counter), once joined."""

    def join(self, record: dict | None) -> None:
        if record:
            self.source_start = record["start"]
            self.emits = {n: t for t, n in record["emits"]}

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

    def relay_s(self) -> list[float]:
        """Per chunk: arrival minus when the source let its newest token go."""
        return [self.t0 + t - self.emits[n] for t, n in self.arrivals if n in self.emits]

    @property
    def added_ttft_s(self) -> float | None:
        """What the path added to TTFT: request to engine start, plus first token to
        consumer. The source's own wait (and its timer jitter) is not in it."""
        if self.source_start is None or not self.emits:
            return None
        return (self.source_start - self.t0) + self.relay_s()[0]

    def lags(self, cadence: Cadence) -> list[float]:
        """How late each chunk's newest token arrived against the source's schedule."""
        return [t - cadence.due(n - 1) for t, n in self.arrivals]

    def growth_s(self) -> float:
        """Mean relay latency of the last 10 % of chunks minus that of the first 10 %."""
        relay = self.relay_s()
        k = max(1, len(relay) // 10)
        return sum(relay[-k:]) / k - sum(relay[:k]) / k


async def inprocess_stream(source: TokenSource, n_tokens: int) -> Trace:
    m = next(_markers)
    request = GenerationRequest(prompt=marker(m), sampling=SamplingParams(max_tokens=n_tokens))
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
    trace = Trace(m, t0, arrivals, end, time.process_time() - cpu0)
    trace.join(source.emissions.pop(m, None))
    return trace


def _body(endpoint: str, prompt: str, n_tokens: int) -> tuple[str, dict]:
    """The request the SDK sends, for the raw client."""
    body: dict = {"max_tokens": n_tokens, "stream": True, "stream_options": {"include_usage": True}}
    if endpoint == "chat":
        return "/v1/chat/completions", {"messages": [{"role": "user", "content": prompt}], **body}
    return "/v1/completions", {"prompt": prompt, **body}


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
    m = next(_markers)
    path, body = _body(endpoint, marker(m), n_tokens)
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
    return Trace(m, t0, arrivals, end, cpu, cpu_seconds(daemon_pid) - dcpu0)


async def sdk_stream(client, endpoint: str, n_tokens: int, daemon_pid: int) -> Trace:
    """One streamed request through the SDK, timed exactly like `inprocess_stream`."""
    m = next(_markers)
    arrivals: list[tuple[float, int]] = []
    tokens = 0
    dcpu0, cpu0 = cpu_seconds(daemon_pid), time.process_time()
    t0 = time.perf_counter()
    if endpoint == "chat":
        messages = [{"role": "user", "content": marker(m)}]
        stream = await client.stream_chat(messages, max_tokens=n_tokens)
    else:
        stream = await client.stream_complete(marker(m), max_tokens=n_tokens)
    async for chunk in stream:
        t = time.perf_counter() - t0
        if chunk.text:
            tokens += count_tokens(chunk.text)
            arrivals.append((t, tokens))
    end = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    return Trace(m, t0, arrivals, end, cpu, cpu_seconds(daemon_pid) - dcpu0)
