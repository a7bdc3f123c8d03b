"""Every command and code block in the README, run the way a user pastes it: against a real
daemon started with the README's own command, in a fresh home directory.

Each fenced block in README.md carries a `<!-- readme-test: KIND -->` comment saying how it
is checked; a block without one fails this file, so a new block cannot go untested. Only the
blocks that need a GPU (or SGLang) are skipped. The port is the one change made to a block:
8741 becomes the test daemon's free port.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.support import REPO

README = REPO / "README.md"
DEFAULT_PORT = "8741"
_BLOCK = re.compile(r"^([ \t]*)```(\w*)\n(.*?)^[ \t]*```[ \t]*$", re.M | re.S)
_MARK = re.compile(r"<!-- readme-test: ([a-z-]+) -->\s*$")
KINDS = {"serve", "test-command", "sh", "python", "local-model", "needs-gpu"}


def _blocks() -> list[tuple[str, str, str, int]]:
    """(kind, language, code, line) of every fenced block, the kind from the comment above."""
    text = README.read_text()
    found = []
    for m in _BLOCK.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        above = text[: m.start()].rstrip().splitlines()[-1] if m.start() else ""
        mark = _MARK.search(above)
        indent = len(m[1])  # a block inside a list item is indented with its fence
        code = "\n".join(row[indent:] for row in m[3].splitlines())
        found.append((mark[1] if mark else "", m[2], code, line))
    return found


BLOCKS = _blocks()


def test_every_block_says_how_it_is_tested() -> None:
    assert BLOCKS, "no code blocks found in README.md"
    unmarked = [line for kind, _, _, line in BLOCKS if kind not in KINDS]
    assert not unmarked, f"README.md blocks without a known readme-test mark at lines {unmarked}"


def test_readme_stays_short() -> None:
    assert len(README.read_text().splitlines()) <= 250


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def user_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A fresh user: an empty home, no XDG or LING_LOCAL variables, the venv on PATH."""
    home = tmp_path_factory.mktemp("user-home")
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("LING_LOCAL_", "XDG_")) and k != "VIRTUAL_ENV"
    }
    bin_dir = str(Path(sys.executable).parent)
    env.update(
        HOME=str(home),
        PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",
        PYTHONPATH=str(REPO),
        PYTHONUNBUFFERED="1",
    )
    return env


def _serve_command() -> list[str]:
    (code,) = [code for kind, _, code, _ in BLOCKS if kind == "serve"]
    return shlex.split(code.split("&&")[-1])


def _start(argv: list[str], env: dict[str, str], port: int, log: Path) -> subprocess.Popen:
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [*argv, "--port", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=str(REPO),
            start_new_session=True,
        )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"{argv} exited {proc.returncode}:\n{log.read_text()}"
        try:
            health = httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).json()
            if health.get("state") == "ready":
                return proc
        except (httpx.HTTPError, ValueError):
            pass
        time.sleep(0.1)
    _stop(proc)
    raise AssertionError(f"{argv} did not become ready:\n{log.read_text()}")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)


@pytest.fixture(scope="module")
def readme_daemon(user_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory):
    """The daemon as the README starts it (its command, with a free port)."""
    port = _free_port()
    log = tmp_path_factory.mktemp("readme-daemon") / "serve.log"
    proc = _start(_serve_command(), user_env, port, log)
    yield port
    _stop(proc)


def _run(argv: list[str], env: dict[str, str], timeout: float = 300, cwd: Path = REPO) -> str:
    done = subprocess.run(
        argv, env=env, cwd=str(cwd), capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, f"{argv} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _cases(kind: str) -> list:
    return [pytest.param(code, id=f"line{line}") for k, _, code, line in BLOCKS if k == kind] or [
        pytest.param("", marks=pytest.mark.skip(reason=f"no {kind} block in the README"))
    ]


def test_the_serve_command_installs_what_the_readme_uses() -> None:
    """The install half of the first command is what CI runs before the tests, plus the
    extra the examples need; the daemon half is what `readme_daemon` runs."""
    (code,) = [code for kind, _, code, _ in BLOCKS if kind == "serve"]
    assert _serve_command() == ["ling-local", "serve"]
    extras = re.search(r"-e '\.\[([\w,-]+)\]'", code)
    assert extras, code
    pyproject = (REPO / "pyproject.toml").read_text()
    for extra in extras[1].split(","):
        assert re.search(rf"^{re.escape(extra)} = \[", pyproject, re.M), extra


def test_the_test_command_is_what_ci_runs() -> None:
    (code,) = [code for kind, _, code, _ in BLOCKS if kind == "test-command"]
    assert code.strip() in (REPO / ".ci" / "run").read_text()


@pytest.mark.parametrize("code", _cases("sh"))
def test_shell_block(
    code: str, readme_daemon: int, user_env: dict[str, str], tmp_path: Path
) -> None:
    """In a copy of the checkout's examples, so what a block writes stays out of the repo."""
    shutil.copytree(REPO / "examples", tmp_path / "examples")
    script = code.replace(DEFAULT_PORT, str(readme_daemon))
    out = _run(["bash", "-e", "-o", "pipefail", "-c", script], user_env, cwd=tmp_path)
    assert out.strip()


@pytest.mark.parametrize("code", _cases("python"))
def test_python_block(
    code: str, readme_daemon: int, user_env: dict[str, str], tmp_path: Path
) -> None:
    script = tmp_path / "snippet.py"
    script.write_text(code.replace(DEFAULT_PORT, str(readme_daemon)))
    env = {**user_env, "LING_LOCAL_URL": f"http://127.0.0.1:{readme_daemon}"}
    out = _run([sys.executable, str(script)], env)
    assert out.strip()
    # What a snippet prints ends its last line (else the shell prompt lands on it), and a
    # value printed after streamed text starts a line of its own.
    assert out.endswith("\n"), f"the output does not end with a newline: {out[-80:]!r}"
    glued = [line for line in out.splitlines() if "Timings(" in line[1:]]
    assert not glued, f"printed on the streamed text's line: {glued}"


@pytest.mark.parametrize("code", _cases("local-model"))
def test_local_model_block(code: str, user_env: dict[str, str], tmp_path: Path) -> None:
    """`--profile local` on a model directory: a small random Llama stands in for the
    README's example path; the rest of the command is run as written."""
    from ling_local.bench.random_model import build_random_llama

    model = build_random_llama(tmp_path / "model", vocab_size=1024, hidden_size=64, num_layers=2)
    (assign, *command) = shlex.split(code.strip())
    name, _, _ = assign.partition("=")
    env = {**user_env, name: str(model), "HOME": str(tmp_path / "home")}
    port = _free_port()
    proc = _start(command, env, port, tmp_path / "serve.log")
    try:
        token = (Path(env["HOME"]) / ".config" / "ling-local" / "token").read_text().strip()
        reply = httpx.post(
            f"http://127.0.0.1:{port}/v1/completions",
            headers={"Authorization": f"Bearer {token}"},
            json={"prompt": "def f(x):\n", "max_tokens": 4},
            timeout=60,
        )
        assert reply.status_code == 200, reply.text
    finally:
        _stop(proc)


@pytest.mark.parametrize("code", _cases("needs-gpu"))
def test_gpu_block(code: str) -> None:
    pytest.skip("needs GPUs and SGLang (run on a GPU machine)")


def test_commands_named_in_the_text_exist(user_env: dict[str, str]) -> None:
    """`ling-local <command>` written inline in the prose: each one is a real command."""
    text = README.read_text()
    commands = set(re.findall(r"`ling-local ([a-z]+)", text))
    assert {"serve", "lsp", "tui", "doctor", "profiles"} <= commands
    for command in sorted(commands):
        _run(["ling-local", command, "--help"], user_env, timeout=60)
