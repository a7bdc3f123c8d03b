"""Work nobody will see is stopped in the engine at once: client disconnects and
superseded completions."""

from __future__ import annotations

import re
import threading
import time

import pytest

from ling_local.errors import GenerationCancelled
from tests.support import DaemonProcess

LONG = {"max_tokens": 1500, "ignore_eos": True, "temperature": 0}


def _metric(text: str, name: str, labels: str = "") -> float:
    pattern = rf"^{re.escape(name)}{re.escape(labels)} ([0-9.e+-]+)$"
    m = re.search(pattern, text, re.M)
    return float(m.group(1)) if m else 0.0


def _wait_idle(client, timeout: float = 5.0) -> float:
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout:
        h = client.health()
        if h.running == 0 and h.engine_running == 0:
            return time.perf_counter() - t0
        time.sleep(0.002)
    raise AssertionError(f"engine still busy after {timeout}s: {client.health()}")


def test_dropping_a_stream_idles_the_engine_within_100ms(daemon: DaemonProcess) -> None:
    with daemon.client() as client:
        _wait_idle(client)
        before = client.metrics()
        stream = client.stream_complete("def main():\n", **LONG)
        first = next(iter(stream))
        assert first.text or first.finish_reason is None
        assert client.health().engine_running == 1
        stream.close()
        idle_after = _wait_idle(client)
        after = client.metrics()
    assert idle_after < 0.1, f"engine idle only {idle_after * 1e3:.0f} ms after the drop"
    assert _metric(after, "ling_cancelled_requests_total", '{reason="disconnected"}') == (
        _metric(before, "ling_cancelled_requests_total", '{reason="disconnected"}') + 1
    )
    wasted = _metric(after, "ling_cancelled_tokens_total") - _metric(
        before, "ling_cancelled_tokens_total"
    )
    assert 1 <= wasted < LONG["max_tokens"] / 4


def test_dropping_a_non_streamed_request_cancels_it(daemon: DaemonProcess) -> None:
    import httpx

    with daemon.client() as client:
        _wait_idle(client)
        with daemon.http() as http, pytest.raises(httpx.ReadTimeout):
            http.post("/v1/completions", json={"prompt": "x = 1\n", **LONG}, timeout=0.3)
        assert _wait_idle(client) < 0.5


def test_superseded_completion_stops_and_the_new_one_runs(daemon: DaemonProcess) -> None:
    with daemon.client() as client:
        _wait_idle(client)
        before = client.metrics()
        old = client.stream_complete(
            "import os\n", key="file:///a.py", priority="completion", **LONG
        )
        it = iter(old)
        next(it)
        outcome: dict = {}

        def drain() -> None:
            try:
                for _ in it:
                    pass
                outcome["finished"] = old.finish_reason
            except GenerationCancelled as err:
                outcome["cancelled"] = err.message

        reader = threading.Thread(target=drain)
        reader.start()
        new = client.complete(
            "import sys\n", key="file:///a.py", priority="completion", max_tokens=5, temperature=0
        )
        reader.join(10)
        after = client.metrics()
    assert "superseded" not in outcome.get("finished", "")
    assert "cancelled" in outcome, outcome
    assert new.finish_reason in ("stop", "length")
    assert _metric(after, "ling_cancelled_requests_total", '{reason="superseded"}') == (
        _metric(before, "ling_cancelled_requests_total", '{reason="superseded"}') + 1
    )
    wasted = _metric(after, "ling_cancelled_tokens_total") - _metric(
        before, "ling_cancelled_tokens_total"
    )
    assert wasted < LONG["max_tokens"] / 4


def test_other_keys_are_not_superseded(daemon: DaemonProcess) -> None:
    with daemon.client() as client:
        a = client.stream_complete(
            "a = 1\n", key="file:///a.py", max_tokens=20, ignore_eos=True, temperature=0
        )
        it = iter(a)
        next(it)
        b = client.complete("b = 2\n", key="file:///b.py", max_tokens=3, temperature=0)
        rest = list(it)
    assert b.finish_reason in ("stop", "length")
    assert a.finish_reason == "length"
    assert rest, "the other document's stream went on"
