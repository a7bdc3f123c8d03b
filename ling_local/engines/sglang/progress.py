"""Start-up progress of the SGLang child, read from its own log lines.

Loading Ling-3.0-flash takes minutes (about 250 GB of weights, then CUDA-graph capture);
the user sees which phase it is in, how many weight shards are loaded, and the last line
SGLang printed, in ``/health``'s detail, in the daemon's log and as a progress bar on a
terminal.
"""

from __future__ import annotations

import logging
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["LoadProgress", "LogFollower", "ProgressDisplay"]

log = logging.getLogger(__name__)

_SHARDS = re.compile(r"Loading safetensors checkpoint shards:\s*(\d+)% Completed \| (\d+)/(\d+)")
# (substring of a log line, phase it starts) in the order SGLang prints them.
_PHASES = (
    ("Load weight begin", "loading weights"),
    ("Load weight end", "allocating the KV cache"),
    ("Capture ", "capturing CUDA graphs"),
    ("Uvicorn running", "warming up"),
    ("Application startup complete", "warming up"),
    ("fired up and ready to roll", "ready"),
)


@dataclass(slots=True)
class LoadProgress:
    phase: str = "launching"
    shards_done: int = 0
    shards_total: int = 0
    last_line: str = ""
    started: float = field(default_factory=time.monotonic)

    def feed(self, line: str) -> bool:
        """Take one log line; True when the phase or the shard count changed."""
        line = line.strip()
        if not line or line.startswith("# ling-local"):
            return False
        self.last_line = line[-200:]
        if match := _SHARDS.search(line):
            done, total = int(match[2]), int(match[3])
            changed = (done, total) != (self.shards_done, self.shards_total)
            self.shards_done, self.shards_total = done, total
            if self.phase == "launching":
                self.phase = "loading weights"
            return changed
        for marker, phase in _PHASES:
            if marker in line and not (marker == "Capture " and "graph" not in line.lower()):
                changed = phase != self.phase
                self.phase = phase
                return changed
        return False

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def describe(self) -> str:
        shards = ""
        if self.shards_total and self.phase == "loading weights":
            shards = f" {self.shards_done}/{self.shards_total} shards"
        text = f"SGLang {self.phase}{shards} ({self.elapsed:.0f}s)"
        return f"{text}: {self.last_line}" if self.last_line else text


class LogFollower:
    """Reads the lines appended to a log file since the last call (tqdm's \\r updates
    count as lines)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._partial = ""

    def read_lines(self) -> list[str]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self._offset)
                data = f.read(1_000_000)
        except OSError:
            return []
        self._offset += len(data)
        text = self._partial + data.decode("utf-8", "replace").replace("\r", "\n")
        *lines, self._partial = text.split("\n")
        return lines


class ProgressDisplay:
    """A progress bar on an interactive stderr; phase changes as log lines otherwise."""

    def __init__(self, label: str) -> None:
        self._bar = None
        self._task = None
        self._last_logged = ""
        if sys.stderr.isatty():
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            self._bar = Progress(
                TextColumn(f"[bold]{label}[/] {{task.description}}"),
                BarColumn(),
                TimeElapsedColumn(),
                transient=True,
            )
            self._bar.start()
            self._task = self._bar.add_task("launching", total=None)

    def update(self, progress: LoadProgress) -> None:
        if self._bar is not None:
            total = progress.shards_total or None
            self._bar.update(
                self._task,
                description=progress.phase,
                completed=progress.shards_done,
                total=total if progress.phase == "loading weights" else None,
            )
        key = f"{progress.phase} {progress.shards_done}/{progress.shards_total}"
        if key != self._last_logged:
            self._last_logged = key
            log.info("%s", progress.describe())

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
