"""`ling-local bench complete` end to end (a few seconds of the shipped session, replayed
through the real language server against the session's daemon): the report adds up."""

from __future__ import annotations

from ling_local.bench.complete import render_markdown, run_complete_bench
from ling_local.bench.session import load_session
from tests.lsp.conftest import TEST_SETTINGS, daemon_profile
from tests.support import DaemonProcess


def test_the_shipped_session_is_a_realistic_typing_record() -> None:
    session = load_session()
    compile(session.final_text(), session.path, "exec")  # it types a whole, valid module
    gaps = [b[0] - a[0] for a, b in zip(session.events, session.events[1:], strict=False)]
    assert sum(1 for e in session.events if e[1] == "backspace") >= 5  # typos and rework
    assert max(gaps) > 1500  # thinking pauses
    assert 100 < sorted(gaps)[len(gaps) // 2] < 300  # a human's median key interval


def test_bench_complete_replays_and_reports(daemon: DaemonProcess) -> None:
    result = run_complete_bench(
        profile=str(daemon_profile(daemon)), url=daemon.url, token=daemon.token,
        speed=2.0, limit_s=12, settings={**TEST_SETTINGS, "context": {"workspace": False}},
    )  # fmt: skip
    req, gen, tok = result["requests"], result["generations"], result["tokens"]
    assert req["keystrokes"] > 20
    assert req["sent"] >= req["keystrokes"]  # one request per keystroke (+ after accepts)
    assert req["cancelled_by_editor"] + req["answered"] <= req["sent"]
    assert result["latency_ms"]["n"] == req["shown"] <= req["answered"]
    assert gen["sent_to_daemon"] >= 1
    assert tok["never_shown"] == max(0, tok["generated"] - tok["shown"])
    markdown = render_markdown(result)
    assert "keystroke → ghost text" in markdown and "never shown" in markdown
