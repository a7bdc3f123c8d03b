"""Greedy Triton decode bursts, whose screened head writes each token into the host ring
(`publish_argmax`'s RING; mapped pinned memory on a GPU), give the tokens of the same step
replayed one at a time and read back: the same sequence, each token at the position it was
fed at, a stop token read after later steps were launched honoured at its token. For real
on a GPU; in Triton's CPU interpreter without one (the steps run eagerly; `_NoEvent`), the
subset not marked `gpu`."""

from __future__ import annotations

import asyncio

import pytest
import torch

from ling_local.engines.base import GenerationRequest, Priority, SamplingParams
from ling_local.engines.embedded.decoding import RING, Decoder
from ling_local.engines.embedded.detok import IncrementalDetokenizer, StopMatcher
from ling_local.engines.embedded.generation import Generation
from ling_local.engines.embedded.prefix_cache import PrefixCache
from tests.triton_support import (
    DEV,
    GPU_ONLY,
    NEEDS_TRITON,
    few_ctas,  # noqa: F401 (a fixture)
)
from tests.triton_support import folded_runner as _runner

pytestmark = NEEDS_TRITON


@pytest.fixture(scope="module")
def runner():
    r = _runner("llama-tied", layers=1)  # one layer: the interpreter runs its kernels slowly
    r.use_graphs = True  # the graph path (eager off a GPU)
    return r


def _generate(runner, decoder: Decoder, prompt: list[int], n: int, stop=()) -> tuple:
    """(output tokens, finish reason, KV length) of one greedy generation through the
    decoder's steps, as the engine's worker runs them."""
    loop = asyncio.new_event_loop()
    request = GenerationRequest(
        prompt="",
        prompt_ids=prompt,
        priority=Priority.COMPLETION,
        sampling=SamplingParams(max_tokens=n, ignore_eos=True),
    )
    gen = Generation(
        request=request, prompt_ids=prompt, max_tokens=n, loop=loop, queue=asyncio.Queue(),
        seq=0, detok=IncrementalDetokenizer(lambda ids: " ".join(map(str, ids))),
        stopper=StopMatcher([]), stop_ids=frozenset(stop),
    )  # fmt: skip
    reason = None
    with torch.inference_mode():
        while reason is None:
            reason = decoder.step(gen, lambda: False)
    gen.finish(reason)
    kv = gen.slot.cache.length
    assert kv == len(gen.slot.ids)  # what the cache holds is what the slot lists
    decoder.release(gen)
    loop.run_until_complete(asyncio.sleep(0))  # deliver the deltas
    tokens = []
    while not gen.queue.empty():
        tokens.extend(gen.queue.get_nowait().token_ids)
    loop.close()
    return tokens, reason, kv


def _decoder(runner) -> Decoder:
    cache = PrefixCache(1, runner.new_cache, runner.crop)
    return Decoder(runner, cache, kernels="triton")


# Under the interpreter a step of the small model takes seconds: 3 tokens a generation
# (the prefill's, then 2 steps; with LAG = 2 the second is launched before the first is read).
N = 3


@pytest.fixture
def prompt_and_copied(runner, request: pytest.FixtureRequest) -> tuple[list[int], list[int]]:
    """A prompt and its greedy tokens: the prefill's, then the screened Triton step without
    the ring, replayed one step at a time, each token read back from the step's output."""
    from ling_local.engines.embedded.cuda_graphs import GraphStep

    request.getfixturevalue("few_ctas")  # the tests that use this run the same tiles

    torch.manual_seed(5)
    prompt = torch.randint(0, 512, (24,)).tolist()
    slot = runner.new_cache()
    with torch.inference_mode():
        want = [int(runner.forward(slot, prompt).argmax())]
        step = GraphStep(runner.weights, slot, 1, runner.max_len, kernels="triton", screen=True)
        step.load(want, len(prompt))
        for _ in range(N - 1):
            step.replay()
            want.append(int(step.argmax))
            step.advance(step.argmax)
    return prompt, want


def test_the_ring_gives_the_copied_tokens(runner, prompt_and_copied) -> None:
    prompt, want = prompt_and_copied
    ring = _decoder(runner)
    assert ring._ring is not None and ring._ring.numel() == RING
    if DEV.type == "cuda":
        assert ring._ring.is_pinned()
    got, reason, kv = _generate(runner, ring, prompt, N)
    assert (got, reason, kv) == (want, "length", 24 + N - 1)
    assert (1, True) in ring.cache.slots[0].cache.graphs  # the greedy decode graph
    assert ring.cache.slots[0].cache.graphs[(1, True)].ring is ring._ring
    # the burst's tokens, each at the position it was fed at (the prefill gave want[0])
    assert [int(ring._ring[p % RING]) for p in range(24, 24 + N - 1)] == want[1:]


@GPU_ONLY
def test_a_stop_in_flight_ends_at_its_token(runner, prompt_and_copied) -> None:
    prompt, want = prompt_and_copied
    at = next(i for i in range(1, N) if want[i] not in want[:i])  # the first new token
    # with the steps after it launched before it is read, the stop token ends it there
    got, reason, kv = _generate(runner, _decoder(runner), prompt, N, [want[at]])
    assert reason == "stop"
    assert got == want[:at]
    assert kv == 24 + at  # the steps past the stop are dropped from the cache


def test_the_ring_is_refused_where_no_kernel_writes_it(runner) -> None:
    from ling_local.engines.embedded.cuda_graphs import GraphStep
    from ling_local.engines.embedded.triton.kernels import token_ring

    ring = torch.full((8,), -1, dtype=torch.long)
    with pytest.raises(ValueError, match="token ring"):
        GraphStep(runner.weights, runner.new_cache(), 1, runner.max_len, ring=ring)
    with pytest.raises(ValueError, match="token ring"):
        # the full head writes no ring
        GraphStep(runner.weights, runner.new_cache(), 1, runner.max_len, kernels="triton",
                  ring=ring)  # fmt: skip
    with pytest.raises(ValueError, match="chaining one-token step"):
        token_ring(ring, False, 1, DEV)
    with pytest.raises(ValueError, match="1-D int64"):
        token_ring(ring.int(), True, 1, DEV)
