"""A fresh `ling-local serve --profile P` for a benchmark: its own throw-away
LING_LOCAL_HOME (the user's daemon, token and discovery file are never touched), the same
ling_local the benchmark was imported from, and the time from launch to `/health` ready."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

import ling_local
from ling_local.errors import LingLocalError

__all__ = ["FreshDaemon", "sigterm_exits"]


@contextlib.contextmanager
def sigterm_exits() -> Iterator[None]:
    """While inside: SIGTERM (a time limit's `timeout`) exits through the stack, so a
    benchmark's `with`/`finally` blocks still stop the servers it started."""

    def exit_now(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, exit_now)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class FreshDaemon:
    def __init__(self, profile: str) -> None:
        self.home = Path(tempfile.mkdtemp(prefix="ling-bench-serve-"))
        self.log = self.home / "daemon.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith("LING_LOCAL_")}
        root = str(Path(ling_local.__file__).resolve().parents[1])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        env["LING_LOCAL_HOME"] = str(self.home)
        env["PYTHONUNBUFFERED"] = "1"
        cmd = [sys.executable, "-m", "ling_local", "serve", "--profile", profile, "--port", "0"]
        self.started = time.perf_counter()
        with open(self.log, "wb") as out:
            self.process = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
        self.url = self.token = ""

    def wait_ready(self, timeout: float) -> float:
        """Seconds from launch until `/health` said ready (polled every 10 ms)."""
        runtime = self.home / "run" / "daemon.json"
        deadline = self.started + timeout
        with httpx.Client(timeout=5, trust_env=False) as http:
            while time.perf_counter() < deadline:
                if self.process.poll() is not None:
                    raise LingLocalError(f"the daemon exited: {self.tail()}")
                if not self.url:
                    try:
                        info = json.loads(runtime.read_text())
                        if info["pid"] == self.process.pid:
                            self.url = info["url"]
                            self.token = (self.home / "config" / "token").read_text().strip()
                    except (OSError, ValueError, KeyError):
                        pass
                if self.url:
                    health = http.get(self.url + "/health").json()
                    if health["state"] == "ready":
                        return time.perf_counter() - self.started
                    if health["state"] == "failed":
                        raise LingLocalError(f"the engine failed: {health['detail']}")
                time.sleep(0.01)
        raise LingLocalError(f"the daemon was not ready after {timeout:.0f}s: {self.tail()}")

    def tail(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-2000:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        shutil.rmtree(self.home, ignore_errors=True)

    def __enter__(self) -> FreshDaemon:
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()
