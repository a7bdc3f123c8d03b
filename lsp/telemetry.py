"""Local counts of what the language server did, for the user and for `bench complete`.

`Stats` lives in memory (the `ling-local.stats` command returns it). With telemetry on,
`shown` and `accepted` events are also appended to `<state>/lsp/telemetry.jsonl`: sizes,
language, latency and where the text came from; never the code itself, never sent anywhere.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any

from ling_local import paths

__all__ = ["Stats", "Telemetry"]

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Stats:
    requests: int = 0
    """Completion requests from the editor."""
    gated: int = 0
    """Not worth asking: cursor inside a word or before code on the same line; disabled."""
    cache_hits: int = 0
    """Answered from a suggestion already shown (typing-through) or prepared (speculative)."""
    joined: int = 0
    """Answered by a generation already in flight for an earlier keystroke."""
    superseded: int = 0
    """Dropped while debouncing: a newer keystroke or request came."""
    stale: int = 0
    """Generated, but the document had changed by then."""
    generations: int = 0
    """Requests sent to the daemon."""
    speculative: int = 0
    """Of those, started right after an acceptance."""
    cancelled: int = 0
    """Generations cancelled before they finished (superseded, $/cancelRequest)."""
    stopped_early: int = 0
    """Generations closed once post-processing knew the rest would not be shown."""
    failed: int = 0
    empty: int = 0
    """Generations whose text post-processing reduced to nothing."""
    shown: int = 0
    """Suggestions returned to the editor."""
    early: int = 0
    """Multi-line suggestions shown with their first lines while the rest was generating."""
    accepted: int = 0
    tokens_generated: int = 0
    tokens_shown: int = 0
    """Tokens of generated text that reached the editor (pro rata of the characters kept)."""

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


class Telemetry:
    def __init__(self, enabled: bool = True, path: Path | None = None) -> None:
        self.enabled = enabled
        self.path = path or paths.state_dir() / "lsp" / "telemetry.jsonl"
        self._file: IO[str] | None = None
        self._broken = False

    def record(self, event: str, **fields: Any) -> None:
        if not self.enabled or self._broken:
            return
        try:
            if self._file is None:
                paths.ensure_private_dir(self.path.parent)
                self._file = open(self.path, "a", encoding="utf-8", buffering=1)  # noqa: SIM115
            self._file.write(json.dumps({"ts": round(time.time(), 3), "event": event, **fields}))
            self._file.write("\n")
        except OSError as err:
            self._broken = True
            log.warning("telemetry disabled: cannot write %s (%s)", self.path, err)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
