"""The workspace's source files, listed without running any program.

`git ls-files` runs programs the repository's own configuration names (``core.fsmonitor``
is a command git runs to list changed files): opening a folder someone sent would run their
code. So the files are listed here, in Python: a walk that honours the ``.gitignore`` files
(git's rules, matched by `pathspec`) and ``.git/info/exclude``, skips version-control
folders, virtualenvs, caches and build output, and follows no symbolic link.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from pathspec import GitIgnoreSpec

__all__ = ["list_files"]

SKIP_DIRS = {
    ".git", ".hg", ".svn", "node_modules", ".venv", "venv", "env", "__pycache__", "build",
    "dist", "target", ".tox", ".mypy_cache", ".ruff_cache", ".pytest_cache", ".idea",
}  # fmt: skip
MAX_IGNORE_FILE_BYTES = 1 << 20

_Rules = list[tuple[Path, GitIgnoreSpec]]


def _read_rules(file: Path) -> GitIgnoreSpec | None:
    try:
        if file.is_symlink() or file.stat().st_size > MAX_IGNORE_FILE_BYTES:
            return None
        lines = file.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    try:
        return GitIgnoreSpec.from_lines(lines)
    except ValueError:  # a malformed pattern: ignore that file, as git warns and goes on
        return None


def _ignored(rules: _Rules, path: Path, is_dir: bool) -> bool:
    """git's answer: the last rule that matches wins, deeper .gitignore files last."""
    verdict = False
    for base, spec in rules:
        relative = path.relative_to(base).as_posix() + ("/" if is_dir else "")
        result = spec.check_file(relative)
        if result.include is not None:
            verdict = result.include
    return verdict


def list_files(root: Path, limit: int, keep: Callable[[Path], bool]) -> list[Path]:
    """Up to `limit` files under `root` that git would not ignore and `keep` accepts."""
    root = Path(root)
    rules_of: dict[str, _Rules] = {}
    top: _Rules = []
    for name in (".git/info/exclude", ".gitignore"):
        if (spec := _read_rules(root / name)) is not None:
            top.append((root, spec))
    rules_of[str(root)] = top
    files: list[Path] = []
    visited = 0
    for dirpath, dirnames, filenames in os.walk(root):  # symlinked folders are not entered
        here = Path(dirpath)
        rules = rules_of.pop(dirpath, [])
        if here != root and (spec := _read_rules(here / ".gitignore")) is not None:
            rules = [*rules, (here, spec)]
        dirnames[:] = sorted(
            d
            for d in dirnames
            if d not in SKIP_DIRS
            and not d.startswith(".")
            and not _ignored(rules, here / d, is_dir=True)
        )
        for d in dirnames:
            rules_of[os.path.join(dirpath, d)] = rules
        for name in sorted(filenames):
            visited += 1
            path = here / name
            if path.is_symlink() or _ignored(rules, path, is_dir=False) or not keep(path):
                continue
            files.append(path)
            if len(files) >= limit:
                return files
        if visited > limit * 4:
            break
    return files
