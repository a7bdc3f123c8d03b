"""The embedded engine: one Hugging Face causal LM on the CPU or one GPU, driven by a single
worker thread that steps the highest-priority live generation one forward pass at a time.

A running chat is therefore paused between tokens (not cancelled) while a completion runs,
and each generation keeps its own KV slot, so the chat resumes without recomputing anything.
Cancellation is checked before every step: a cancelled request costs at most one more step.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import torch

from ling_local.config import Profile
from ling_local.engines.base import (
    Delta,
    EngineHealth,
    EngineState,
    FinishReason,
    GenerationRequest,
    GenerationStats,
)
from ling_local.engines.detok import IncrementalDetokenizer, StopMatcher
from ling_local.engines.hf_runner import HFRunner, load_causal_lm, resolve_device, resolve_dtype
from ling_local.engines.prefix_cache import PrefixCache, Slot
from ling_local.engines.sampling import make_generator, sample
from ling_local.errors import EngineNotReady, RequestError
from ling_local.tokenization import TextTokenizer, load_tokenizer

__all__ = ["TorchEngine"]

log = logging.getLogger(__name__)

#: Prompt tokens fed per forward pass; bounds how long a higher-priority request waits.
PREFILL_CHUNK = 512


@dataclass(eq=False, slots=True)
class _Generation:
    request: GenerationRequest
    prompt_ids: list[int]
    max_tokens: int
    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue
    seq: int
    detok: IncrementalDetokenizer
    stopper: StopMatcher
    stop_ids: frozenset[int]
    generator: torch.Generator | None = None
    slot: Slot | None = None
    fed: int = 0
    """Prompt tokens already in the slot's KV."""
    next_token: int | None = None
    """Sampled token not yet fed to the model."""
    n_generated: int = 0
    unsent_tokens: int = 0
    t_start: float = 0.0
    t_first: float | None = None
    t_last: float = 0.0
    stats: GenerationStats = field(default_factory=GenerationStats)

    @property
    def key(self) -> tuple[int, int]:
        return (int(self.request.priority), self.seq)


class TorchEngine:
    kind = "torch"
    supports_preemption = True
    supports_concurrency = False

    def __init__(self, profile: Profile) -> None:
        self.profile = profile
        self.model_name = profile.served_model_name
        self.context_length = profile.model.context_length
        self.state = EngineState.STARTING
        self.detail = ""
        self.tokenizer: TextTokenizer | None = None
        self.runner: HFRunner | None = None
        self.prefix_cache: PrefixCache | None = None
        self._active: list[_Generation] = []
        self._cond = threading.Condition()
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None
        self._stopping = False

    # ----------------------------------------------------------------- lifecycle
    async def start(self) -> None:
        try:
            await asyncio.to_thread(self._load)
        except Exception as err:
            self.state = EngineState.FAILED
            self.detail = str(err)
            raise
        self._thread = threading.Thread(target=self._worker, name="ling-engine", daemon=True)
        self._thread.start()
        self.state = EngineState.READY
        if self.profile.engine.warmup:
            await self._warmup()

    def _load(self) -> None:
        settings = self.profile.model
        if self.profile.engine.threads:
            torch.set_num_threads(self.profile.engine.threads)
        device = resolve_device(settings.device)
        dtype = resolve_dtype(settings.dtype, device)
        model_dir = self.profile.resolve_path(settings.path)
        tok_dir = self.profile.resolve_path(settings.tokenizer_path) or model_dir
        t0 = time.perf_counter()
        self.tokenizer = load_tokenizer(tok_dir, trust_remote_code=settings.trust_remote_code)
        model = load_causal_lm(
            model_dir, dtype=dtype, device=device, trust_remote_code=settings.trust_remote_code
        )
        self.runner = HFRunner(model, device)
        max_pos = getattr(model.config, "max_position_embeddings", None)
        if max_pos and self.context_length > max_pos:
            self.context_length = max_pos
        self.prefix_cache = PrefixCache(
            self.profile.engine.cache_slots, self.runner.new_cache, self.runner.crop
        )
        log.info(
            "loaded %s on %s (%s) in %.2fs", model_dir, device, dtype, time.perf_counter() - t0
        )

    async def _warmup(self) -> None:
        from ling_local.engines.base import Priority, SamplingParams

        request = GenerationRequest(
            prompt="def main():\n",
            priority=Priority.AGENT,
            sampling=SamplingParams(max_tokens=4),
            request_id="warmup",
        )
        async for _ in self.stream(request):
            pass
        assert self.prefix_cache is not None
        self.prefix_cache.clear()

    async def stop(self) -> None:
        with self._cond:
            self._stopping = True
            for gen in self._active:
                gen.request.cancel()
            self._cond.notify_all()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, 5.0)
        self.state = EngineState.STOPPED

    def health(self) -> EngineHealth:
        return EngineHealth(
            self.state, self.kind, self.model_name, self.detail, running=len(self._active)
        )

    # ----------------------------------------------------------------- tokenizer
    def tokenize(self, text: str) -> list[int] | None:
        return None if self.tokenizer is None else self.tokenizer.encode(text)

    def detokenize(self, ids: list[int]) -> str | None:
        return None if self.tokenizer is None else self.tokenizer.decode(ids)

    # ----------------------------------------------------------------- streaming
    async def stream(self, request: GenerationRequest) -> AsyncIterator[Delta]:
        if self.state is not EngineState.READY or self.tokenizer is None:
            raise EngineNotReady(f"engine is {self.state.value}: {self.detail}".rstrip(": "))
        gen = self._new_generation(request)
        with self._cond:
            self._active.append(gen)
            self._cond.notify()
        finished = False
        try:
            while True:
                delta = await gen.queue.get()
                while not gen.queue.empty() and delta.finish_reason is None:
                    nxt = gen.queue.get_nowait()
                    delta = delta.merged(nxt)
                finished = delta.finish_reason is not None
                yield delta
                if finished:
                    return
        finally:
            if not finished:
                request.cancel()

    async def abort(self, request: GenerationRequest) -> None:
        request.cancel()

    def _new_generation(self, request: GenerationRequest) -> _Generation:
        assert self.tokenizer is not None and self.runner is not None
        ids = (
            request.prompt_ids
            if request.prompt_ids is not None
            else (self.tokenizer.encode(request.prompt))
        )
        if not ids:
            raise RequestError("the prompt is empty", param="prompt")
        room = self.context_length - len(ids)
        if room <= 0:
            raise RequestError(
                f"the prompt has {len(ids)} tokens; this model's context is {self.context_length}",
                param="prompt",
            )
        params = request.sampling
        stop_ids = set(params.stop_token_ids)
        if not params.ignore_eos:
            stop_ids.update(self.tokenizer.eos_token_ids)
        return _Generation(
            request=request,
            prompt_ids=list(ids),
            max_tokens=min(params.max_tokens, room),
            loop=asyncio.get_running_loop(),
            queue=asyncio.Queue(),
            seq=next(self._seq),
            detok=IncrementalDetokenizer(self.tokenizer.decode),
            stopper=StopMatcher(params.stop),
            stop_ids=frozenset(stop_ids),
            generator=make_generator(params.seed, self.runner.device),
        )

    # ----------------------------------------------------------------- worker thread
    def _worker(self) -> None:
        torch.set_grad_enabled(False)
        while True:
            with self._cond:
                while not self._active and not self._stopping:
                    self._cond.wait()
                if self._stopping and not self._active:
                    return
                for gen in [g for g in self._active if g.request.cancelled]:
                    self._finish(gen, "cancelled")
                if not self._active:
                    continue
                gen = min(self._active, key=lambda g: g.key)
            try:
                self._step(gen)
            except Exception as err:  # a failed forward ends this request, not the engine
                log.exception("generation %s failed", gen.request.request_id)
                self._finish(gen, "error", f"engine error: {err}")

    def _step(self, gen: _Generation) -> None:
        runner, cache = self.runner, self.prefix_cache
        assert runner is not None and cache is not None
        if gen.slot is None:
            gen.t_start = time.perf_counter()
            gen.slot, gen.fed = cache.acquire(gen.prompt_ids)
            gen.stats.prompt_tokens = len(gen.prompt_ids)
            gen.stats.cached_tokens = gen.fed
        slot = gen.slot
        if gen.next_token is None:  # prefill, in chunks so higher priorities get a turn
            chunk = gen.prompt_ids[gen.fed : gen.fed + PREFILL_CHUNK]
            logits = runner.forward(slot.cache, chunk)
            slot.ids.extend(chunk)
            gen.fed += len(chunk)
            if gen.fed < len(gen.prompt_ids):
                return
        else:
            token = gen.next_token
            logits = runner.forward(slot.cache, [token])
            slot.ids.append(token)
        params = gen.request.sampling
        token = int(sample(logits, params.temperature, params.top_p, gen.generator))
        self._on_token(gen, token)

    def _on_token(self, gen: _Generation, token: int) -> None:
        now = time.perf_counter()
        if gen.t_first is None:
            gen.t_first = now
        gen.t_last = now
        if token in gen.stop_ids:
            self._finish(gen, "stop")
            return
        gen.n_generated += 1
        gen.unsent_tokens += 1
        gen.next_token = token
        text, hit_stop = gen.stopper.feed(gen.detok.push((token,)))
        if hit_stop:
            self._finish(gen, "stop", text=text, at_stop_string=True)
            return
        if gen.n_generated >= gen.max_tokens:
            self._finish(gen, "length", text=text)
            return
        if text:
            self._emit(gen, Delta(text, gen.unsent_tokens))
            gen.unsent_tokens = 0

    def _emit(self, gen: _Generation, delta: Delta) -> None:
        gen.loop.call_soon_threadsafe(gen.queue.put_nowait, delta)

    def _finish(
        self,
        gen: _Generation,
        reason: FinishReason,
        error: str = "",
        text: str = "",
        at_stop_string: bool = False,
    ) -> None:
        if not at_stop_string:
            # Release what was held back for a possible stop string or a split character.
            tail, hit = gen.stopper.feed(gen.detok.flush())
            text += tail
            if not hit:
                text += gen.stopper.finish()
        stats = gen.stats
        stats.completion_tokens = gen.n_generated
        stats.finish_reason = reason
        stats.queue_s = gen.request.queue_s
        if gen.t_first is not None:
            stats.ttft_s = gen.t_first - gen.t_start
            if gen.n_generated > 1:
                stats.tpot_s = (gen.t_last - gen.t_first) / (gen.n_generated - 1)
        if gen.slot is not None and self.prefix_cache is not None:
            self.prefix_cache.release(gen.slot)
            gen.slot = None
        with self._cond:
            if gen in self._active:
                self._active.remove(gen)
        if error:
            log.warning("%s: %s", gen.request.request_id, error)
        self._emit(gen, Delta(text, gen.unsent_tokens, reason, stats, error))
        gen.unsent_tokens = 0
        if gen.request.on_finish is not None:
            try:
                gen.request.on_finish(stats)
            except Exception:
                log.exception("on_finish callback failed")
