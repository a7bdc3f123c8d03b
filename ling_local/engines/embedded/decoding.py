"""How the embedded engine advances one generation by one step: chunked prefill with prefix
reuse, then decode — plain, a CUDA-graph burst that reads tokens a step late, or a
speculative verify of tokens proposed by prompt lookup or a draft model.

A prompt's last chunk of at most `EXTEND` tokens (a keystroke on a cached file) runs as the
slot's captured T = `EXTEND` graph step, padded: one graph launch instead of a few hundred
eager ones. `Decoder.warm_up` runs every shape and captures every graph a request can use
before the engine says it is ready."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Any

import torch

from ling_local.engines.base import FinishReason
from ling_local.engines.embedded.generation import Generation
from ling_local.engines.embedded.llama_runner import LlamaRunner
from ling_local.engines.embedded.prefix_cache import PrefixCache
from ling_local.engines.embedded.sampling import make_generator, sample
from ling_local.engines.embedded.speculative import accept_prefix

__all__ = ["EXTEND", "PREFILL_CHUNK", "Decoder"]

#: Prompt tokens fed per forward pass where the runner has no chunk size of its own (the
#: transformers path); bounds how long a higher-priority request waits.
PREFILL_CHUNK = 512
#: Tokens of the graph step a short last prompt chunk runs as (GPU): a keystroke adds a few.
EXTEND = 16
#: Steps the host queues ahead of the token it reads back (GPU graph decode).
LAG = 2
#: Tokens in the ring a greedy Triton decode step writes into host memory.
RING = 64


class _NoEvent:
    """Stands in for a CUDA event when the graph path is exercised on the CPU (tests)."""

    def record(self) -> None:
        pass

    def synchronize(self) -> None:
        pass


class Decoder:
    def __init__(
        self,
        runner: Any,
        cache: PrefixCache,
        *,
        draft: LlamaRunner | None = None,
        draft_cache: PrefixCache | None = None,
        num_speculative: int = 4,
        compile_graphs: bool = False,
        kernels: str = "torch",
        banned_token_ids: tuple[int, ...] = (),
        threads: tuple[int, int] | None = None,
        speculative: bool = False,
    ) -> None:
        self.runner = runner
        self.chunk = runner.prefill_chunk if isinstance(runner, LlamaRunner) else PREFILL_CHUNK
        """Prompt tokens per forward pass."""
        self.speculative = speculative
        """Generations may speculate: the warm-up captures the verify step too."""
        self.captures = 0
        """Graph steps captured so far (a request's trace counts the ones it captured)."""
        self.threads = threads
        """(decode, prefill) CPU threads; None leaves torch's setting alone."""
        self.banned = torch.tensor(banned_token_ids, dtype=torch.long, device=runner.device)
        self.cache = cache
        self.draft = draft
        self.draft_cache = draft_cache
        self.k = num_speculative
        self.compile_graphs = compile_graphs
        self.kernels = kernels
        """The graph steps' kernels: "torch" or "triton" (`decode_path`)."""
        self.graphs = isinstance(runner, LlamaRunner) and runner.use_graphs
        self.can_verify = isinstance(runner, LlamaRunner)
        self._ring = None
        if self.graphs:
            on_gpu = runner.device.type == "cuda"
            self._host = [torch.empty(1, dtype=torch.long, pin_memory=on_gpu) for _ in range(8)]
            self._events = [torch.cuda.Event() if on_gpu else _NoEvent() for _ in range(8)]
            if kernels == "triton":  # greedy decode steps write their tokens here
                self._ring = torch.full((RING,), -1, dtype=torch.long, pin_memory=on_gpu)
                self._ring_view = self._ring.numpy()  # the same memory, cheap to index

    # ------------------------------------------------------------------ slots
    def begin(self, gen: Generation) -> None:
        gen.marks["picked"] = time.perf_counter()
        gen.info["captures"] = self.captures
        if getattr(self.runner, "prefill_buckets", ()):  # shapes are counted with buckets
            gen.info["new_shapes"] = len(self.runner.prefill_shapes)
        gen.slot, gen.fed = self.cache.acquire(gen.prompt_ids)
        gen.stats.prompt_tokens = len(gen.prompt_ids)
        gen.stats.cached_tokens = gen.fed
        if self.draft_cache is not None and gen.speculate:
            gen.draft_slot, _ = self.draft_cache.acquire(gen.prompt_ids)
        gen.marks["slot"] = time.perf_counter()

    def release(self, gen: Generation) -> None:
        """Make each cache hold exactly the tokens its slot lists, and free the slots."""
        if "captures" in gen.info:  # what this request ran for the first time (its trace)
            gen.info["captures"] = self.captures - gen.info["captures"]
        if "new_shapes" in gen.info:
            gen.info["new_shapes"] = len(self.runner.prefill_shapes) - gen.info["new_shapes"]
        for slot, cache, runner in (
            (gen.slot, self.cache, self.runner),
            (gen.draft_slot, self.draft_cache, self.draft),
        ):
            if slot is not None and cache is not None:
                runner.crop(slot.cache, len(slot.ids))
                cache.release(slot)
        gen.slot = gen.draft_slot = None

    # ------------------------------------------------------------------ warm-up
    def warm_up(self) -> None:
        """Run once every kernel and shape a request can use, so that the first request
        costs what the tenth does: each prefill bucket from the sequence's start and past a
        prefix (eager), each slot's graph steps (greedy and sampled decode, the T = EXTEND
        prompt extension, the speculative verify), each replayed once (a graph's first
        launch uploads it), and the sampling kernels. On the CPU (no buckets, no graphs)
        only the sampling runs."""
        runner = self.runner
        if not isinstance(runner, LlamaRunner):
            return
        for r, cache in ((runner, self.cache), (self.draft, self.draft_cache)):
            if r is not None and cache is not None:
                _run_buckets(r, cache.slots[0].cache)
        if self.graphs:
            sizes = {EXTEND} | ({self.k + 1} if self.speculative else set())
            for slot in self.cache.slots:
                steps = [self._graph(slot, 1, True), self._graph(slot, 1, False)]
                steps += [self._graph(slot, t) for t in sorted(sizes)]
                for step in steps:  # at the cache's tail, which real positions reach last
                    step.load([0] * step.t, runner.max_len - step.t)
                    step.replay()
        logits = torch.zeros(runner.vocab_size, device=runner.device)
        self._mask(logits)
        for temperature, top_p in ((0.0, 1.0), (0.7, 0.9)):
            sample(logits, temperature, top_p, make_generator(0, runner.device))
        _restrict(logits, [0])
        if runner.device.type == "cuda":
            torch.cuda.synchronize(runner.device)
        for slot in self.cache.slots:
            runner.crop(slot.cache, 0)

    # ------------------------------------------------------------------ steps
    def step(self, gen: Generation, should_yield: Callable[[], bool]) -> FinishReason | None:
        if gen.slot is None:
            self.begin(gen)
        if gen.next_token is None:
            return self._prefill(gen)
        if gen.constraint is not None:  # every token through the grammar's mask
            return self._decode_run(gen, should_yield)
        speculating = gen.speculate and gen.greedy and self.can_verify
        if speculating:
            proposals = self._propose(gen)
            if proposals:
                return self._verify(gen, proposals)
        if self.graphs:
            # Speculating: the burst ends as soon as the output so far has a match to copy.
            return self._burst(gen, should_yield, speculating and gen.history is not None)
        if speculating:  # propose again after this token
            return self._decode_one(gen)
        return self._decode_run(gen, should_yield)

    def _prefill(self, gen: Generation) -> FinishReason | None:
        slot = gen.slot
        chunk = gen.prompt_ids[gen.fed : gen.fed + self.chunk]
        last = gen.fed + len(chunk) >= len(gen.prompt_ids)
        if last and self._extends(slot, len(chunk)):
            logits = self._extend(slot, chunk)
            gen.info["prefill"] = "graph"
        elif self.threads and self.threads[0] != self.threads[1] and len(chunk) > 1:
            torch.set_num_threads(self.threads[1])
            try:
                logits = self.runner.forward(slot.cache, chunk)
            finally:
                torch.set_num_threads(self.threads[0])
        else:
            logits = self.runner.forward(slot.cache, chunk)
        gen.info["chunks"] = gen.info.get("chunks", 0) + 1
        slot.ids.extend(chunk)
        gen.fed += len(chunk)
        if not last:
            return None
        gen.info.setdefault("prefill", "eager")
        gen.marks["launched"] = time.perf_counter()
        if gen.request.first_token_ids:  # token healing: re-create the dropped prompt text
            logits = _restrict(self._mask(logits), gen.request.first_token_ids)
            return gen.on_token(int(sample(logits, *gen.sample_args())))
        return gen.on_token(self._pick(gen, logits))

    def _extends(self, slot: Any, n: int) -> bool:
        """Whether a last chunk of n tokens runs as the slot's T = EXTEND graph step."""
        return self.graphs and n <= EXTEND and slot.cache.length + EXTEND <= self.runner.max_len

    def _extend(self, slot: Any, chunk: list[int]) -> torch.Tensor:
        """Feed a short last chunk through the slot's T = EXTEND graph step, padded: the
        padding's keys land past the chunk, where nothing reads them before they are
        overwritten. Returns the last real position's logits [vocab]."""
        start, n = slot.cache.length, len(chunk)
        step = self._graph(slot, EXTEND)
        step.load(chunk + [chunk[-1]] * (EXTEND - n), start)
        step.replay()
        slot.cache.length = start + n
        return step.logits[n - 1].float()

    def _mask(self, logits: torch.Tensor) -> torch.Tensor:
        """Rule out the tokens no generation may emit (FIM control tokens)."""
        if self.banned.numel():
            logits.index_fill_(-1, self.banned, float("-inf"))
        return logits

    def _pick(self, gen: Generation, logits: torch.Tensor) -> int:
        """The next token from one position's logits; under a grammar (`response_format`)
        only one the grammar allows, and the grammar advances past it."""
        logits = self._mask(logits)
        constraint = gen.constraint
        if constraint is None:
            return int(sample(logits, *gen.sample_args()))
        token = int(sample(constraint.mask(logits), *gen.sample_args()))
        constraint.accept(token)
        return token

    def _decode_run(self, gen: Generation, should_yield: Callable[[], bool]) -> FinishReason | None:
        """Plain decode (CPU, or a GPU without graphs) until the generation ends or the
        worker is wanted elsewhere (a cancel, a new arrival): the worker's per-step
        bookkeeping is then paid per burst, not per token."""
        reason = self._decode_one(gen)
        while reason is None and not should_yield():
            reason = self._decode_one(gen)
        return reason

    def _decode_one(self, gen: Generation) -> FinishReason | None:
        token = gen.next_token
        logits = self.runner.forward(gen.slot.cache, [token])
        gen.slot.ids.append(token)
        gen.decode_steps += 1
        return gen.on_token(self._pick(gen, logits))

    # ------------------------------------------------------------------ GPU burst
    def _graph(self, slot: Any, t: int, greedy: bool = False) -> Any:
        """The slot's captured T-token step; for a greedy decode (T = 1) with the Triton
        kernels, the one whose head is the exact int8 screen and whose tokens go to the
        host ring."""
        from ling_local.engines.embedded.cuda_graphs import GraphStep

        decode = greedy and t == 1 and self.kernels == "triton"
        ring = self._ring if decode else None
        key = (t, decode)
        graphs = slot.cache.graphs
        if key not in graphs:
            self.captures += 1
            graphs[key] = GraphStep(
                self.runner.weights,
                slot.cache,
                t,
                self.runner.max_len,
                self.compile_graphs,
                self.banned,
                kernels=self.kernels,
                screen=decode,
                ring=ring,
            )
        return graphs[key]

    def _burst(
        self, gen: Generation, should_yield: Callable[[], bool], until_match: bool = False
    ) -> FinishReason | None:
        """Replay the decode graph back to back; read each token LAG steps later, so the GPU
        never waits for the host. Stops at a finish, a cancel, a higher-priority arrival,
        or (`until_match`, prompt lookup) once the tokens read so far end in an n-gram seen
        before: the steps in flight finish, then the next step verifies a proposal."""
        slot, runner = gen.slot, self.runner
        start = slot.cache.length
        budget = min(gen.remaining, runner.max_len - start - 1)
        if budget <= 0:
            return self._decode_one(gen)
        greedy = gen.greedy
        step = self._graph(slot, 1, greedy)
        step.load([gen.next_token], start)
        fed = gen.next_token
        copied = step.ring is None  # else the step's head writes the token to the host ring
        # (event, the position fed when the token is in the ring, else -1)
        pending: deque[tuple[int, int]] = deque()
        launched = 0
        reason: FinishReason | None = None
        history = gen.history if until_match else None
        while launched < budget and reason is None:
            if launched and (should_yield() or (history is not None and history.propose(1))):
                break
            now = launched % len(self._events)
            step.replay()
            if copied:
                out = (
                    step.argmax if greedy else sample(step.logits[0], *gen.sample_args()).reshape(1)
                )
                self._host[now].copy_(out, non_blocking=True)
                step.advance(out)
            self._events[now].record()
            pending.append((now, -1 if copied else start + launched))
            launched += 1
            if len(pending) > LAG:
                reason, fed = self._consume(gen, pending.popleft(), fed)
        while pending and reason is None:
            reason, fed = self._consume(gen, pending.popleft(), fed)
        slot.cache.length = len(slot.ids)  # steps launched past a finish are dropped
        return reason

    def _consume(
        self, gen: Generation, done: tuple[int, int], fed: int
    ) -> tuple[FinishReason | None, int]:
        """The token of a replay, once its event completed: from the host ring (at the
        position it was fed at) or its copy."""
        event, position = done
        self._events[event].synchronize()
        host = self._host[event][0] if position < 0 else self._ring_view[position % RING]
        token = int(host)
        gen.slot.ids.append(fed)
        gen.decode_steps += 1
        return gen.on_token(token), token

    # ------------------------------------------------------------------ speculation
    def _propose(self, gen: Generation) -> list[int]:
        k = min(self.k, gen.remaining - 1, self.runner.max_len - gen.slot.cache.length - self.k - 2)
        if k <= 0:
            return []
        if gen.history is not None:
            found = gen.history.propose(k)
            if found:
                return found
        if self.draft is not None and gen.draft_slot is not None:
            return self._draft_propose(gen, k)
        return []

    def _draft_propose(self, gen: Generation, k: int) -> list[int]:
        draft, slot = self.draft, gen.draft_slot
        target_ids = gen.slot.ids
        # Bring the draft's KV up to the target's accepted tokens.
        keep = 0
        limit = min(len(slot.ids), len(target_ids))
        while keep < limit and slot.ids[keep] == target_ids[keep]:
            keep += 1
        draft.crop(slot.cache, keep)
        del slot.ids[keep:]
        missing = target_ids[keep:]
        for i in range(0, len(missing), draft.prefill_chunk):
            draft.forward(slot.cache, missing[i : i + draft.prefill_chunk])
        slot.ids.extend(missing)
        token, out = gen.next_token, []
        for _ in range(k):
            logits = draft.forward(slot.cache, [token])
            slot.ids.append(token)
            token = int(self._mask(logits).argmax())
            out.append(token)
        return out

    def _verify(self, gen: Generation, proposals: list[int]) -> FinishReason | None:
        slot = gen.slot
        feed = [gen.next_token, *proposals]
        if self.graphs:  # one fixed-shape graph per slot: pad short proposals
            step = self._graph(slot, self.k + 1)
            step.load(feed + [feed[-1]] * (self.k + 1 - len(feed)), slot.cache.length)
            step.replay()
            targets = step.argmax.tolist()
        else:
            targets = self._mask(self.runner.forward_all(slot.cache, feed)).argmax(-1).tolist()
        accepted = accept_prefix(proposals, targets)
        slot.ids.extend(feed[: accepted + 1])
        slot.cache.length = len(slot.ids)
        gen.decode_steps += 1
        for token in targets[: accepted + 1]:
            reason = gen.on_token(token)
            if reason is not None:
                return reason
        return None


def _restrict(logits: torch.Tensor, allowed: list[int]) -> torch.Tensor:
    """Only the `allowed` ids keep their logits (token healing's first token)."""
    index = torch.tensor(allowed, device=logits.device)
    return torch.full_like(logits, float("-inf")).index_copy_(
        -1, index, logits.index_select(-1, index)
    )


def _run_buckets(runner: LlamaRunner, cache: Any) -> None:
    """Each prefill bucket once from position 0 and once past a prefix (the two attention
    kernels), then the cache emptied."""
    for size in runner.prefill_buckets:
        if size > runner.max_len:
            break
        runner.crop(cache, 0)
        runner.forward(cache, [0] * size)
        at = min(size, runner.max_len - size)
        if at > 0:
            runner.crop(cache, at)
            runner.forward(cache, [0] * size)
    runner.crop(cache, 0)
