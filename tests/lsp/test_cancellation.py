"""Work nobody will see is stopped: `$/cancelRequest` and a newer keystroke both close the
HTTP stream, and the daemon cancels the generation in the engine."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from pathlib import Path

import pytest
from lsprotocol import types
from pygls.exceptions import JsonRpcException

from tests.lsp.conftest import (
    StartLsp,
    inline,
    metric,
    open_document,
    stats,
    type_text,
    wait_until,
)
from tests.support import DaemonProcess

# A top-level empty line: a block that only ends at max_lines or two blank lines, so with
# these settings the generation runs for seconds unless it is cancelled.
LONG = {"maxTokens": 1000, "maxLines": 200, "context": {"workspace": False}}
DOC = "import os\n\n\n"


def cancelled_total(daemon: DaemonProcess) -> float:
    with daemon.http() as http:
        return metric(http.get("/metrics").text, "ling_cancelled_requests_total")


def running(daemon: DaemonProcess) -> int:
    with daemon.http() as http:
        return http.get("/health").json()["running"]


def request(client, uri: str, line: int, col: int, msg_id: str) -> asyncio.Future:
    params = types.InlineCompletionParams(
        types.InlineCompletionContext(types.InlineCompletionTriggerKind.Invoked),
        types.TextDocumentIdentifier(uri), types.Position(line, col),
    )  # fmt: skip
    return asyncio.ensure_future(
        client.protocol.send_request_async(
            types.TEXT_DOCUMENT_INLINE_COMPLETION, params, msg_id=msg_id
        )
    )


async def test_cancel_request_stops_the_generation_in_the_daemon(
    start_lsp: StartLsp, workspace: Path, daemon: DaemonProcess
) -> None:
    client = await start_lsp(settings=LONG)
    uri = open_document(client, workspace / "scratch.py", DOC)
    before = cancelled_total(daemon)
    msg_id = str(uuid.uuid4())
    pending = request(client, uri, 3, 0, msg_id)
    await wait_until(lambda: running(daemon) == 1, timeout=20)
    t0 = time.monotonic()
    client.protocol.notify(types.CANCEL_REQUEST, types.CancelParams(id=msg_id))
    with pytest.raises(JsonRpcException):
        await asyncio.wait_for(pending, 5)
    assert time.monotonic() - t0 < 1.0, "the cancelled request did not return promptly"
    await wait_until(lambda: cancelled_total(daemon) > before, timeout=5)
    await wait_until(lambda: running(daemon) == 0, timeout=5)


async def test_a_new_keystroke_supersedes_the_generation_in_flight(
    start_lsp: StartLsp, workspace: Path, daemon: DaemonProcess
) -> None:
    client = await start_lsp(settings=LONG)
    uri = open_document(client, workspace / "scratch.py", DOC)
    before = cancelled_total(daemon)
    first = request(client, uri, 3, 0, "first")
    await wait_until(lambda: running(daemon) == 1, timeout=20)
    type_text(client, uri, 2, 3, 0, "#")  # the user typed on: the old suggestion is stale
    second = request(client, uri, 3, 1, "second")
    t0 = time.monotonic()
    result = await asyncio.wait_for(first, 5)
    assert time.monotonic() - t0 < 1.0
    assert not result.items  # nothing stale reaches the editor
    await wait_until(lambda: cancelled_total(daemon) > before, timeout=5)
    client.protocol.notify(types.CANCEL_REQUEST, types.CancelParams(id="second"))
    with contextlib.suppress(JsonRpcException):  # a one-line answer may beat the cancel
        await asyncio.wait_for(second, 5)
    await wait_until(lambda: running(daemon) == 0, timeout=5)


async def test_a_long_block_shows_its_first_lines_while_the_rest_generates(
    start_lsp: StartLsp, workspace: Path, daemon: DaemonProcess
) -> None:
    client = await start_lsp(settings={**LONG, "firstLinesMs": 100})
    uri = open_document(client, workspace / "scratch.py", DOC)
    items = await asyncio.wait_for(inline(client, uri, 3, 0), 60)
    st = await stats(client)
    assert st["early"] == 1, "the block finished before any line was complete"
    assert len(items) == 1 and items[0].insert_text.strip()
    assert running(daemon) == 1  # the rest is still coming, for the next keystrokes
    client.text_document_did_close(
        types.DidCloseTextDocumentParams(types.TextDocumentIdentifier(uri))
    )
    await wait_until(lambda: running(daemon) == 0, timeout=5)  # closing cancels it
