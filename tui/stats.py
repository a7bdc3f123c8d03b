"""Per-reply numbers: what the person at the terminal sees under each answer.

Two views of time to first token are kept on purpose: the client's (what the person waits,
HTTP and queueing included) and the engine's (what the model took). Their gap is our overhead.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from typing import Any

from ling_local.client import AsyncStream

__all__ = ["LiveMeter", "ReplyStats"]


@dataclass(frozen=True, slots=True)
class ReplyStats:
    """Numbers of one finished reply, stored with the message."""

    ttft_s: float | None = None
    """Client-side time from sending the request to the first text chunk."""
    engine_ttft_ms: float | None = None
    """Engine-side time to first token (from the daemon's `ling` timings)."""
    completion_tokens: int = 0
    seconds: float = 0.0
    """Client-side wall time of the whole reply."""
    tokens_per_s: float | None = None
    """Decode speed: tokens after the first one over the time after the first one."""
    accept_length: float | None = None
    """Mean tokens accepted per verify step, when the engine speculates."""
    finish_reason: str | None = None

    @classmethod
    def from_stream(cls, stream: AsyncStream, meter: LiveMeter) -> ReplyStats:
        """Client-side times come from `meter`: it starts before the request is sent and
        ends at the last chunk, so drawing the reply is not counted as the model's time."""
        now = meter.last or time.perf_counter()
        seconds = now - meter.started
        tokens = stream.usage.completion_tokens
        timings = stream.timings
        ttft = None if meter.first is None else meter.first - meter.started
        decode_s = now - (meter.first or now)
        rate = (tokens - 1) / decode_s if tokens > 1 and decode_s > 0 else None
        if rate is None and timings is not None and timings.tpot_ms:
            rate = 1000.0 / timings.tpot_ms
        return cls(
            ttft_s=ttft,
            engine_ttft_ms=timings.ttft_ms if timings else None,
            completion_tokens=tokens,
            seconds=seconds,
            tokens_per_s=rate,
            accept_length=timings.accept_length if timings else None,
            finish_reason=stream.finish_reason,
        )

    def format(self) -> str:
        parts = []
        if self.ttft_s is not None:
            ttft = f"TTFT {self.ttft_s * 1000:.0f} ms"
            if self.engine_ttft_ms is not None:
                ttft += f" (engine {self.engine_ttft_ms:.0f})"
            parts.append(ttft)
        if self.tokens_per_s is not None:
            parts.append(f"{self.tokens_per_s:.1f} tok/s")
        parts.append(f"{self.completion_tokens} tok in {self.seconds:.1f} s")
        if self.accept_length is not None:
            parts.append(f"accept {self.accept_length:.2f}")
        if self.finish_reason == "length":
            parts.append("hit max tokens")
        return " · ".join(parts)

    def short(self) -> str:
        """The status line's version: the three numbers that matter most."""
        parts = []
        if self.ttft_s is not None:
            parts.append(f"TTFT {self.ttft_s * 1000:.0f} ms")
        if self.tokens_per_s is not None:
            parts.append(f"{self.tokens_per_s:.1f} tok/s")
        if self.accept_length is not None:
            parts.append(f"accept {self.accept_length:.2f}")
        return "last reply: " + (" · ".join(parts) or f"{self.completion_tokens} tokens")

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str | None) -> ReplyStats | None:
        if not text:
            return None
        try:
            data: dict[str, Any] = json.loads(text)
            keys = cls.__dataclass_fields__
            return cls(**{k: v for k, v in data.items() if k in keys})
        except (ValueError, TypeError):
            return None


class LiveMeter:
    """Numbers while a reply streams; chunks stand in for tokens until the usage arrives."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.first: float | None = None
        self.last = 0.0
        self.chunks = 0

    def tick(self) -> None:
        self.last = time.perf_counter()
        if self.first is None:
            self.first = self.last
        self.chunks += 1

    def format(self) -> str:
        if self.first is None:
            return f"waiting for the first token… {time.perf_counter() - self.started:.1f} s"
        ttft = (self.first - self.started) * 1000
        decode = time.perf_counter() - self.first
        # Chunks, not tokens: the exact token count comes with the last chunk.
        rate = f" · {(self.chunks - 1) / decode:.0f} chunks/s" if decode > 0.2 else ""
        return f"streaming · TTFT {ttft:.0f} ms{rate}"
