"""Fixtures for the SGLang engine tests: profiles that launch the protocol-level stand-in
(tests/sglang_standin.py) through the real launch path, as ``python -m
sglang.launch_server``, plus helpers to inspect the child's process group."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.support import REPO

SHIM = REPO / "tests" / "sglang_shim"


def _toml_value(value) -> str:
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items()) + " }"
    return json.dumps(value)


def write_standin_profile(
    path: Path, model_dir: Path, *, name: str = "standin", env: dict | None = None, **sections
) -> Path:
    """An sglang profile whose child is the stand-in (PYTHONPATH puts the shim first)."""
    child_env = {"PYTHONPATH": f"{SHIM}{os.pathsep}{REPO}", "STANDIN_LOAD_S": "0.3"}
    child_env.update(env or {})
    child_env.update(sections.get("sglang", {}).pop("env", {}))
    base: dict[str, dict] = {
        "engine": {"kind": "sglang", "warmup": True},
        "model": {"path": str(model_dir), "name": name, "context_length": 2048},
        "prompt": {"chat_template": "plain"},
        "sglang": {
            "env": child_env,
            "startup_timeout_s": 60,
            "restart_backoff_s": 0.2,
        },
    }
    for key, values in sections.items():
        base.setdefault(key, {}).update(values)
    lines = [f'name = "{name}"']
    for section, values in base.items():
        lines.append(f"[{section}]")
        lines += [f"{k} = {_toml_value(v)}" for k, v in values.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes in a process group, read from /proc."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            found.append(int(entry.name))
    return found


@pytest.fixture
def standin_profile(tmp_path: Path, model_dir: Path):
    """Factory: ``standin_profile(**sections)`` -> a loaded Profile."""
    from ling_local.config import load_profile

    def make(**kw) -> object:
        return load_profile(write_standin_profile(tmp_path / "standin.toml", model_dir, **kw))

    return make
