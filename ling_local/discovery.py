"""How clients find the daemon: a runtime file (url, pid, profile) and a bearer-token file
(0600). ``LING_LOCAL_URL`` / ``LING_LOCAL_TOKEN`` override both."""

from __future__ import annotations

import errno
import json
import logging
import os
import secrets
import stat
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from ling_local import paths
from ling_local.errors import ConfigError

__all__ = [
    "DaemonInfo",
    "daemon_url",
    "ensure_token",
    "read_daemon_info",
    "read_token",
    "remove_daemon_info",
    "write_daemon_info",
]

log = logging.getLogger(__name__)


@dataclass(slots=True)
class DaemonInfo:
    url: str
    """``http://127.0.0.1:PORT`` or ``unix:/path/to/socket``."""
    pid: int
    profile: str
    model: str
    started: float


#: A fresh token is `secrets.token_urlsafe(32)`: 43 characters, 256 random bits. A shorter
#: one was not made here (or was cut short) and is replaced.
TOKEN_MIN_CHARS = 43


def ensure_token() -> str:
    """Return the bearer token, creating a random one (mode 0600) on first use.

    An existing token file is used only when it is a regular file of this user's, that
    nobody else could have read or written, holding a token of full length; otherwise it
    is replaced, and the log says why. The new file is created with O_EXCL | O_NOFOLLOW:
    never through a symbolic link, and never over a file another process just made."""
    path = paths.token_file()
    directory = paths.ensure_private_dir(path.parent)
    st = directory.stat()
    if st.st_uid == os.getuid() and st.st_mode & 0o077:  # others could swap the file
        log.warning("%s was mode %o; made it 0700", directory, stat.S_IMODE(st.st_mode))
        directory.chmod(0o700)
    for _ in range(3):
        token, problem = _existing_token(path)
        if token is not None:
            return token
        if problem is not None:
            log.warning("replacing the token file %s: %s", path, problem)
            try:
                path.unlink()
            except FileNotFoundError:
                pass
            except OSError as err:
                raise ConfigError(
                    f"the token file {path} cannot be trusted ({problem}) nor replaced "
                    f"({err.strerror}); remove it"
                ) from None
        token = secrets.token_urlsafe(32)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(path, flags, 0o600)
        except FileExistsError:
            continue  # another daemon wrote one a moment ago: read that one
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(token + "\n")
        return token
    raise ConfigError(f"could not create the token file {path}")


def _existing_token(path: Path) -> tuple[str | None, str | None]:
    """(token, None) when the file can be trusted; (None, why not) when it is there but
    cannot; (None, None) when there is none."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None, None
    except OSError as err:
        if err.errno == errno.ELOOP:
            return None, "it is a symbolic link"
        return None, f"it cannot be read ({err.strerror})"
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None, "it is not a regular file"
        if st.st_uid != os.getuid():
            return None, f"it belongs to user id {st.st_uid}, not to this user"
        if st.st_mode & 0o077:
            return None, f"its mode was {stat.S_IMODE(st.st_mode):o}: others could read or write it"
        data = os.read(fd, 4096)
    finally:
        os.close(fd)
    token = data.decode("utf-8", "replace").strip()
    if len(token) < TOKEN_MIN_CHARS or not token.isascii() or not token.isprintable():
        return None, f"the token in it is too short or malformed ({len(token)} characters)"
    return token, None


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
