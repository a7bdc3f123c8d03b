"""The embedded engine: prefix reuse, stop handling, sampling knobs, cancellation."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import pytest_asyncio

from ling_local.config import load_profile
from ling_local.engines.base import GenerationRequest, Priority, SamplingParams
from ling_local.engines.embedded.torch_engine import TorchEngine

SOURCE = (Path(__file__).resolve().parents[1] / "ling_local" / "scheduler.py").read_text()


pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def engine(profile_path: Path):
    e = TorchEngine(load_profile(str(profile_path)))
    await e.start()
    yield e
    await e.stop()


async def _generate(
    engine: TorchEngine, ids: list[int] | None = None, prompt: str = "", **sampling
) -> tuple[str, object]:
    request = GenerationRequest(
        prompt=prompt,
        prompt_ids=ids,
        priority=Priority.COMPLETION,
        sampling=SamplingParams(**sampling),
    )
    parts, last = [], None
    async for delta in engine.stream(request):
        parts.append(delta.text)
        last = delta
    return "".join(parts), last.stats


async def test_shared_1500_token_prefix_is_reused(engine: TorchEngine) -> None:
    ids = engine.tokenize(SOURCE * 4)[:1500]
    assert len(ids) == 1500
    _, cold = await _generate(engine, ids + engine.tokenize("\n# one"), max_tokens=8)
    _, warm = await _generate(engine, ids + engine.tokenize("\n# two"), max_tokens=8)
    assert cold.cached_tokens < 1500
    assert warm.cached_tokens >= 1500
    assert warm.prompt_tokens == len(ids) + len(engine.tokenize("\n# two"))
    assert warm.ttft_s < cold.ttft_s / 3, (warm.ttft_s, cold.ttft_s)


async def test_reuse_gives_the_same_tokens_as_a_cold_start(engine: TorchEngine) -> None:
    ids = engine.tokenize(SOURCE)[:300]
    engine.prefix_cache.clear()
    cold, _ = await _generate(engine, ids, max_tokens=16, ignore_eos=True)
    warm, stats = await _generate(engine, ids, max_tokens=16, ignore_eos=True)
    assert stats.cached_tokens == len(ids) - 1
    assert warm == cold


async def test_max_tokens_and_length_finish(engine: TorchEngine) -> None:
    _, stats = await _generate(engine, prompt="x = ", max_tokens=7, ignore_eos=True)
    assert stats.completion_tokens == 7
    assert stats.finish_reason == "length"
    assert stats.tpot_s is not None and stats.ttft_s is not None


async def test_stop_token_ids_end_the_generation(engine: TorchEngine) -> None:
    first, _ = await _generate(engine, prompt="def f(x):\n", max_tokens=1, ignore_eos=True)
    ids = engine.tokenize(first)
    if len(ids) != 1:
        pytest.skip("the first token's text does not map back to one token")
    out, stats = await _generate(
        engine, prompt="def f(x):\n", max_tokens=20, ignore_eos=True, stop_token_ids=(ids[0],)
    )
    assert stats.finish_reason == "stop"
    assert stats.completion_tokens == 0
    assert out == ""


async def test_temperature_and_seed(engine: TorchEngine) -> None:
    kw = dict(prompt="import ", max_tokens=12, ignore_eos=True, temperature=1.5, top_p=0.95)
    a, _ = await _generate(engine, seed=1, **kw)
    b, _ = await _generate(engine, seed=1, **kw)
    outs = {(await _generate(engine, seed=s, **kw))[0] for s in range(2, 7)}
    assert a == b
    assert len(outs) > 1


async def test_cancel_stops_within_one_step(engine: TorchEngine) -> None:
    request = GenerationRequest(
        prompt="while True:\n",
        priority=Priority.CHAT,
        sampling=SamplingParams(max_tokens=2000, ignore_eos=True),
    )
    seen = 0
    last = None
    async for delta in engine.stream(request):
        seen += delta.n_tokens
        last = delta
        if seen >= 5 and not request.cancelled:
            request.cancel()
            at_cancel = seen
    assert last.finish_reason == "cancelled"
    # Tokens already queued when we cancelled, plus at most the one step in flight.
    assert last.stats.completion_tokens <= at_cancel + 2
    assert engine.health().running == 0


async def test_two_streams_interleave_by_priority(engine: TorchEngine) -> None:
    low = GenerationRequest(
        prompt="a = [",
        priority=Priority.AGENT,
        sampling=SamplingParams(max_tokens=40, ignore_eos=True),
    )
    high = GenerationRequest(
        prompt="b = {",
        priority=Priority.COMPLETION,
        sampling=SamplingParams(max_tokens=5, ignore_eos=True),
    )
    order: list[str] = []

    async def run(req, name):
        async for d in engine.stream(req):
            if d.finish_reason:
                order.append(name)

    t_low = asyncio.create_task(run(low, "low"))
    await asyncio.sleep(0.005)
    await asyncio.gather(t_low, run(high, "high"))
    assert order == ["high", "low"]
