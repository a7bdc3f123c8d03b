"""One greedy generation through an engine's streaming API, timed per token: what the
in-process benchmarks (`bench engine`, `bench edit`, `bench cpu`) time. A module of its own
so that they all import it and none of them imports another."""

from __future__ import annotations

import time
from typing import Any

__all__ = ["engine_stream"]


async def engine_stream(
    engine: Any, prompt: list[int], new_tokens: int
) -> tuple[list[float], list[int], Any]:
    """(seconds from the call at which each token arrived, the token ids, the last delta's
    stats) for `new_tokens` tokens after `prompt`, end of sequence ignored."""
    from ling_local.engines.base import GenerationRequest, Priority, SamplingParams

    request = GenerationRequest(
        prompt="",
        prompt_ids=list(prompt),
        priority=Priority.COMPLETION,
        sampling=SamplingParams(max_tokens=new_tokens, ignore_eos=True),
    )
    stamps: list[float] = []
    ids: list[int] = []
    last = None
    t0 = time.perf_counter()
    async for delta in engine.stream(request):
        now = time.perf_counter() - t0
        stamps.extend([now] * delta.n_tokens)
        ids.extend(delta.token_ids)
        last = delta
    return stamps, ids, last.stats
