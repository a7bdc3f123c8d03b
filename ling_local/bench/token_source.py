"""A benchmark-only engine that emits tokens at a fixed cadence, with no model behind it.

`ling-local bench overhead` serves it through the real daemon to measure what our host
path (HTTP, scheduler, relay, SSE, client) adds to a stream whose timing is known exactly.
The default cadence is the published DSpark run on Ling-3.0-flash: 0.78 ms per token, in
bursts of ~10 tokens per verify step (a burst every 7.8 ms).

It is selectable only by that benchmark (`python -m ling_local.bench.overhead_daemon`):
no profile can name it (`engine.kind` does not allow it).

Timing: bursts are due at fixed offsets from the start of the request (`Cadence`), so a
late wake-up never shifts the bursts after it. The source sleeps with asyncio until each
burst is due. The loop's timers have millisecond granularity, so a burst leaves 0–1 ms
after its due time; we accept that rather than busy-waiting the tail, because a spin would
burn the daemon's CPU and spoil the CPU-per-token figure. The benchmark does not depend on
it either: the source records when each burst actually left (`emissions`), and latencies
are measured from there.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from ling_local.engines.base import (
    Delta,
    EngineHealth,
    EngineState,
    FinishReason,
    GenerationRequest,
    GenerationStats,
)

__all__ = ["TOKEN_CHARS", "Cadence", "TokenSource", "count_tokens", "marker"]

# Every token is exactly TOKEN_CHARS characters, so a client counts the tokens of any chunk
# from its text alone. They include characters JSON must escape and non-ASCII ones, like code.
TOKEN_CHARS = 4
_TOKENS = ("def ", "(x):", "\n   ", ' "a"', "\\n\t ", "é = ", "retu", "rn ;")
_CYCLE = "".join(_TOKENS)


_MARKER = re.compile(r"bench-(\d+)")


def count_tokens(text: str) -> int:
    return len(text) // TOKEN_CHARS


def marker(n: int) -> str:
    """A prompt the source recognises, so its emissions can be matched to a request."""
    return f"bench-{n}"


def token_text(start: int, n: int) -> str:
    """The text of tokens start .. start+n-1."""
    i = (start % len(_TOKENS)) * TOKEN_CHARS
    span = n * TOKEN_CHARS
    repeated = _CYCLE * (2 + span // len(_CYCLE))
    return repeated[i : i + span]


@dataclass(frozen=True, slots=True)
class Cadence:
    """When each token is due, from the start of a request: the first token alone after
    `first_token_s` (the prefill), then `burst` tokens every `burst × period_s` (one
    verify step each)."""

    period_s: float = 0.00078
    burst: int = 10
    first_token_s: float | None = None
    """Default: one verify step."""

    def __post_init__(self) -> None:
        if self.period_s <= 0 or self.burst < 1:
            raise ValueError("the period must be positive and a burst at least one token")

    @property
    def step_s(self) -> float:
        return self.period_s * self.burst

    @property
    def first_s(self) -> float:
        return self.step_s if self.first_token_s is None else self.first_token_s

    def due(self, token: int) -> float:
        """Offset (s) at which token `token` (0-based) leaves the engine."""
        return self.first_s + math.ceil(token / self.burst) * self.step_s

    def bursts(self, n_tokens: int) -> list[tuple[float, int]]:
        """(offset, tokens) of every emission for a stream of `n_tokens`."""
        out = [(self.first_s, min(1, n_tokens))]
        sent = out[0][1]
        while sent < n_tokens:
            n = min(self.burst, n_tokens - sent)
            out.append((self.due(sent + n - 1), n))
            sent += n
        return out


class TokenSource:
    """The `Engine` protocol over a `Cadence`: one request streams `max_tokens` tokens.

    When a prompt carries a marker (``bench-<n>``), the source records when that stream
    started and when it handed over each burst (`emissions`, by marker), so the benchmark
    can tell what happened before the engine got the request and after it let a token go,
    apart from the source's own timer jitter. `trace_path` writes them out at `stop()`."""

    kind = "bench-token-source"
    supports_preemption = False
    supports_concurrency = True

    def __init__(
        self,
        cadence: Cadence | None = None,
        model_name: str = "token-source",
        trace_path: Path | None = None,
    ) -> None:
        self.cadence = cadence or Cadence()
        self.model_name = model_name
        self.context_length = 1 << 20
        self.state = EngineState.STARTING
        self.running = 0
        self.trace_path = trace_path
        self.emissions: dict[int, dict] = {}
        """marker -> {"start": t, "emits": [(t, tokens so far), ...]} (perf_counter)."""

    async def start(self) -> None:
        self.state = EngineState.READY

    async def stop(self) -> None:
        self.state = EngineState.STOPPED
        if self.trace_path is not None:
            self.trace_path.write_text(json.dumps(self.emissions))

    def health(self) -> EngineHealth:
        return EngineHealth(self.state, self.kind, self.model_name, running=self.running)

    def tokenize(self, text: str) -> list[int] | None:
        return None

    def detokenize(self, ids: list[int]) -> str | None:
        return None

    async def abort(self, request: GenerationRequest) -> None:
        request.cancel()

    async def stream(self, request: GenerationRequest) -> AsyncIterator[Delta]:
        t0 = time.perf_counter()
        emits: list[tuple[float, int]] = []
        if (m := _MARKER.search(request.prompt)) is not None:
            self.emissions[int(m.group(1))] = {"start": t0, "emits": emits}
        stats = GenerationStats(prompt_tokens=len(request.prompt_ids or ()))
        stats.queue_s = request.queue_s
        sent, finish = 0, None
        self.running += 1
        try:
            bursts = self.cadence.bursts(request.sampling.max_tokens)
            for i, (due, n) in enumerate(bursts):
                # perf_counter, not loop.time(): uvloop's clock ticks in whole milliseconds
                while (delay := t0 + due - time.perf_counter()) > 0:
                    await asyncio.sleep(delay)
                if request.cancelled:
                    finish = "cancelled"
                    yield self._finish(request, stats, finish, sent, t0, len(bursts))
                    return
                text = token_text(sent, n)
                sent += n
                now = time.perf_counter()
                emits.append((now, sent))
                if i == 0:
                    stats.ttft_s = now - t0
                if i < len(bursts) - 1:
                    yield Delta(text, n)
                    continue
                finish = "length"
                yield self._finish(request, stats, finish, sent, t0, len(bursts), text)
        finally:
            self.running -= 1
            if finish is None:  # the consumer went away: account the work all the same
                self._finish(request, stats, "cancelled", sent, t0, 0)

    def _finish(
        self,
        request: GenerationRequest,
        stats: GenerationStats,
        reason: FinishReason,
        sent: int,
        t0: float,
        steps: int,
        text: str = "",
    ) -> Delta:
        stats.completion_tokens = sent
        stats.finish_reason = reason
        if stats.ttft_s is not None and sent > 1:
            stats.tpot_s = (time.perf_counter() - t0 - stats.ttft_s) / (sent - 1)
        if steps > 1:
            stats.verify_steps = steps - 1
            stats.accept_length = round((sent - 1) / (steps - 1), 3)
        if request.on_finish is not None:
            request.on_finish(stats)
        return Delta(text, count_tokens(text), reason, stats)
