"""VS Code itself with our extension: code-server (VS Code in a browser) with the built .vsix
installed, driven by Playwright in Debian's Chromium, against a real daemon on the embedded
default model (`ling-local serve --profile tiny`).

The model is small and gets retrained, so these tests assert behaviour, never a completion:
a suggestion appears, accepting it (whole, by word, by line) inserts exactly the text shown,
and what is shown while typing on always belongs to the text on screen.

editors/vscode/ci.sh installs what this needs and runs it (`.ci/run` calls it); without that
setup the tests are skipped.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support import REPO, DaemonProcess, child_env, start_daemon

pytestmark = [pytest.mark.vscode, pytest.mark.slow]

CODE_SERVER = os.environ.get("LING_LOCAL_CODE_SERVER", "")
VSIX = Path(os.environ.get("LING_LOCAL_VSIX") or REPO / "editors/vscode/ling-local.vsix")
ARTIFACTS = os.environ.get("LING_LOCAL_E2E_ARTIFACTS")
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--no-first-run",
]  # fmt: skip

# A plain editor: no word-based suggestion widget competing for Enter and Tab, no welcome
# page or chat panel. Accept-line has no default key; the test gives it one.
USER_SETTINGS = {
    "workbench.startupEditor": "none",
    "chat.disableAIFeatures": True,
    "security.workspace.trust.enabled": False,
    "telemetry.telemetryLevel": "off",
    "extensions.autoUpdate": False,
    "extensions.autoCheckUpdates": False,
    "update.mode": "none",
    "workbench.tips.enabled": False,
    "editor.quickSuggestions": {"other": "off", "comments": "off", "strings": "off"},
    "editor.suggestOnTriggerCharacters": False,
    "editor.wordBasedSuggestions": "off",
    # Use the daemon the test started; a daemon started by the server would outlive the test.
    "ling-local.daemon.autoStart": False,
}
KEYBINDINGS = [
    {
        "key": "ctrl+alt+l",
        "command": "editor.action.inlineSuggest.acceptNextLine",
        "when": "inlineSuggestionVisible",
    }
]

# The ghost text on screen: the part on the cursor's line (`.ghost-text-decoration`), then
# the lines VS Code draws below it (`.suggest-preview-text`), spaces as U+00A0.
GHOST_JS = """() => {
  const editor = document.querySelector('.editor-instance .monaco-editor.focused')
    || document.querySelector('.editor-instance .monaco-editor');
  if (!editor) return null;
  const inline = [...editor.querySelectorAll('.view-lines .ghost-text-decoration')]
    .map(e => e.textContent).join('');
  const zone = editor.querySelector('.suggest-preview-text');
  const below = zone ? [...zone.querySelectorAll(':scope > .view-line')]
    .sort((a, b) => parseFloat(a.style.top) - parseFloat(b.style.top))
    .map(e => e.textContent) : [];
  const cursor = editor.querySelector('.cursors-layer .cursor');
  let line = null;
  if (cursor) {
    for (const view of editor.querySelectorAll('.view-lines > .view-line')) {
      if (view.style.top === cursor.style.top) {
        line = [...view.querySelectorAll('span > span')]
          .filter(e => !e.className.includes('ghost-text'))
          .map(e => e.textContent).join('');
      }
    }
  }
  const nb = s => s.replace(/\\u00a0/g, ' ');
  return {ghost: nb([inline, ...below].join('\\n')), line: line === null ? null : nb(line)};
}"""


def _missing() -> str | None:
    if not VSIX.is_file():
        return f"{VSIX} is not built (npm ci && npm run package in editors/vscode)"
    if not Path(CHROMIUM).is_file():
        return "no /usr/bin/chromium (apt-get install chromium)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install -e '.[vscode-test]')"
    return None


@pytest.fixture(scope="module", autouse=True)
def _requirements() -> None:
    """Skipped unless editors/vscode/ci.sh (or a person) set LING_LOCAL_CODE_SERVER; once
    it is set, anything else missing is an error, so CI cannot pass by skipping."""
    if not CODE_SERVER:
        pytest.skip("LING_LOCAL_CODE_SERVER is not set: editors/vscode/ci.sh runs this")
    assert Path(CODE_SERVER).is_file(), f"LING_LOCAL_CODE_SERVER={CODE_SERVER} does not exist"
    reason = _missing()
    assert reason is None, reason


@pytest.fixture(scope="module")
def tiny_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    """`ling-local serve` on the shipped model, as a user starts it."""
    daemon = start_daemon("tiny", tmp_path_factory.mktemp("ling-home"), timeout=300)
    yield daemon
    daemon.stop()


@dataclass
class VSCode:
    page: object  # playwright.sync_api.Page
    workspace: Path
    home: Path
    user: Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def vscode(
    tiny_daemon: DaemonProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[VSCode]:
    from playwright.sync_api import sync_playwright

    root = tmp_path_factory.mktemp("vscode")
    workspace = root / "project"
    # The extension finds `ling-local` in the project's .venv, as it would in a user's project.
    (workspace / ".venv" / "bin").mkdir(parents=True)
    (workspace / ".venv" / "bin" / "ling-local").symlink_to(
        Path(sys.executable).with_name("ling-local")
    )
    # Files exist before VS Code starts: quick open may not list a file created later
    # until its file watcher reports it.
    (workspace / "fib.py").write_text('"""Small math helpers."""\n\n\n')
    (workspace / "area.py").write_text("import math\n\n\ndef circle_area(r):\n    ")
    user = root / "user-data"
    (user / "User").mkdir(parents=True)
    (user / "User" / "settings.json").write_text(json.dumps(USER_SETTINGS, indent=1))
    (user / "User" / "keybindings.json").write_text(json.dumps(KEYBINDINGS, indent=1))
    env = child_env(
        tiny_daemon.home,
        HOME=str(root / "home"),
        XDG_CONFIG_HOME=str(root / "xdg-config"),
        XDG_DATA_HOME=str(root / "xdg-data"),
        XDG_CACHE_HOME=str(root / "xdg-cache"),
    )
    dirs = ["--user-data-dir", str(user), "--extensions-dir", str(root / "extensions")]
    install = subprocess.run(
        [CODE_SERVER, *dirs, "--install-extension", str(VSIX)],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert install.returncode == 0, install.stdout + install.stderr
    port = _free_port()
    log = root / "code-server.log"
    with open(log, "wb") as out:
        server = subprocess.Popen(
            [CODE_SERVER, *dirs, "--auth", "none", "--bind-addr", f"127.0.0.1:{port}",
             "--disable-telemetry", "--disable-update-check", "--disable-workspace-trust",
             "--disable-getting-started-override", "--ignore-last-opened", str(workspace)],
            env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            _open_workbench(page, f"http://127.0.0.1:{port}/?folder={workspace}", log)
            yield VSCode(page, workspace, tiny_daemon.home, user)
            browser.close()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, 15)  # code-server, its extension host and `ling-local lsp`
        server.wait(timeout=30)
        if ARTIFACTS:  # what a failure needs, kept beyond pytest's tmp rotation
            logs = Path(ARTIFACTS) / "logs"
            logs.mkdir(parents=True, exist_ok=True)
            state = tiny_daemon.home / "state"
            kept = [log, *_ext_logs(user), *state.glob("logs/*.log"), state / "lsp/telemetry.jsonl"]
            for found in filter(Path.is_file, kept):
                shutil.copy(found, logs / found.name)


def _ext_logs(user: Path) -> list[Path]:
    """The extension's output channel, as VS Code writes it to disk."""
    return sorted(user.glob("logs/*/exthost*/ling-local.ling-local/ling-local.log"))


def _open_workbench(page, url: str, log: Path) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            page.goto(url)
            break
        except Exception:
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"code-server did not answer:\n{log.read_text()[-3000:]}"
                ) from None
            time.sleep(0.25)
    page.wait_for_selector(".monaco-workbench", timeout=60_000)


def _ghost(page) -> dict:
    return page.evaluate(GHOST_JS) or {"ghost": "", "line": None}


def _wait_ghost(page, timeout: float) -> str:
    """The ghost text once it is on screen and has stayed the same for 300 ms."""
    deadline = time.monotonic() + timeout
    last, since = "", time.monotonic()
    while time.monotonic() < deadline:
        text = _ghost(page)["ghost"]
        if text != last:
            last, since = text, time.monotonic()
        elif text and time.monotonic() - since >= 0.3:
            return text
        time.sleep(0.05)
    return ""


def _saved(page, path: Path) -> str:
    """Save (Ctrl+S) and read the file back: the document as VS Code holds it."""
    before = path.stat().st_mtime_ns
    page.keyboard.press("Control+s")
    deadline = time.monotonic() + 10
    while path.stat().st_mtime_ns == before and time.monotonic() < deadline:
        time.sleep(0.05)
    return path.read_text()


def _telemetry(home: Path) -> list[dict]:
    path = home / "state" / "lsp" / "telemetry.jsonl"
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _screenshot(vs: VSCode, tmp_path: Path, name: str) -> Path:
    shot = tmp_path / f"{name}.png"
    vs.page.screenshot(path=str(shot))
    if ARTIFACTS:
        Path(ARTIFACTS).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(ARTIFACTS) / shot.name)
    return shot


def _open(vs: VSCode, name: str) -> None:
    page = vs.page
    page.keyboard.press("Control+p")
    page.wait_for_selector(".quick-input-widget input", state="visible")
    page.keyboard.type(name)
    page.wait_for_selector(f".quick-input-list [aria-label*='{name}']", timeout=30_000)
    page.keyboard.press("Enter")
    page.wait_for_selector(f".tab.active[aria-label*='{name}']", timeout=30_000)
    page.wait_for_selector(".editor-instance .monaco-editor.focused", timeout=30_000)


def test_status_bar_shows_the_daemon_and_opens_the_log(vscode: VSCode, tmp_path: Path) -> None:
    page = vscode.page
    item = page.get_by_role("button", name="ling-local: ready", exact=True)
    item.wait_for(timeout=120_000)
    item.click()
    # The output channel: the extension's own lines (where it found the server) are there.
    page.get_by_text("found in the project's .venv").first.wait_for(timeout=30_000)
    _screenshot(vscode, tmp_path, "vscode-log")
    page.keyboard.press("Control+j")  # close the panel again


def test_ghost_text_accept_and_type_on(vscode: VSCode, tmp_path: Path) -> None:
    page, path = vscode.page, vscode.workspace / "fib.py"
    page.get_by_role("button", name="ling-local: ready", exact=True).wait_for(timeout=120_000)
    _open(vscode, "fib.py")
    page.keyboard.press("Control+End")
    page.keyboard.type("def fibonacci(n):", delay=60)
    page.keyboard.press("Enter")
    try:
        _accept(vscode, path, tmp_path)
        _type_on(vscode, path)
    finally:
        _screenshot(vscode, tmp_path, "vscode-ghost-text")
    errors = [
        line for f in _ext_logs(vscode.user) for line in f.read_text().splitlines()
        if "[error]" in line
    ]  # fmt: skip
    assert not errors, errors


def _accept(vs: VSCode, path: Path, tmp_path: Path) -> None:
    page = vs.page
    ghost = _wait_ghost(page, timeout=60)
    assert ghost.strip(), "no ghost text within 60 s of `def fibonacci(n):` + Enter"
    _screenshot(vs, tmp_path, "vscode-suggestion")
    print(f"suggestion: {ghost!r}")
    shown = [e["chars"] for e in _telemetry(vs.home) if e["event"] == "shown"]
    assert len(ghost) in shown, f"the server sent no {len(ghost)}-character suggestion: {shown}"
    before = _saved(page, path)
    assert _ghost(page)["ghost"] == ghost, "saving the file hid the suggestion"
    assert before.endswith("def fibonacci(n):\n    "), repr(before)

    page.keyboard.press("Tab")
    # The next suggestion, prepared as soon as VS Code runs the accepted item's command
    # (saving first would cancel VS Code's request for it).
    nxt = _wait_ghost(page, timeout=10)
    after = _saved(page, path)
    assert after == before + ghost, "Tab did not insert exactly the suggestion"
    accepted = _wait_for(lambda: [e for e in _telemetry(vs.home) if e["event"] == "accepted"])
    assert accepted[-1]["chars"] == len(ghost), "VS Code did not run the item's command"

    # VS Code's own accept-word (Ctrl+Right) and accept-line take part of a suggestion.
    print(f"next suggestion: {nxt!r}")
    if not nxt.strip():
        page.keyboard.press("Enter")
        nxt = _wait_ghost(page, timeout=60)
        after = _saved(page, path)
    assert nxt.strip(), "no second suggestion"
    page.keyboard.press("Control+ArrowRight")
    _partially_accepted(page, path, after, nxt, "accept-word")
    rest = _ghost(page)["ghost"]
    if rest:
        page.keyboard.press("Control+Alt+l")
        _partially_accepted(page, path, after, nxt, "accept-line")


def _partially_accepted(page, path: Path, base: str, ghost: str, how: str) -> None:
    text = _saved(page, path)
    assert text.startswith(base), f"{how} changed text before the cursor"
    taken = text[len(base) :]
    assert taken and ghost.startswith(taken), f"{how} inserted {taken!r}, not a prefix of {ghost!r}"
    rest = _ghost(page)["ghost"]
    assert rest in ("", ghost[len(taken) :]), f"after {how}, {rest!r} is shown"


def _type_on(vs: VSCode, path: Path) -> None:
    """Type on, a few keys at a time with pauses for suggestions to come, watching the
    screen: every ghost text shown must belong to the line as it is then (new, or the rest
    of one being typed through), never a suggestion made for an earlier state of the line."""
    page = vs.page
    page.keyboard.press("Escape")
    page.keyboard.press("End")
    seen: list[tuple[str, str]] = []

    def look() -> str:
        state = _ghost(page)
        if state["line"] is not None:
            seen.append((state["line"], state["ghost"]))
        return state["ghost"]

    chunks = ["\n", "total = ", "fibonacci(", "10", ")", "\n", "print(", "total", ")", "\n"]
    for chunk in chunks:
        for key in chunk:
            page.keyboard.press("Enter" if key == "\n" else key)
            look()
            time.sleep(0.03)
            look()
        pause = time.monotonic() + 3
        while time.monotonic() < pause and not look():
            time.sleep(0.05)
    shown = list(dict.fromkeys(seen))
    print("seen while typing:", *shown, sep="\n  ")
    stale = [
        (line, ghost, earlier, old)
        for i, (line, ghost) in enumerate(shown)
        for earlier, old in shown[:i]
        if len(ghost.strip()) >= 3 and earlier != line and _stale(earlier, old, line, ghost)
    ]
    assert not stale, f"stale suggestions: {stale[:3]}"
    assert sum(1 for _, g in shown if g) >= 2, "fewer than 2 suggestions while typing: no check"
    text = _saved(page, path)
    assert "total = fibonacci(10)\n" in text and "print(total)\n" in text, text


def _stale(line0: str, ghost0: str, line: str, ghost: str) -> bool:
    """`ghost`, shown on `line`, is (the end of) `ghost0`, made for `line0`, although the
    keys typed since do not match it (typing through a suggestion keeps line + ghost)."""
    if ghost == ghost0:
        return True
    return ghost0.endswith(ghost) and line.startswith(line0) and line + ghost != line0 + ghost0


def _wait_for(fn, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"condition not met within {timeout}s")


def _run_command(page, title: str) -> None:
    page.keyboard.press("F1")
    page.wait_for_selector(".quick-input-widget input", state="visible")
    page.keyboard.type(title)
    page.wait_for_selector(f".quick-input-list [aria-label*='{title}']", timeout=30_000)
    page.keyboard.press("Enter")
    page.wait_for_selector(".quick-input-widget", state="hidden")


def _status(page, state: str, timeout: float = 60) -> None:
    page.get_by_role("button", name=f"ling-local: {state}", exact=True).wait_for(
        timeout=timeout * 1000
    )


def test_commands_disable_enable_trigger_restart(vscode: VSCode, tmp_path: Path) -> None:
    page = vscode.page
    _status(page, "ready", timeout=120)
    _open(vscode, "area.py")
    page.keyboard.press("Control+End")

    _run_command(page, "ling-local: Disable Completions")
    _status(page, "disabled")
    _run_command(page, "ling-local: Trigger Suggestion")
    assert not _wait_ghost(page, timeout=3), "a suggestion while disabled"

    _run_command(page, "ling-local: Enable Completions")
    _status(page, "ready")
    _run_command(page, "ling-local: Trigger Suggestion")
    assert _wait_ghost(page, timeout=60), "no suggestion on Trigger Suggestion"
    page.keyboard.press("Escape")
    assert not _wait_ghost(page, timeout=1)

    def starts() -> int:
        return sum(f.read_text().count("] starting ") for f in _ext_logs(vscode.user))

    before = starts()
    _run_command(page, "ling-local: Restart Language Server")
    _wait_for(lambda: starts() > before, timeout=30)  # a new `ling-local lsp`, and then
    _status(page, "ready", timeout=120)  # the status bar says starting until it runs
    _run_command(page, "ling-local: Trigger Suggestion")
    assert _wait_ghost(page, timeout=60), "no suggestion after restarting the server"
    _screenshot(vscode, tmp_path, "vscode-commands")
