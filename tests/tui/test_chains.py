"""Agent chains: the runner's events against a real daemon, and the chain view in the TUI."""

from __future__ import annotations

from contextlib import aclosing
from pathlib import Path

import pytest

from ling_local.errors import ConfigError
from tests.support import DaemonProcess
from tests.tui.conftest import DOWN_URL, daemon_idle, wait_for
from tui.app import make_app
from tui.chains import (
    BUILTIN_CHAINS,
    ChainError,
    ChainFinished,
    StepFinished,
    StepStarted,
    Token,
    fill,
    load_chain_file,
)
from tui.screens.chains import ChainScreen
from tui.widgets.chain_step import StepPanel

SIZE = (100, 40)

CHAIN_FILE = """
from tui.chains import PromptStep, SerialChain

chain = SerialChain(
    "draft-then-shorten",
    [
        PromptStep("draft", "Write a docstring for: {task}"),
        PromptStep("short", "Shorten this docstring: {draft} (keep {braces} as is)"),
    ],
    max_tokens={max_tokens},
    options={{"ignore_eos": True}},
)
"""


def write_chain(tmp_path: Path, max_tokens: int) -> Path:
    path = tmp_path / "chain.py"
    path.write_text(
        CHAIN_FILE.replace("{max_tokens}", str(max_tokens)).replace("{{", "{").replace("}}", "}")
    )
    return path


async def test_serial_chain_events_in_order_and_step_two_sees_step_one(
    daemon: DaemonProcess, tmp_path: Path
) -> None:
    runner = load_chain_file(write_chain(tmp_path, 32))
    async with daemon.async_client() as client:
        events = [e async for e in runner.events(client, "def add(a, b)")]
    kinds = [type(e) for e in events if not isinstance(e, Token)]
    assert kinds == [StepStarted, StepFinished, StepStarted, StepFinished, ChainFinished]
    first, second = events[0], next(e for e in events[1:] if isinstance(e, StepStarted))
    assert first.prompt == "Write a docstring for: def add(a, b)"
    done = [e for e in events if isinstance(e, StepFinished)]
    assert done[0].output and done[0].output in second.prompt
    assert second.prompt.endswith("(keep {braces} as is)")  # unknown braces stay as they are
    tokens = "".join(e.text for e in events if isinstance(e, Token) and e.index == 0)
    assert tokens == done[0].output
    assert all(d.completion_tokens == 32 and d.prompt_tokens > 0 and d.seconds > 0 for d in done)
    assert events[-1].outputs == {"draft": done[0].output, "short": done[1].output}


async def test_closing_the_iterator_cancels_the_step_in_the_daemon(
    daemon: DaemonProcess, tmp_path: Path
) -> None:
    runner = load_chain_file(write_chain(tmp_path, 4000))
    async with daemon.async_client() as client:
        async with aclosing(runner.events(client, "x")) as events:
            async for event in events:
                if isinstance(event, Token):
                    break
        assert await daemon_idle(client)


async def test_a_daemon_that_is_down_is_a_chain_error() -> None:
    from ling_local.client import AsyncClient

    async with AsyncClient(DOWN_URL, "x") as client:
        events = [e async for e in BUILTIN_CHAINS["plan-and-code"].events(client, "x")]
    assert isinstance(events[-1], ChainError) and events[-1].index == 0
    assert "ling-local serve" in events[-1].message


def test_chain_files_are_checked(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_chain_file(tmp_path / "missing.py")
    bad = tmp_path / "bad.py"
    bad.write_text("chain = 42\n")
    with pytest.raises(ConfigError, match="must define `chain`"):
        load_chain_file(bad)
    broken = tmp_path / "broken.py"
    broken.write_text("raise RuntimeError('boom')\n")
    with pytest.raises(ConfigError, match="boom"):
        load_chain_file(broken)
    pairs = tmp_path / "pairs.py"
    pairs.write_text("chain = [('a', 'say {task}'), ('b', 'again: {a}')]\n")
    assert [s.name for s in load_chain_file(pairs).steps] == ["a", "b"]
    assert fill("{a} {b} {}", {"a": "1"}) == "1 {b} {}"


async def test_chain_view_runs_two_steps_and_shows_both(
    daemon: DaemonProcess, tmp_path: Path
) -> None:
    path = write_chain(tmp_path, 32)
    app = make_app(
        store_path=tmp_path / "db.sqlite3", url=daemon.url, token=daemon.token, chain_file=str(path)
    )
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, ChainScreen), what="chain screen")
        screen = app.screen
        await pilot.press("ctrl+r")
        await wait_for(
            pilot,
            lambda: "finished" in str(screen.query_one("#chain-result").render()),
            what="chain finished",
        )
        panels = list(screen.query(StepPanel))
        assert [(p.step_name, p.state) for p in panels] == [
            ("draft", "finished"),
            ("short", "finished"),
        ]
        assert panels[0].output and panels[0].output in panels[1].prompt
        assert "32 tokens" in str(panels[1].query_one(".step-numbers").render())
        await pilot.press("escape")  # not running: back to the chat
        assert app.screen.__class__.__name__ == "ChatScreen"


async def test_chain_view_cancels_at_the_second_step(
    slow_daemon: DaemonProcess, tmp_path: Path
) -> None:
    path = tmp_path / "long.py"
    path.write_text(
        "from tui.chains import PromptStep, SerialChain\n"
        "steps = [PromptStep('one', 'a {task}', max_tokens=4), PromptStep('two', 'b {one}')]\n"
        "chain = SerialChain('long', steps, max_tokens=4000, options={'ignore_eos': True})\n"
    )
    app = make_app(store_path=tmp_path / "db.sqlite3", url=slow_daemon.url, token=slow_daemon.token)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+g")
        screen = app.screen
        assert isinstance(screen, ChainScreen)
        screen.query_one("#chain-choice").value = "__file__"
        screen.query_one("#chain-file").value = str(path)
        for _ in range(5):  # a fast engine may finish step two before Esc lands: run again
            await pilot.press("ctrl+r")
            await wait_for(
                pilot,
                lambda: (
                    not screen.running or (1 in screen.panels and len(screen.panels[1].output) > 0)
                ),
                what="step two streaming",
            )
            if screen.running:
                break
        await pilot.press("escape")
        await wait_for(pilot, lambda: not screen.running, what="chain stopped")
        assert [p.state for p in screen.panels.values()] == ["finished", "cancelled"]
        assert "cancelled at step 2" in str(screen.query_one("#chain-result").render())
        async with slow_daemon.async_client() as client:
            assert await daemon_idle(client)
