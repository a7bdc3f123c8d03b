"""`ling-local tui` in a real terminal (tmux) at 80×24 and 200×50: the screen is laid out
without overlap. Skipped where tmux is not installed."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from tests.support import REPO, DaemonProcess, child_env
from tests.tui.conftest import seed_conversations
from tests.tui.pty_app import home_store

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


SOCKET = Path(tempfile.gettempdir()) / f"ling-tui-tmux-{uuid.uuid4().hex[:8]}"
"""A private tmux server: sessions of other tmux users on this machine cannot resize ours."""


def tmux(*args: str) -> str:
    command = ["tmux", "-S", str(SOCKET), "-f", "/dev/null", *args]
    return subprocess.run(command, check=True, capture_output=True, text=True).stdout


def capture(session: str) -> list[str]:
    return tmux("capture-pane", "-p", "-t", session).split("\n")[:-1]


def wait_for_screen(session: str, needles: list[str], timeout: float = 60.0) -> list[str]:
    """The screen once it shows every needle and has stopped changing (a settled frame)."""
    deadline = time.monotonic() + timeout
    previous: list[str] = []
    while True:
        lines = capture(session)
        if lines == previous and all(any(n in line for line in lines) for n in needles):
            return lines
        if time.monotonic() > deadline:
            raise AssertionError("screen never showed " + repr(needles) + ":\n" + "\n".join(lines))
        previous = lines
        time.sleep(0.3)


@pytest.mark.parametrize("size", [(80, 24), (200, 50)], ids=["80x24", "200x50"])
def test_tui_in_tmux_lays_out_without_overlap(
    daemon: DaemonProcess, tmp_path: Path, size: tuple[int, int]
) -> None:
    columns, rows = size
    home = tmp_path / "home"
    seed_conversations(home_store(home))
    env = child_env(
        home, LING_LOCAL_URL=daemon.url, LING_LOCAL_TOKEN=daemon.token, TERM="xterm-256color"
    )
    # `env -u`: a COLUMNS/LINES inherited from the test runner would pin the app's size.
    command = (
        "env -u COLUMNS -u LINES "
        + " ".join(
            shlex.quote(f"{k}={v}")
            for k, v in env.items()
            if k.startswith(("LING_", "PYTHON", "TERM", "PATH", "HOME"))
        )
        + f" {shlex.quote(sys.executable)} -m ling_local tui"
    )
    session = f"ling-tui-{uuid.uuid4().hex[:8]}"
    tmux(
        "new-session",
        "-d",
        "-s",
        session,
        "-x",
        str(columns),
        "-y",
        str(rows),
        "-c",
        str(REPO),
        command,
    )
    try:
        screen = wait_for_screen(session, ["ready · torch · test", "TTFT 84 ms", "Chains"])
        (tmp_path / f"capture-{columns}x{rows}.txt").write_text("\n".join(screen))
        assert len(screen) == rows
        assert all(len(line) <= columns for line in screen)
        assert "ling-local" in screen[0] and "Add two numbers" in screen[0]  # header
        footer, status = screen[-1], screen[-2]
        for key in ("^e Edit", "^n New", "^r Regen", "^s Settings", "f1 Help", "^g Chains"):
            assert key in footer, f"{key!r} missing from the footer: {footer!r}"
        assert "palette" in footer
        assert status.lstrip().startswith("● ready · torch · test")
        assert status.rstrip().endswith("last reply: TTFT 84 ms · 51.2 tok/s · accept 3.10")
        # The sidebar's edge is one unbroken column from below the header to above the prompt.
        edge = screen[1].index("▕")
        body = screen[1:-2]
        assert all(len(line) > edge and line[edge] in "▕▊" for line in body), "\n".join(body)
        left = "\n".join(line[:edge] for line in body)
        right = "\n".join(line[edge + 1 :] for line in body)
        assert "Add two numbers" in left and "Shell one-liners" in left
        assert "You" in right and "ling-tiny" in right and "Enter sends" in right
        assert "Shell one-liners" not in right and "Enter sends" not in left
        prompt_row = next(i for i, line in enumerate(screen) if "Enter sends" in line)
        stats_row = next(i for i, line in enumerate(screen) if "TTFT 84 ms (engine 61)" in line)
        assert stats_row < prompt_row - 1 < rows - 3  # the reply ends above the prompt box

        tmux("send-keys", "-t", session, "F1")
        help_screen = wait_for_screen(session, ["ling-local keys"])
        (tmp_path / f"capture-{columns}x{rows}-help.txt").write_text("\n".join(help_screen))
        assert "send the prompt" in "\n".join(help_screen)
        assert "f1 Help" in help_screen[-1]
    finally:
        subprocess.run(["tmux", "-S", str(SOCKET), "kill-server"], capture_output=True)
        SOCKET.unlink(missing_ok=True)
