"""The CLI as a user runs it (in a subprocess)."""

from __future__ import annotations

import subprocess
import sys

from tests.support import REPO, DaemonProcess, child_env


def _run(home, *args: str, columns: int | None = None) -> subprocess.CompletedProcess:
    env = child_env(home) if columns is None else child_env(home, COLUMNS=str(columns))
    return subprocess.run(
        [sys.executable, "-m", "ling_local", *args],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_profiles_lists_the_shipped_profiles(tmp_path) -> None:
    out = _run(tmp_path, "profiles")
    assert out.returncode == 0, out.stderr
    assert "tiny" in out.stdout


def test_profile_names_are_never_cut_at_80_columns(tmp_path) -> None:
    from ling_local.config import list_profiles

    out = _run(tmp_path, "profiles", columns=80)
    assert out.returncode == 0, out.stderr
    assert max(len(line) for line in out.stdout.splitlines()) <= 80
    cells = {c.strip() for line in out.stdout.splitlines() for c in line.split("│")}
    for name in list_profiles():
        assert name in cells, f"{name} is not shown whole:\n{out.stdout}"
    assert "…" not in out.stdout


def test_run_ids_are_never_cut_at_80_columns(tmp_path, monkeypatch) -> None:
    from ling_local.agents.runlog import RunLog, new_run_id

    monkeypatch.setenv("LING_LOCAL_HOME", str(tmp_path))  # the run log the CLI reads
    ids = [new_run_id() for _ in range(3)]
    with RunLog() as log:
        for i, run_id in enumerate(ids):
            log.create(run_id, "review-and-fix-every-module-of-the-project-" * (i + 1), ["a"], {})
    out = _run(tmp_path, "chain", "list", columns=80)
    assert out.returncode == 0, out.stderr
    assert max(len(line) for line in out.stdout.splitlines()) <= 80
    cells = {c.strip() for line in out.stdout.splitlines() for c in line.split("│")}
    assert set(ids) <= cells, out.stdout


def test_help_shows_flags_as_flags(tmp_path) -> None:
    for args in (("--help",), ("serve", "--help"), ("chain", "list", "--help")):
        out = _run(tmp_path, *args, columns=80)
        assert out.returncode == 0, out.stderr
        assert "--help" in out.stdout and "<bool>" not in out.stdout, out.stdout
    serve = _run(tmp_path, "serve", "--help", columns=80).stdout
    assert "<int>" in serve  # options that take a value still say what kind


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
