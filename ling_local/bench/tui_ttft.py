"""`bench tui`: time to first token as the person at the TUI sees it, against the SDK's
`stream_chat` on the same daemon, in the same process, round by round.

The TUI is the app `ling-local tui` runs (`tui.app.make_app`), driven headless by Textual's
Pilot at a fixed terminal size: a prompt is typed into a new conversation and Enter
pressed. Its clock starts just before the Enter key is delivered and stops when the
reply's first text has been laid out on the screen (its first Markdown block has a region:
the compositor placed it, and the same refresh drew it). The SDK's clock runs from the
call of `stream_chat` to the first chunk with text. Both send the same kind of request
(one user message, chat priority, the same `max_tokens`), each round a prompt of its own
that starts with its own number so neither finds the other's prompt cached; the order of
the two alternates from round to round. The engine's own TTFT (`ling.ttft_ms`) comes with
both, so a slower engine on one side shows as such.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

__all__ = ["TTFTRound", "print_result", "run_tui_bench", "summarize", "tui_vs_sdk"]

PROMPTS = (
    "Write a Python function that reverses a string.",
    "Write a function that returns the n-th Fibonacci number.",
    "Write a Python function that counts the words in a text.",
    "Write a function that checks whether a number is prime.",
)


@dataclass(frozen=True, slots=True)
class TTFTRound:
    """One round: the same kind of request through the TUI and through the SDK (ms)."""

    tui_ms: float
    """Enter pressed → the reply's first text laid out on the screen."""
    tui_engine_ms: float | None
    tui_own_ms: float | None
    """What the TUI's own line under the reply says (its meter, not the test's clock)."""
    sdk_ms: float
    """`stream_chat` called → its first chunk with text."""
    sdk_engine_ms: float | None


def _prompt(index: int, side: str) -> str:
    return f"{index} {side}: {PROMPTS[index % len(PROMPTS)]}"


async def _sdk_once(client: Any, text: str, max_tokens: int) -> tuple[float, float | None]:
    started = time.perf_counter()
    stream = await client.stream_chat(
        [{"role": "user", "content": text}], priority="chat", max_tokens=max_tokens
    )
    first = None
    try:
        async for chunk in stream:
            if chunk.text and first is None:
                first = time.perf_counter()
    finally:
        await stream.aclose()
    if first is None:
        raise RuntimeError("the SDK's stream ended without text")
    timings = stream.timings
    return (first - started) * 1e3, timings.ttft_ms if timings else None


def _first_text_on_screen(screen: Any) -> bool:
    """Whether the last message is a reply whose first text the compositor has placed
    (plain attribute reads: this runs every millisecond while the TUI works)."""
    from textual.widgets import Markdown

    children = screen.log_view.children
    last = children[-1] if children else None
    if getattr(last, "role", None) != "assistant":
        return False
    return any(
        isinstance(body, Markdown)
        and bool(body.source)
        and any(block.region.height for block in body.children)
        for body in last.children
    )


async def _tui_once(
    pilot: Any, text: str, max_tokens: int, timeout: float
) -> tuple[float, float | None, float | None]:
    from tui.store import ChatSettings

    screen = pilot.app.screen
    if screen.conversation is not None:
        await pilot.press("ctrl+n")
    screen.draft_settings = ChatSettings(max_tokens=max_tokens)
    screen.prompt.load_text(text)
    await pilot.pause()
    before = len(screen.history)
    started = time.perf_counter()
    enter = asyncio.create_task(pilot.press("enter"))
    deadline = started + timeout
    while not _first_text_on_screen(screen):
        if time.perf_counter() > deadline:
            enter.cancel()
            raise RuntimeError("no reply text appeared on the TUI's screen")
        await asyncio.sleep(0.001)
    shown = time.perf_counter()
    await enter
    while screen.reply is not None or len(screen.history) < before + 2:
        if time.perf_counter() > deadline:
            raise RuntimeError("the TUI's reply did not finish")
        await pilot.pause(0.01)
    stats = screen.history[-1].stats
    own = stats.ttft_s * 1e3 if stats and stats.ttft_s is not None else None
    return (shown - started) * 1e3, stats.engine_ttft_ms if stats else None, own


async def tui_vs_sdk(
    url: str,
    token: str | None,
    *,
    rounds: int = 10,
    warmup: int = 1,
    max_tokens: int = 32,
    size: tuple[int, int] = (100, 32),
    store_path: Path | None = None,
    timeout: float = 120.0,
) -> list[TTFTRound]:
    """`rounds` measured rounds (after `warmup` unmeasured ones) against the daemon at
    `url`; the TUI keeps its conversations in `store_path` (default: a temporary file)."""
    from ling_local.client import AsyncClient
    from tui.app import make_app

    with tempfile.TemporaryDirectory(prefix="ling-bench-tui-") as scratch:
        app = make_app(
            store_path=store_path or Path(scratch) / "conversations.sqlite3", url=url, token=token
        )
        results: list[TTFTRound] = []
        async with AsyncClient(url, token) as client, app.run_test(size=size) as pilot:
            deadline = time.perf_counter() + timeout
            while not app.daemon_status.ready:
                if time.perf_counter() > deadline:
                    raise RuntimeError(f"the TUI never saw the daemon ready at {url}")
                await pilot.pause(0.05)
            for index in range(warmup + rounds):
                sdk_text, tui_text = _prompt(index, "sdk"), _prompt(index, "tui")
                if index % 2 == 0:
                    sdk = await _sdk_once(client, sdk_text, max_tokens)
                    tui = await _tui_once(pilot, tui_text, max_tokens, timeout)
                else:
                    tui = await _tui_once(pilot, tui_text, max_tokens, timeout)
                    sdk = await _sdk_once(client, sdk_text, max_tokens)
                if index >= warmup:
                    results.append(TTFTRound(tui[0], tui[1], tui[2], sdk[0], sdk[1]))
        return results


def summarize(rounds: list[TTFTRound]) -> dict[str, Any]:
    """Medians (ms) of each column and of the per-round gap, TUI minus SDK."""

    def median(name: str) -> float | None:
        values = [getattr(r, name) for r in rounds if getattr(r, name) is not None]
        return round(statistics.median(values), 1) if values else None

    gaps = [r.tui_ms - r.sdk_ms for r in rounds]
    return {
        "rounds": len(rounds),
        "tui_ms": median("tui_ms"),
        "tui_engine_ms": median("tui_engine_ms"),
        "tui_own_ms": median("tui_own_ms"),
        "sdk_ms": median("sdk_ms"),
        "sdk_engine_ms": median("sdk_engine_ms"),
        "gap_ms": round(statistics.median(gaps), 1) if gaps else None,
        "each": [
            {k: v if v is None else round(v, 1) for k, v in asdict(r).items()} for r in rounds
        ],
    }


def run_tui_bench(
    profile: str,
    url: str | None,
    token: str | None,
    *,
    rounds: int = 10,
    max_tokens: int = 32,
    size: tuple[int, int] = (100, 32),
) -> dict[str, Any]:
    """`tui_vs_sdk` on the daemon at `url`, or on a fresh daemon of `profile` started for
    the run (and stopped after it); the summary with the machine it ran on."""
    from ling_local.bench.fresh_daemon import FreshDaemon, sigterm_exits
    from ling_local.bench.stats import machine

    def measure(daemon_url: str, daemon_token: str | None) -> dict[str, Any]:
        found = asyncio.run(
            tui_vs_sdk(daemon_url, daemon_token, rounds=rounds, max_tokens=max_tokens, size=size)
        )
        where = {"profile": profile if url is None else None, "url": url}
        return {"machine": machine(), **where, "size": list(size), **summarize(found)}

    if url:
        return measure(url, token)
    with sigterm_exits(), FreshDaemon(profile) as daemon:
        daemon.wait_ready(600)
        return measure(daemon.url, daemon.token)


def print_result(result: dict[str, Any]) -> None:
    from ling_local.tables import Col, print_table

    def ms(value: float | None) -> str:
        return "" if value is None else f"{value:.1f}"

    keys = ("tui_ms", "tui_engine_ms", "sdk_ms", "sdk_engine_ms")
    rows = [[str(i + 1), *(ms(r[k]) for k in keys)] for i, r in enumerate(result["each"])]
    rows.append(["median", *(ms(result[k]) for k in keys)])
    headers = ("round", "TUI ms", "its engine ms", "SDK ms", "its engine ms")
    print_table([Col(h) for h in headers], rows)
    m = result["machine"]
    print(
        f"TUI minus SDK, median over the rounds: {ms(result['gap_ms'])} ms "
        f"({m['cpu']}, {m['cores']} cores, load {m['load_avg']}, {m['date']})"
    )
