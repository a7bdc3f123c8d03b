"""The /generate relay on byte streams in SGLang's wire format with
``--incremental-streaming-output`` (each event its new text and ids, running counts in
meta_info), events split and merged across reads the way TCP delivers them."""

from __future__ import annotations

import json

import pytest

from ling_local.engines.base import GenerationRequest, SamplingParams
from ling_local.engines.sglang.relay import Flight, relay_events


def event(text: str, n: int, finish: dict | None = None, new: int = 1, **meta) -> bytes:
    """One event: `text` and `new` ids added, `n` tokens so far."""
    info = {
        "id": "r",
        "finish_reason": finish,
        "prompt_tokens": 7,
        "cached_tokens": 3,
        "completion_tokens": n,
        **meta,
    }
    body = {"text": text, "output_ids": list(range(n - new, n)), "meta_info": info}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


async def relay(*reads: bytes, stop: tuple[str, ...] = ()):
    async def chunks():
        for read in reads:
            yield read

    flight = Flight(GenerationRequest("p", SamplingParams(stop=stop)), "r")
    return [d async for d in relay_events(chunks(), flight)], flight


async def test_a_backlog_of_events_becomes_one_delta() -> None:
    backlog = event("a", 1) + event("b", 2) + event("c", 3)
    final = event("d", 4, {"type": "length", "length": 4}, spec_verify_ct=2, spec_accept_length=2.0)
    deltas, flight = await relay(backlog, final[:10], final[10:] + b"data: [DONE]\n\n")
    assert [(d.text, d.n_tokens) for d in deltas] == [("abc", 3), ("d", 1)]
    last = deltas[-1]
    assert last.finish_reason == "length" and flight.finished
    assert (last.stats.prompt_tokens, last.stats.cached_tokens) == (7, 3)
    assert (last.stats.verify_steps, last.stats.accept_length) == (2, 2.0)


async def test_an_error_event_raises_with_sglangs_message() -> None:
    error = b'data: {"error": {"message": "Duplicate request ID", "code": 400}}\n\n'
    with pytest.raises(ValueError, match="Duplicate request ID"):
        await relay(event("a", 1), error + b"data: [DONE]\n\n")


async def test_user_abort_is_a_cancellation_and_a_refusal_is_an_error() -> None:
    aborted, _ = await relay(
        event("a", 1, {"type": "abort", "message": "Aborted", "status_code": None})
    )
    assert aborted[-1].finish_reason == "cancelled"
    refused, _ = await relay(
        event("", 0, {"type": "abort", "message": "too long", "status_code": 400})
    )
    assert refused[-1].finish_reason == "error" and "too long" in refused[-1].error


async def test_a_partial_stop_string_is_held_back_then_dropped() -> None:
    # SGLang streams "x\n#" before it sees the whole stop string "\n##".
    deltas, _ = await relay(
        event("x\n#", 2, new=2), event("", 3, {"type": "stop", "matched": "\n##"}), stop=("\n##",)
    )
    assert "".join(d.text for d in deltas) == "x"


async def test_multi_token_events_are_relayed_exactly_with_a_stop_string_across_them() -> None:
    # Speculation: one event per verify step, several tokens each; the stop string spans
    # two events and SGLang trims it from the final text.
    deltas, flight = await relay(
        event("def f():\n    ret", 4, new=4),
        event("urn 1\n\nde", 9, new=5),
        event("", 10, {"type": "stop", "matched": "\n\ndef"}),
        stop=("\n\ndef",),
    )
    assert "".join(d.text for d in deltas) == "def f():\n    return 1"
    assert [d.n_tokens for d in deltas] == [4, 5, 1] and flight.stats.completion_tokens == 10
