"""Agent chains in the TUI: `ling_local.agents` chains fed the typed task, run against a real
daemon, and the chain view that draws their events."""

from __future__ import annotations

from contextlib import aclosing
from pathlib import Path

import pytest
from textual.app import App
from typer.testing import CliRunner

from ling_local.agents import (
    Chain,
    ChainError,
    ChainFinished,
    Prompt,
    RetryPolicy,
    RunLog,
    RunStarted,
    StepFinished,
    StepRetry,
    StepStarted,
    Token,
)
from ling_local.client import AsyncClient
from ling_local.errors import ChainDefinitionError
from tests.support import DaemonProcess
from tests.tui.conftest import DOWN_URL, daemon_idle, wait_for
from tui.app import make_app
from tui.chains import BUILTIN_CHAINS, EXAMPLE_TASK, ChainRunner, load_chain_file
from tui.screens.chains import ChainScreen
from tui.widgets.chain_step import StepPanel

SIZE = (100, 40)

CHAIN_FILE = """
from ling_local.agents import Chain, Prompt

inputs = {"style": "one line"}

chain = Chain("draft-then-shorten", [
    Prompt("draft", "Write a docstring for: {{ task }}", max_tokens=MAX,
           options={"ignore_eos": True}),
    Prompt("short", "Shorten this docstring ({{ style }}): {{ draft }}", max_tokens=MAX,
           options={"ignore_eos": True}),
])
"""


def write_chain(tmp_path: Path, max_tokens: int) -> Path:
    path = tmp_path / "chain.py"
    path.write_text(CHAIN_FILE.replace("MAX", str(max_tokens)))
    return path


async def test_a_chain_file_runs_on_the_task_and_step_two_sees_step_one(
    daemon: DaemonProcess, tmp_path: Path
) -> None:
    runner = load_chain_file(write_chain(tmp_path, 32))
    with RunLog(tmp_path / "runs.sqlite3") as log:
        async with daemon.async_client() as client:
            run = runner.start(client, "def add(a, b)", run_log=log)
            events = [e async for e in run.events()]
        record = log.get(run.run_id)
    kinds = [type(e) for e in events if not isinstance(e, Token)]
    assert kinds == [
        RunStarted,
        StepStarted,
        StepFinished,
        StepStarted,
        StepFinished,
        ChainFinished,
    ]
    assert events[0].run_id == run.run_id == events[-1].run_id
    first, second = (e for e in events if isinstance(e, StepStarted))
    assert first.prompt == "Write a docstring for: def add(a, b)"
    done = [e for e in events if isinstance(e, StepFinished)]
    assert done[0].output and done[0].output in second.prompt
    assert second.prompt.startswith("Shorten this docstring (one line): ")  # the file's default
    tokens = "".join(e.text for e in events if isinstance(e, Token) and e.index == 0)
    assert tokens == done[0].output
    assert all(d.completion_tokens == 32 and d.prompt_tokens > 0 and d.seconds > 0 for d in done)
    assert events[-1].outputs == {"draft": done[0].output, "short": done[1].output}
    # the run is durable: what `ling-local chain show` reads
    assert record.status == "finished" and record.inputs["task"] == "def add(a, b)"
    assert [s.output for s in record.steps] == [d.output for d in done]


async def test_leaving_the_events_loop_cancels_the_step_in_the_daemon(
    daemon: DaemonProcess, tmp_path: Path
) -> None:
    runner = load_chain_file(write_chain(tmp_path, 4000))
    with RunLog(tmp_path / "runs.sqlite3") as log:
        async with daemon.async_client() as client:
            run = runner.start(client, "x", run_log=log)
            async with aclosing(run.events()) as events:
                async for event in events:
                    if isinstance(event, Token):
                        break
            assert await daemon_idle(client)
        assert log.get(run.run_id).status == "cancelled"


async def test_a_daemon_that_is_down_is_a_chain_error_after_the_retries(tmp_path: Path) -> None:
    quick = RetryPolicy(attempts=2, backoff_s=0.01)
    runner = ChainRunner(Chain("one", [Prompt("answer", "{{ task }}")], retry=quick))
    async with AsyncClient(DOWN_URL, "x") as client:
        run = runner.start(client, "x", run_log=tmp_path / "runs.sqlite3")
        events = [e async for e in run.events()]
    assert [type(e) for e in events] == [RunStarted, StepStarted, StepRetry, ChainError]
    assert events[-1].index == 0 and "ling-local serve" in events[-1].message


def test_builtin_chains_take_the_task() -> None:
    assert {"plan-and-code", "code-review-fix"} <= set(BUILTIN_CHAINS)
    for runner in BUILTIN_CHAINS.values():
        assert runner.chain.inputs == {"task"} and runner.task_input == "task"
        assert runner.inputs_for("") == {"task": EXAMPLE_TASK}
    steps = [s.name for s in BUILTIN_CHAINS["code-review-fix"].chain.steps]
    assert steps == ["code", "review", "fix"]


async def test_chain_files_are_checked_and_the_task_finds_its_input(tmp_path: Path) -> None:
    with pytest.raises(ChainDefinitionError, match="does not exist"):
        load_chain_file(tmp_path / "missing.py")
    bad = tmp_path / "bad.py"
    bad.write_text("chain = 42\n")
    with pytest.raises(ChainDefinitionError, match="must define `chain"):
        load_chain_file(bad)
    broken = tmp_path / "broken.py"
    broken.write_text("raise RuntimeError('boom')\n")
    with pytest.raises(ChainDefinitionError, match="boom"):
        load_chain_file(broken)

    def runner(template: str, defaults: dict | None = None) -> ChainRunner:
        return ChainRunner(Chain("c", [Prompt("a", template)]), defaults or {})

    # `task` when the chain uses it; else the one input without a default
    assert runner("{{ task }} {{ code }}").inputs_for("t") == {"task": "t"}
    assert runner("{{ code }} {{ lang }}", {"lang": "go"}).inputs_for("t") == {
        "code": "t",
        "lang": "go",
    }
    assert runner("{{ task }}", {"task": "default"}).inputs_for("") == {"task": "default"}
    none_open = runner("{{ path }}", {"path": "a.py"})
    assert none_open.task_input is None and none_open.inputs_for("ignored") == {"path": "a.py"}
    assert "takes no task" in none_open.description
    two_open = runner("{{ a1 }} {{ a2 }}")
    assert two_open.task_input is None
    async with AsyncClient(DOWN_URL, "x") as client:
        with pytest.raises(ChainDefinitionError, match="needs the input 'a1'"):
            two_open.start(client, "t")


async def test_chain_view_runs_two_steps_and_shows_both_and_the_run_id(
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
        result = screen.query_one("#chain-result")
        await wait_for(pilot, lambda: "finished" in str(result.render()), what="chain finished")
        panels = list(screen.query(StepPanel))
        assert [(p.step_name, p.state) for p in panels] == [
            ("draft", "finished"),
            ("short", "finished"),
        ]
        assert panels[0].output and panels[0].output in panels[1].prompt
        assert "32 tokens" in str(panels[1].query_one(".step-numbers").render())
        run_id = screen.current_run.run_id
        assert f"run {run_id}" in str(result.render())
        await pilot.press("escape")  # not running: back to the chat
        assert app.screen.__class__.__name__ == "ChatScreen"
    from ling_local.cli import app as cli

    shown = CliRunner().invoke(cli, ["chain", "show", run_id])
    assert shown.exit_code == 0, shown.output
    assert "draft-then-shorten" in shown.output and "finished" in shown.output


async def test_chain_view_cancels_at_the_second_step(
    slow_daemon: DaemonProcess, tmp_path: Path
) -> None:
    path = tmp_path / "long.py"
    path.write_text(
        "from ling_local.agents import Chain, Prompt\n"
        "chain = Chain('long', [\n"
        "    Prompt('one', 'a {{ task }}', max_tokens=4),\n"
        "    Prompt('two', 'b {{ one }}', max_tokens=4000, options={'ignore_eos': True}),\n"
        "])\n"
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
        run_id = screen.current_run.run_id
        assert f"cancelled at step 2 · run {run_id}" in str(
            screen.query_one("#chain-result").render()
        )
        async with slow_daemon.async_client() as client:
            assert await daemon_idle(client)
    with RunLog() as log:
        record = log.get(run_id)
    assert record.status == "cancelled" and [s.name for s in record.steps] == ["one"]


async def test_a_step_panel_ticked_and_ended_while_it_mounts_shows_it_once_up() -> None:
    """The view's 0.2 s timer ticks every panel it knows, and one may still be mounting (a CI
    run once died on that tick): the panel takes the tick and the end before its children
    exist, and shows them when it is up."""
    panel = StepPanel(0, "draft", "a prompt")
    panel.note = "attempt 2: timeout"
    panel.tick()
    assert "attempt 2: timeout" in str(panel._numbers.render())
    await panel.end("cancelled", "cancelled")
    app = App()
    async with app.run_test(size=SIZE) as pilot:
        await app.mount(panel)
        await pilot.pause()
        assert panel.has_class("-cancelled") and panel.state == "cancelled"
        assert str(panel.query_one(".step-numbers").render()).startswith("cancelled after")
        assert "■ Step 1: draft · cancelled" in str(panel.query_one(".step-title").render())
