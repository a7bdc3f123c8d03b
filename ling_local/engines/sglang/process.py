"""The SGLang child process: started in its own session (so its whole process group can be
signalled at once), its output written to a log file under the state dir, stopped with
SIGTERM and then SIGKILL to the group, so no GPU process outlives the daemon.

On Linux the child also gets a parent-death signal: if the daemon itself is killed with
SIGKILL, the kernel kills the server, and SGLang's own workers follow their parent.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import subprocess
import time
from collections import deque
from pathlib import Path

from ling_local import paths
from ling_local.engines.sglang.command import LaunchCommand, child_environment

__all__ = ["ChildProcess", "child_info_file", "group_alive", "kill_group"]

log = logging.getLogger(__name__)

# Runs in the child before exec: ask for SIGKILL when the daemon dies, then become the real
# command (same pid, same argv), so `ps` shows exactly `python -m sglang.launch_server ...`.
_EXEC_WITH_PARENT_DEATH_SIGNAL = (
    "import os, signal, sys\n"
    "try:\n"
    "    import ctypes\n"
    "    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)\n"
    "except (OSError, AttributeError):\n"
    "    pass\n"
    "if os.getppid() != int(sys.argv[1]):\n"
    "    sys.exit(70)\n"
    "os.execv(sys.argv[2], sys.argv[2:])\n"
)


def child_info_file() -> Path:
    """Where the running child's URL and key are kept (0600, like the daemon's token), for
    the user's own debugging and for the overhead benchmark to reach SGLang directly."""
    return paths.runtime_dir() / "sglang.json"


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def kill_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


class ChildProcess:
    """One run of the server. A restart makes a new ChildProcess (new port, new key)."""

    def __init__(self, command: LaunchCommand, log_path: Path) -> None:
        self.command = command
        self.log_path = log_path
        self.process: subprocess.Popen | None = None
        self.started_at = 0.0

    def start(self) -> None:
        # SGLang writes its whole ServerArgs to the log at start-up, the API key included:
        # the log is this user's only (0600 in a 0700 directory), whatever the umask.
        paths.ensure_private_dir(self.log_path.parent)
        os.chmod(self.log_path.parent, 0o700)
        if self.log_path.exists() and self.log_path.stat().st_size:
            previous = self.log_path.with_suffix(".log.1")
            self.log_path.replace(previous)
            os.chmod(previous, 0o600)
        argv = self.command.argv
        wrapped = [argv[0], "-c", _EXEC_WITH_PARENT_DEATH_SIGNAL, str(os.getpid()), *argv]
        self.command.write_key_file()
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(self.log_path, flags, 0o600)
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "ab") as out:
            out.write(f"# ling-local: {self.command.redacted()}\n".encode())
            out.flush()
            self.process = subprocess.Popen(
                wrapped,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=child_environment(self.command),
                start_new_session=True,
                close_fds=True,
            )
        self.started_at = time.monotonic()
        log.info("started SGLang (pid %d), log %s", self.process.pid, self.log_path)

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    @property
    def returncode(self) -> int | None:
        return None if self.process is None else self.process.poll()

    def write_info(self, path: Path, log_path: Path) -> None:
        paths.ensure_private_dir(path.parent)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        info = {
            "url": self.command.url,
            "api_key": self.command.api_key,
            "pid": self.pid,
            "log": str(log_path),
        }
        with os.fdopen(fd, "w") as f:
            json.dump(info, f)

    def tail(self, lines: int = 20) -> list[str]:
        """The last lines of the child's log (for an error message)."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(max(0, f.seek(0, os.SEEK_END) - 64_000))
                data = f.read().decode("utf-8", "replace")
        except OSError:
            return []
        parts = data.replace("\r", "\n").splitlines()
        kept = deque((p.rstrip() for p in parts if p.strip()), maxlen=lines)
        return list(kept)

    async def wait_exit(self, poll_s: float = 0.2) -> int:
        """Wait until the server process exits (it is never waited on from a thread, so
        stop() can reap it at any time)."""
        while (rc := self.returncode) is None:
            await asyncio.sleep(poll_s)
        return rc

    async def stop(self, grace_s: float = 15.0) -> None:
        """SIGTERM the whole group, then SIGKILL whatever is left after `grace_s`."""
        self.command.remove_key_file()
        if self.process is None:
            return
        pgid = self.process.pid  # session leader: its pgid is its pid
        if group_alive(pgid):
            kill_group(pgid, signal.SIGTERM)
            deadline = time.monotonic() + grace_s
            while time.monotonic() < deadline:
                self.process.poll()
                if not group_alive(pgid):
                    break
                await asyncio.sleep(0.05)
            else:
                log.warning("SGLang did not stop within %.0fs; killing it", grace_s)
            kill_group(pgid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            await asyncio.to_thread(self.process.wait, 10)

    def kill_remnants(self) -> None:
        """After the server crashed: kill workers it left in its group (they hold GPUs)."""
        if self.process is not None:
            kill_group(self.process.pid, signal.SIGKILL)
