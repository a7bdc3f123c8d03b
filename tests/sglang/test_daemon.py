"""The real daemon (`python -m ling_local serve`) on an sglang profile whose child is the
protocol-level stand-in: completion, chat, cancellation and shutdown end to end."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest

from ling_local.errors import GenerationCancelled
from tests.sglang.conftest import group_members, write_standin_profile
from tests.support import DaemonProcess, start_daemon


@pytest.fixture(scope="module")
def sgl_daemon(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> DaemonProcess:
    home = tmp_path_factory.mktemp("sgl-daemon")
    profile = write_standin_profile(
        home / "standin.toml", model_dir, env={"STANDIN_TOKEN_S": "0.005"}
    )
    daemon = start_daemon(profile, home)
    yield daemon
    daemon.stop()


def child_info(daemon: DaemonProcess) -> dict:
    return json.loads((daemon.home / "run" / "sglang.json").read_text())


def child_log(daemon: DaemonProcess) -> str:
    return Path(child_info(daemon)["log"]).read_text()


def wait_for(predicate, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


def test_the_sglang_key_is_on_no_command_line_and_sglang_refuses_requests_without_it(
    sgl_daemon: DaemonProcess,
) -> None:
    info = child_info(sgl_daemon)
    key = info["api_key"].encode()
    ours = [sgl_daemon.process.pid, *group_members(info["pid"])]
    assert len(ours) >= 3  # the daemon, the server, its worker
    for entry in Path("/proc").iterdir():  # every process this user can see, ours included
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            assert key not in cmdline, f"pid {entry.name}: {cmdline[:200]!r}"
    assert not list((sgl_daemon.home / "run").glob("sglang-*.yaml"))  # read, then deleted
    body = {"text": "x", "sampling_params": {"max_new_tokens": 1}}
    refused = httpx.post(info["url"] + "/generate", json=body, trust_env=False)
    assert refused.status_code == 401
    served = httpx.post(
        info["url"] + "/generate",
        json=body,
        headers={"Authorization": f"Bearer {info['api_key']}"},
        trust_env=False,
    )
    assert served.status_code == 200


def test_health_and_models_report_the_sglang_engine(sgl_daemon: DaemonProcess) -> None:
    with sgl_daemon.client() as client:
        health = client.health()
        assert health.ready and health.engine == "sglang" and health.model == "standin"
        (model,) = client.models()
        assert model.engine == "sglang" and model.context_length == 2048


def test_completion_streamed_matches_non_streamed(sgl_daemon: DaemonProcess) -> None:
    with sgl_daemon.client() as client:
        whole = client.complete("def add(a, b):\n", max_tokens=10, ignore_eos=True)
        assert whole.finish_reason == "length" and whole.usage.completion_tokens == 10
        assert whole.timings is not None and whole.timings.ttft_ms > 0
        with client.stream_complete("def add(a, b):\n", max_tokens=10, ignore_eos=True) as s:
            text = "".join(chunk.text for chunk in s)
        assert text == whole.text
        assert s.result().usage.cached_tokens > 0  # the same prompt again: a prefix-cache hit


def test_requests_one_after_another_share_one_connection_to_sglang(
    sgl_daemon: DaemonProcess,
) -> None:
    """The scheduler stops reading at the finishing delta; the daemon still reads the
    body's tail (off the token path) so the next request reuses the keep-alive connection
    instead of paying for a new one on its TTFT."""
    info = child_info(sgl_daemon)
    standin = httpx.Client(
        base_url=info["url"],
        headers={"Authorization": f"Bearer {info['api_key']}"},
        trust_env=False,
    )
    before = len(standin.get("/standin/requests").json()["peers"])
    body = {"prompt": list(range(5, 200)), "max_tokens": 2, "ignore_eos": True, "stream": True}
    with sgl_daemon.http() as http:
        for _ in range(12):
            with http.stream("POST", "/v1/completions", json=body) as response:
                assert response.status_code == 200
                assert response.read().endswith(b"data: [DONE]\n\n")
    peers = standin.get("/standin/requests").json()["peers"][before:]
    standin.close()
    # Reused, not one per request (a drain still running when the next request comes can
    # add one connection to the pool under load; closing them unread made ~every second
    # request connect anew).
    assert len(peers) == 12 and len(set(peers)) <= 3, peers


def test_fill_in_the_middle_and_chat(sgl_daemon: DaemonProcess) -> None:
    with sgl_daemon.client() as client:
        plain = client.complete("x = 1\n", max_tokens=4)
        fim = client.complete("x = 1\n", suffix="\nprint(x)\n", max_tokens=4)
        assert fim.usage.prompt_tokens >= plain.usage.prompt_tokens + 3
        reply = client.chat([{"role": "user", "content": "Add two numbers."}], max_tokens=6)
        assert reply.finish_reason in ("stop", "length") and reply.usage.completion_tokens <= 6


def test_response_format_reaches_sglangs_grammar_backend(sgl_daemon: DaemonProcess) -> None:
    """SGLang's /generate takes the schema as the string `sampling_params.json_schema`
    (json_object is the schema {"type": "object"}, as SGLang's own OpenAI layer sends it);
    a schema that is not a JSON schema is a 400 here and never reaches SGLang."""
    info = child_info(sgl_daemon)
    standin = httpx.Client(
        base_url=info["url"],
        headers={"Authorization": f"Bearer {info['api_key']}"},
        trust_env=False,
    )
    schema = {
        "type": "object",
        "properties": {"kind": {"enum": ["a", "b"]}, "items": {"type": "array"}},
        "required": ["kind"],
    }
    before = len(standin.get("/standin/requests").json()["requests"])
    with sgl_daemon.http() as http:
        for body in (
            {
                "messages": [{"role": "user", "content": "JSON please"}],
                "max_tokens": 4,
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "r", "schema": schema},
                },
            },
            {"prompt": "x = ", "max_tokens": 4, "response_format": {"type": "json_object"}},
        ):
            path = "/v1/chat/completions" if "messages" in body else "/v1/completions"
            assert http.post(path, json=body).status_code == 200
        bad = http.post(
            "/v1/completions",
            json={
                "prompt": "x = ",
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "r", "schema": {"type": "foo"}},
                },
            },
        )
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "response_format"
    sent = standin.get("/standin/requests").json()["requests"][before:]
    standin.close()
    assert [json.loads(r["sampling_params"]["json_schema"]) for r in sent] == [
        schema,
        {"type": "object"},
    ]


def test_closing_a_stream_aborts_it_inside_sglang(sgl_daemon: DaemonProcess) -> None:
    with sgl_daemon.client() as client:
        with client.stream_complete("while True:\n", max_tokens=2000, ignore_eos=True) as s:
            next(iter(s))
        assert client.health().state == "ready"
    assert wait_for(lambda: child_log(sgl_daemon).count("Abort request rid=") >= 1)
    assert wait_for(lambda: 'reason="disconnected"' in _metrics(sgl_daemon))


def _metrics(daemon: DaemonProcess) -> str:
    with daemon.client() as client:
        return client.metrics()


def _disconnects(daemon: DaemonProcess) -> float:
    prefix = 'ling_cancelled_requests_total{reason="disconnected"} '
    lines = [line for line in _metrics(daemon).splitlines() if line.startswith(prefix)]
    return float(lines[0].removeprefix(prefix)) if lines else 0.0


async def test_supersede_and_completion_beside_a_running_chat(sgl_daemon: DaemonProcess) -> None:
    async with sgl_daemon.async_client() as client:
        chat = await client.stream_chat(
            [{"role": "user", "content": "Write a long story."}], max_tokens=400, ignore_eos=True
        )
        chat_chunks = chat.__aiter__()
        await chat_chunks.__anext__()
        # A completion does not wait for the running chat: SGLang batches them.
        t0 = time.perf_counter()
        done = await client.complete("import os\n", max_tokens=8, ignore_eos=True)
        assert done.usage.completion_tokens == 8
        assert time.perf_counter() - t0 < 400 * 0.005
        # A newer completion for the same document supersedes the older one.
        old = await client.stream_complete(
            "def f():\n", max_tokens=2000, ignore_eos=True, key="doc.py"
        )
        old_chunks = old.__aiter__()
        await old_chunks.__anext__()
        new = await client.complete("def f(x):\n", max_tokens=4, key="doc.py")
        assert new.finish_reason in ("stop", "length")
        with pytest.raises(GenerationCancelled):
            async for _ in old_chunks:
                pass
        await chat.aclose()
    log_text = child_log(sgl_daemon)
    assert log_text.count("Abort request rid=") >= 2


def test_a_crash_is_a_clean_error_then_the_daemon_serves_again(
    sgl_daemon: DaemonProcess,
) -> None:
    info = child_info(sgl_daemon)
    disconnects = _disconnects(sgl_daemon)
    body = {"prompt": "import sys\n", "max_tokens": 2000, "ignore_eos": True, "stream": True}
    with sgl_daemon.http() as http, http.stream("POST", "/v1/completions", json=body) as stream:
        lines = stream.iter_lines()
        assert next(line for line in lines if line).startswith("data: {")
        with pytest.raises(httpx.HTTPError):  # the stand-in exits inside this request
            httpx.post(
                info["url"] + "/standin/crash",
                trust_env=False,
                headers={"Authorization": f"Bearer {info['api_key']}"},
            )
        events = [line for line in lines if line]
    # The stream ends with an error event the client can read, then [DONE].
    assert events[-1] == "data: [DONE]"
    error = json.loads(events[-2].removeprefix("data: "))["error"]
    assert "crashed" in error["message"]
    assert _disconnects(sgl_daemon) == disconnects  # a failure, not a client that left
    with sgl_daemon.client() as client:
        assert client.health().state == "starting"
        assert client.wait_ready(timeout=60).ready
        assert child_info(sgl_daemon)["pid"] != info["pid"]
        again = client.complete("import sys\n", max_tokens=4)
        assert again.finish_reason in ("stop", "length")


def test_sigterm_stops_the_child_process_group(model_dir: Path, tmp_path: Path) -> None:
    profile = write_standin_profile(tmp_path / "p.toml", model_dir, name="short")
    daemon = start_daemon(profile, tmp_path / "home")
    pgid = json.loads((daemon.home / "run" / "sglang.json").read_text())["pid"]
    assert len(group_members(pgid)) >= 2
    assert daemon.stop() in (0, -15)  # uvicorn re-raises SIGTERM after a graceful stop
    assert wait_for(lambda: group_members(pgid) == [], timeout=5)


def test_start_failure_shows_in_health_with_the_log_tail(model_dir: Path, tmp_path: Path) -> None:
    profile = write_standin_profile(
        tmp_path / "p.toml", model_dir, name="broken", env={"STANDIN_FAIL_START": "1"}
    )
    with pytest.raises(Exception, match="CUDA out of memory"):
        start_daemon(profile, tmp_path / "home", timeout=60)
