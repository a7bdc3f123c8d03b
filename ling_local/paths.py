"""Where ling-local keeps its files: XDG directories, all relocatable by LING_LOCAL_HOME."""

from __future__ import annotations

import os
from pathlib import Path

APP = "ling-local"


def _xdg(var: str, default: str, sub: str) -> Path:
    home = os.environ.get("LING_LOCAL_HOME")
    if home:
        return Path(home).expanduser() / sub
    base = os.environ.get(var) or os.path.expanduser(default)
    return Path(base) / APP


def config_dir() -> Path:
    """User profiles and the bearer token."""
    return _xdg("XDG_CONFIG_HOME", "~/.config", "config")


def state_dir() -> Path:
    """Logs, conversations, chain runs."""
    return _xdg("XDG_STATE_HOME", "~/.local/state", "state")


def data_dir() -> Path:
    """Indexes and other rebuildable data."""
    return _xdg("XDG_DATA_HOME", "~/.local/share", "data")


def runtime_dir() -> Path:
    """The daemon's discovery file and default unix socket (falls back to the state dir)."""
    if os.environ.get("LING_LOCAL_HOME"):
        return _xdg("", "", "run")
    if os.environ.get("XDG_RUNTIME_DIR"):
        return Path(os.environ["XDG_RUNTIME_DIR"]) / APP
    return state_dir() / "run"


def token_file() -> Path:
    return config_dir() / "token"


def runtime_file() -> Path:
    return runtime_dir() / "daemon.json"


def log_dir() -> Path:
    return state_dir() / "logs"


def ensure_private_dir(path: Path) -> Path:
    """Create a directory only its owner can enter."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path
