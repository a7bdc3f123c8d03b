"""The embedded engine: one Hugging Face causal LM on the CPU or one GPU, driven by a single
worker thread that steps the highest-priority live generation one forward pass at a time.

A running chat is therefore paused between tokens (not cancelled) while a completion runs,
and each generation keeps its own KV slot, so the chat resumes without recomputing anything.
Cancellation is checked before every step: a cancelled request costs at most one more step.
Llama-family checkpoints run on the lean path (`llama_runner`, CUDA graphs on a GPU); any
other architecture runs through transformers' own forward (`hf_runner`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import torch

from ling_local.config import Profile
from ling_local.engines.base import (
    Delta,
    EngineHealth,
    EngineState,
    FinishReason,
    GenerationRequest,
    Priority,
    SamplingParams,
)
from ling_local.engines.embedded.decode_path import DecodePath, decode_path
from ling_local.engines.embedded.decoding import Decoder
from ling_local.engines.embedded.detok import IncrementalDetokenizer, StopMatcher
from ling_local.engines.embedded.generation import Generation
from ling_local.engines.embedded.grammar import Grammars
from ling_local.engines.embedded.hf_runner import (
    HFRunner,
    load_causal_lm,
    resolve_device,
    resolve_dtype,
)
from ling_local.engines.embedded.llama_runner import LlamaRunner, supports
from ling_local.engines.embedded.prefix_cache import PrefixCache
from ling_local.engines.embedded.sampling import make_generator
from ling_local.engines.embedded.speculative import NgramIndex
from ling_local.engines.embedded.triton.setup import ModelShape
from ling_local.errors import ConfigError, EngineNotReady, RequestError
from ling_local.prompts import PromptBuilder
from ling_local.tokenization import TextTokenizer, load_tokenizer

__all__ = ["TorchEngine"]

log = logging.getLogger(__name__)


class TorchEngine:
    kind = "torch"
    supports_preemption = True
    supports_concurrency = False
    supports_token_healing = True

    def __init__(self, profile: Profile) -> None:
        self.profile = profile
        self.model_name = profile.served_model_name
        self.context_length = profile.model.context_length
        self.state = EngineState.STARTING
        self.detail = ""
        self.tokenizer: TextTokenizer | None = None
        self.runner: Any = None
        self.decoder: Decoder | None = None
        self.grammars: Grammars | None = None
        """`response_format` grammars over this model's vocabulary."""
        self._no_grammar = ""
        self._grammars_built = threading.Event()
        self._active: list[Generation] = []
        self._arrivals = 0
        self._cond = threading.Condition()
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._warmup_request: GenerationRequest | None = None
        self._jobs: list[Callable[[], None]] = []
        self.decode_path: DecodePath | None = None
        """The decode step the engine runs and why (known once the model is loaded)."""

    @property
    def prefix_cache(self) -> PrefixCache | None:
        return None if self.decoder is None else self.decoder.cache

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
        if self.profile.engine.warmup:
            self.detail = "warming up"
            try:
                await self._warmup()
            except Exception as err:
                self.state = EngineState.FAILED
                self.detail = f"warm-up failed: {err}"
                raise
            self.detail = ""
        self.state = EngineState.READY  # only now: the first request is as fast as the tenth

    def _load(self) -> None:
        settings, engine = self.profile.model, self.profile.engine
        cores = torch.get_num_threads()
        threads = (engine.threads or cores, engine.prefill_threads or cores)
        torch.set_num_threads(threads[0])
        device = resolve_device(settings.device)
        dtype = resolve_dtype(settings.dtype, device)
        model_dir = self.profile.resolve_path(settings.path)
        if not (model_dir / "config.json").is_file():
            what = "not found" if not model_dir.exists() else "has no config.json"
            raise ConfigError(
                f"model directory {model_dir} {what}: set model.path to a Hugging Face model "
                "directory (e.g. LING_LOCAL_MODEL__PATH=/models/x)"
            )
        tok_dir = self.profile.resolve_path(settings.tokenizer_path) or model_dir
        t0 = time.perf_counter()
        self.tokenizer = load_tokenizer(tok_dir, trust_remote_code=settings.trust_remote_code)
        model = load_causal_lm(
            model_dir, dtype=dtype, device=device, trust_remote_code=settings.trust_remote_code
        )
        max_pos = getattr(model.config, "max_position_embeddings", None)
        if max_pos and self.context_length > max_pos:
            self.context_length = max_pos
        if supports(model.config):
            self.runner = LlamaRunner(
                model, device, self.context_length, engine.cuda_graphs, engine.quantize
            )
        else:
            self.runner = HFRunner(model, device)
        weights = getattr(self.runner, "weights", None)
        shape = ModelShape.of_weights(weights) if weights is not None else None
        self.decode_path = decode_path(engine, device, dtype, model.config, shape)
        log.info("decode step: %s (%s)", self.decode_path.kernels, self.decode_path.why)
        if self.decode_path.kernels == "triton":
            from ling_local.engines.embedded.triton.setup import fold_norms, screen_head

            fold_norms(weights)  # the kernels' form; the prefill runs it too
            screen_head(weights)  # greedy steps' head, built at load: its memory up front
        # The grammar library's view of the vocabulary takes 0.1 s at 8k tokens and seconds
        # at 152k: built beside the engine's start, waited for by the first response_format.
        threading.Thread(target=self._build_grammars, name="ling-grammars", daemon=True).start()
        draft = draft_cache = None
        if engine.speculative in ("draft", "auto") and settings.draft_path:
            draft = self._load_draft(device, dtype)
            draft_cache = PrefixCache(engine.cache_slots, draft.new_cache, draft.crop)
        self.decoder = Decoder(
            self.runner,
            PrefixCache(engine.cache_slots, self.runner.new_cache, self.runner.crop),
            draft=draft,
            draft_cache=draft_cache,
            num_speculative=engine.num_speculative_tokens,
            compile_graphs=engine.compile,
            kernels=self.decode_path.kernels,
            threads=threads,
            banned_token_ids=PromptBuilder(self.profile.prompt, self.tokenizer).banned_token_ids(),
            speculative=engine.speculative != "none",
        )
        log.info(
            "loaded %s on %s (%s, %s path%s) in %.2fs",
            model_dir,
            device,
            dtype,
            ("lean, int8" if getattr(self.runner, "quantized", False) else "lean")
            if isinstance(self.runner, LlamaRunner)
            else "transformers",
            ", draft" if draft else "",
            time.perf_counter() - t0,
        )

    def _load_draft(self, device: torch.device, dtype: torch.dtype) -> LlamaRunner:
        path = self.profile.resolve_path(self.profile.model.draft_path)
        model = load_causal_lm(path, dtype=dtype, device=device)
        if not supports(model.config) or not isinstance(self.runner, LlamaRunner):
            raise ConfigError(f"the draft at {path} needs a Llama-family target and draft")
        if model.config.vocab_size != self.runner.vocab_size:
            raise ConfigError(f"the draft at {path} has another vocabulary than the model")
        engine = self.profile.engine
        return LlamaRunner(model, device, self.context_length, engine.cuda_graphs, engine.quantize)

    async def _warmup(self) -> None:
        """Before the engine says it is ready: every prefill shape, graph step and sampling
        kernel a request can use (`Decoder.warm_up`, here on a thread of its own while the
        worker has nothing to do), the tokenizer's token-healing index (a FIM request's
        first use would build it), then a greedy and a sampled generation through the
        worker (tokenizer, detokenizer, decode bursts)."""
        assert self.decoder is not None and self.tokenizer is not None
        decoder = self.decoder

        # On the worker thread itself: cuBLAS / cuDNN handles and the plans they cache are
        # per thread, so shapes warmed on another thread were new again to the worker (the
        # first cold 2,000-token request after ready took ~65 ms on the H200, the next 13).
        done: concurrent.futures.Future[None] = concurrent.futures.Future()

        def warm() -> None:
            try:
                if self._stopping:
                    raise EngineNotReady("the engine stopped during its warm-up")
                with torch.inference_mode():
                    decoder.warm_up()
            except BaseException as err:
                done.set_exception(err)
            else:
                done.set_result(None)

        with self._cond:
            self._jobs.append(warm)
            self._cond.notify_all()
        await asyncio.wrap_future(done)
        if self.profile.prompt.token_healing:  # the healing index: ~0.4 s for a 150k vocab
            await asyncio.to_thread(self.tokenizer.tokens_starting_with, "def")
        for temperature in (0.0, 0.7):
            request = GenerationRequest(
                prompt="",
                prompt_ids=self.tokenizer.encode("def main():\n") or [0],  # never empty
                priority=Priority.AGENT,
                sampling=SamplingParams(max_tokens=4, temperature=temperature, seed=0),
                request_id="warmup",
            )
            self._warmup_request = request  # the one request let in before READY
            try:
                async for _ in self.stream(request):
                    pass
            finally:
                self._warmup_request = None
        decoder.cache.clear()

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
            self.state,
            self.kind,
            self.model_name,
            self.detail,
            running=len(self._active),
            decode=self.decode_path.as_dict() if self.decode_path else None,
        )

    # ----------------------------------------------------------------- tokenizer
    def tokenize(self, text: str) -> list[int] | None:
        return None if self.tokenizer is None else self.tokenizer.encode(text)

    def detokenize(self, ids: list[int]) -> str | None:
        return None if self.tokenizer is None else self.tokenizer.decode(ids)

    def check_json_schema(self, schema: dict) -> None:
        """Compile a `response_format` schema now (cached for the generation), so a schema
        the grammar library refuses is a 400 before any response starts."""
        self._grammars().compile(schema)

    def _build_grammars(self) -> None:
        assert self.tokenizer is not None and self.runner is not None
        try:
            self.grammars = Grammars(
                self.tokenizer.hf, self.runner.vocab_size, self.tokenizer.eos_token_ids
            )
        except Exception as err:  # e.g. a slow (Python-only) tokenizer
            self._no_grammar = f"this model's tokenizer cannot drive a grammar ({err})"
            log.warning("response_format is not available: %s", self._no_grammar)
        finally:
            self._grammars_built.set()

    def _grammars(self) -> Grammars:
        if self.runner is None:
            raise EngineNotReady(f"engine is {self.state.value}")
        self._grammars_built.wait()
        if self.grammars is None:
            raise RequestError(f"response_format: {self._no_grammar}", param="response_format")
        return self.grammars

    # ----------------------------------------------------------------- streaming
    async def stream(self, request: GenerationRequest) -> AsyncIterator[Delta]:
        ready = self.state is EngineState.READY or request is self._warmup_request
        if not ready or self.tokenizer is None:
            raise EngineNotReady(f"engine is {self.state.value}: {self.detail}".rstrip(": "))
        gen = self._new_generation(request)
        with self._cond:
            self._active.append(gen)
            self._arrivals += 1
            self._cond.notify()
        finished = False
        try:
            while True:
                delta = await gen.queue.get()
                while not gen.queue.empty() and delta.finish_reason is None:
                    delta = delta.merged(gen.queue.get_nowait())
                finished = delta.finish_reason is not None
                yield delta
                if finished:
                    return
        finally:
            if not finished:
                request.cancel()

    async def abort(self, request: GenerationRequest) -> None:
        request.cancel()

    def _new_generation(self, request: GenerationRequest) -> Generation:
        assert self.tokenizer is not None and self.runner is not None
        ids = (
            request.prompt_ids
            if request.prompt_ids is not None
            else (self.tokenizer.encode(request.prompt))
        )
        # The daemon checked that the prompt is not empty and fits (server/state.py).
        room = self.context_length - len(ids)
        params = request.sampling
        stop_ids = set(params.stop_token_ids)
        if params.ignore_eos:  # past EOS even when a caller listed it among the stop ids
            stop_ids.difference_update(self.tokenizer.eos_token_ids)
        else:
            stop_ids.update(self.tokenizer.eos_token_ids)
        constraint = None
        if request.json_schema is not None:  # never with token healing (server/state.py)
            constraint = self._grammars().constraint(request.json_schema, self.runner.device)
        mode = self.profile.engine.speculative
        # Speculation verifies proposals with argmax, past the grammar: constrained
        # requests decode one masked token at a time instead.
        speculate = mode != "none" and params.greedy and constraint is None
        return Generation(
            request=request,
            prompt_ids=list(ids),
            max_tokens=min(params.max_tokens, room),
            loop=asyncio.get_running_loop(),
            queue=asyncio.Queue(),
            seq=next(self._seq),
            detok=IncrementalDetokenizer(self.tokenizer.decode),
            stopper=StopMatcher(params.stop, params.scope),
            stop_ids=frozenset(stop_ids),
            generator=make_generator(params.seed, self.runner.device),
            history=NgramIndex(ids) if speculate and mode in ("prompt_lookup", "auto") else None,
            speculate=speculate,
            constraint=constraint,
            t_start=time.perf_counter(),
            strip=request.heal_text if request.first_token_ids else "",
        )

    # ----------------------------------------------------------------- worker thread
    def _worker(self) -> None:
        torch.set_grad_enabled(False)
        while True:
            with self._cond:
                while not self._active and not self._jobs and not self._stopping:
                    self._cond.wait()
                stopping = self._stopping and not self._active
                jobs, self._jobs = self._jobs, []
            for job in jobs:  # the warm-up, run here so its per-thread state is the worker's
                job()  # (when stopping it ends at once, so whoever awaits it is not left hanging)
            if stopping:
                return
            with self._cond:
                for gen in [g for g in self._active if g.request.cancelled]:
                    self._end(gen, "cancelled")
                if not self._active:
                    continue
                gen = min(self._active, key=lambda g: g.key)
                arrivals = self._arrivals
            try:
                with torch.inference_mode():
                    reason = self.decoder.step(
                        gen, lambda a=arrivals, g=gen: g.request.cancelled or self._arrivals != a
                    )
            except Exception as err:  # a failed forward ends this request, not the engine
                log.exception("generation %s failed", gen.request.request_id)
                self._end(gen, "error", f"engine error: {err}")
                continue
            if reason is not None:
                self._end(gen, reason)

    def _end(self, gen: Generation, reason: FinishReason, error: str = "") -> None:
        """End a generation. Never raises: a stuck stream would hang its client."""
        assert self.decoder is not None
        with self._cond:
            if gen in self._active:
                self._active.remove(gen)
        try:
            self.decoder.release(gen)
            gen.finish(reason, error)
        except Exception as err:
            log.exception("ending %s failed", gen.request.request_id)
            if not gen.done:
                gen.done = True
                gen.loop.call_soon_threadsafe(
                    gen.queue.put_nowait, Delta("", 0, "error", gen.stats, f"engine error: {err}")
                )
