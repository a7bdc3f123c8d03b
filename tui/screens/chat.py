"""The main screen: conversations on the left, the chat on the right, the prompt below.

A reply streams in a worker (``exclusive``: one reply at a time, like the engine). Esc, a
conversation switch or a new conversation cancel it by closing the stream, which cancels
the generation in the daemon, and the exchange is rolled back: the prompt goes back into
the input for editing, and the sent message leaves the store.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import ClassVar

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import Footer, Header, Input

from ling_local.client import Message
from ling_local.errors import LingLocalError
from tui.daemon import DaemonStatus
from tui.messages import ConversationAction, ConversationSelected, PromptSubmitted
from tui.screens.conversation_actions import ConversationActions
from tui.stats import LiveMeter, ReplyStats
from tui.store import ChatSettings, Conversation, ConversationStore, StoredMessage
from tui.widgets.chat_log import ChatLog
from tui.widgets.chat_message import ChatMessage
from tui.widgets.framed_stream import FRAME_S
from tui.widgets.prompt_input import PromptInput
from tui.widgets.sidebar import Sidebar
from tui.widgets.status_bar import StatusBar

__all__ = ["ChatScreen", "chat_payload", "request_options", "title_from"]

SETTLE_S = 1.0
"""Longest a reply's footer and sidebar changes wait for its first token: rebuilding the
footer takes a frame or more of work, which would delay a first token due meanwhile."""


def title_from(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else "New conversation"
    return line if len(line) <= 48 else line[:47] + "…"


def chat_payload(settings: ChatSettings, history: list[StoredMessage]) -> list[Message]:
    system = [{"role": "system", "content": settings.system_prompt}]
    return (system if settings.system_prompt else []) + [
        {"role": m.role, "content": m.content} for m in history
    ]


def request_options(settings: ChatSettings) -> dict[str, object]:
    options: dict[str, object] = {"priority": "chat"}
    if settings.temperature is not None:
        options["temperature"] = settings.temperature
    if settings.max_tokens is not None:
        options["max_tokens"] = settings.max_tokens
    if settings.ignore_eos:
        options["ignore_eos"] = True
    return options


@dataclass(slots=True)
class ReplyInFlight:
    model: str
    text: str
    """The prompt the reply answers (given back to the input if the reply is rolled back)."""
    messages: list[Message]
    """What was sent: the system prompt, the history and the prompt."""
    settings: ChatSettings
    widget: ChatMessage
    meter: LiveMeter
    conversation: Conversation | None = None
    prompt: StoredMessage | None = None
    """The prompt as stored: set once the request is on its way (the store write waits)."""
    created: bool = False
    """The conversation was created by this prompt (the sidebar has not listed it yet)."""
    settled: bool = False
    """The screen work that waits for the first token (footer, sidebar) has been done."""


class ChatScreen(ConversationActions, Screen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "stop", "Stop"),
        Binding("ctrl+n", "new_conversation", "New"),
        Binding("ctrl+r", "regenerate", "Regen"),
        Binding("ctrl+e", "edit_last", "Edit", priority=True),
        Binding("ctrl+s", "settings", "Settings"),
        Binding("ctrl+o", "export", "Export", show=False),
        Binding("f2", "rename", "Rename", show=False),
        Binding("ctrl+f", "search", "Search", show=False),
        Binding("ctrl+b", "toggle_sidebar", "Sidebar", show=False),
    ]

    def __init__(self, store: ConversationStore) -> None:
        super().__init__()
        self.store = store
        self.conversation: Conversation | None = None
        self.history: list[StoredMessage] = []
        self.draft_settings = ChatSettings()
        self.reply: ReplyInFlight | None = None
        self.editing: StoredMessage | None = None
        self.drafts: dict[int | None, str] = {}
        """What the input held when each conversation was left (None: the new one)."""

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="main"):
            yield Sidebar(id="sidebar")
            with Vertical(id="chat"):
                yield ChatLog(id="log")
                yield PromptInput(id="prompt")
        yield StatusBar(id="status")
        yield Footer()

    @property
    def log_view(self) -> ChatLog:
        return self.query_one("#log", ChatLog)

    @property
    def prompt(self) -> PromptInput:
        return self.query_one("#prompt", PromptInput)

    def on_mount(self) -> None:
        self.watch(self.app, "daemon_status", self._status_changed, init=False)
        latest = self.store.list()
        self.open_conversation(latest[0].id if latest else None)
        self.prompt.focus()

    def _status_changed(self, status: DaemonStatus) -> None:
        self.log_view.update_status(status)

    # ----------------------------------------------------------------- conversations
    def open_conversation(self, conversation_id: int | None) -> None:
        self._cancel_reply()  # gives its prompt back to the input: a draft of this conversation
        leaving = self.conversation.id if self.conversation else None
        if self.editing is None:  # an edit left unfinished is dropped, not kept as a draft
            self.drafts[leaving] = self.prompt.text
        self._leave_edit()
        self.prompt.load_text(self.drafts.pop(conversation_id, ""))
        self.conversation = self.store.get(conversation_id) if conversation_id else None
        self.history = self.store.messages(self.conversation.id) if self.conversation else []
        self.draft_settings = ChatSettings()
        self.sub_title = self.conversation.title if self.conversation else "New conversation"
        self.log_view.show(self.history, self.app.daemon_status)
        last = next((m.stats for m in reversed(self.history) if m.stats), None)
        self.query_one(StatusBar).show_numbers(last.short() if last else "")
        self.refresh_sidebar()

    def refresh_sidebar(self) -> None:
        sidebar = self.query_one(Sidebar)
        current = self.conversation.id if self.conversation else None
        sidebar.show(self.store.list(sidebar.query_text), current)

    @on(ConversationSelected)
    def _selected(self, event: ConversationSelected) -> None:
        if not self.conversation or event.conversation_id != self.conversation.id:
            self.open_conversation(event.conversation_id)
        self.prompt.focus()

    @on(Input.Changed, "#search")
    def _search(self) -> None:
        self.refresh_sidebar()

    @on(ConversationAction)
    def _conversation_action(self, event: ConversationAction) -> None:
        {"rename": self.action_rename, "delete": self.action_delete, "export": self.action_export}[
            event.action
        ](event.conversation_id)

    # ----------------------------------------------------------------- sending
    @on(PromptSubmitted)
    async def _submitted(self, event: PromptSubmitted) -> None:
        text = event.text.strip()
        if not text:
            return
        if self.reply is not None:
            self.notify("A reply is still streaming; Esc stops it.", severity="warning")
            return
        status = self.app.daemon_status
        if status.state in ("down", "failed", "error"):
            self.notify(status.advice(), title="Cannot send", severity="error", timeout=8)
            return
        if self.editing is not None and self.conversation is not None:
            self._drop_from(self.editing.id)
            self._leave_edit()
        settings = self.conversation.settings if self.conversation else self.draft_settings
        messages = [*chat_payload(settings, self.history), {"role": "user", "content": text}]
        reply = self._start_reply(text, messages, settings)
        # Let the worker send the request before the store write (an fsync) and the screen
        # work below: they then overlap the engine's prefill instead of preceding it.
        await asyncio.sleep(0)
        if self.reply is not reply:  # it failed at once (and gave the prompt back)
            return
        if self.conversation is None:
            self.conversation, message = self.store.start(title_from(text), settings, text)
            reply.created = True
        else:
            message = self.store.add_message(self.conversation.id, "user", text)
        reply.conversation, reply.prompt = self.conversation, message
        self.history.append(message)
        self.log_view.add(ChatMessage("user", text, message_id=message.id), before=reply.widget)
        self.prompt.load_text("")

    def _start_reply(
        self,
        text: str,
        messages: list[Message],
        settings: ChatSettings,
        prompt: StoredMessage | None = None,
    ) -> ReplyInFlight:
        model = self.app.daemon_status.model
        widget = self.log_view.add(ChatMessage("assistant", speaker=model, streaming=True))
        self.reply = ReplyInFlight(
            model, text, messages, settings, widget, LiveMeter(), self.conversation, prompt
        )
        self._stream_reply(self.reply)
        return self.reply

    def _settle(self, reply: ReplyInFlight) -> None:
        """The screen work a reply makes that can wait until its first token is on screen
        (or `SETTLE_S`, if the engine is slower than that): the footer's keys (Stop instead
        of Regen and Edit; the footer is rebuilt whole) and, for a new conversation, its
        title and the sidebar."""
        if reply.settled:
            return
        reply.settled = True
        self.refresh_bindings()
        if reply.created and reply.conversation is not None:
            self.sub_title = reply.conversation.title
            self.refresh_sidebar()

    def _tick(self, reply: ReplyInFlight) -> None:
        self.query_one(StatusBar).show_numbers(reply.meter.format())
        if time.perf_counter() - reply.meter.started >= SETTLE_S:
            self._settle(reply)

    @work(exclusive=True, group="reply")
    async def _stream_reply(self, reply: ReplyInFlight) -> None:
        status = self.query_one(StatusBar)
        timer = self.set_interval(0.25, lambda: self._tick(reply))
        stream = body = None
        try:
            stream = await self.app.link.client.stream_chat(
                reply.messages, **request_options(reply.settings)
            )
            body = await reply.widget.stream()
            async for chunk in stream:
                if chunk.text:
                    first = reply.meter.first is None
                    reply.meter.tick()
                    await body.write(chunk.text)  # drawn once a frame, not once a token
                    if first:  # once the first token's frame is out
                        self.set_timer(2 * FRAME_S, lambda: self._settle(reply))
            await body.stop()
            stats = ReplyStats.from_stream(stream, reply.meter)
            assert reply.conversation is not None  # stored before any token could arrive
            stored = self.store.add_message(
                reply.conversation.id, "assistant", stream.text, stats, model=reply.model
            )
            self.history.append(stored)
            self.reply = None  # done: the next action must not wait for the clean-up below
            self.refresh_bindings()
            reply.widget.finish(stream.text, stats, stored.id)
            status.show_numbers(stats.short())
            self.refresh_sidebar()
        except LingLocalError as err:
            if self.reply is reply:
                self._roll_back(reply)
                self.log_view.notice(f"The reply failed: {err.message}")
                self.notify(err.message, title="Reply failed", severity="error", timeout=8)
        finally:
            timer.stop()
            if stream is not None:
                await stream.aclose()
            if body is not None:
                await body.stop()
            if self.reply is reply:
                self.reply = None
                self.refresh_bindings()

    def _cancel_reply(self) -> bool:
        """Stop the reply in flight (the worker closes the stream) and roll it back."""
        reply = self.reply
        if reply is None:
            return False
        self.workers.cancel_group(self, "reply")
        self._roll_back(reply)
        self.query_one(StatusBar).show_numbers("reply stopped")
        return True

    def _roll_back(self, reply: ReplyInFlight) -> None:
        self.reply = None
        reply.settled = False
        self._settle(reply)
        reply.widget.remove()
        if reply.prompt is not None:  # else the prompt is dropped once it is stored
            self._drop_from(reply.prompt.id)
        self.prompt.restore(reply.text)

    def _drop_from(self, message_id: int) -> None:
        assert self.conversation is not None
        self.store.delete_messages_from(self.conversation.id, message_id)
        self.history = [m for m in self.history if m.id < message_id]
        self.log_view.remove_from(message_id)

    def _leave_edit(self) -> None:
        if self.editing is not None:
            self.editing = None
            for widget in self.log_view.messages():
                widget.remove_class("-editing")
            self.refresh_bindings()

    # ----------------------------------------------------------------- actions
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "stop":
            return self.reply is not None or self.editing is not None
        if action in ("regenerate", "edit_last"):  # hidden while a reply streams: room for Stop
            return self.reply is None
        return True

    def action_stop(self) -> None:
        if not self._cancel_reply() and self.editing is not None:
            self._leave_edit()
            self.prompt.load_text("")

    def action_regenerate(self) -> None:
        if self.reply is not None:
            self.notify("A reply is still streaming; Esc stops it.", severity="warning")
            return
        if not self.history:
            self.notify("Nothing to regenerate yet.", severity="warning")
            return
        if self.history[-1].role == "assistant":
            self._drop_from(self.history[-1].id)
        if self.history and self.history[-1].role == "user":
            assert self.conversation is not None
            settings = self.conversation.settings
            prompt = self.history[-1]
            self._start_reply(
                prompt.content, chat_payload(settings, self.history), settings, prompt
            )

    def action_edit_last(self) -> None:
        last = next((m for m in reversed(self.history) if m.role == "user"), None)
        if self.reply is not None or last is None:
            self.notify("No message to edit.", severity="warning")
            return
        self.editing = last
        for widget in self.log_view.messages():
            widget.set_class((widget.message_id or 0) >= last.id, "-editing")
        self.prompt.restore(last.content)
        self.refresh_bindings()
        self.notify("Editing your last message: Enter resends it, Esc leaves the edit.")

    def action_new_conversation(self) -> None:
        self.open_conversation(None)
        self.prompt.focus()

    def action_search(self) -> None:
        self.query_one(Sidebar).display = True
        self.query_one("#search", Input).focus()

    def action_toggle_sidebar(self) -> None:
        sidebar = self.query_one(Sidebar)
        sidebar.display = not sidebar.display
