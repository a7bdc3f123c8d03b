"""`ling-local lsp`: the language server editors start over stdio for ghost-text completion.

`create_server` is the one factory both `main` (the CLI) and the tests use. The LSP wiring
lives in `lsp.handlers`; this module holds the server's state and its start-up.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol
from pygls.uris import to_fs_path

from ling_local import __version__
from ling_local.config import Profile, PromptSettings, load_profile
from ling_local.errors import ConfigError
from lsp.bridge import DaemonBridge
from lsp.completer import Completer
from lsp.context import CursorContextBuilder, Snapshot
from lsp.retrieval import WorkspaceIndex
from lsp.settings import LspSettings, merge_settings
from lsp.telemetry import Telemetry
from lsp.tokens import TokenCounter

__all__ = ["LingLanguageServer", "create_server", "main"]

log = logging.getLogger(__name__)

_MESSAGE_TYPES = {
    "error": types.MessageType.Error,
    "warning": types.MessageType.Warning,
    "info": types.MessageType.Info,
    "log": types.MessageType.Log,
}


@dataclass(frozen=True, slots=True)
class _Unreadable:
    """A request whose params do not fit its method: answered with an error, not dropped."""

    id: Any
    error: JsonRpcException


class _Protocol(LanguageServerProtocol):
    """pygls drops a request whose params cannot be read, and the editor then waits for an
    answer forever; this one answers it with InvalidParams."""

    def structure_message(self, data: dict[str, Any]) -> Any:
        try:
            return super().structure_message(data)
        except JsonRpcException as err:
            if isinstance(data, dict) and "id" in data and "method" in data:
                return _Unreadable(data["id"], err)
            raise

    def handle_message(self, message: Any) -> None:
        if isinstance(message, _Unreadable):
            self._send_response(message.id, error=message.error.to_response_error())
            return
        super().handle_message(message)


class LingLanguageServer(LanguageServer):
    def __init__(self, profile_ref: str, start_daemon: bool) -> None:
        super().__init__("ling-local", __version__, protocol_cls=_Protocol)
        self.profile_ref = profile_ref
        self.profile_error: str | None = None
        self.profile = self._load_profile(profile_ref)
        self.settings = LspSettings()
        self.telemetry = Telemetry(self.settings.telemetry)
        self.counter = TokenCounter.for_profile(self.profile)
        prompt = self.profile.prompt if self.profile else PromptSettings()
        self.bridge = DaemonBridge(profile_ref, start_daemon=start_daemon, notify=self.notify)
        self.workspace_index: WorkspaceIndex | None = None
        self.completer = Completer(
            bridge=self.bridge,
            counter=self.counter,
            builder=CursorContextBuilder(self.counter, prompt.prefix_tokens, prompt.suffix_tokens),
            documents=_Documents(self),
            settings=lambda: self.settings,
            telemetry=self.telemetry,
        )
        self.background: set[asyncio.Task[Any]] = set()
        self._calibrated: set[str] = set()
        self.progress_tokens: dict[str, str] = {}

    def _load_profile(self, ref: str) -> Profile | None:
        try:
            return load_profile(ref)
        except ConfigError as err:
            self.profile_error = err.message
            return None

    # ------------------------------------------------------------------ helpers
    def notify(self, kind: str, message: str) -> None:
        """Tell the user (showMessage) or the editor's log (logMessage)."""
        log.info("%s", message)
        params_type = _MESSAGE_TYPES.get(kind, types.MessageType.Log)
        try:
            if kind == "log":
                self.window_log_message(types.LogMessageParams(params_type, message))
            else:
                self.window_show_message(types.ShowMessageParams(params_type, message))
        except Exception:  # no client yet (start-up) or the pipe is gone
            log.debug("cannot send a message to the client", exc_info=True)

    def spawn(self, coro: Any) -> asyncio.Task[Any]:
        """Run background work, keeping a reference so it is not garbage-collected."""
        task = asyncio.ensure_future(coro)
        self.background.add(task)
        task.add_done_callback(self.background.discard)
        return task

    def apply_settings(self, raw: Any) -> None:
        try:
            self.settings = merge_settings(self.settings, raw)
        except ConfigError as err:
            self.notify("warning", err.message)
            return
        self.telemetry.enabled = self.settings.telemetry

    def display_path(self, uri: str) -> str:
        path = to_fs_path(uri) or uri
        for folder in self.workspace_roots():
            try:
                return str(Path(path).relative_to(folder))
            except ValueError:
                continue
        return Path(path).name

    def workspace_roots(self) -> list[Path]:
        roots = [to_fs_path(f.uri) for f in self.workspace.folders.values()]
        if not roots and self.workspace.root_path:
            roots = [self.workspace.root_path]
        return [Path(r) for r in roots if r and Path(r).is_dir()]

    def snapshot(self, uri: str, position: types.Position) -> Snapshot:
        doc = self.workspace.get_text_document(uri)
        text = doc.source
        offset = min(doc.offset_at_position(position), len(text))
        return Snapshot(uri, text, offset, doc.language_id or "", doc.version,
                        self.display_path(uri))  # fmt: skip

    def calibrate(self, uri: str, text: str) -> None:
        """Measure chars per token on this document with the model's tokenizer, once."""
        if self.counter.tokenizer is not None and uri not in self._calibrated:
            self._calibrated.add(uri)
            self.spawn(asyncio.to_thread(self.counter.calibrate, text))

    def follow_daemon_profile(self) -> None:
        """The running daemon may serve another profile than ours (started by hand): its
        budgets and tokenizer are the ones that count."""
        served = self.bridge.daemon_profile
        if not served or (self.profile is not None and served == self.profile.name):
            return
        try:
            profile = load_profile(served)
        except ConfigError:
            log.info("daemon profile %r is not known here; keeping %s", served, self.profile_ref)
            return
        self.profile = profile
        self.counter.tokenizer = TokenCounter.for_profile(profile).tokenizer
        self.notify("log", f"ling-local: the daemon serves profile {served}; using its budgets")

    def fit_budgets(self) -> None:
        """Keep prefix + suffix + generation within the served model's context."""
        ctx = self.bridge.context_length
        prompt = self.profile.prompt if self.profile else PromptSettings()
        prefix, suffix = prompt.prefix_tokens, prompt.suffix_tokens
        room = (ctx or 1 << 30) - self.settings.max_tokens - 16
        if prefix + suffix > room > 0:
            scale = room / (prefix + suffix)
            prefix, suffix = int(prefix * scale), int(suffix * scale)
        self.completer.builder.prefix_tokens = prefix
        self.completer.builder.suffix_tokens = suffix


class _Documents:
    """The completer's view of the editor's open documents."""

    def __init__(self, server: LingLanguageServer) -> None:
        self.server = server

    def version(self, uri: str) -> int | None:
        doc = self.server.workspace.text_documents.get(uri)
        return None if doc is None else doc.version

    def others(self, uri: str) -> list[tuple[str, str, int | None, str]]:
        return [
            (u, self.server.display_path(u), d.version, d.source)
            for u, d in list(self.server.workspace.text_documents.items())
            if u != uri
        ]


def create_server(profile: str = "tiny", start_daemon: bool = True) -> LingLanguageServer:
    from lsp.handlers import register

    server = LingLanguageServer(profile, start_daemon)
    register(server)
    return server


def main(profile: str = "tiny", start_daemon: bool = True) -> None:
    """Serve LSP on stdin/stdout until the editor says exit."""
    from ling_local.logs import setup_logging

    # Info goes to the log file and, through window/logMessage, to the editor; editors show
    # a server's stderr as errors (VS Code marks every stderr line [error]): warnings only.
    setup_logging("lsp", "warning")
    # pygls logs every message it sends at INFO: whole documents, on the keystroke path.
    logging.getLogger("pygls").setLevel(logging.WARNING)
    create_server(profile, start_daemon).start_io()
