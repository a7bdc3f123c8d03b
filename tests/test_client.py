"""The SDK: discovery, sync and async, streaming, cancellation, typed errors, unix socket."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from ling_local import (
    AsyncClient,
    AuthenticationError,
    Client,
    ContextLengthExceeded,
    DaemonUnavailable,
    RequestError,
)
from tests.support import DaemonProcess, start_daemon


def test_client_finds_the_daemon_through_its_files(daemon: DaemonProcess, monkeypatch) -> None:
    monkeypatch.setenv("LING_LOCAL_HOME", str(daemon.home))
    with Client() as client:
        assert client.base_url == daemon.url
        assert client.health().ready
        out = client.complete("def square(x):\n", max_tokens=6)
    assert out.finish_reason in ("stop", "length")
    assert out.usage.prompt_tokens > 0
    assert out.timings is not None and out.timings.ttft_ms is not None


def test_env_overrides_discovery(daemon: DaemonProcess, monkeypatch) -> None:
    monkeypatch.setenv("LING_LOCAL_URL", daemon.url)
    monkeypatch.setenv("LING_LOCAL_TOKEN", daemon.token)
    with Client() as client:
        assert [m.id for m in client.models()] == ["test"]


def test_stream_chunks_add_up_and_report_usage(daemon: DaemonProcess) -> None:
    with daemon.client() as client:
        whole = client.complete("for i in range(3):\n", max_tokens=10, temperature=0)
        with client.stream_complete("for i in range(3):\n", max_tokens=10, temperature=0) as s:
            chunks = list(s)
        assert "".join(c.text for c in chunks) == whole.text == s.text
        assert s.finish_reason == whole.finish_reason
        assert s.usage.completion_tokens == whole.usage.completion_tokens
        assert s.first_chunk_s is None or s.first_chunk_s > 0


HEADERS_DELAY_S = 0.3
"""Added before the response headers reach the client (a slow network, a busy daemon)."""


class SlowHeaders(httpx.HTTPTransport):
    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        time.sleep(HEADERS_DELAY_S)
        return response


class AsyncSlowHeaders(httpx.AsyncHTTPTransport):
    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await super().handle_async_request(request)
        await asyncio.sleep(HEADERS_DELAY_S)
        return response


def _check_ttft(stream) -> None:
    """The client's TTFT covers the whole wait: sending, the headers, the daemon's queue and
    the engine's own time to the first token."""
    assert stream.first_chunk_s is not None and stream.timings is not None
    assert stream.first_chunk_s >= HEADERS_DELAY_S
    engine_s = (stream.timings.ttft_ms + stream.timings.queue_ms) / 1000
    assert stream.first_chunk_s >= engine_s


def test_first_chunk_time_counts_from_before_the_request_is_sent(daemon: DaemonProcess) -> None:
    with daemon.client(transport=SlowHeaders()) as client:
        stream = client.stream_complete("def f(x):\n", max_tokens=32, ignore_eos=True)
        stream.result()
    _check_ttft(stream)


async def test_async_first_chunk_time_counts_from_before_the_request_is_sent(
    daemon: DaemonProcess,
) -> None:
    async with daemon.async_client(transport=AsyncSlowHeaders()) as client:
        stream = await client.stream_chat(
            [{"role": "user", "content": "hi"}], max_tokens=32, ignore_eos=True
        )
        async with stream:
            await stream.result()
    _check_ttft(stream)


def test_chat_stream_result(daemon: DaemonProcess) -> None:
    with daemon.client() as client:
        result = client.stream_chat(
            [{"role": "user", "content": "hello"}], max_tokens=5, temperature=0
        ).result()
    assert result.usage.completion_tokens <= 5
    assert result.finish_reason in ("stop", "length")


async def test_async_client_streams_and_cancels(daemon: DaemonProcess) -> None:
    async with daemon.async_client() as client:
        stream = await client.stream_complete("x = [", max_tokens=500, ignore_eos=True)
        got = []
        async for chunk in stream:
            got.append(chunk)
            if len(got) == 3:
                break
        await stream.aclose()
        for _ in range(200):
            h = await client.health()
            if h.engine_running == 0:
                break
        assert h.engine_running == 0
        out = await client.chat([{"role": "user", "content": "hi"}], max_tokens=3)
    assert out.usage.completion_tokens <= 3


def test_typed_errors(daemon: DaemonProcess) -> None:
    with Client(daemon.url, "wrong-token") as bad, pytest.raises(AuthenticationError):
        bad.models()
    with daemon.client() as client:
        with pytest.raises(ContextLengthExceeded):
            client.complete("x = 1\n" * 3000)
        with pytest.raises(RequestError, match="max_tokens"):
            client.complete("x", max_tokens=10**9)
        with pytest.raises(RequestError):
            list(client.stream_complete("x", max_tokens=-3))


def test_no_daemon_is_a_clear_error() -> None:
    with (
        Client("http://127.0.0.1:9", "t") as client,
        pytest.raises(DaemonUnavailable, match="ling-local serve"),
    ):
        client.health()


def test_unix_socket_daemon(profile_path, tmp_path) -> None:
    sock = tmp_path / "run" / "ling.sock"
    sock.parent.mkdir(parents=True)
    d = start_daemon(profile_path, tmp_path / "home", "--uds", str(sock))
    try:
        assert d.url == f"unix:{sock}"
        with d.client() as client:
            assert client.health().ready
            assert client.complete("a = ", max_tokens=2).usage.completion_tokens <= 2
    finally:
        d.stop()
    assert not sock.exists()


async def test_async_client_over_unix_socket(profile_path, tmp_path) -> None:
    sock = tmp_path / "s.sock"
    d = start_daemon(profile_path, tmp_path / "home", "--uds", str(sock))
    try:
        async with AsyncClient(d.url, d.token) as client:
            stream = await client.stream_chat([{"role": "user", "content": "x"}], max_tokens=3)
            result = await stream.result()
        assert result.usage.completion_tokens <= 3
    finally:
        d.stop()
