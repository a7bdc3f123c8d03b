"""Greedy Triton decode bursts that write each token into the host ring (`engine.token_ring`,
`_publish_argmax`'s RING) and replay several chained steps per graph (`engine.graph_steps`)
give the tokens of one-step replays with a copy per token: the same sequence, a finish in
the middle of a replay honoured at its token, the tail of a burst on the one-step graph.
In Triton's CPU interpreter without a GPU (the steps run eagerly; `_NoEvent`), for real on
one."""

from __future__ import annotations

import asyncio

import pytest
import torch

from ling_local.engines.base import GenerationRequest, Priority, SamplingParams
from ling_local.engines.decoding import RING, Decoder
from ling_local.engines.detok import IncrementalDetokenizer, StopMatcher
from ling_local.engines.generation import Generation
from ling_local.engines.prefix_cache import PrefixCache
from tests.triton_support import DEV, NEEDS_TRITON, triton_kernels
from tests.triton_support import folded_runner as _runner

pytestmark = NEEDS_TRITON


@pytest.fixture(scope="module")
def runner():
    r = _runner("llama-tied")
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


def _decoder(runner, **kw) -> Decoder:
    cache = PrefixCache(1, runner.new_cache, runner.crop)
    return Decoder(runner, cache, kernels="triton", **kw)


# Under the interpreter a step of the small model takes seconds: 4 tokens a generation
# (the prefill's, then 3 steps), 9 interpreted steps in all.
N = 4


@pytest.fixture(scope="module")
def prompt_and_copied(runner) -> tuple[list[int], list[int]]:
    """A prompt and its greedy tokens through one-step replays with a copy a step."""
    torch.manual_seed(5)
    prompt = torch.randint(0, 512, (24,)).tolist()
    want, reason, kv = _generate(runner, _decoder(runner, token_ring=False), prompt, N)
    assert reason == "length" and len(want) == N and kv == 24 + N - 1
    return prompt, want


def test_ring_and_multi_step_replays_give_the_copied_tokens(runner, prompt_and_copied) -> None:
    prompt, want = prompt_and_copied
    ring = _decoder(runner, graph_steps=2)
    assert ring._ring is not None and ring._ring.numel() == RING
    if DEV.type == "cuda":
        assert ring._ring.is_pinned()
    # after the prefill's token: one replay of 2 steps, then the tail on the one-step graph
    got, reason, kv = _generate(runner, ring, prompt, N)
    assert (got, reason, kv) == (want, "length", 24 + N - 1)
    assert {(1, True, True, 1), (1, True, True, 2)} <= set(ring.cache.slots[0].cache.graphs)
    assert sorted(int(t) for t in ring._ring if t >= 0) == sorted(want[1:])


def test_a_finish_inside_a_replay_ends_at_its_token(runner, prompt_and_copied) -> None:
    prompt, want = prompt_and_copied
    at = next(i for i in range(1, N) if want[i] not in want[:i])  # the first new token
    # one replay of 3 steps makes want[1:4]; the stop token at `at` ends the generation
    got, reason, kv = _generate(runner, _decoder(runner, graph_steps=3), prompt, N, [want[at]])
    assert reason == "stop"
    assert got == want[:at]
    assert kv == 24 + at  # the steps past the stop are dropped from the cache


def test_the_ring_is_refused_where_no_kernel_writes_it(runner) -> None:
    from ling_local.engines.cuda_graphs import GraphStep

    ring = torch.full((8,), -1, dtype=torch.long)
    with pytest.raises(ValueError, match="token ring"):
        GraphStep(runner.weights, runner.new_cache(), 1, runner.max_len, ring=ring)
    with pytest.raises(ValueError, match="token ring"):
        GraphStep(runner.weights, runner.new_cache(), 1, runner.max_len, kernels="triton", steps=2)
    with pytest.raises(ValueError, match="holds under 2 replays"):
        GraphStep(runner.weights, runner.new_cache(), 1, runner.max_len, kernels="triton",
                  ring=ring, steps=5)  # fmt: skip
    tk = triton_kernels()
    with pytest.raises(ValueError, match="chaining one-token step"):
        tk._token_ring(ring, False, 1, DEV)
