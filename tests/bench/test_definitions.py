"""The numbers the bench commands report follow their definitions (sglang.bench_serving's
for TTFT/TPOT/ITL, the overhead benchmark's for relay latency and growth), checked on constructed
inputs whose answers follow from the definitions by hand."""

from __future__ import annotations

import itertools

import pytest

from ling_local.bench.backends import RequestOutput, _Timer
from ling_local.bench.consumers import Trace
from ling_local.bench.serve import RunMetrics
from ling_local.bench.stats import Spread, Summary
from ling_local.bench.token_source import Cadence
from ling_local.bench.workload import random_prompts


def test_itl_spreads_each_gap_over_its_tokens() -> None:
    out = RequestOutput(prompt_len=8)
    timer = _Timer(out, start=10.0)
    timer.text_chunk(10.5, 1)  # first text: TTFT
    timer.text_chunk(10.8, 4)  # 3 new tokens in 0.3 s
    timer.text_chunk(10.8, 4)  # no new token: no ITL sample
    timer.text_chunk(11.0, 5)
    timer.done(11.1, 5)
    assert out.ok and out.ttft_s == pytest.approx(0.5)
    assert out.itl_s == pytest.approx([0.1, 0.1, 0.1, 0.2])
    assert out.latency_s == pytest.approx(1.1)
    assert out.tpot_s == pytest.approx((1.1 - 0.5) / 4)


def test_without_token_counts_each_chunk_is_one_token() -> None:
    out = RequestOutput(prompt_len=8)
    timer = _Timer(out, start=0.0)
    for t in (0.1, 0.3, 0.6):
        timer.text_chunk(t, None)
    timer.done(0.7, None)
    assert out.output_len == 3 and out.itl_s == pytest.approx([0.2, 0.3])


def test_run_metrics_follow_sglang() -> None:
    outs = []
    for ttft, latency in ((0.1, 1.1), (0.2, 2.2)):
        o = RequestOutput(prompt_len=100, ok=True, output_len=11, ttft_s=ttft, latency_s=latency)
        outs.append(o)
    outs.append(RequestOutput(prompt_len=100, error="HTTP 500: boom"))
    m = RunMetrics.of(outs, duration_s=4.0)
    assert (m.completed, m.failed, m.total_output) == (2, 1, 22)
    assert m.output_throughput == pytest.approx(22 / 4.0)
    assert m.tpot_ms.mean == pytest.approx((100 + 200) / 2)  # (1.0/10, 2.0/10) s in ms
    assert m.concurrency == pytest.approx((1.1 + 2.2) / 4.0)
    assert m.errors == ["HTTP 500: boom"]


def test_trace_relay_added_ttft_and_growth() -> None:
    cadence = Cadence(period_s=0.001, burst=10)
    bursts = cadence.bursts(101)
    t0, start = 100.0, 100.0004  # the request reached the engine 0.4 ms after it was sent
    emits = []
    total = 0
    for offset, n in bursts:
        total += n
        emits.append((start + offset + 0.0003, total))  # each burst left 0.3 ms late
    # every chunk arrives 2 ms after its burst left the source
    arrivals = [(t + 0.002 - t0, n) for t, n in emits]
    steady = Trace(1, t0, arrivals, end_s=arrivals[-1][0])
    steady.join({"start": start, "emits": emits})
    assert steady.relay_s() == pytest.approx([0.002] * len(bursts))
    assert steady.added_ttft_s == pytest.approx(0.0004 + 0.002)  # the source's wait is out
    assert steady.growth_s() == pytest.approx(0.0, abs=1e-9)
    assert steady.tpot_s == pytest.approx((emits[-1][0] - emits[0][0]) / 100)
    assert steady.lags(cadence) == pytest.approx([0.0004 + 0.0003 + 0.002] * len(bursts))
    behind = Trace(2, t0, [(t + 0.0005 * i, n) for i, (t, n) in enumerate(arrivals)], 1.0)
    behind.join({"start": start, "emits": emits})
    assert behind.growth_s() > 0.004
    assert Trace(3, t0, arrivals, 1.0).added_ttft_s is None  # not joined: no claim


def test_random_prompts_like_sglang() -> None:
    prompts = random_prompts(4, 64, 8, vocab_size=1000, seed=3)
    assert [len(p.ids) for p in prompts] == [64] * 4
    assert [p.output_len for p in prompts] == [8] * 4
    for p in prompts:  # a ramp of ids from a random offset, wrapping at the vocabulary
        assert all((b - a) % 1000 == 1 for a, b in itertools.pairwise(p.ids))
    assert random_prompts(4, 64, 8, vocab_size=1000, seed=3) == prompts
    varied = random_prompts(50, 64, 8, vocab_size=1000, range_ratio=0.5)
    assert {len(p.ids) for p in varied} <= set(range(32, 65)) and len(
        {len(p.ids) for p in varied}
    ) > 1


def test_summaries() -> None:
    s = Summary.of([1.0, 2.0, 3.0, 4.0], scale=1e3)
    assert (s.mean, s.median, s.min, s.max) == (2500.0, 2500.0, 1000.0, 4000.0)
    assert s.p99 == pytest.approx(3970.0)  # numpy's linear interpolation, as sglang
    assert Summary.of([]) is None
    assert Spread.of([9.0, 10.0, 11.0]).relative == pytest.approx(0.2)
