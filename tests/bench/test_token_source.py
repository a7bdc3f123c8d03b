"""The benchmark token source: its cadence, its stream protocol, and that nothing but the
benchmark can select it."""

from __future__ import annotations

import itertools
import time

import pytest

from ling_local.bench.token_source import TOKEN_CHARS, Cadence, TokenSource, count_tokens
from ling_local.config import profile_from_dict
from ling_local.engines.base import GenerationRequest, GenerationStats, SamplingParams
from ling_local.errors import ConfigError


def _request(n: int, finished: list[GenerationStats]) -> GenerationRequest:
    return GenerationRequest(
        prompt="x", sampling=SamplingParams(max_tokens=n), on_finish=finished.append
    )


def test_schedule_covers_every_token_once() -> None:
    cadence = Cadence(period_s=0.001, burst=10)
    bursts = cadence.bursts(205)
    assert sum(n for _, n in bursts) == 205
    assert bursts[0] == (cadence.first_s, 1)  # the prefill's token comes alone
    assert all(n == 10 for _, n in bursts[1:-1]) and bursts[-1][1] == 4
    offsets = [t for t, _ in bursts]
    assert offsets == sorted(offsets)
    steps = {round(b - a, 9) for a, b in itertools.pairwise(offsets)}
    assert steps == {round(cadence.step_s, 9)}


async def test_cadence_is_honoured_and_the_stream_is_complete() -> None:
    source = TokenSource(Cadence(period_s=0.001, burst=10))
    await source.start()
    finished: list[GenerationStats] = []
    request = _request(200, finished)
    request.prompt = "bench-7"  # a marker: the source records this stream's emissions
    t0 = time.perf_counter()
    deltas = [d async for d in source.stream(request)]
    elapsed = time.perf_counter() - t0
    assert elapsed >= 0.2  # 200 tokens at 1 ms per token cannot arrive sooner
    assert sum(d.n_tokens for d in deltas) == 200
    assert all(count_tokens(d.text) == d.n_tokens for d in deltas)
    assert all(len(d.text) == d.n_tokens * TOKEN_CHARS for d in deltas)
    assert [d.finish_reason for d in deltas[:-1]] == [None] * (len(deltas) - 1)
    last = deltas[-1]
    assert last.finish_reason == "length" and last.stats is finished[0]
    assert len(finished) == 1 and finished[0].completion_tokens == 200
    assert finished[0].accept_length == pytest.approx(10, rel=0.01)
    record = source.emissions[7]
    assert t0 <= record["start"] and [n for _, n in record["emits"]][-1] == 200
    schedule = Cadence(period_s=0.001, burst=10).bursts(200)
    for (t, _), (due, _) in zip(record["emits"], schedule, strict=True):
        assert t >= record["start"] + due  # never early
    # a late first burst shortens the measured TPOT (the schedule does not shift): generous
    assert finished[0].tpot_s is not None and finished[0].tpot_s > 0.0005


async def test_cancel_and_early_close_are_accounted_once() -> None:
    source = TokenSource(Cadence(period_s=0.0005, burst=4))
    await source.start()
    finished: list[GenerationStats] = []
    request = _request(1000, finished)
    seen = []
    async for delta in source.stream(request):
        seen.append(delta)
        if len(seen) == 3:
            request.cancel()
    assert seen[-1].finish_reason == "cancelled"
    assert len(finished) == 1 and finished[0].finish_reason == "cancelled"
    assert finished[0].completion_tokens == sum(d.n_tokens for d in seen) < 1000

    finished.clear()
    stream = source.stream(_request(1000, finished))
    await anext(stream)
    await stream.aclose()  # the consumer went away: still accounted, once
    assert [s.finish_reason for s in finished] == ["cancelled"]
    assert source.running == 0


def test_no_profile_can_select_the_token_source() -> None:
    for kind in ("bench-token-source", "token_source", "bench"):
        with pytest.raises(ConfigError, match=r"engine\.kind"):
            profile_from_dict({"name": "x", "model": {"path": "m"}, "engine": {"kind": kind}})
