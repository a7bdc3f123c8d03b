"""The concurrency-1 policy with the real embedded engine, in-process."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from ling_local.config import SchedulerSettings, load_profile
from ling_local.engines.base import GenerationRequest, Priority, SamplingParams
from ling_local.engines.embedded.torch_engine import TorchEngine
from ling_local.errors import GenerationCancelled
from ling_local.metrics import Metrics
from ling_local.scheduler import Scheduler


@pytest.fixture
async def engine(profile_path: Path):
    e = TorchEngine(load_profile(str(profile_path)))
    await e.start()
    yield e
    await e.stop()


def _req(prompt: str, priority: Priority, n: int) -> GenerationRequest:
    return GenerationRequest(
        prompt=prompt, priority=priority, sampling=SamplingParams(max_tokens=n, ignore_eos=True)
    )


async def _run(
    scheduler: Scheduler, request: GenerationRequest, log: list, name: str, key: str | None = None
) -> str:
    parts = []
    async for delta in scheduler.stream(request, key=key):
        if not parts:
            log.append(("first", name))
        parts.append(delta.text)
    log.append(("done", name))
    return "".join(parts)


async def test_completion_pauses_a_running_chat_which_then_resumes_intact(engine) -> None:
    sched = Scheduler(engine, SchedulerSettings(max_running=1, preempt=True), Metrics())
    alone = await _run(sched, _req("class A:\n", Priority.CHAT, 60), [], "chat-alone")
    log: list = []
    chat = asyncio.create_task(_run(sched, _req("class A:\n", Priority.CHAT, 60), log, "chat"))
    while ("first", "chat") not in log:
        await asyncio.sleep(0.001)
    completion = await _run(sched, _req("def f():\n", Priority.COMPLETION, 5), log, "completion")
    chat_text = await chat
    assert log.index(("done", "completion")) < log.index(("done", "chat"))
    assert chat_text == alone, "the paused chat must continue exactly where it was"
    assert completion is not None


async def test_without_preemption_priority_orders_the_queue(engine) -> None:
    sched = Scheduler(engine, SchedulerSettings(max_running=1, preempt=False), Metrics())
    log: list = []
    blocker = asyncio.create_task(
        _run(sched, _req("x = 0\n", Priority.AGENT, 1000), log, "blocker")
    )
    while ("first", "blocker") not in log:
        await asyncio.sleep(0.001)
    tasks = [
        asyncio.create_task(_run(sched, _req(p, prio, 3), log, name))
        for p, prio, name in (
            ("a = 1\n", Priority.AGENT, "agent"),
            ("b = 2\n", Priority.CHAT, "chat"),
            ("c = 3\n", Priority.COMPLETION, "completion"),
        )
    ]
    while sched.queued < 3:  # the three wait behind the blocker (which runs ~1,000 steps)
        await asyncio.sleep(0.001)
    assert sched.running == 1 and ("first", "blocker") in log
    await asyncio.gather(blocker, *tasks)
    starts = [name for kind, name in log if kind == "first"]
    assert starts == ["blocker", "completion", "chat", "agent"]


async def test_supersede_cancels_queued_request_before_it_runs(engine) -> None:
    metrics = Metrics()
    sched = Scheduler(engine, SchedulerSettings(max_running=1, preempt=False), metrics)
    log: list = []
    blocker = asyncio.create_task(_run(sched, _req("x = 0\n", Priority.AGENT, 1000), log, "b"))
    while ("first", "b") not in log:
        await asyncio.sleep(0.001)
    old = asyncio.create_task(_run(sched, _req("y", Priority.COMPLETION, 3), log, "old", "doc"))
    await asyncio.sleep(0.005)
    new = asyncio.create_task(_run(sched, _req("z", Priority.COMPLETION, 3), log, "new", "doc"))
    with pytest.raises(GenerationCancelled):
        await old
    await asyncio.gather(blocker, new)
    assert ("first", "old") not in log
    assert ("done", "new") in log
    value = metrics.registry.get_sample_value(
        "ling_cancelled_requests_total", {"reason": "superseded"}
    )
    assert value == 1


async def test_queue_wait_is_accounted(engine) -> None:
    metrics = Metrics()
    sched = Scheduler(engine, SchedulerSettings(max_running=1, preempt=False), metrics)
    log: list = []
    await asyncio.gather(
        _run(sched, _req("a", Priority.CHAT, 10), log, "a"),
        _run(sched, _req("b", Priority.CHAT, 2), log, "b"),
    )
    count = metrics.registry.get_sample_value("ling_queue_wait_seconds_count", {"priority": "chat"})
    total = metrics.registry.get_sample_value("ling_queue_wait_seconds_sum", {"priority": "chat"})
    assert count == 2
    assert total > 0
