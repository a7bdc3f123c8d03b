"""Chains against the real daemon: results flow between steps, events come in order,
cancel and timeouts stop the daemon's work, retries happen only before anything streamed."""

from __future__ import annotations

import asyncio
import socket
import threading

import pytest

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
    StepSkipped,
    StepStarted,
    Token,
)
from ling_local.client import AsyncClient
from ling_local.errors import (
    ChainCancelled,
    ChainDefinitionError,
    DaemonUnavailable,
    StepFailed,
    StepTimeout,
)
from tests.agents.conftest import agent_requests, await_idle, metric, wait_idle
from tests.support import DaemonProcess

LONG = {"ignore_eos": True}  # generate until max_tokens, whatever the model says
ESSAY = 1800  # tokens: long enough to be cancelled mid-way even on a fast engine


def three_steps(seen: dict) -> Chain:
    def check(plan: str, code: str, topic: str) -> dict:
        seen.update(plan=plan, code=code, topic=topic)
        return {"plan_chars": len(plan), "code_chars": len(code)}

    return Chain(
        "three",
        [
            Prompt("plan", "Plan <<{{ topic }}>>", max_tokens=6, options=LONG),
            Prompt(
                "code",
                "# plan: <<{{ plan }}>>\ndef {{ topic }}():\n",
                mode="complete",
                max_tokens=6,
                options=LONG,
            ),
            check,
        ],
    )


def test_three_step_chain_feeds_each_step_the_earlier_results(
    daemon: DaemonProcess, run_log: RunLog
) -> None:
    seen: dict = {}
    before = agent_requests(daemon)
    with daemon.client() as client:
        events = list(three_steps(seen).start(topic="fib", client=client, run_log=run_log).events())
    started = {e.index: e for e in events if isinstance(e, StepStarted)}
    finished = {e.index: e for e in events if isinstance(e, StepFinished)}
    done = events[-1]
    assert isinstance(done, ChainFinished)
    plan, code = done.outputs["plan"], done.outputs["code"]
    assert "Plan <<fib>>" in started[0].prompt
    assert started[1].prompt == f"# plan: <<{plan}>>\ndef fib():\n"
    assert seen == {"plan": plan, "code": code, "topic": "fib"}
    assert done.outputs["check"] == {"plan_chars": len(plan), "code_chars": len(code)}
    for i in (0, 1):
        assert finished[i].prompt_tokens > 0
        assert 0 < finished[i].completion_tokens <= 6
    assert finished[2].completion_tokens == 0 and started[2].kind == "function"
    assert agent_requests(daemon) - before == 2  # both model calls ran as 'agent'
    record = run_log.get(done.run_id)
    assert record.status == "finished"
    assert [s.output for s in record.steps] == [plan, code, done.outputs["check"]]


async def test_events_arrive_in_order(daemon: DaemonProcess, run_log: RunLog) -> None:
    async with daemon.async_client() as client:
        run = three_steps({}).astart(topic="sort", client=client, run_log=run_log)
        events = [e async for e in run.events()]
    assert isinstance(events[0], RunStarted) and events[0].steps == ["plan", "code", "check"]
    assert isinstance(events[-1], ChainFinished) and events[-1].run_id == run.run_id
    # Per step: StepStarted, its Tokens, StepFinished; steps in index order; nothing between.
    shape = [(type(e).__name__, getattr(e, "index", None)) for e in events[1:-1]]
    expected: list[tuple[str, int]] = []
    for i in range(3):
        tokens = [("Token", i)] * sum(1 for e in events if isinstance(e, Token) and e.index == i)
        expected += [("StepStarted", i), *tokens, ("StepFinished", i)]
    assert shape == expected
    for i, name in enumerate(["plan", "code"]):
        streamed = "".join(e.text for e in events if isinstance(e, Token) and e.index == i)
        assert streamed == events[-1].outputs[name]  # the tokens are the output, in order


async def test_cancel_mid_step_stops_the_generation_in_the_daemon(
    daemon: DaemonProcess, run_log: RunLog
) -> None:
    chain = Chain(
        "cancel", [Prompt("essay", "# An essay\n", mode="complete", max_tokens=ESSAY, options=LONG)]
    )
    async with daemon.async_client() as client:
        before = await client.metrics()
        run = chain.astart(client=client, run_log=run_log)
        tokens = 0
        events = []
        async for event in run.events():
            events.append(event)
            if isinstance(event, Token):
                tokens += 1
                if tokens == 2:  # from "another task": cancel() only needs the run handle
                    asyncio.get_running_loop().call_soon(run.cancel)
        health = await await_idle(daemon, timeout=5)
        after = await client.metrics()
    assert isinstance(events[-1], ChainError) and events[-1].error_type == "cancelled"
    assert events[-1].index == 0
    assert isinstance(run.error, ChainCancelled)
    with pytest.raises(ChainCancelled):
        await run.result()
    assert health.running == 0 and health.engine_running == 0
    cancelled = metric(after, "ling_cancelled_requests_total") - metric(
        before, "ling_cancelled_requests_total"
    )
    wasted = metric(after, "ling_cancelled_tokens_total") - metric(
        before, "ling_cancelled_tokens_total"
    )
    assert cancelled == 1
    assert 0 < wasted < ESSAY  # stopped before max_tokens
    record = run_log.get(run.run_id)
    assert record.status == "cancelled" and record.steps == []


def test_sync_run_is_cancelled_from_another_thread(daemon: DaemonProcess, run_log: RunLog) -> None:
    chain = Chain(
        "cancel", [Prompt("essay", "# An essay\n", mode="complete", max_tokens=ESSAY, options=LONG)]
    )
    with daemon.client() as client:
        run = chain.start(client=client, run_log=run_log)
        events = []
        for event in run.events():
            events.append(event)
            if isinstance(event, Token) and len(events) == 3:
                worker = threading.Thread(target=run.cancel)  # e.g. a UI thread
                worker.start()
                worker.join()
    assert isinstance(events[-1], ChainError) and events[-1].error_type == "cancelled"
    assert isinstance(run.error, ChainCancelled)
    assert wait_idle(daemon, timeout=5).engine_running == 0
    assert sum(isinstance(e, Token) for e in events) < ESSAY


def test_step_timeout_stops_the_step_and_its_generation(
    daemon: DaemonProcess, run_log: RunLog
) -> None:
    step = Prompt(
        "essay", "# Essay\n", mode="complete", max_tokens=ESSAY, timeout=0.05, options=LONG
    )
    with daemon.client() as client:
        run = Chain("slow", [step]).start(client=client, run_log=run_log)
        with pytest.raises(StepTimeout, match=r"timeout of 0\.05s"):
            run.result()
        wasted = metric(client.metrics(), "ling_cancelled_tokens_total")
    wait_idle(daemon, timeout=5)
    assert run_log.get(run.run_id).status == "failed"
    assert wasted < ESSAY


def test_failed_step_resumes_without_rerunning_finished_ones(
    daemon: DaemonProcess, run_log: RunLog
) -> None:
    attempts: list[str] = []

    def flaky(draft: str) -> int:
        attempts.append(draft)
        if len(attempts) == 1:
            raise OSError("the test runner is not installed")
        return len(draft)

    chain = Chain("flaky", [Prompt("draft", "Draft.", max_tokens=4), flaky])
    with daemon.client() as client:
        first = chain.start(client=client, run_log=run_log)
        with pytest.raises(StepFailed, match="OSError: the test runner is not installed"):
            first.result()
        before = agent_requests(daemon)
        events = list(chain.resume(first.run_id, client=client, run_log=run_log).events())
    assert agent_requests(daemon) == before  # the draft was not generated again
    assert isinstance(events[1], StepSkipped) and events[1].name == "draft"
    assert attempts[0] == attempts[1] == events[1].output
    assert events[-1].outputs == {"draft": attempts[0], "flaky": len(attempts[0])}
    assert run_log.get(first.run_id).status == "finished"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_connection_refused_is_retried_then_reported(run_log: RunLog) -> None:
    chain = Chain(
        "offline",
        [Prompt("p", "hi", max_tokens=4)],
        retry=RetryPolicy(attempts=3, backoff_s=0.01),
    )
    async with AsyncClient(f"http://127.0.0.1:{_free_port()}", "token") as client:
        run = chain.astart(client=client, run_log=run_log)
        events = [e async for e in run.events()]
    retries = [e for e in events if isinstance(e, StepRetry)]
    assert [r.attempt for r in retries] == [2, 3]
    assert isinstance(events[-1], ChainError) and "cannot reach" in events[-1].message
    assert isinstance(run.error, StepFailed)
    assert isinstance(run.error.__cause__, DaemonUnavailable)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: [Prompt("a", "{{ b }}"), Prompt("b", "x")], "'b', which is not an earlier step"),
        (lambda: [Prompt("a", "x"), Prompt("a", "y")], "two steps are named 'a'"),
        (lambda: [Prompt("a-b", "x")], "must be a Python identifier"),
        (lambda: [Prompt("a", "{% if %}")], "template is invalid"),
        (lambda: [Prompt("a", "x", prefill="{")], "prefill needs mode='complete'"),
        (
            lambda: [Prompt("a", "x", mode="complete", prefill="{", schema=dict[str, int])],
            "prefill cannot be combined with schema",
        ),
        (lambda: [Prompt("a", "x", schema={"type": "nope"})], "invalid schema"),
    ],
)
def test_bad_chains_are_refused_when_built(build, message: str) -> None:
    with pytest.raises(ChainDefinitionError, match=message):
        Chain("bad", build())


def test_missing_input_is_named_before_anything_runs() -> None:
    chain = Chain("c", [Prompt("a", "{{ code }} {{ lang }}")])
    assert chain.inputs == {"code", "lang"}
    with pytest.raises(ChainDefinitionError, match=r"needs the input 'code'.*step 'a'"):
        chain.start(lang="py")


def test_public_surface() -> None:
    import ling_local.agents as agents

    assert sorted(agents.__all__) == sorted(agents._LAZY)
    for name in agents.__all__:
        assert getattr(agents, name) is not None
