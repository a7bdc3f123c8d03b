"""The LSP surface of the server: lifecycle, document sync, inline completion (and the
completion-popup fallback), commands and configuration."""

from __future__ import annotations

import asyncio
import logging
import re
import uuid
from pathlib import Path
from typing import Any

from lsprotocol import types
from pygls.uris import to_fs_path

from lsp.context import Snapshot
from lsp.retrieval import WorkspaceIndex, in_background
from lsp.server import LingLanguageServer

__all__ = ["ACCEPTED", "STATS", "register"]

log = logging.getLogger(__name__)

ACCEPTED = "ling-local.accepted"
STATS = "ling-local.stats"
_WORD_BEFORE = re.compile(r"\w*$")


def _accept_command(uri: str, position: types.Position, text: str) -> types.Command:
    args = {"uri": uri, "line": position.line, "character": position.character, "text": text}
    return types.Command(title="ling-local: accepted", command=ACCEPTED, arguments=[args])


def register(ls: LingLanguageServer) -> None:
    @ls.feature(types.INITIALIZE)
    def initialize(ls: LingLanguageServer, params: types.InitializeParams) -> None:
        ls.apply_settings(params.initialization_options)
        doc_caps = params.capabilities.text_document
        has_inline = doc_caps is not None and doc_caps.inline_completion is not None
        mode = ls.settings.completion_fallback
        if mode == "on" or (mode == "auto" and not has_inline):
            ls.feature(types.TEXT_DOCUMENT_COMPLETION, types.CompletionOptions())(completion)
            log.info("answering textDocument/completion too (fallback: %s)", mode)

    @ls.feature(types.INITIALIZED)
    def initialized(ls: LingLanguageServer, _: types.InitializedParams) -> None:
        if ls.profile_error:
            ls.notify("error", f"ling-local: {ls.profile_error}; using default prompt budgets.")
        ls.spawn(_connect(ls))
        if ls.settings.context.workspace:
            ls.spawn(_index_workspace(ls))
        caps = ls.client_capabilities.workspace
        if caps is not None and caps.configuration:
            ls.spawn(_pull_configuration(ls))

    @ls.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: LingLanguageServer, params: types.DidOpenTextDocumentParams) -> None:
        ls.calibrate(params.text_document.uri, params.text_document.text)

    @ls.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: LingLanguageServer, params: types.DidChangeTextDocumentParams) -> None:
        ls.completer.changed(params.text_document.uri)

    @ls.feature(types.TEXT_DOCUMENT_DID_SAVE)
    def did_save(ls: LingLanguageServer, params: types.DidSaveTextDocumentParams) -> None:
        index, path = ls.workspace_index, to_fs_path(params.text_document.uri)
        if index is not None and path:
            ls.spawn(in_background(index.update_file, Path(path)))

    @ls.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: LingLanguageServer, params: types.DidCloseTextDocumentParams) -> None:
        ls.completer.closed(params.text_document.uri)

    @ls.feature(types.TEXT_DOCUMENT_INLINE_COMPLETION, types.InlineCompletionOptions())
    async def inline_completion(
        ls: LingLanguageServer, params: types.InlineCompletionParams
    ) -> types.InlineCompletionList:
        snap = ls.snapshot(params.text_document.uri, params.position)
        invoked = params.context.trigger_kind == types.InlineCompletionTriggerKind.Invoked
        suggestion = await ls.completer.complete(snap, invoked=invoked)
        if suggestion is None:
            return types.InlineCompletionList(items=[])
        item = types.InlineCompletionItem(
            insert_text=suggestion.text,
            command=_accept_command(snap.uri, params.position, suggestion.text),
        )
        return types.InlineCompletionList(items=[item])

    async def completion(
        ls: LingLanguageServer, params: types.CompletionParams
    ) -> types.CompletionList:
        snap = ls.snapshot(params.text_document.uri, params.position)
        invoked = (
            params.context is not None
            and params.context.trigger_kind == types.CompletionTriggerKind.Invoked
        )
        suggestion = await ls.completer.complete(snap, invoked=invoked)
        if suggestion is None:
            return types.CompletionList(is_incomplete=True, items=[])
        word = _WORD_BEFORE.search(snap.site().line_prefix).group(0)
        doc = ls.workspace.get_text_document(snap.uri)
        start = doc.client_position_at_offset(snap.offset - len(word))
        new_text = word + suggestion.text
        label = new_text.split("\n", 1)[0].strip()[:80] or new_text.strip()[:80]
        item = types.CompletionItem(
            label=label,
            kind=types.CompletionItemKind.Text,
            detail="ling-local",
            filter_text=new_text,
            sort_text="0",
            insert_text_format=types.InsertTextFormat.PlainText,
            text_edit=types.TextEdit(types.Range(start, params.position), new_text),
            command=_accept_command(snap.uri, start, new_text),
        )
        return types.CompletionList(is_incomplete=True, items=[item])

    @ls.command(ACCEPTED)
    def accepted(ls: LingLanguageServer, *args: Any) -> None:
        arg = args[0] if args and isinstance(args[0], dict) else {}
        uri, text = arg.get("uri"), arg.get("text")
        if not isinstance(uri, str) or not isinstance(text, str):
            return
        snap = _after_accept(ls, uri, arg, text)
        lang = snap.language_id if snap else ""
        ls.completer.accepted(snap, len(text), text.count("\n") + 1, lang)

    @ls.command(STATS)
    def stats(ls: LingLanguageServer, *_: Any) -> dict[str, Any]:
        index = ls.workspace_index
        return {
            **ls.completer.stats.as_dict(),
            "chars_per_token": round(ls.counter.chars_per_token, 3),
            "calibrated_by": ls.counter.calibrated_by,
            "index_ready": bool(index and index.ready),
            "index_version": index.version if index else 0,
            "daemon_profile": ls.bridge.daemon_profile,
            "last_prompt": _describe(ls.completer.last_prompt),
        }

    @ls.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
    def did_change_configuration(
        ls: LingLanguageServer, params: types.DidChangeConfigurationParams
    ) -> None:
        if params.settings:
            ls.apply_settings(params.settings)
            ls.fit_budgets()
        else:  # pull-model clients (VS Code) send no payload
            ls.spawn(_pull_configuration(ls))

    @ls.feature(types.SHUTDOWN)
    async def shutdown(ls: LingLanguageServer, *_: Any) -> None:
        for task in list(ls.background):
            task.cancel()
        await ls.completer.aclose()
        await ls.bridge.aclose()
        ls.telemetry.close()


def _describe(prompt: Any) -> dict[str, Any] | None:
    if prompt is None:
        return None
    return {
        "prefix_chars": len(prompt.prefix),
        "suffix_chars": len(prompt.suffix),
        "snippets": [
            {"path": s.path, "source": s.source, "score": round(s.score, 3)}
            for s in prompt.snippets
        ],
    }


def _after_accept(ls: LingLanguageServer, uri: str, arg: dict, text: str) -> Snapshot | None:
    """The document right after the acceptance. Editors may run the command before their
    (debounced) didChange arrives, so the insertion is applied here when it is missing."""
    doc = ls.workspace.text_documents.get(uri)
    if doc is None:
        return None
    try:
        pos = types.Position(int(arg.get("line", 0)), int(arg.get("character", 0)))
    except (TypeError, ValueError):
        return None
    source = doc.source
    offset = min(doc.offset_at_position(pos), len(source))
    if source[offset : offset + len(text)] != text:
        source = source[:offset] + text + source[offset:]
    return Snapshot(uri, source, offset + len(text), doc.language_id or "", None,
                    ls.display_path(uri))  # fmt: skip


async def _connect(ls: LingLanguageServer) -> None:
    def on_ready() -> None:
        ls.follow_daemon_profile()
        ls.fit_budgets()

    ls.bridge.on_starting = lambda starting: _daemon_progress(ls, starting)
    ls.bridge.on_ready = on_ready
    await ls.bridge.ensure()


def _daemon_progress(ls: LingLanguageServer, starting: bool) -> None:
    """A progress bar in the editor while this server starts the daemon."""
    if starting:
        token = str(uuid.uuid4())

        async def begin() -> None:
            if await _begin(ls, token, "ling-local: starting the daemon"):
                ls.progress_tokens["daemon"] = token

        ls.spawn(begin())
    elif (token := ls.progress_tokens.pop("daemon", None)) is not None:
        ls.work_done_progress.end(token, types.WorkDoneProgressEnd(message="ready"))


async def _begin(ls: LingLanguageServer, token: str, title: str) -> bool:
    caps = ls.client_capabilities.window
    if caps is None or not caps.work_done_progress:
        return False
    try:
        await ls.work_done_progress.create_async(token)
    except Exception:
        return False
    ls.work_done_progress.begin(token, types.WorkDoneProgressBegin(title=title, percentage=0))
    return True


async def _index_workspace(ls: LingLanguageServer) -> None:
    roots = ls.workspace_roots()
    if not roots:
        return
    index = WorkspaceIndex(roots)
    token = str(uuid.uuid4())
    shown = await _begin(ls, token, "ling-local: indexing the workspace")
    loop = asyncio.get_running_loop()

    def progress(done: int, total: int, name: str) -> None:
        if shown:
            pct = int(done * 100 / max(total, 1))
            report = types.WorkDoneProgressReport(message=f"{done}/{total} {name}", percentage=pct)
            loop.call_soon_threadsafe(ls.work_done_progress.report, token, report)

    try:
        chunks = await in_background(index.build, progress)
        ls.workspace_index = ls.completer.workspace = index
        ls.notify("log", f"ling-local: indexed {chunks} chunks of {roots[0]}")
    except Exception as err:
        log.exception("workspace indexing failed")
        ls.notify("log", f"ling-local: workspace indexing failed: {err}")
    finally:
        if shown:
            ls.work_done_progress.end(token, types.WorkDoneProgressEnd(message="done"))


async def _pull_configuration(ls: LingLanguageServer) -> None:
    try:
        params = types.ConfigurationParams(items=[types.ConfigurationItem(section="ling-local")])
        result = await ls.workspace_configuration_async(params)
    except Exception as err:
        log.info("workspace/configuration failed: %s", err)
        return
    if result and isinstance(result[0], dict):
        ls.apply_settings(result[0])
        ls.fit_budgets()
