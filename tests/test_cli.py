"""The CLI as a user runs it (in a subprocess)."""

from __future__ import annotations

import subprocess
import sys

from tests.support import REPO, DaemonProcess, child_env


def _run(home, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ling_local", *args],
        env=child_env(home),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_profiles_lists_the_shipped_profiles(tmp_path) -> None:
    out = _run(tmp_path, "profiles")
    assert out.returncode == 0, out.stderr
    assert "tiny" in out.stdout


def test_serve_with_unknown_profile_fails_cleanly(tmp_path) -> None:
    out = _run(tmp_path, "serve", "--profile", "nope", "--port", "0")
    assert out.returncode == 2
    assert "unknown profile" in out.stderr
    assert "Traceback" not in out.stderr


def test_doctor_reports_the_running_daemon(daemon: DaemonProcess) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "ling_local", "doctor"],
        env=child_env(daemon.home),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "daemon" in out.stdout
    assert daemon.url in out.stdout
    assert "mode 600" in out.stdout


def test_daemon_logs_to_the_state_dir(daemon: DaemonProcess) -> None:
    log = daemon.home / "state" / "logs" / "daemon.log"
    assert log.is_file()
    assert "engine ready" in log.read_text()


def test_port_in_use_is_a_clear_error(daemon: DaemonProcess, profile_path, tmp_path) -> None:
    port = daemon.url.rsplit(":", 1)[1]
    out = _run(tmp_path, "serve", "--profile", str(profile_path), "--port", port)
    assert out.returncode == 2
    assert "could not listen" in out.stderr
