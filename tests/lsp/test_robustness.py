"""What editors and users get wrong must not take the server down, and what the user can
fix is told once, clearly."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import time
from concurrent.futures import Future
from pathlib import Path

import pytest
from lsprotocol import types
from pygls.exceptions import JsonRpcException, JsonRpcMethodNotFound

from tests.lsp.conftest import StartLsp, inline, open_document, stats, wait_until
from tests.support import DaemonProcess, child_env


async def test_malformed_messages_and_unknown_methods_leave_it_running(
    start_lsp: StartLsp, workspace: Path
) -> None:
    client = await start_lsp()
    uri = open_document(client, workspace / "main.py")
    stdin = client._server.stdin
    for body in (b"{this is not json", b'{"jsonrpc": "2.0", "id": 99, "method": 42}', b"[]"):
        stdin.write(b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    await stdin.drain()
    with pytest.raises(JsonRpcMethodNotFound):
        await client.protocol.send_request_async("ling/noSuchMethod", {"x": 1})
    client.protocol.notify("ling/noSuchNotification", {"x": 1})
    with pytest.raises(JsonRpcException):  # a position that is not a position
        await send_raw(client, {
            "jsonrpc": "2.0", "id": "bad-params", "method": types.TEXT_DOCUMENT_INLINE_COMPLETION,
            "params": {"textDocument": {"uri": uri}, "position": "here",
                       "context": {"triggerKind": 1}},
        })  # fmt: skip
    with pytest.raises(JsonRpcException):  # a document the editor never opened
        await inline(client, "file:///nowhere/ghost.py", 0, 0)
    # still serving
    assert (await stats(client))["requests"] >= 0
    await inline(client, uri, 9, 4)
    assert client._server.returncode is None


def send_raw(client, message: dict) -> asyncio.Future:
    """Send a request exactly as given (the typed client would refuse to)."""
    future: Future = Future()
    client.protocol._request_futures[message["id"]] = future
    body = json.dumps(message).encode()
    client._server.stdin.write(b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    return asyncio.wrap_future(future)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_no_daemon_is_told_once_with_the_fix(
    start_lsp: StartLsp, workspace: Path, tmp_path: Path
) -> None:
    env = child_env(tmp_path / "home", LING_LOCAL_URL=f"http://127.0.0.1:{_closed_port()}")
    client = await start_lsp(env=env)
    uri = open_document(client, workspace / "main.py")
    message = await wait_until(lambda: client.messages, timeout=10)
    assert "ling-local serve" in message[0].message
    assert message[0].type == types.MessageType.Warning
    t0 = time.monotonic()
    for _ in range(3):
        assert await inline(client, uri, 9, 4) == []
    assert time.monotonic() - t0 < 3.0  # fails fast, never hangs the editor
    assert len(client.messages) == 1  # told once, not per keystroke
    assert (await stats(client))["failed"] == 3


async def test_starts_a_daemon_when_none_runs(
    start_lsp: StartLsp, workspace: Path, tmp_path: Path, daemon: DaemonProcess
) -> None:
    home = tmp_path / "fresh-home"
    from tests.lsp.conftest import daemon_profile

    client = await start_lsp(env=child_env(home), args=(),
                             profile=str(daemon_profile(daemon)))  # fmt: skip
    runtime = home / "run" / "daemon.json"
    try:
        await wait_until(lambda: runtime.is_file(), timeout=60)
        uri = open_document(client, workspace / "main.py")
        await wait_until(
            lambda: stats(client), timeout=1
        )  # the server answers while the daemon loads
        ready = await wait_until(_daemon_ready(client), timeout=120)
        assert ready["daemon_profile"] == "test"
        await inline(client, uri, 9, 4)
        assert (await stats(client))["generations"] >= 1
        tokens = [t for t, reports in client.progress_reports.items() if reports]
        titles = [
            r.title
            for t in tokens
            for r in client.progress_reports[t]
            if isinstance(r, types.WorkDoneProgressBegin)
        ]
        assert "ling-local: starting the daemon" in titles
    finally:
        if runtime.is_file():
            pid = json.loads(runtime.read_text())["pid"]
            os.kill(pid, signal.SIGTERM)
            await wait_until(lambda: not _alive(pid), timeout=20)


def _daemon_ready(client):
    async def check():
        st = await stats(client)
        return st if st["daemon_profile"] else None

    return check


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie until its parent (the language server, still running) reaps it
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return False


async def test_settings_from_the_editor(start_lsp: StartLsp, workspace: Path) -> None:
    client = await start_lsp(settings={"enable": False})
    uri = open_document(client, workspace / "main.py")
    assert await inline(client, uri, 9, 4) == []
    assert (await stats(client))["gated"] == 1
    client.workspace_did_change_configuration(
        types.DidChangeConfigurationParams(settings={"ling-local": {"enable": True}})
    )
    await inline(client, uri, 9, 4)
    assert (await stats(client))["generations"] == 1
    client.workspace_did_change_configuration(
        types.DidChangeConfigurationParams(settings={"ling-local": {"maxLines": 0}})
    )
    warning = await wait_until(lambda: client.messages, timeout=5)
    assert "maxLines" in warning[0].message
    await inline(client, uri, 9, 4)  # the previous settings are still in force
    assert (await stats(client))["gated"] == 1


async def test_workspace_is_indexed_in_the_background_with_progress(
    start_lsp: StartLsp, workspace: Path
) -> None:
    client = await start_lsp()
    ready = await wait_until(_index_ready(client), timeout=60)
    version = ready["index_version"]
    reports = [r for rs in client.progress_reports.values() for r in rs]
    assert any(
        isinstance(r, types.WorkDoneProgressBegin)
        and r.title == "ling-local: indexing the workspace"
        for r in reports
    )
    assert any(isinstance(r, types.WorkDoneProgressEnd) for r in reports)
    path = workspace / "geometry" / "circles.py"
    path.write_text("def circumference(r):\n    return 2 * 3.14159 * r\n")
    client.text_document_did_save(
        types.DidSaveTextDocumentParams(types.TextDocumentIdentifier(path.as_uri()))
    )
    await wait_until(_index_version_above(client, version), timeout=30)


def _index_ready(client):
    async def check():
        st = await stats(client)
        return st if st["index_ready"] else None

    return check


def _index_version_above(client, version: int):
    async def check():
        return (await stats(client))["index_version"] > version

    return check
