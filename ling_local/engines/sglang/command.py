"""A profile turned into the real ``python -m sglang.launch_server`` command line and the
environment of the child process.

The daemon owns the address (127.0.0.1 on a port it holds until SGLang binds it), the API
key (random per start) and the model path. Key and port are given to SGLang in a private
``--config`` file, never on the command line, which any local user can read: a process
that does not know the port cannot bind it first. Two flags are always added:
``--incremental-streaming-output`` (each event carries only its new text and ids, so the
relay's work per event does not grow with the answer) and ``--skip-server-warmup``
(SGLang's own warm-up sends its API key to its URL before anyone has checked who serves
it; the daemon warms up itself, after that check). Everything else comes from the
profile, in the order a person would type it, so the Ling profiles reproduce the published
recipes flag for flag.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shlex
import socket
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ling_local import paths
from ling_local.config import SAFE_GPU_ENV, Profile

__all__ = [
    "LaunchCommand",
    "build_command",
    "child_environment",
    "local_model_dir",
    "model_context_length",
    "model_reference",
    "profile_flags",
    "reserve_port",
]

HOST = "127.0.0.1"
#: Set for every child: SGLang's logs reach the file (and the progress display) at once.
BASE_ENV = {"PYTHONUNBUFFERED": "1"}
#: Added to every command line: the relay reads deltas, and the daemon warms up itself.
DAEMON_FLAGS = ("--incremental-streaming-output", "--skip-server-warmup")


@dataclass(frozen=True, slots=True)
class LaunchCommand:
    argv: list[str]
    env: dict[str, str]
    """Only what the daemon adds to (or overrides in) its own environment."""
    port: int
    api_key: str
    key_file: Path
    """The ``--config`` YAML that gives SGLang its API key and port: any local user can
    read a process's command line (/proc/PID/cmdline), so neither is on it."""

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def redacted(self) -> str:
        """The command line as a log line (it holds no key; this is belt and braces)."""
        argv = ["***" if a == self.api_key else a for a in self.argv]
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items()))
        return f"{env} {shlex.join(argv)}".strip()

    def write_key_file(self) -> None:
        """Create the key file: this user's only (0600, in a 0700 directory), never through
        a symbolic link or over a file someone else made."""
        paths.ensure_private_dir(self.key_file.parent)
        with contextlib.suppress(FileNotFoundError):
            self.key_file.unlink()  # a leftover of a daemon that was killed
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(self.key_file, flags, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            # SGLang's --config turns each key into a flag; quoted, the key stays a string.
            f.write(f'api-key: "{self.api_key}"\nport: {self.port}\n')

    def remove_key_file(self) -> None:
        """SGLang reads its config file once, at start-up: the key need not stay on disk."""
        with contextlib.suppress(FileNotFoundError):
            self.key_file.unlink()


def model_reference(profile: Profile, value: str) -> str:
    """A local directory (absolute) or a Hugging Face id (``org/name``) passed on verbatim,
    as SGLang accepts both; ``org/name`` that exists on disk next to the profile wins."""
    path = profile.resolve_path(value)
    assert path is not None
    if value.startswith(("builtin:", "/", "~", ".")) or path.exists():
        return str(path)
    if value.count("/") == 1 and not Path(value).exists():
        return value
    return str(path)


def local_model_dir(reference: str) -> Path | None:
    """The directory holding a model given as a path or a Hugging Face id (in the local
    hub cache), or None when it is not on this machine yet."""
    if Path(reference).is_dir():
        return Path(reference)
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    found = try_to_load_from_cache(reference, "config.json")
    return Path(found).parent if isinstance(found, str) else None


def model_context_length(model_dir: Path | None) -> int | None:
    """The longest sequence a model was built for, from its config.json."""
    try:
        config = json.loads((model_dir / "config.json").read_text())  # type: ignore[operator]
    except (OSError, TypeError, ValueError):
        return None
    for key in ("max_position_embeddings", "max_sequence_length", "seq_length", "n_positions"):
        if isinstance(config.get(key), int):
            return config[key]
    return None


def profile_flags(profile: Profile) -> list[str]:
    """The launch_server flags a profile asks for (everything but address, key and model)."""
    s = profile.sglang
    flags: list[str] = []
    if s.tp_size != 1:
        flags += ["--tp-size", str(s.tp_size)]
    if s.ep_size is not None:
        flags += ["--ep-size", str(s.ep_size)]
    if profile.model.trust_remote_code:
        flags.append("--trust-remote-code")
    if s.speculative_algorithm:
        flags += ["--speculative-algorithm", s.speculative_algorithm]
        if profile.model.draft_path:
            draft = model_reference(profile, profile.model.draft_path)
            flags += ["--speculative-draft-model-path", draft]
    flags += s.args
    if s.mem_fraction_static is not None:
        flags += ["--mem-fraction-static", f"{s.mem_fraction_static:g}"]
    return flags


def build_command(profile: Profile, *, port: int, api_key: str) -> LaunchCommand:
    """The command line and environment of one SGLang start. The API key goes in a file
    (`LaunchCommand.write_key_file`) that the command names with ``--config``."""
    python = profile.sglang.python or sys.executable
    key_file = paths.runtime_dir() / f"sglang-{secrets.token_hex(8)}.yaml"
    argv = [
        python,
        "-m",
        "sglang.launch_server",
        "--model-path",
        model_reference(profile, profile.model.path),
        *profile_flags(profile),
        *DAEMON_FLAGS,
        "--host",
        HOST,
        "--config",
        str(key_file),
    ]
    env = dict(BASE_ENV)
    env.update(profile.sglang.env)
    if not profile.sglang.allow_nvlink_multicast:
        env.update(SAFE_GPU_ENV)
    return LaunchCommand(argv, env, port, api_key, key_file)


def child_environment(command: LaunchCommand, base: Mapping[str, str] | None = None) -> dict:
    """The daemon's environment minus its own settings and secrets, plus the command's."""
    base = os.environ if base is None else base
    env = {k: v for k, v in base.items() if not k.startswith("LING_LOCAL_")}
    env.update(command.env)
    return env


def reserve_port() -> socket.socket:
    """A socket bound to a free port on 127.0.0.1, held until SGLang serves on that port.

    It is bound with SO_REUSEADDR and never listens: Linux then lets SGLang's own listener
    (uvicorn sets SO_REUSEADDR too) bind the port, while a plain bind by anyone else fails
    and the kernel hands the port to no outgoing connection. A binder that also sets
    SO_REUSEADDR is not stopped by it: that is why the port is kept off the command line
    and the listener's owner is checked (`listener.verify_listener`) before the key is
    sent."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((HOST, 0))
    except OSError:
        sock.close()
        raise
    return sock
