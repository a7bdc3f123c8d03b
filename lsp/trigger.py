"""When to ask the model at all: the trigger gate, the adaptive debounce and the
typing-through cache.

- Gate: no automatic request with the cursor inside a word, or with code (not just closing
  brackets) after it on the line: a suggestion there would have to overwrite text.
- Debounce: measured from the last edit, not from the request, so a client that already
  waited (Neovim waits 200 ms) is not made to wait twice; its length follows the user's
  typing speed (1.5 x the median gap between recent keystrokes), within bounds.
- Typing-through: while the user types the characters of the suggestion on screen (or
  deletes back over them), the rest of it is the answer, without a new request.
"""

from __future__ import annotations

import re
import statistics
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

from lsp.postprocess import Site

__all__ = ["SuggestionCache", "TypingTracker", "should_request"]

_WORD_CHAR = re.compile(r"\w")
_ONLY_CLOSERS = re.compile(r"^[\s)\]}>\"'`;:,.]*$")
_AUTO_PAIRED = frozenset(")]}\"'`")


def should_request(site: Site, *, invoked: bool) -> bool:
    """Whether a completion makes sense at this cursor (an explicit request always does)."""
    if invoked:
        return True
    if site.line_suffix and _WORD_CHAR.match(site.line_suffix[0]):
        return False  # in the middle of a word
    return bool(_ONLY_CLOSERS.match(site.line_suffix))


class TypingTracker:
    """Keystroke timing: when each document last changed, and how fast the user types."""

    IDLE_GAP_S = 1.0
    """Gaps longer than this are pauses, not typing speed."""

    def __init__(self) -> None:
        self._last: dict[str, float] = {}
        self._gaps: deque[float] = deque(maxlen=16)

    def changed(self, uri: str, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        last = self._last.get(uri)
        if last is not None and 0 < now - last < self.IDLE_GAP_S:
            self._gaps.append(now - last)
        self._last[uri] = now

    def forget(self, uri: str) -> None:
        self._last.pop(uri, None)

    def delay_s(self, base_ms: int, min_ms: int, max_ms: int) -> float:
        """The debounce for the next request."""
        ms = base_ms if len(self._gaps) < 3 else 1.5 * statistics.median(self._gaps) * 1000
        return min(max(ms, min_ms), max_ms) / 1000

    def wait_s(self, uri: str, delay_s: float, now: float | None = None) -> float:
        """How much longer to wait so that `delay_s` has passed since the last edit."""
        now = time.monotonic() if now is None else now
        last = self._last.get(uri)
        return delay_s if last is None else max(0.0, last + delay_s - now)


@dataclass(frozen=True, slots=True)
class _Entry:
    before: str
    after: str
    text: str
    owner: Any = None


class SuggestionCache:
    """Suggestions shown recently, per document, to answer typing-through requests."""

    MAX_PER_DOC = 8
    MAX_DELETED = 64

    def __init__(self) -> None:
        self._entries: dict[str, deque[_Entry]] = {}

    def put(self, uri: str, before: str, after: str, text: str, owner: Any = None) -> None:
        """Remember `text` shown at `before|after`; `owner` is handed back on a hit."""
        if text:
            self._entries.setdefault(uri, deque(maxlen=self.MAX_PER_DOC)).append(
                _Entry(before, after, text, owner)
            )

    def forget(self, uri: str) -> None:
        self._entries.pop(uri, None)

    def lookup(self, uri: str, before: str, after: str) -> tuple[str, Any] | None:
        """(rest of a cached suggestion consistent with the document, its owner) or None."""
        for e in reversed(self._entries.get(uri, ())):
            if not _same_after(after, e.after):
                continue
            if before.startswith(e.before):
                typed = before[len(e.before) :]
                if len(typed) < len(e.text) and e.text.startswith(typed):
                    return e.text[len(typed) :], e.owner
            elif e.before.startswith(before) and len(e.before) - len(before) <= self.MAX_DELETED:
                return e.before[len(before) :] + e.text, e.owner
        return None


def _same_after(now: str, then: str) -> bool:
    """The text after the cursor is unchanged, but for brackets or quotes the editor paired
    with what the user typed (they are trimmed against the suggestion later)."""
    if now == then:
        return True
    extra = len(now) - len(then)
    return 0 < extra <= 2 and now.endswith(then) and all(c in _AUTO_PAIRED for c in now[:extra])
