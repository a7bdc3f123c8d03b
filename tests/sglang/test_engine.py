"""SGLangEngine against the protocol-level stand-in, launched through the real launch path:
streaming, abort, health while starting, fail-fast, crash and restart, shutdown."""

from __future__ import annotations

import asyncio
import json
import os
import time

import httpx
import pytest

from ling_local.engines.base import (
    EngineState,
    GenerationRequest,
    GenerationStats,
    Priority,
    SamplingParams,
)
from ling_local.engines.sglang import SGLangEngine, child_info_file
from ling_local.errors import EngineError, EngineNotReady
from tests.sglang.conftest import group_members


def request(engine: SGLangEngine, text: str, finished: list, **sampling) -> GenerationRequest:
    return GenerationRequest(
        prompt=text,
        prompt_ids=engine.tokenize(text),
        sampling=SamplingParams(**{"max_tokens": 12, **sampling}),
        priority=Priority.COMPLETION,
        on_finish=finished.append,
    )


async def collect(engine: SGLangEngine, req: GenerationRequest):
    deltas = [d async for d in engine.stream(req)]
    return "".join(d.text for d in deltas), deltas


def child_requests() -> dict:
    info = json.loads(child_info_file().read_text())
    r = httpx.get(
        info["url"] + "/standin/requests",
        headers={"Authorization": f"Bearer {info['api_key']}"},
        trust_env=False,
    )
    return r.json()


@pytest.fixture
async def engine(standin_profile):
    eng = SGLangEngine(standin_profile(sglang={"speculative_algorithm": "NEXTN"}))
    await eng.start()
    yield eng
    await eng.stop()


async def test_stream_relays_sglangs_incremental_events_as_deltas(engine: SGLangEngine) -> None:
    finished: list[GenerationStats] = []
    req = request(engine, "def add(a, b):\n", finished, max_tokens=20, ignore_eos=True)
    _, deltas = await collect(engine, req)
    last = deltas[-1]
    assert last.finish_reason == "length" and last.stats is not None
    stats = last.stats
    assert stats.completion_tokens == 20 == sum(d.n_tokens for d in deltas)
    assert stats.prompt_tokens == len(req.prompt_ids)
    assert stats.ttft_s and stats.ttft_s > 0 and stats.tpot_s and stats.tpot_s > 0
    # Speculation: several tokens per event, and the last event's stats are kept.
    assert max(d.n_tokens for d in deltas) > 1
    assert stats.verify_steps and stats.accept_length == pytest.approx(20 / stats.verify_steps)
    assert finished == [stats]
    # What SGLang got: the daemon's token ids, a fresh rid, the sampling params by SGLang's names.
    body = child_requests()["requests"][-1]
    assert body["input_ids"] == req.prompt_ids and body["stream"] is True
    assert body["sampling_params"]["max_new_tokens"] == 20
    assert body["sampling_params"]["ignore_eos"] is True
    assert len(body["rid"]) == 32
    # The same prompt again hits the (stand-in's) prefix cache.
    again = request(engine, "def add(a, b):\n", [], max_tokens=4)
    _, deltas = await collect(engine, again)
    assert deltas[-1].stats.cached_tokens > 0
    assert child_requests()["requests"][-1]["rid"] != body["rid"]


async def test_stop_string_never_leaks_a_partial_match(engine: SGLangEngine) -> None:
    free, _ = await collect(engine, request(engine, "x = 1\n", [], max_tokens=24, ignore_eos=True))
    if len(free) < 8:
        pytest.skip("too little text to pick a stop string from")
    stop = free[4:8]
    finished: list = []
    text, deltas = await collect(
        engine, request(engine, "x = 1\n", finished, max_tokens=24, ignore_eos=True, stop=(stop,))
    )
    assert deltas[-1].finish_reason == "stop"
    assert text == free[: free.index(stop)]
    assert len(finished) == 1


async def test_abort_stops_the_generation_in_sglang(engine: SGLangEngine) -> None:
    finished: list = []
    req = request(engine, "while True:\n", finished, max_tokens=5000, ignore_eos=True)
    deltas = []
    t_abort = None
    async for delta in engine.stream(req):
        deltas.append(delta)
        if len(deltas) == 3:
            t_abort = time.perf_counter()
            await engine.abort(req)
    assert deltas[-1].finish_reason == "cancelled"
    assert time.perf_counter() - t_abort < 2.0  # SGLang's own disconnect abort waits 2 s
    assert deltas[-1].stats.completion_tokens < 5000
    assert [s.finish_reason for s in finished] == ["cancelled"]
    assert (
        f"Abort request rid={child_requests()['requests'][-1]['rid']}"
        in engine.log_path.read_text()
    )
    assert child_requests()["running"] == []


async def test_consumer_going_away_aborts_explicitly(engine: SGLangEngine) -> None:
    finished: list = []
    req = request(engine, "for i in x:\n", finished, max_tokens=5000, ignore_eos=True)
    stream = engine.stream(req)
    async for _ in stream:
        break
    await stream.aclose()
    rid = child_requests()["requests"][-1]["rid"]
    assert f"Abort request rid={rid}" in engine.log_path.read_text()
    assert [s.finish_reason for s in finished] == ["cancelled"]
    assert engine.health().running == 0


async def test_health_while_starting_shows_load_progress(standin_profile) -> None:
    eng = SGLangEngine(standin_profile(sglang={"env": {"STANDIN_LOAD_S": "2.0"}}))
    task = asyncio.create_task(eng.start())
    seen = set()
    try:
        while not task.done():
            h = eng.health()
            seen.add((h.state, h.detail.split(" (")[0]))
            with pytest.raises(EngineNotReady):
                eng.stream(request(eng, "x", []) if eng.tokenizer else GenerationRequest("x"))
            await asyncio.sleep(0.05)
        await task
        assert eng.health().state is EngineState.READY
        starting = {d for s, d in seen if s is EngineState.STARTING}
        assert any("loading weights" in d and "shards" in d for d in starting), starting
    finally:
        await eng.stop()


async def test_start_fails_fast_with_the_last_log_lines(standin_profile) -> None:
    eng = SGLangEngine(standin_profile(sglang={"env": {"STANDIN_FAIL_START": "1"}}))
    t0 = time.monotonic()
    with pytest.raises(EngineError) as err:
        await eng.start()
    assert time.monotonic() - t0 < 30
    assert "exited with code 1 during start-up" in err.value.message
    assert "CUDA out of memory" in err.value.message
    assert eng.health().state is EngineState.FAILED
    await eng.stop()
    assert group_members(eng._child.pid) == []


async def test_a_bad_flag_fails_the_start_with_the_parser_error(standin_profile) -> None:
    eng = SGLangEngine(standin_profile(sglang={"args": ["--no-such-flag"]}))
    with pytest.raises(EngineError, match="unrecognized arguments: --no-such-flag"):
        await eng.start()
    await eng.stop()


async def test_crash_ends_streams_in_flight_and_restarts(standin_profile) -> None:
    eng = SGLangEngine(standin_profile(sglang={"env": {"STANDIN_TOKEN_S": "0.01"}}))
    await eng.start()
    try:
        first = eng._child
        old_members = group_members(first.pid)
        assert len(old_members) >= 2  # the server and its worker
        info = json.loads(child_info_file().read_text())
        finished: list = []
        req = request(eng, "import os\n", finished, max_tokens=5000, ignore_eos=True)
        deltas = []
        async for delta in eng.stream(req):
            deltas.append(delta)
            if len(deltas) == 2:
                with pytest.raises(httpx.HTTPError):
                    httpx.post(
                        info["url"] + "/standin/crash",
                        trust_env=False,
                        headers={"Authorization": f"Bearer {info['api_key']}"},
                    )
        assert deltas[-1].finish_reason == "error"
        assert "crashed" in deltas[-1].error and "restarted" in deltas[-1].error
        assert [s.finish_reason for s in finished] == ["error"]
        assert eng.health().state is EngineState.STARTING
        for _ in range(400):
            if eng.health().state is EngineState.READY:
                break
            await asyncio.sleep(0.05)
        assert eng.health().state is EngineState.READY
        assert eng._child is not first
        assert group_members(first.pid) == []  # the crashed server's worker was killed
        _, deltas = await collect(eng, request(eng, "import os\n", [], max_tokens=4))
        assert deltas[-1].finish_reason in ("stop", "length")
    finally:
        await eng.stop()


async def test_too_many_crashes_mark_the_engine_failed(standin_profile) -> None:
    eng = SGLangEngine(standin_profile(sglang={"max_restarts": 0}))
    await eng.start()
    try:
        os.kill(eng._child.pid, 9)
        for _ in range(200):
            if eng.health().state is EngineState.FAILED:
                break
            await asyncio.sleep(0.05)
        assert eng.health().state is EngineState.FAILED
        assert "giving up" in eng.health().detail
    finally:
        await eng.stop()


async def test_the_childs_log_which_holds_its_key_is_private(standin_profile) -> None:
    umask = os.umask(0o022)  # the usual default: files 0644, directories 0755
    eng = SGLangEngine(standin_profile())
    await eng.start()
    os.umask(umask)
    try:
        key = json.loads(child_info_file().read_text())["api_key"]
        assert key in eng.log_path.read_text()  # SGLang logs its ServerArgs, key included
        assert oct(eng.log_path.stat().st_mode)[-3:] == "600"
        assert oct(eng.log_path.parent.stat().st_mode)[-3:] == "700"
    finally:
        await eng.stop()


async def test_stop_leaves_no_process_behind(standin_profile) -> None:
    eng = SGLangEngine(standin_profile())
    await eng.start()
    pgid = eng._child.pid
    assert len(group_members(pgid)) >= 2
    assert child_info_file().is_file() and oct(child_info_file().stat().st_mode)[-3:] == "600"
    await eng.stop()
    assert group_members(pgid) == []
    assert eng.health().state is EngineState.STOPPED
    assert not child_info_file().exists()
