"""Ctrl-C on `ling-local serve` in the middle of a generation: the daemon says so at once,
cancels the engine's work (the stream ends as cancelled) and is gone within 2 s."""

from __future__ import annotations

import json
import signal
import threading
import time
from pathlib import Path

from tests.support import start_daemon


def test_ctrl_c_mid_generation_stops_within_two_seconds(profile_path: Path, tmp_path: Path) -> None:
    daemon = start_daemon(profile_path, tmp_path / "home")
    events: list[tuple[float, bytes]] = []

    def read_stream() -> None:
        with daemon.http() as http:
            body = {"prompt": "def main():\n", "max_tokens": 2000, "ignore_eos": True}
            with http.stream("POST", "/v1/completions", json={**body, "stream": True}) as r:
                for line in r.iter_lines():
                    if line:
                        events.append((time.monotonic(), line.encode()))

    reader = threading.Thread(target=read_stream, daemon=True)
    try:
        reader.start()
        deadline = time.monotonic() + 60
        while len(events) < 5:  # generating
            assert time.monotonic() < deadline, "no tokens streamed"
            time.sleep(0.01)
        sent = time.monotonic()
        daemon.process.send_signal(signal.SIGINT)
        said = None
        while daemon.process.poll() is None and time.monotonic() - sent < 10:
            if said is None and "stopping…" in daemon.log.read_text():
                said = time.monotonic() - sent
            time.sleep(0.01)
        gone = time.monotonic() - sent
        if said is None and "stopping…" in daemon.log.read_text():
            said = gone
        reader.join(5)
    finally:
        daemon.stop(signal.SIGKILL)
    assert said is not None and said < 1.0, daemon.log.read_text()
    assert gone < 2.0, f"still running {gone:.1f} s after Ctrl-C:\n{daemon.log.read_text()}"
    assert daemon.process.returncode == -signal.SIGINT  # ended as killed by Ctrl-C
    # the generation was cancelled in the engine, not run to its 2000 tokens
    data = [json.loads(e[5:]) for _, e in events if e.startswith(b"data: {")]
    assert "cancelled" in data[-1]["error"]["message"]
    assert len(events) < 2000 and events[-1][0] - sent < 2.0
    assert not (daemon.home / "run" / "daemon.json").exists()  # nothing left behind
