"""Replays an editing session through a language server over stdio, as an editor would.

The editor modelled is VS Code's: every keystroke sends `didChange`, cancels the inline
completion request still pending (`$/cancelRequest`) and sends a new one, and shows what
comes back for the latest request. When the ghost text on screen is exactly what the user
is about to type, the user presses Tab: the text is inserted at once, the item's command
runs, and the rest of the session moves earlier by the time the typing would have taken.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from lsprotocol import types
from pygls.lsp.client import LanguageClient

from ling_local.bench.session import Session, apply

__all__ = ["ReplayResult", "replay"]


@dataclass
class ReplayResult:
    keystrokes: int = 0
    requests: int = 0
    cancelled_by_editor: int = 0
    answered: int = 0
    answered_empty: int = 0
    accepted: int = 0
    accepted_chars: int = 0
    latencies_ms: list[float] = field(default_factory=list)
    """Keystroke to ghost text, for every suggestion the editor showed."""
    wall_s: float = 0.0
    messages: list[str] = field(default_factory=list)


@dataclass
class _Pending:
    msg_id: str
    sent: float
    version: int
    task: asyncio.Task[Any] | None = None
    answered: bool = False


class _Editor:
    def __init__(self, client: LanguageClient, uri: str, session: Session) -> None:
        self.client, self.uri = client, uri
        self.text, self.cursor, self.version = session.initial, session.cursor, 1
        self.result = ReplayResult()
        self.latest: _Pending | None = None
        self.ghost: tuple[int, str, Any] | None = None
        """(document version, text, command) of the ghost text on screen."""

    def position(self, offset: int) -> types.Position:
        line = self.text.count("\n", 0, offset)
        col = offset - (self.text.rfind("\n", 0, offset) + 1)
        return types.Position(line, len(self.text[offset - col : offset].encode("utf-16-le")) // 2)

    def edit(self, op: str, arg: str | int) -> None:
        """Apply one event and send it as an incremental didChange."""
        if op == "move":
            self.text, self.cursor = apply(self.text, self.cursor, op, arg)
            return
        first = max(0, self.cursor - int(arg)) if op == "backspace" else self.cursor
        deleted = types.Range(self.position(first), self.position(self.cursor))  # old text
        self.text, self.cursor = apply(self.text, self.cursor, op, arg)
        self.version += 1
        self.ghost = None
        change = types.TextDocumentContentChangePartial(
            range=deleted, text=str(arg) if op == "type" else ""
        )
        self.client.text_document_did_change(
            types.DidChangeTextDocumentParams(
                types.VersionedTextDocumentIdentifier(version=self.version, uri=self.uri), [change]
            )
        )

    def request(self) -> None:
        if self.latest is not None and not self.latest.answered:
            self.client.protocol.notify(
                types.CANCEL_REQUEST, types.CancelParams(id=self.latest.msg_id)
            )
            self.result.cancelled_by_editor += 1
        params = types.InlineCompletionParams(
            types.InlineCompletionContext(types.InlineCompletionTriggerKind.Automatic),
            types.TextDocumentIdentifier(self.uri), self.position(self.cursor),
        )  # fmt: skip
        pending = _Pending(str(uuid.uuid4()), time.perf_counter(), self.version)
        future = self.client.protocol.send_request_async(
            types.TEXT_DOCUMENT_INLINE_COMPLETION, params, msg_id=pending.msg_id
        )
        pending.task = asyncio.ensure_future(self._answer(pending, future))
        self.latest = pending
        self.result.requests += 1

    async def _answer(self, pending: _Pending, future: Any) -> None:
        try:
            result = await future
        except Exception:  # cancelled by us, or an error the server reported
            pending.answered = True
            return
        pending.answered = True
        if self.latest is not pending or pending.version != self.version:
            return
        self.result.answered += 1
        items = getattr(result, "items", None) or []
        if not items:
            self.result.answered_empty += 1
            return
        self.result.latencies_ms.append((time.perf_counter() - pending.sent) * 1000)
        self.ghost = (self.version, items[0].insert_text, items[0].command)


def _acceptable(editor: _Editor, events: list, i: int) -> int | None:
    """Index after the typing events the ghost text on screen covers exactly, if any."""
    if editor.ghost is None or editor.ghost[0] != editor.version or len(editor.ghost[1]) < 2:
        return None
    want, typed, k = editor.ghost[1], "", i
    while k < len(events) and events[k][1] == "type" and len(typed) < len(want):
        typed += events[k][2]
        k += 1
    return k if typed == want else None


async def replay(
    client: LanguageClient,
    uri: str,
    session: Session,
    *,
    speed: float = 1.0,
    accept: bool = True,
    limit_s: float | None = None,
    on_event: Callable[[int], None] | None = None,
) -> ReplayResult:
    editor = _Editor(client, uri, session)
    events = session.events
    start, shift_ms, i = time.perf_counter(), 0.0, 0
    while i < len(events):
        t_ms = events[i][0] - shift_ms
        if limit_s is not None and t_ms / 1000 > limit_s:
            break
        delay = start + t_ms / 1000 / speed - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        k = _acceptable(editor, events, i) if accept else None
        if k is not None:
            _, text, command = editor.ghost
            editor.edit("type", text)
            await client.workspace_execute_command_async(
                types.ExecuteCommandParams(command.command, command.arguments)
            )
            editor.result.accepted += 1
            editor.result.accepted_chars += len(text)
            shift_ms += events[k - 1][0] - events[i][0]
            editor.request()
            if on_event:
                on_event(k - i)
            i = k
            continue
        _, op, arg = events[i]
        editor.edit(op, arg)
        editor.result.keystrokes += 1
        if op != "move":
            editor.request()
        if on_event:
            on_event(1)
        i += 1
    if editor.latest is not None and editor.latest.task is not None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(editor.latest.task), 15)
    editor.result.wall_s = time.perf_counter() - start
    return editor.result
