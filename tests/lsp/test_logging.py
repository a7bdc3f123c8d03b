"""Editors show a language server's stderr as errors (Neovim's LSP log marks every line of
it ERROR): `ling-local lsp` writes INFO to its log file under the state dir, and only
warnings and errors to stderr."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from tests.support import REPO, DaemonProcess, child_env


def _send(proc: subprocess.Popen, message: dict) -> None:
    body = json.dumps({"jsonrpc": "2.0", **message}).encode()
    proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
    proc.stdin.flush()


def test_info_goes_to_the_log_file_not_stderr(
    daemon: DaemonProcess, workspace: Path, tmp_path: Path
) -> None:
    home = tmp_path / "lsp-home"
    env = child_env(home, LING_LOCAL_URL=daemon.url, LING_LOCAL_TOKEN=daemon.token)
    proc = subprocess.Popen(
        [sys.executable, "-m", "ling_local", "lsp", "--no-start-daemon"],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
        cwd=str(REPO),
    )
    log_file = home / "state" / "logs" / "lsp.log"
    try:
        _send(proc, {"id": 1, "method": "initialize", "params": {
            "processId": None, "rootUri": workspace.as_uri(), "capabilities": {},
        }})  # fmt: skip
        _send(proc, {"method": "initialized", "params": {}})
        deadline = time.monotonic() + 60
        while not (log_file.is_file() and "indexed" in log_file.read_text()):
            assert time.monotonic() < deadline and proc.poll() is None, "no INFO line logged"
            time.sleep(0.1)
        _send(proc, {"id": 2, "method": "shutdown"})
        _send(proc, {"method": "exit"})
        _, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert " INFO " in log_file.read_text()  # the file has the INFO lines (with timestamps)
    assert "INFO" not in stderr.decode(), stderr.decode()
