"""The SGLang child's port cannot be taken over (issue 39, item 2).

SGLang binds its HTTP port only after loading the model, minutes after the daemon chose it.
A local process that binds the port first (another user who read it from the command line,
or guessed it) must get neither SGLang's API key nor a prompt, and the daemon must not go
ready while serving from it. Here the squatter is a plain HTTP server that answers 200 to
everything and records what it receives; it learns the port from the child's log line
(a real attacker reads /proc/PID/cmdline, where the port no longer is, or guesses)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ling_local import paths
from ling_local.engines.base import EngineState
from ling_local.engines.sglang import SGLangEngine
from ling_local.engines.sglang.listener import PortTaken, verify_listener
from ling_local.errors import EngineError


class _Squatter(ThreadingHTTPServer):
    allow_reuse_address = True  # SO_REUSEADDR, as most servers (and attackers) set it
    daemon_threads = True

    def __init__(self, port: int) -> None:
        self.seen: list[tuple[str, str, str]] = []  # (method, path, Authorization)
        super().__init__(("127.0.0.1", port), _Handler)


class _Handler(BaseHTTPRequestHandler):
    def _answer(self) -> None:
        assert isinstance(self.server, _Squatter)
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        self.server.seen.append((self.command, self.path, self.headers.get("Authorization", "")))
        body = b'{"text": "", "meta_info": {}}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, *args) -> None:
        pass


async def _squat_first_port(log_file, timeout: float = 30.0) -> _Squatter:
    """Bind the port of the first child as soon as its log names it."""
    for _ in range(int(timeout / 0.01)):
        if log_file.is_file() and (m := re.search(r"port=(\d+)", log_file.read_text())):
            squatter = _Squatter(int(m.group(1)))
            threading.Thread(target=squatter.serve_forever, daemon=True).start()
            return squatter
        await asyncio.sleep(0.01)
    raise AssertionError(f"no port in {log_file}")


async def test_a_process_that_takes_the_port_first_gets_no_key_and_no_prompt(
    standin_profile,
) -> None:
    # The stand-in loads for 2 s before it binds, like SGLang loading its weights.
    eng = SGLangEngine(standin_profile(sglang={"env": {"STANDIN_LOAD_S": "2.0"}}))
    start = asyncio.create_task(eng.start())
    squatter = await _squat_first_port(paths.log_dir() / "sglang-standin.log")
    try:
        with contextlib.suppress(EngineError):  # checked below, after what the squatter got
            await asyncio.wait_for(start, 60)
        # What the squatter got: at most keyless health checks, never a key or a prompt.
        assert all(not auth for _, _, auth in squatter.seen), squatter.seen
        assert not any(path.startswith("/generate") for _, path, _ in squatter.seen)
        assert eng.health().state is EngineState.READY
        # The daemon gave up that port and serves from its own child, on another one.
        port = eng._wire.port  # type: ignore[union-attr]
        assert port != squatter.server_address[1]
        assert verify_listener(port, eng._child.pid) == eng._child.pid  # type: ignore[union-attr]
    finally:
        squatter.shutdown()
        squatter.server_close()
        await eng.stop()


def test_the_owner_check_finds_the_listener_in_its_group_only() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        assert verify_listener(port, os.getpgid(0)) == os.getpid()  # this test's own group
        with pytest.raises(PortTaken, match="outside SGLang's process group"):
            verify_listener(port, 1)  # init's group does not hold it
    with pytest.raises(PortTaken, match="nothing listens"):
        verify_listener(port, os.getpgid(0))
