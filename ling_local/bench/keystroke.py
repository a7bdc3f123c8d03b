"""`bench keystroke`: the editor's case through a fresh daemon on a profile as shipped.

The daemon is started for the run (`FreshDaemon`), and its very first request goes out
the moment `/health` says ready: its time to first token against the steady state's is
what a user who opens the editor feels. Then, repeated: a cold prompt (nothing cached),
and the file so far (`prefix_tokens`) followed by the same text plus a keystroke's
`new_prompt_tokens` (the prefix is in the cache). Time to first token is read at the
client (the first SSE chunk out) and from the engine (`ling.ttft_ms`), with the engine's
per-phase trace of the first token (`ling.trace`: prep, queue, wait, lookup, launch, sync,
emit; `Generation.trace` says what each is); decode TPOT from longer generations.

Each prompt starts with its own token, so no two share a cached prefix by accident."""

from __future__ import annotations

import asyncio
import itertools
import json
import statistics
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ling_local.bench.fresh_daemon import FreshDaemon, sigterm_exits
from ling_local.bench.rawhttp import SSEConnection

__all__ = ["keystroke_latency", "median_trace"]


def _markers(tokenizer: Any) -> Iterator[int]:
    """Token ids whose text encodes back to themselves: each prompt starts with its own."""
    for token in range(100, tokenizer.vocab_size):
        text = tokenizer.decode([token])
        if text.strip() and text.isprintable() and tokenizer.encode(text) == [token]:
            yield token


def _body(tokenizer: Any, n: int) -> list[int]:
    """n prompt tokens: this package's scheduler.py as the tokenizer reads it, repeated, or,
    for a tokenizer that does not know code (a benchmark's word-level one), its own words."""
    source = (Path(__file__).resolve().parents[1] / "scheduler.py").read_text()
    ids = tokenizer.encode(source)
    visible = {t for t in set(ids) if tokenizer.decode([t])}  # special tokens decode to ""
    unit = [t for t in ids if t in visible]
    if len(visible) < 32:
        unit = list(itertools.islice(_markers(tokenizer), 4096))
    return (unit * (n // len(unit) + 1))[:n]


def median_trace(traces: list[dict]) -> dict:
    """Per phase, the median over runs (the most common value for labels)."""
    keys = [k for k in traces[0] if all(k in t for t in traces)] if traces else []
    out: dict[str, Any] = {}
    for key in keys:
        values = [t[key] for t in traces]
        if all(isinstance(v, int | float) for v in values):
            out[key] = round(statistics.median(values), 3)
        else:
            out[key] = Counter(map(str, values)).most_common(1)[0][0]
    return out


async def _request(conn: SSEConnection, text: str, max_tokens: int) -> dict:
    """One streamed completion: the client's TTFT (first SSE chunk out) and TPOT, and the
    engine's `ling` object."""
    body = {
        "prompt": text,
        "max_tokens": max_tokens,
        "stream": True,
        "ignore_eos": True,
        "temperature": 0.0,
    }
    t0 = time.perf_counter()
    first = last = None
    ling: dict = {}
    async for data in conn.events("/v1/completions", body):
        now = time.perf_counter()
        if data == b"[DONE]":
            continue
        event = json.loads(data)
        first = first or now
        last = now
        ling = event.get("ling") or ling
    if first is None or not ling:
        raise RuntimeError(f"the stream ended without a token: {ling}")
    n = ling["completion_tokens"]
    return {
        "client_ttft_ms": round((first - t0) * 1e3, 3),
        "client_tpot_ms": round((last - first) / (n - 1) * 1e3, 4) if n > 1 else None,
        "ttft_ms": ling["ttft_ms"],
        "tpot_ms": ling["tpot_ms"],
        "prompt_tokens": ling["prompt_tokens"],
        "cached_tokens": ling["cached_tokens"],
        "trace": ling.get("trace") or {},
    }


def _summary(runs: list[dict]) -> dict:
    def med(key: str) -> float | None:
        values = [r[key] for r in runs if r[key] is not None]
        return round(statistics.median(values), 3) if values else None

    return {
        "client_ttft_ms_median": med("client_ttft_ms"),
        "ttft_ms_median": med("ttft_ms"),
        "cached_tokens_median": med("cached_tokens"),
        "prompt_tokens_median": med("prompt_tokens"),
        "trace_median": median_trace([r["trace"] for r in runs]),
        "client_ttft_ms_runs": [r["client_ttft_ms"] for r in runs],
    }


def keystroke_latency(
    profile_name: str = "tiny",
    prefix_tokens: int = 1500,
    new_prompt_tokens: int = 8,
    cold_tokens: int | None = None,
    decode_tokens: int = 128,
    repeats: int = 7,
    ready_timeout: float = 900.0,
    save: Callable[[dict], None] | None = None,
) -> dict:
    """See the module docstring. `cold_tokens`: the cold prompts' length (default: the
    keystroke prompt's); `save` gets the results so far after each phase (a run cut short
    keeps what it measured)."""
    from ling_local.config import load_profile
    from ling_local.tokenization import load_tokenizer

    profile = load_profile(profile_name)
    model_dir = profile.resolve_path(profile.model.path)
    tokenizer = load_tokenizer(
        profile.resolve_path(profile.model.tokenizer_path) or model_dir,
        trust_remote_code=profile.model.trust_remote_code,
    )
    cold_n = cold_tokens or prefix_tokens + new_prompt_tokens
    body = _body(tokenizer, max(cold_n, prefix_tokens + new_prompt_tokens, 256))
    markers = _markers(tokenizer)

    def prompt(n: int, marker: int | None = None) -> str:
        return tokenizer.decode([next(markers) if marker is None else marker, *body[: n - 1]])

    result: dict[str, Any] = {
        "profile": profile_name,
        "device": profile.model.device,
        "kernels": profile.engine.kernels,
        "prefix_tokens": prefix_tokens,
        "new_prompt_tokens": new_prompt_tokens,
        "cold_tokens": cold_n,
    }

    def saved(key: str, value: Any) -> None:
        result[key] = value
        if save is not None:
            save(result)

    async def measure(daemon: FreshDaemon) -> None:
        conn = SSEConnection(daemon.url, daemon.token)
        try:
            first = await _request(conn, prompt(cold_n), 8)  # right after /health said ready
            saved("first_after_ready", first)
            cold, cached = [], []
            for _ in range(repeats):
                cold.append(await _request(conn, prompt(cold_n), 8))
                marker = next(markers)
                await _request(conn, prompt(prefix_tokens, marker), 1)  # the file so far
                cached.append(
                    await _request(conn, prompt(prefix_tokens + new_prompt_tokens, marker), 8)
                )
            saved("cold", _summary(cold))
            saved("cached_prefix", _summary(cached))
            steady = result["cold"]["client_ttft_ms_median"]
            saved("first_vs_steady", round(first["client_ttft_ms"] / steady, 2))
            decode = [await _request(conn, prompt(256), decode_tokens) for _ in range(3)]
            saved("decode_tpot_ms_median", statistics.median(r["tpot_ms"] for r in decode))
            saved("client_tpot_ms_median", statistics.median(r["client_tpot_ms"] for r in decode))
        finally:
            await conn.aclose()

    with sigterm_exits(), FreshDaemon(profile_name) as daemon:
        saved("ready_s", round(daemon.wait_ready(ready_timeout), 2))
        asyncio.run(measure(daemon))
    return result
