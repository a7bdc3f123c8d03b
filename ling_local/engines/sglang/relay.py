"""One generation through SGLang's native ``/generate`` stream, relayed as `Delta`s.

The daemon starts SGLang with ``--incremental-streaming-output``: each server-sent event
carries only the text and ids it adds (by default both are cumulative, and parsing the
whole answer again at every event made the relay's CPU per token grow with the answer's
length), and ``meta_info`` the running token counts; with speculation one event may carry
many tokens, and the last one has the speculation stats. Per event: one JSON parse of a
small object, and the stop/scope matcher only when the request has one. It runs once per
verify step on the token path.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from ling_local.engines.base import (
    Delta,
    FinishReason,
    GenerationRequest,
    GenerationStats,
    error_body_message,
)
from ling_local.engines.embedded.detok import StopMatcher
from ling_local.errors import EngineError, RequestError

__all__ = ["Flight", "dumps", "generate_payload", "relay_events", "status_error"]

try:  # orjson (an SGLang dependency) parses an event in about half the time of json
    from orjson import dumps
    from orjson import loads as _loads
except ImportError:  # pragma: no cover - depends on the environment
    _loads = json.loads

    def dumps(obj: object) -> bytes:
        return json.dumps(obj, separators=(",", ":")).encode()


@dataclass(eq=False, slots=True)
class Flight:
    """A request in flight inside SGLang: its never-reused rid and what it cost so far."""

    request: GenerationRequest
    rid: str
    t_sent: float = field(default_factory=time.perf_counter)
    t_first: float | None = None
    t_last: float = 0.0
    first_tokens: int = 0
    abort_sent: bool = False
    stats: GenerationStats = field(default_factory=GenerationStats)
    finished: bool = False

    def final_stats(self, reason: FinishReason) -> GenerationStats:
        s = self.stats
        s.finish_reason = reason
        s.queue_s = self.request.queue_s
        if self.t_first is not None:
            s.ttft_s = self.t_first - self.t_sent
            if s.completion_tokens > 1 and self.t_last > self.t_first:
                s.tpot_s = (self.t_last - self.t_first) / (s.completion_tokens - 1)
        return s


def generate_payload(request: GenerationRequest, rid: str, max_new_tokens: int) -> dict:
    p = request.sampling
    params: dict = {
        "max_new_tokens": max_new_tokens,
        "temperature": p.temperature,
        "top_p": p.top_p,
    }
    if p.stop:
        params["stop"] = list(p.stop)
    if p.stop_token_ids:
        params["stop_token_ids"] = list(p.stop_token_ids)
    if p.ignore_eos:
        params["ignore_eos"] = True
    if p.seed is not None:
        params["sampling_seed"] = p.seed
    if request.json_schema is not None:
        params["json_schema"] = json.dumps(request.json_schema)
    body: dict = {"sampling_params": params, "stream": True, "rid": rid}
    if request.prompt_ids is not None:
        body["input_ids"] = request.prompt_ids
    else:
        body["text"] = request.prompt
    return body


def _finish(info: dict | None, flight: Flight) -> tuple[FinishReason, str]:
    """SGLang's finish_reason -> ours (+ an error message). An abort we asked for (or any
    abort without a status code, which is how /abort_request ends a request) is a
    cancellation; an abort with a status code is SGLang refusing or failing the request."""
    kind = info.get("type") if isinstance(info, dict) else None
    if kind == "length":
        return "length", ""
    if kind == "abort":
        assert isinstance(info, dict)
        if flight.abort_sent or flight.request.cancelled or info.get("status_code") is None:
            return "cancelled", ""
        return "error", f"SGLang: {info.get('message') or 'aborted'}"
    return "stop", ""


def _events(block: bytes) -> tuple[list[bytes], bool]:
    """The JSON payloads of the complete events in `block` and whether [DONE] was among
    them. Usually one event: more only when the relay fell behind (SGLang itself coalesces
    what queued up on its side, so a backlog here is short)."""
    payloads, done = [], False
    for event in block.split(b"\n\n") if b"\n\n" in block else (block,):
        if event.startswith(b"data:"):
            data = event[5:]
            if data.strip() == b"[DONE]":
                done = True
            else:
                payloads.append(data)
    return payloads, done


async def relay_events(chunks: AsyncIterator[bytes], flight: Flight) -> AsyncIterator[Delta]:
    """Deltas from the body of one ``/generate`` event stream (SGLang started with
    ``--incremental-streaming-output``: each event has only its new text and ids, and
    ``meta_info`` the running counts); the last delta has finish_reason + stats. Raises
    ValueError with SGLang's message on an error event."""
    sampling = flight.request.sampling
    stopper = (
        StopMatcher(sampling.stop, sampling.scope) if sampling.stop or sampling.scope else None
    )
    stopped = False  # a stop string was seen: relay no more text, wait for the finish
    stats = flight.stats
    buffer = b""
    async for chunk in chunks:
        if flight.finished:  # reading on to the end returns the connection to the pool
            continue
        if buffer:
            chunk = buffer + chunk
        end = chunk.rfind(b"\n\n")
        if end == -1:
            buffer = chunk
            continue
        buffer = chunk[end + 2 :]
        payloads, done = _events(chunk[:end])
        if not payloads:
            if done:
                return
            continue
        pieces = []
        for data in payloads:
            out = _loads(data)
            if "error" in out:
                err = out["error"]
                raise ValueError(err.get("message", str(err)) if isinstance(err, dict) else err)
            if text := out.get("text"):
                pieces.append(text)
        now = time.perf_counter()
        meta = out["meta_info"]
        n = meta.get("completion_tokens", stats.completion_tokens)
        new_tokens = n - stats.completion_tokens
        stats.completion_tokens = n
        stats.prompt_tokens = meta.get("prompt_tokens", stats.prompt_tokens)
        stats.cached_tokens = meta.get("cached_tokens", stats.cached_tokens)
        piece = pieces[0] if len(pieces) == 1 else "".join(pieces)
        if new_tokens > 0:
            if flight.t_first is None:
                flight.t_first = now
            flight.t_last = now
        finish = meta.get("finish_reason")
        if stopped:
            piece = ""
        elif stopper is not None:
            piece, stopped = stopper.feed(piece)
        if finish is None:
            if piece or new_tokens:
                yield Delta(piece, new_tokens)
            if done:
                return
            continue
        if stopper is not None and not stopped and not isinstance(finish.get("matched"), str):
            # Held text is released unless SGLang matched a stop string: then it is the
            # start of that string (SGLang streams it before it sees the match).
            piece += stopper.finish()
        if "spec_verify_ct" in meta:
            stats.verify_steps = meta["spec_verify_ct"]
            stats.accept_length = meta.get("spec_accept_length")
        flight.finished = True
        reason, error = _finish(finish, flight)
        # The caller has its last delta at once; only if it asks for more is the rest of
        # the body ("data: [DONE]") read, so that the keep-alive connection is reused (a
        # new TCP connection per request costs TTFT).
        yield Delta(piece, new_tokens, reason, flight.final_stats(reason), error)


def status_error(status: int, body: bytes) -> Exception:
    """The error for a /generate answered with an HTTP error status."""
    message = error_body_message(body)
    if status == 400:
        return RequestError(f"SGLang refused the request: {message}")
    return EngineError(f"SGLang answered HTTP {status}: {message}")
