"""Who is listening on the SGLang child's port: the check made before the daemon sends the
child its API key or a prompt.

The daemon picks the port and SGLang binds it only after loading the model (minutes). A
process that binds it first would receive the key and every prompt. So the daemon sends no
key until the kernel says that every listening socket on that port belongs to a process
of the child's own process group: the socket's inode, from ``/proc/net/tcp`` and
``/proc/net/tcp6`` (a ``[::]`` listener also takes IPv4 connections), is among the open
files of one of those processes (``/proc/PID/fd``, readable for the daemon's own children).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from ling_local.errors import EngineError

__all__ = ["PortTaken", "listening_inodes", "socket_owner", "verify_listener"]

_LISTEN = "0A"


class PortTaken(EngineError):
    """Another process serves the port the SGLang child was given."""


def listening_inodes(port: int, proc: Path = Path("/proc")) -> set[int]:
    """Inodes of the TCP sockets (IPv4 and IPv6) listening on `port`, any address."""
    found: set[int] = set()
    for name in ("tcp", "tcp6"):
        try:
            lines = (proc / "net" / name).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 10 or fields[3] != _LISTEN:
                continue
            if int(fields[1].rsplit(":", 1)[1], 16) == port:
                found.add(int(fields[9]))
    return found


def _group(pgid: int, proc: Path) -> Iterator[int]:
    """The live processes of a process group, the leader first (the others are looked
    for only if the leader's files do not hold the socket)."""
    yield pgid
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == pgid:
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if int(stat[stat.rindex(")") + 2 :].split()[2]) == pgid:
            yield int(entry.name)


def socket_owner(inode: int, pgid: int, proc: Path = Path("/proc")) -> int | None:
    """The pid in process group `pgid` that holds socket `inode` open, if any."""
    link = f"socket:[{inode}]"
    for pid in _group(pgid, proc):
        try:
            fds = os.scandir(proc / str(pid) / "fd")
        except OSError:
            continue
        with fds:
            for fd in fds:
                try:
                    if os.readlink(fd.path) == link:
                        return pid
                except OSError:
                    continue
    return None


def verify_listener(port: int, pgid: int) -> int:
    """The pid of the child's process that listens on `port`; raises `PortTaken` when no
    listener is there or any listener there is not the child's."""
    inodes = listening_inodes(port)
    if not inodes:
        raise PortTaken(f"nothing listens on 127.0.0.1:{port}, yet something answered there")
    owner = None
    for inode in sorted(inodes):
        pid = socket_owner(inode, pgid)
        if pid is None:
            raise PortTaken(
                f"127.0.0.1:{port} is served by a process outside SGLang's process group "
                f"({pgid}); the daemon sent it nothing and starts SGLang on another port"
            )
        owner = pid
    assert owner is not None
    return owner
