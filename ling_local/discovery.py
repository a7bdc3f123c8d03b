"""How clients find the daemon: a runtime file (url, pid, profile) and a bearer-token file
(0600). ``LING_LOCAL_URL`` / ``LING_LOCAL_TOKEN`` override both."""

from __future__ import annotations

import json
import os
import secrets
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from ling_local import paths

__all__ = [
    "DaemonInfo",
    "daemon_url",
    "ensure_token",
    "read_daemon_info",
    "read_token",
    "remove_daemon_info",
    "write_daemon_info",
]


@dataclass(slots=True)
class DaemonInfo:
    url: str
    """``http://127.0.0.1:PORT`` or ``unix:/path/to/socket``."""
    pid: int
    profile: str
    model: str
    started: float


def ensure_token() -> str:
    """Return the bearer token, creating a random one (mode 0600) on first use."""
    path = paths.token_file()
    if path.is_file():
        token = path.read_text(encoding="utf-8").strip()
        if token:
            if path.stat().st_mode & 0o077:  # someone loosened it: tighten again
                path.chmod(0o600)
            return token
    paths.ensure_private_dir(path.parent)
    token = secrets.token_urlsafe(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(token + "\n")
    path.chmod(0o600)
    return token


def read_token() -> str | None:
    env = os.environ.get("LING_LOCAL_TOKEN")
    if env:
        return env
    try:
        return paths.token_file().read_text(encoding="utf-8").strip() or None
    except OSError:
        return None


def write_daemon_info(url: str, profile: str, model: str) -> Path:
    path = paths.runtime_file()
    paths.ensure_private_dir(path.parent)
    info = DaemonInfo(url=url, pid=os.getpid(), profile=profile, model=model, started=time.time())
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(info)), encoding="utf-8")
    tmp.replace(path)
    return path


def read_daemon_info() -> DaemonInfo | None:
    """The running daemon's info, or None when there is none (stale files are ignored)."""
    path = paths.runtime_file()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        info = DaemonInfo(**data)
    except (OSError, ValueError, TypeError):
        return None
    if not _alive(info.pid):
        return None
    return info


def remove_daemon_info() -> None:
    path = paths.runtime_file()
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
        if info.get("pid") == os.getpid():
            path.unlink()
    except (OSError, ValueError):
        pass


def daemon_url() -> str | None:
    env = os.environ.get("LING_LOCAL_URL")
    if env:
        return env
    info = read_daemon_info()
    return info.url if info else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
