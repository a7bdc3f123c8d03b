"""The remote engine against a real OpenAI-compatible server: our own daemon serving the
embedded model (the session `daemon`), fronted by a second daemon with a remote profile."""

from __future__ import annotations

import re
import socket
import time
from pathlib import Path

import pytest

from ling_local.errors import EngineNotReady
from tests.support import DaemonProcess, start_daemon


def remote_profile(path: Path, base_url: str, **remote) -> Path:
    lines = [
        'name = "remote"',
        "[engine]",
        'kind = "remote"',
        "[model]",
        'path = "served-elsewhere"',
        "[remote]",
        f'base_url = "{base_url}"',
        'api_key_env = "UPSTREAM_KEY"',
        "health_interval_s = 0.5",
    ]
    lines += [f'{k} = "{v}"' for k, v in remote.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def front(daemon: DaemonProcess, tmp_path_factory: pytest.TempPathFactory) -> DaemonProcess:
    home = tmp_path_factory.mktemp("front")
    profile = remote_profile(home / "remote.toml", daemon.url + "/v1", fim="suffix")
    d = start_daemon(profile, home, env={"UPSTREAM_KEY": daemon.token})
    yield d
    d.stop()


def cancelled_count(daemon: DaemonProcess) -> float:
    with daemon.client() as client:
        text = client.metrics()
    found = re.search(r'ling_cancelled_requests_total\{reason="disconnected"\} (\S+)', text)
    return float(found[1]) if found else 0.0


def test_health_and_models_come_from_the_remote_server(front: DaemonProcess) -> None:
    with front.client() as client:
        health = client.health()
        assert health.ready and health.engine == "remote"
        (model,) = client.models()
        assert model.id == "remote" and model.context_length == 2048  # the upstream's


def test_completion_and_chat_match_the_upstream(front: DaemonProcess, daemon: DaemonProcess):
    messages = [{"role": "user", "content": "Write a function that adds two numbers."}]
    with front.client() as via, daemon.client() as direct:
        a = via.complete("def add(a, b):\n", max_tokens=8, temperature=0)
        b = direct.complete("def add(a, b):\n", max_tokens=8, temperature=0)
        assert a.text == b.text and a.finish_reason == b.finish_reason
        assert a.usage.completion_tokens == b.usage.completion_tokens
        assert a.usage.prompt_tokens == b.usage.prompt_tokens
        with via.stream_chat(messages, max_tokens=8, temperature=0) as stream:
            streamed = "".join(chunk.text for chunk in stream)
        assert streamed == direct.chat(messages, max_tokens=8, temperature=0).text


def test_fim_passes_the_suffix_on(front: DaemonProcess, daemon: DaemonProcess) -> None:
    with front.client() as via, daemon.client() as direct:
        a = via.complete("x = 1\n", suffix="\nprint(x)\n", max_tokens=6, temperature=0)
        b = direct.complete("x = 1\n", suffix="\nprint(x)\n", max_tokens=6, temperature=0)
        assert a.text == b.text and a.usage.prompt_tokens == b.usage.prompt_tokens


def test_closing_the_stream_cancels_upstream(front: DaemonProcess, daemon: DaemonProcess):
    before = cancelled_count(daemon)
    with (
        front.client() as client,
        client.stream_complete("import os\n", max_tokens=400, ignore_eos=True) as stream,
    ):
        next(iter(stream))
    deadline = time.monotonic() + 10
    while cancelled_count(daemon) <= before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert cancelled_count(daemon) > before


def test_an_unreachable_server_is_reported_not_ready(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # nothing listens here once closed
    profile = remote_profile(tmp_path / "r.toml", f"http://127.0.0.1:{port}/v1")
    d = start_daemon(profile, tmp_path / "home", env={"UPSTREAM_KEY": "x"}, wait_ready=False)
    try:
        with d.client() as client:
            deadline = time.monotonic() + 30
            while "cannot reach" not in (health := client.health()).detail:
                assert time.monotonic() < deadline, health
                time.sleep(0.1)
            assert health.state == "starting" and f"127.0.0.1:{port}" in health.detail
            with pytest.raises(EngineNotReady, match="cannot reach"):
                client.complete("x", max_tokens=2)
    finally:
        d.stop()
