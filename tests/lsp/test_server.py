"""The language server end to end: a subprocess over stdio, pytest-lsp's client, the real
daemon with the real model."""

from __future__ import annotations

import json
import re
from pathlib import Path

from lsprotocol import types
from pytest_lsp import client_capabilities

from lsp.context import Snapshot
from tests.lsp.conftest import (
    SOURCE,
    StartLsp,
    inline,
    open_document,
    stats,
    type_text,
    wait_until,
)
from tests.support import DaemonProcess

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\ufffd]")
_MAX_LINES = 4


async def test_advertises_inline_completion_and_commands(start_lsp: StartLsp) -> None:
    client = await start_lsp()
    caps = client.init_result.capabilities
    assert caps.inline_completion_provider is not None
    assert caps.completion_provider is None  # the popup stays free of AI text
    assert set(caps.execute_command_provider.commands) >= {
        "ling-local.accepted",
        "ling-local.stats",
    }
    sync = caps.text_document_sync
    assert getattr(sync, "change", sync) == types.TextDocumentSyncKind.Incremental


async def test_clients_without_inline_completion_get_the_popup(
    start_lsp: StartLsp, workspace: Path
) -> None:
    client = await start_lsp(capabilities=client_capabilities("neovim@v0.11.0"))
    assert client.init_result.capabilities.completion_provider is not None
    uri = open_document(client, workspace / "main.py", SOURCE.replace("    \n", "    sh\n"))
    result = await client.text_document_completion_async(
        types.CompletionParams(
            types.TextDocumentIdentifier(uri), types.Position(9, 6),
            types.CompletionContext(types.CompletionTriggerKind.Invoked),
        )
    )  # fmt: skip
    assert result.is_incomplete  # asked again as the user types
    assert len(result.items) == 1
    item = result.items[0]
    assert item.text_edit.new_text.startswith("sh")  # replaces the word being typed
    assert len(item.text_edit.new_text) > 2
    assert item.text_edit.range == types.Range(types.Position(9, 4), types.Position(9, 6))
    assert item.command.command == "ling-local.accepted"


async def test_inline_completion_is_consistent_with_prefix_and_suffix(
    start_lsp: StartLsp, workspace: Path
) -> None:
    client = await start_lsp(settings={"maxLines": _MAX_LINES})
    uri = open_document(client, workspace / "main.py")
    lines = SOURCE.split("\n")
    positions = [
        (9, 4),  # empty line in a function body: a block
        (8, len(lines[8])),  # end of `def describe(...):`: a block
        (0, len(lines[0])),  # end of a plain line: one line
        (11, len("print(circle_area(2.0")),  # before `))`: one line, no doubled brackets
        (5, len("    return")),  # mid-line: one line
    ]
    shown = 0
    for line, col in positions:
        items = await inline(client, uri, line, col)
        assert len(items) <= 1
        if not items:
            continue
        shown += 1
        text = items[0].insert_text
        offset = sum(len(x) + 1 for x in lines[:line]) + col
        site = Snapshot(uri, SOURCE, offset).site()
        assert text.strip(), "an empty suggestion must be no item"
        assert not _CONTROL.search(text)
        assert all(x == x.rstrip() for x in text.split("\n"))
        if site.line_suffix.strip():
            assert "\n" not in text, f"mid-line must be one line: {text!r}"
            assert not text.endswith(site.line_suffix.strip())
        else:
            assert len([x for x in text.split("\n") if x.strip()]) <= _MAX_LINES
        args = items[0].command.arguments[0]
        assert items[0].command.command == "ling-local.accepted"
        assert (args["uri"], args["line"], args["character"], args["text"]) == (
            uri, line, col, text)  # fmt: skip
    assert shown >= 2, "the model wrote nothing usable at most positions"
    st = await stats(client)
    assert st["shown"] == shown and st["generations"] == len(positions)


async def test_typing_through_and_accepting_need_no_new_request(
    start_lsp: StartLsp, workspace: Path, daemon: DaemonProcess
) -> None:
    client = await start_lsp()
    uri = open_document(client, workspace / "main.py")
    items = await inline(client, uri, 9, 4)
    assert items, "no suggestion on an empty function body"
    text = items[0].insert_text
    before = await stats(client)
    # The user types the first character of the suggestion: the rest comes from the cache.
    type_text(client, uri, 2, 9, 4, text[0])
    items = await inline(client, uri, 9, 5, invoked=False)
    after = await stats(client)
    assert [i.insert_text for i in items] == [text[1:]]
    assert after["cache_hits"] == before["cache_hits"] + 1
    assert after["generations"] == before["generations"]
    # Tab: the editor inserts the rest and runs the item's command.
    type_text(client, uri, 3, 9, 5, text[1:])
    command = items[0].command
    await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command.command, command.arguments)
    )
    accepted = await stats(client)
    assert accepted["accepted"] == 1
    # Local telemetry: sizes and sources, never the code itself.
    log = (daemon.home / "state" / "lsp" / "telemetry.jsonl").read_text().splitlines()
    events = [json.loads(line) for line in log]
    assert {"shown", "accepted"} <= {e["event"] for e in events}
    assert events[-1] == {**events[-1], "event": "accepted", "chars": len(text) - 1}
    assert not any(text.strip() in line for line in log if len(text.strip()) > 3)
    assert accepted["speculative"] == after["speculative"] + 1  # the next one is on its way
    end_line = 9 + text.count("\n")
    end_col = 4 + len(text) if "\n" not in text else len(text.split("\n")[-1])
    await inline(client, uri, end_line, end_col, invoked=False)
    final = await stats(client)
    # Answered by the speculative generation (cached or joined in flight), not a new one...
    assert final["generations"] == accepted["generations"]
    # ...unless that one came back empty, which post-processing may rightly decide, or the
    # cursor after the accepted text is not a place to ask at (say, in the middle of a word).
    assert (
        final["cache_hits"] + final["joined"] > accepted["cache_hits"] + accepted["joined"]
        or final["empty"] > accepted["empty"]
        or final["gated"] > accepted["gated"]
    )


async def test_open_documents_and_the_workspace_reach_the_prompt(
    start_lsp: StartLsp, workspace: Path
) -> None:
    (workspace / "billing.py").write_text(
        "def compute_invoice_total(lines, tax_rate):\n"
        "    subtotal = sum(line.price * line.quantity for line in lines)\n"
        "    return subtotal * (1 + tax_rate)\n"
    )
    client = await start_lsp()
    await wait_until(_index_ready(client), timeout=60)
    open_document(client, workspace / "geometry" / "shapes.py")  # open, not edited
    text = (
        "from geometry.shapes import Square\n\n"
        "square = Square(side=3)\nprint(square.area(), square.side)\n"
        "total = compute_invoice_total(lines, tax_rate) + square.area()\n"
        "value = "
    )
    uri = open_document(client, workspace / "report.py", text)
    await inline(client, uri, 5, len("value = "), invoked=False)  # debounced, automatic
    prompt = (await stats(client))["last_prompt"]
    sources = {(s["path"], s["source"]) for s in prompt["snippets"]}
    assert ("geometry/shapes.py", "open") in sources
    assert ("billing.py", "bm25") in sources


def _index_ready(client):
    async def check():
        return (await stats(client))["index_ready"]

    return check
