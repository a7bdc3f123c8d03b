"""The benchmark's own daemon process, and the CPU time a process has used.

`bench overhead` starts `python -m ling_local.bench.overhead_daemon` in a throw-away
LING_LOCAL_HOME, so it never overwrites the discovery file or token of the user's daemon,
and runs the same ling_local the command itself was imported from.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import ling_local
from ling_local.errors import LingLocalError

__all__ = ["BenchDaemon", "cpu_seconds"]


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system, all threads) of a process so far.

    Summed from each thread's ``schedstat`` (nanoseconds) where the kernel has it, since
    ``stat``'s utime+stime tick at only 100 Hz; falls back to ``stat``."""
    total, found = 0, False
    try:
        for task in os.scandir(f"/proc/{pid}/task"):
            try:
                with open(f"{task.path}/schedstat", encoding="ascii") as f:
                    total += int(f.read().split()[0])
                    found = True
            except (OSError, ValueError, IndexError):
                pass
    except OSError:
        pass
    if found:
        return total / 1e9
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class BenchDaemon:
    """One overhead daemon on TCP (any free port) or on a unix socket."""

    def __init__(self, transport: str, cadence_args: list[str], timeout: float = 60.0) -> None:
        if transport not in ("tcp", "uds"):
            raise ValueError(f"unknown transport {transport!r}")
        self.transport = transport
        self.home = Path(tempfile.mkdtemp(prefix="ling-bench-"))
        self.trace_file = self.home / "emissions.json"
        self.emissions: dict[int, dict] = {}
        """After `stop()`: when the token source started each marked stream and let each
        burst go (see TokenSource.emissions)."""
        cmd = [sys.executable, "-m", "ling_local.bench.overhead_daemon", *cadence_args]
        cmd += ["--trace-file", str(self.trace_file)]
        cmd += ["--uds", str(self.home / "d.sock")] if transport == "uds" else ["--port", "0"]
        env = {k: v for k, v in os.environ.items() if not k.startswith("LING_LOCAL_")}
        root = str(Path(ling_local.__file__).resolve().parents[1])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        env["LING_LOCAL_HOME"] = str(self.home)
        self._log = self.home / "daemon.stderr"
        with open(self._log, "wb") as out:
            self.process = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
        self.url, self.token = self._wait_ready(timeout)

    @property
    def pid(self) -> int:
        return self.process.pid

    def _wait_ready(self, timeout: float) -> tuple[str, str]:
        runtime = self.home / "run" / "daemon.json"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self.stop()
                raise LingLocalError(f"the benchmark daemon exited: {self._tail()}")
            try:
                info = json.loads(runtime.read_text())
                if info["pid"] == self.pid:
                    token = (self.home / "config" / "token").read_text().strip()
                    return info["url"], token
            except (OSError, ValueError, KeyError):
                pass
            time.sleep(0.02)
        self.stop()
        raise LingLocalError(f"the benchmark daemon did not start in {timeout:.0f}s")

    def _tail(self) -> str:
        try:
            return self._log.read_text(errors="replace")[-2000:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        try:
            data = json.loads(self.trace_file.read_text())
            self.emissions = {int(k): v for k, v in data.items()}
        except (OSError, ValueError):
            pass
        shutil.rmtree(self.home, ignore_errors=True)

    def __enter__(self) -> BenchDaemon:
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()
