"""The language server as editors run it: `python -m ling_local lsp` in a subprocess over
stdio, driven by pytest-lsp's client, against the session's real daemon."""

from __future__ import annotations

import asyncio
import re
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from lsprotocol import types
from pytest_lsp import LanguageClient, client_capabilities
from pytest_lsp.client import make_test_lsp_client

from tests.support import DaemonProcess, child_env

# Sampling that makes even a random-weight model write text, reproducibly; short outputs
# keep the suite fast on two cores. Early first lines (tested on their own) would make which
# request generates depend on machine speed.
TEST_SETTINGS: dict[str, Any] = {
    "temperature": 1.0, "seed": 11, "maxTokens": 16, "firstLinesMs": None,
}  # fmt: skip

SOURCE = "\n".join([
    "import math",
    "",
    "",
    "def circle_area(radius):",
    '    """Area of a circle."""',
    "    return math.pi * radius ** 2",
    "",
    "",
    "def describe(shape, size):",
    "    ",  # the cursor's line: an indented empty line in a function body
    "",
    "print(circle_area(2.0))",
    "",
])  # fmt: skip

StartLsp = Callable[..., Awaitable[LanguageClient]]


def inline_capabilities() -> types.ClientCapabilities:
    """Neovim 0.11's capabilities plus inline completion (what Neovim 0.12 sends)."""
    caps = client_capabilities("neovim@v0.11.0")
    caps.text_document.inline_completion = types.InlineCompletionClientCapabilities(
        dynamic_registration=False
    )
    return caps


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / "geometry").mkdir(parents=True)
    (root / "geometry" / "shapes.py").write_text(
        "class Square:\n    def __init__(self, side):\n        self.side = side\n\n"
        "    def area(self):\n        return self.side ** 2\n"
    )
    (root / "main.py").write_text(SOURCE)
    return root


@pytest_asyncio.fixture
async def start_lsp(daemon: DaemonProcess, workspace: Path) -> AsyncIterator[StartLsp]:
    """Start language servers (each in its own subprocess); all are shut down after."""
    clients: list[LanguageClient] = []

    async def start(
        *,
        settings: dict[str, Any] | None = None,
        capabilities: types.ClientCapabilities | None = None,
        args: tuple[str, ...] = ("--no-start-daemon",),
        env: dict[str, str] | None = None,
        profile: str | None = None,
    ) -> LanguageClient:
        client = make_test_lsp_client()
        server_env = env or child_env(daemon.home)
        await client.start_io(
            sys.executable, "-m", "ling_local", "lsp", "--profile",
            profile or str(daemon_profile(daemon)), *args, env=server_env,
        )  # fmt: skip
        clients.append(client)
        client.init_result = await client.initialize_session(  # type: ignore[attr-defined]
            types.InitializeParams(
                capabilities=capabilities or inline_capabilities(),
                root_uri=workspace.as_uri(),
                workspace_folders=[types.WorkspaceFolder(workspace.as_uri(), "project")],
                initialization_options={**TEST_SETTINGS, **(settings or {})},
            )
        )
        return client

    yield start
    for client in clients:
        if client._server is not None and client._server.returncode is None:
            await client.shutdown_session()
        await client.stop()


def daemon_profile(daemon: DaemonProcess) -> Path:
    """The profile file the session daemon was started with (its command line has it)."""
    args = daemon.process.args
    return Path(args[args.index("--profile") + 1])


def open_document(client: LanguageClient, path: Path, text: str | None = None) -> str:
    uri = path.as_uri()
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(
            types.TextDocumentItem(uri, "python", 1, text if text is not None else path.read_text())
        )
    )
    return uri


def type_text(
    client: LanguageClient, uri: str, version: int, line: int, col: int, text: str
) -> None:
    """Insert `text` at (line, col) as an editor's incremental didChange."""
    pos = types.Position(line, col)
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            types.VersionedTextDocumentIdentifier(version=version, uri=uri),
            [types.TextDocumentContentChangePartial(range=types.Range(pos, pos), text=text)],
        )
    )


async def inline(
    client: LanguageClient, uri: str, line: int, col: int, *, invoked: bool = True
) -> list[types.InlineCompletionItem]:
    kind = (
        types.InlineCompletionTriggerKind.Invoked
        if invoked
        else types.InlineCompletionTriggerKind.Automatic
    )
    result = await client.text_document_inline_completion_async(
        types.InlineCompletionParams(
            types.InlineCompletionContext(kind),
            types.TextDocumentIdentifier(uri),
            types.Position(line, col),
        )
    )
    items = result.items if isinstance(result, types.InlineCompletionList) else result
    return list(items or [])


async def stats(client: LanguageClient) -> dict[str, Any]:
    return await client.workspace_execute_command_async(
        types.ExecuteCommandParams("ling-local.stats")
    )


def metric(text: str, name: str) -> float:
    """Sum of a Prometheus metric over its labels."""
    return sum(float(v) for v in re.findall(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.M))


async def wait_until(predicate: Callable[[], Any], timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        await asyncio.sleep(0.05)
    raise AssertionError(f"condition not met within {timeout}s")
