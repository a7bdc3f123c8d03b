"""The CLI as a user runs it (in a subprocess)."""

from __future__ import annotations

import itertools
import re
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


def _table(out: str) -> list[dict[str, str]]:
    """The rows of a Rich table as printed (header -> cell text, a wrapped cell's lines
    joined with spaces), so a test can see whether a whole value is there."""
    lines = [line for line in out.splitlines() if line.startswith(("┃", "│"))]
    header = [c.strip() for c in lines[0].strip("┃").split("┃")]
    rows: list[dict[str, list[str]]] = []
    for line in lines[1:]:
        cells = [c.strip() for c in line.strip("│").split("│")]
        if cells[0] or not rows:  # a new row: its first (identifier) column is never wrapped
            rows.append({h: [] for h in header})
        for h, cell in zip(header, cells, strict=True):
            if cell:
                rows[-1][h].append(cell)
    return [{h: " ".join(parts) for h, parts in row.items()} for row in rows]


def _same_text(shown: str, value: str) -> bool:
    """Equal once wrapping is undone (a folded path has no space where it was cut)."""
    return "".join(shown.split()) == "".join(value.split())


def test_version(tmp_path) -> None:
    import ling_local

    out = _run(tmp_path, "--version", columns=80)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"ling-local {ling_local.__version__}"


def test_profiles_keeps_every_column_at_80_columns(tmp_path) -> None:
    from ling_local.config import list_profiles, load_profile

    out = _run(tmp_path, "profiles", columns=80)
    assert out.returncode == 0, out.stderr
    assert max(len(line) for line in out.stdout.splitlines()) <= 80
    rows = {row["name"]: row for row in _table(out.stdout)}
    assert set(rows) == set(list_profiles()), out.stdout
    for name, file in list_profiles().items():
        row = rows[name]
        assert _same_text(row["file"], file.name), out.stdout  # its directory is said below
        assert _same_text(row["description"], load_profile(str(file)).description), out.stdout
    assert "too narrow" not in out.stdout


def test_chain_list_keeps_every_column_at_80_columns(tmp_path, monkeypatch) -> None:
    from ling_local.agents.runlog import RunLog, new_run_id

    monkeypatch.setenv("LING_LOCAL_HOME", str(tmp_path))  # the run log the CLI reads
    with RunLog() as log:
        for i in range(3):
            log.create(new_run_id(), "review-and-fix-every-module-" * (i + 1), ["a", "b"], {})
    out = _run(tmp_path, "chain", "list", columns=80)
    assert out.returncode == 0, out.stderr
    assert max(len(line) for line in out.stdout.splitlines()) <= 80
    rows = _table(out.stdout)
    assert len(rows) == 3 and all(row["steps"] == "2" for row in rows), out.stdout
    for row in rows:  # the date and the time of day, whole
        assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", row["started"]), out.stdout
    assert "too narrow" not in out.stdout


def test_bench_help_descriptions_wrap_at_the_terminal_not_mid_sentence(tmp_path) -> None:
    """Each line of a command's description in `--help` is as full as the terminal allows:
    the next line's first word would not have fitted on it."""
    for group in ("bench", "chain"):
        out = _run(tmp_path, group, "--help", columns=80)
        assert out.returncode == 0, out.stderr
        panel = out.stdout.split("Commands")[1].splitlines()[1:]
        entries: list[list[str]] = []
        for line in panel:
            match = re.match(r"│ (\S*)( +)(.*?) *│$", line)
            if not match:
                continue
            if match[1]:
                start = 2 + len(match[1]) + len(match[2])
                width = len(line) - start - 2
                entries.append([])
            entries[-1].append(match[3])
        assert len(entries) >= 4, out.stdout
        for lines in entries:
            for line, following in itertools.pairwise(lines):
                assert len(line) + 1 + len(following.split()[0]) > width, (line, following)


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
