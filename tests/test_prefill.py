"""Time to first token: the prompt's attention, a cached prefix extended by its new tokens
only (eager, padded to a bucket, or through the T = EXTEND graph step: the same logits as a
full prefill), a warm-up that leaves nothing for the first request to load or capture, a
daemon that says ready only after it, and the per-request trace. The GPU's logic (buckets,
graph steps) runs here on the CPU, eagerly, as tests/test_decoding.py does."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from ling_local.config import profile_from_dict
from ling_local.engines.base import EngineState, GenerationRequest, Priority, SamplingParams
from ling_local.engines.embedded.decoding import Decoder
from ling_local.engines.embedded.llama_runner import PREFILL_BUCKETS, causal_attention
from ling_local.engines.embedded.torch_engine import TorchEngine
from ling_local.errors import EngineNotReady

SOURCE = (Path(__file__).resolve().parents[1] / "ling_local" / "scheduler.py").read_text()


@pytest.fixture(scope="module")
def gqa_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Grouped-query attention (4 query heads on 2 kv heads), like the GPU's models."""
    from ling_local.bench.random_model import build_random_llama

    return build_random_llama(
        tmp_path_factory.mktemp("gqa"),
        vocab_size=1024,
        hidden_size=64,
        intermediate_size=128,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
    )


def _profile(model: Path, warmup: bool = False, context: int = 1024):
    return profile_from_dict(
        {
            "name": "t",
            "model": {"path": str(model), "context_length": context},
            "engine": {"warmup": warmup, "cache_slots": 2},
        }
    )


async def _engine(model: Path, gpu_logic: bool, **kw) -> TorchEngine:
    """An engine; with `gpu_logic` its runner pads chunks to the GPU's buckets and its
    decoder runs graph steps (eagerly: there is no GPU)."""
    e = TorchEngine(_profile(model, **kw))
    await e.start()
    if gpu_logic:
        e.runner.use_graphs = True
        e.runner.prefill_buckets = PREFILL_BUCKETS
        e.decoder = Decoder(e.runner, e.decoder.cache)
    return e


async def _run(e: TorchEngine, ids: list[int], n: int, **sampling) -> tuple[list[int], object]:
    request = GenerationRequest(
        prompt="",
        prompt_ids=ids,
        priority=Priority.COMPLETION,
        sampling=SamplingParams(max_tokens=n, ignore_eos=True, **sampling),
    )
    out, last = [], None
    async for delta in e.stream(request):
        out += delta.token_ids
        last = delta
    return out, last.stats


@pytest.mark.parametrize("start", [0, 5])
def test_causal_attention_is_the_masked_attention(start: int) -> None:
    torch.manual_seed(0)
    t = 7
    q = torch.randn(1, 4, t, 16)
    k, v = torch.randn(1, 2, start + t, 16), torch.randn(1, 2, start + t, 16)
    rows = torch.arange(start, start + t)[:, None]
    mask = (torch.arange(start + t)[None, :] <= rows)[None, None]
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    assert torch.allclose(causal_attention(q, k, v, start, True), expected, atol=1e-6)


@pytest.mark.parametrize("buckets", [(), PREFILL_BUCKETS])
async def test_extending_a_cached_prefix_gives_the_full_prefills_logits(
    gqa_model: Path, buckets: tuple[int, ...]
) -> None:
    e = await _engine(gqa_model, gpu_logic=False)
    try:
        runner = e.runner
        runner.prefill_buckets = buckets  # () exact lengths (CPU); else padded (GPU)
        ids = e.tokenize(SOURCE)[:300]
        full = runner.forward(runner.new_cache(), ids)
        for new in (1, 9, 40):
            cache = runner.new_cache()
            runner.forward(cache, ids[:-new])
            extended = runner.forward(cache, ids[-new:])
            assert cache.length == len(ids)
            assert torch.allclose(extended, full, atol=1e-5), new
    finally:
        await e.stop()


async def test_a_keystroke_on_a_cached_prefix_runs_the_graph_step_exactly(
    gqa_model: Path,
) -> None:
    plain = await _engine(gqa_model, gpu_logic=False)
    try:
        ids = plain.tokenize(SOURCE)[:400]
        expected, _ = await _run(plain, ids, 12)
    finally:
        await plain.stop()
    e = await _engine(gqa_model, gpu_logic=True)
    try:
        await _run(e, ids[:-9], 1)  # the file so far
        tokens, stats = await _run(e, ids, 12)  # a keystroke adds 9 tokens
        cold_tokens, cold = await _run(e, ids[5:], 12)  # nothing cached: eager, padded
    finally:
        await e.stop()
    assert stats.cached_tokens == len(ids) - 9
    assert stats.trace["prefill"] == "graph" and stats.trace["chunks"] == 1
    assert tokens == expected
    assert cold.cached_tokens == 0 and cold.trace["prefill"] == "eager"
    assert len(cold_tokens) == 12


async def test_after_the_warm_up_a_request_loads_and_captures_nothing(gqa_model: Path) -> None:
    cold = await _engine(gqa_model, gpu_logic=True, context=512)
    try:  # without a warm-up the first request captures graphs and runs new shapes
        ids = cold.tokenize(SOURCE)[:300]
        _, first = await _run(cold, ids, 4)
        assert first.trace["captures"] > 0 and first.trace["new_shapes"] > 0
    finally:
        await cold.stop()
    e = await _engine(gqa_model, gpu_logic=True, context=512)
    try:
        await e._warmup()  # what start() runs before READY, now with the GPU's logic
        assert e.decoder.captures > 0
        slots = [s.cache for s in e.decoder.cache.slots]
        assert all(s.length == 0 for s in slots)
        traces = []
        for prompt, sampling in (
            (ids, {}),  # cold: eager, padded
            (ids + ids[:7], {}),  # a keystroke on the cached prompt: graph
            (ids[3:], {"temperature": 0.8, "seed": 1}),  # cold into the other slot, sampled
            (ids[3:] + ids[:40], {}),  # a paste: eager past a prefix
            (ids[100:112], {"temperature": 0.8}),  # a short new prompt, sampled: graph
        ):
            _, stats = await _run(e, prompt, 6, **sampling)
            traces.append(stats.trace)
    finally:
        await e.stop()
    assert [t["prefill"] for t in traces] == ["eager", "graph", "eager", "eager", "graph"]
    for trace in traces:
        assert trace["captures"] == 0 and trace["new_shapes"] == 0, trace


async def test_the_engine_is_ready_only_after_its_warm_up(gqa_model: Path) -> None:
    e = TorchEngine(_profile(gqa_model, warmup=True))
    starting = asyncio.create_task(e.start())
    seen_warming = False
    request = GenerationRequest(prompt="x = 1", sampling=SamplingParams(max_tokens=2))
    while not starting.done():
        if e.detail == "warming up":
            seen_warming = True
            assert e.health().state is EngineState.STARTING
            with pytest.raises(EngineNotReady):
                await anext(e.stream(request))
        await asyncio.sleep(0.001)
    await starting
    try:
        assert seen_warming
        assert e.health().state is EngineState.READY and e.detail == ""
        assert all(s.cache.length == 0 and not s.ids for s in e.decoder.cache.slots)
        _, stats = await _run(e, e.tokenize(SOURCE)[:50], 3)
    finally:
        await e.stop()
    trace = stats.trace
    for phase in ("wait", "lookup", "launch", "sync", "emit", "second"):
        assert trace[phase] >= 0, phase
    # the engine's TTFT is the phases up to the first token
    parts = trace["wait"] + trace["lookup"] + trace["launch"] + trace["sync"]
    assert parts == pytest.approx(stats.ttft_s * 1e3, abs=0.05)


def test_the_daemon_answers_with_the_requests_trace(app_client) -> None:
    response = app_client.post(
        "/v1/completions", json={"prompt": "def f(x):\n", "max_tokens": 3, "ignore_eos": True}
    )
    assert response.status_code == 200
    trace = response.json()["ling"]["trace"]
    assert trace["prep"] > 0 and trace["prefill"] == "eager" and trace["chunks"] == 1
