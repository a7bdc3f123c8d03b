"""Run `python -m ling_local tui` as a real process on a pseudo-terminal, the way a terminal
emulator runs it: keys go in as bytes, the screen comes out as escape sequences."""

from __future__ import annotations

import contextlib
import fcntl
import os
import pty
import re
import signal
import struct
import subprocess
import sys
import termios
import threading
import time
from pathlib import Path

from tests.support import REPO

_ESCAPES = re.compile(rb"\x1b(\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)|[@-Z\\-_])")


class PtyApp:
    def __init__(self, env: dict[str, str], columns: int = 100, rows: int = 30) -> None:
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
        env = {**env, "TERM": "xterm-256color", "COLUMNS": str(columns), "LINES": str(rows)}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "ling_local", "tui"],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env,
            cwd=str(REPO),
            start_new_session=True,
            close_fds=True,
        )
        os.close(slave)
        self.master = master
        self._output = bytearray()
        self._lock = threading.Lock()
        # Drain the terminal all the time: a full pty buffer would block the app's writes.
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self.master, 65536)
            except OSError:
                return
            if not data:
                return
            with self._lock:
                self._output += data

    def text(self) -> str:
        """Everything written so far, escape sequences removed."""
        with self._lock:
            raw = bytes(self._output)
        return _ESCAPES.sub(b"", raw).decode("utf-8", "replace")

    def wait_for_text(self, needle: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while needle not in self.text():
            if self.process.poll() is not None:
                raise AssertionError(f"the TUI exited with {self.process.returncode}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{needle!r} never appeared on the screen")
            time.sleep(0.05)

    def type(self, keys: str) -> None:
        os.write(self.master, keys.encode())

    def kill(self) -> int:
        """kill -9: no clean-up of any kind runs in the app."""
        os.killpg(self.process.pid, signal.SIGKILL)
        return self.process.wait(10)

    def close(self) -> None:
        if self.process.poll() is None:
            self.kill()
        with contextlib.suppress(OSError):
            os.close(self.master)
        self._reader.join(5)


def wait_until(condition, timeout: float = 60.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def home_store(home: Path) -> Path:
    """Where the TUI keeps conversations when LING_LOCAL_HOME is `home`."""
    return home / "state" / "conversations.sqlite3"
