"""The state of one generation in the embedded engine, and what happens per new token:
timing, stop tokens, detokenization, stop strings, max_tokens, and handing text to the
asyncio side. Runs on the engine's worker thread."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from ling_local.engines.base import Delta, FinishReason, GenerationRequest, GenerationStats
from ling_local.engines.embedded.detok import IncrementalDetokenizer, StopMatcher
from ling_local.engines.embedded.grammar import Constraint
from ling_local.engines.embedded.prefix_cache import Slot
from ling_local.engines.embedded.speculative import NgramIndex

__all__ = ["Generation"]

log = logging.getLogger(__name__)


@dataclass(eq=False, slots=True)
class Generation:
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
    history: NgramIndex | None = None
    """Prompt + output so far, indexed for prompt-lookup proposals (greedy only)."""
    speculate: bool = False
    constraint: Constraint | None = None
    """The grammar of a `response_format` request: masks every token, ends the generation
    when the JSON value is complete."""
    slot: Slot | None = None
    draft_slot: Slot | None = None
    next_token: int | None = None
    """The newest output token: sampled, not yet fed to the model."""
    fed: int = 0
    """Prompt tokens already in the slot's KV."""
    n_generated: int = 0
    decode_steps: int = 0
    """Target forward passes after the prefill (a verify step counts once)."""
    unsent_ids: list[int] = field(default_factory=list)
    pending_text: str = ""
    strip: str = ""
    """Token healing: prompt text the first tokens re-create, not sent to the client."""
    at_stop_string: bool = False
    done: bool = False
    t_start: float = 0.0
    t_first: float | None = None
    t_second: float | None = None
    t_last: float = 0.0
    marks: dict[str, float] = field(default_factory=dict)
    """perf_counter stamps on the way to the first token: "picked" (the worker took it),
    "slot" (prefix-cache slot acquired), "launched" (the last prompt chunk's kernels
    queued), "emitted" (the first text handed to the event loop)."""
    info: dict[str, Any] = field(default_factory=dict)
    """How the prompt ran: "prefill" (graph or eager), "chunks", and what ran for the first
    time ("captures": graph steps, "new_shapes": prefill shapes)."""
    stats: GenerationStats = field(default_factory=GenerationStats)

    @property
    def key(self) -> tuple[int, int]:
        return (int(self.request.priority), self.seq)

    @property
    def greedy(self) -> bool:
        return self.request.sampling.greedy

    @property
    def remaining(self) -> int:
        return self.max_tokens - self.n_generated

    def sample_args(self) -> tuple[float, float, Any]:
        p = self.request.sampling
        return p.temperature, p.top_p, self.generator

    # ------------------------------------------------------------------ per token
    def on_token(self, token: int) -> FinishReason | None:
        """Account one output token; return why the generation ends, if it does."""
        now = time.perf_counter()
        if self.t_first is None:
            self.t_first = now
        elif self.t_second is None:
            self.t_second = now
        self.t_last = now
        if token in self.stop_ids:
            return "stop"
        self.n_generated += 1
        self.unsent_ids.append(token)
        self.next_token = token
        if self.history is not None:
            self.history.append(token)
        text, hit = self.stopper.feed(self._visible(self.detok.push((token,))))
        if hit:
            self.pending_text, self.at_stop_string = text, True
            return "stop"
        if self.constraint is not None and self.constraint.finished:
            self.pending_text = text
            return "stop"
        if self.n_generated >= self.max_tokens:
            self.pending_text = text
            return "length"
        if text:
            self._emit(Delta(text, len(self.unsent_ids), token_ids=self.unsent_ids))
            self.unsent_ids = []
            if "emitted" not in self.marks:
                self.marks["emitted"] = time.perf_counter()
        return None

    def finish(self, reason: FinishReason, error: str = "") -> None:
        """Send the last delta with the stats and run the request's on_finish hook."""
        self.done = True
        text = self.pending_text
        if not self.at_stop_string:
            # Release text held back for a possible stop string or a split character.
            tail, hit = self.stopper.feed(self._visible(self.detok.flush()))
            text += tail
            if not hit:
                text += self.stopper.finish()
        stats = self.stats
        stats.completion_tokens = self.n_generated
        stats.finish_reason = reason
        stats.queue_s = self.request.queue_s
        if self.t_first is not None:
            stats.ttft_s = self.t_first - self.t_start
            if self.n_generated > 1:
                stats.tpot_s = (self.t_last - self.t_first) / (self.n_generated - 1)
        if self.constraint is not None:
            stats.grammar_s = self.constraint.seconds
        if self.speculate and self.decode_steps:
            stats.verify_steps = self.decode_steps
            stats.accept_length = round((self.n_generated - 1) / self.decode_steps, 3)
        stats.trace = self.trace()
        if error:
            log.warning("%s: %s", self.request.request_id, error)
        self._emit(Delta(text, len(self.unsent_ids), reason, stats, error, self.unsent_ids))
        self.unsent_ids = []
        if self.request.on_finish is not None:
            try:
                self.request.on_finish(stats)
            except Exception:
                log.exception("on_finish callback failed")

    def trace(self) -> dict[str, Any]:
        """Where the time to the first token went, in ms: "prep" (the daemon parsed and
        tokenized the request), "queue" (the scheduler held it), "wait" (until the worker
        took it), "lookup" (the prefix-cache slot), "launch" (queueing the prompt's
        kernels), "sync" (until the first token was on the host: the GPU's share of the
        prefill, and the sampling), "emit" (detokenizing and handing over the first text;
        the engine's TTFT ends before it), "second" (first to second token: the first
        decode step); plus how the prompt ran (`info`)."""
        m = self.marks
        stamps = [
            ("wait", self.t_start, m.get("picked")),
            ("lookup", m.get("picked"), m.get("slot")),
            ("launch", m.get("slot"), m.get("launched")),
            ("sync", m.get("launched"), self.t_first),
            ("emit", self.t_first, m.get("emitted")),
            ("second", self.t_first, self.t_second),
        ]
        out: dict[str, Any] = {
            "prep": round(self.request.prep_s * 1e3, 3),
            "queue": round(self.request.queue_s * 1e3, 3),
        }
        for name, a, b in stamps:
            if a is not None and b is not None:
                out[name] = round((b - a) * 1e3, 3)
        out.update(self.info)
        return out

    def _visible(self, text: str) -> str:
        """Cut the healed prompt text from the front of the output."""
        if not self.strip or not text:
            return text
        if text.startswith(self.strip):
            text, self.strip = text[len(self.strip) :], ""
        elif self.strip.startswith(text):  # decoded in pieces
            text, self.strip = "", self.strip[len(text) :]
        else:  # not re-created (the first-token mask makes this impossible)
            self.strip = ""
        return text

    def _emit(self, delta: Delta) -> None:
        self.loop.call_soon_threadsafe(self.queue.put_nowait, delta)
