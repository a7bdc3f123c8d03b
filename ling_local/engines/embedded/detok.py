"""Token ids -> text deltas, incrementally, with stop strings.

Byte-level BPE can split one character over several tokens, so text is released only once
it decodes cleanly; text that might be the start of a stop string is held back until the
next token shows whether it is.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ling_local.prompts import indent_width

__all__ = ["IncrementalDetokenizer", "ScopeLimit", "StopMatcher"]


class IncrementalDetokenizer:
    """Decodes only a short window per token (vLLM's prefix/read offsets)."""

    __slots__ = ("_decode", "_ids", "_prefix_offset", "_read_offset")

    def __init__(self, decode: Callable[[list[int]], str]) -> None:
        self._decode = decode
        self._ids: list[int] = []
        self._prefix_offset = 0
        self._read_offset = 0

    def push(self, token_ids: Sequence[int]) -> str:
        """Add tokens; return the text they complete (may be empty)."""
        self._ids.extend(token_ids)
        ids = self._ids
        prefix_text = self._decode(ids[self._prefix_offset : self._read_offset])
        new_text = self._decode(ids[self._prefix_offset :])
        if len(new_text) > len(prefix_text) and not new_text.endswith("\ufffd"):
            self._prefix_offset = self._read_offset
            self._read_offset = len(ids)
            return new_text[len(prefix_text) :]
        return ""

    def flush(self) -> str:
        """Whatever is still undecoded at the end of the stream."""
        prefix_text = self._decode(self._ids[self._prefix_offset : self._read_offset])
        new_text = self._decode(self._ids[self._prefix_offset :])
        self._prefix_offset = self._read_offset = len(self._ids)
        return new_text[len(prefix_text) :]


class ScopeLimit:
    """Ends a fill-in-the-middle answer before a line that goes back to the indentation of
    the code after the cursor: once the answer has a line of its own, a later line indented
    no deeper than ``indent`` starts what the suffix already holds (the next statement, the
    next function), so the answer ends after its last line before it, with that line's
    newline unless the suffix starts with one (``keep_newline``). Blank lines between are
    held back until the next line decides."""

    __slots__ = ("_cut", "_indent", "_line", "_passed", "_pos", "_released", "_text", "_trim")

    def __init__(self, indent: int, keep_newline: bool = True) -> None:
        self._indent = indent
        self._trim = 0 if keep_newline else 1
        """Characters of the kept text's last newline that are not released."""
        self._text = ""
        self._released = 0
        self._pos = 0
        """Start of the line being looked at."""
        self._line = 0
        self._passed = -1
        """The last line let through (its indentation is known before it is complete)."""
        self._cut = 0
        """Just after the newline that ends the last line of the answer that is kept."""

    def feed(self, chunk: str) -> tuple[str, bool]:
        """Return (text safe to release now, whether the answer ends here)."""
        self._text += chunk
        text = self._text
        safe = max(0, self._cut - self._trim)
        while True:
            nl = text.find("\n", self._pos)
            end = len(text) if nl == -1 else nl
            has_text = bool(text[self._pos : end].strip())
            if has_text and self._line != self._passed:  # a line not yet let through
                if self._passed >= 0 and indent_width(text[self._pos : end]) <= self._indent:
                    stop = max(self._released, self._cut - self._trim)
                    out, self._released = text[self._released : stop], stop
                    return out, True
                self._passed = self._line
            if has_text or self._line == 0:
                safe = end
            if nl == -1:
                break
            if has_text or self._line == 0:
                self._cut = nl + 1
            self._pos, self._line = nl + 1, self._line + 1
        safe = max(safe, self._released)
        out, self._released = text[self._released : safe], safe
        return out, False

    def finish(self) -> str:
        """Whatever is held back, at the end of an answer that ended on its own."""
        out = self._text[self._released :]
        self._released = len(self._text)
        return out


class StopMatcher:
    """Finds stop strings in streamed text and holds back text that may begin one; with a
    ``scope`` (indent, keep_newline), also ends the text where :class:`ScopeLimit` does."""

    __slots__ = ("_held", "_max_len", "_scope", "_stops", "text")

    def __init__(self, stops: Sequence[str], scope: tuple[int, bool] | None = None) -> None:
        self._stops = tuple(s for s in stops if s)
        self._max_len = max((len(s) for s in self._stops), default=0)
        self._held = ""
        self._scope = ScopeLimit(*scope) if scope is not None else None
        self.text = ""
        """Everything released so far."""

    def feed(self, chunk: str) -> tuple[str, bool]:
        """Return (text safe to release now, whether a stop string was reached)."""
        out, hit = self._feed_stops(chunk)
        if self._scope is not None:
            out, ended = self._scope.feed(out)
            if hit and not ended:
                out += self._scope.finish()
            hit = hit or ended
        self.text += out
        return out, hit

    def _feed_stops(self, chunk: str) -> tuple[str, bool]:
        if not self._stops:
            return chunk, False
        pending = self._held + chunk
        first = -1
        for stop in self._stops:
            at = pending.find(stop)
            if at != -1 and (first == -1 or at < first):
                first = at
        if first != -1:
            self._held = ""
            return pending[:first], True
        hold = self._partial_len(pending)
        self._held = pending[len(pending) - hold :]
        return pending[: len(pending) - hold], False

    def finish(self) -> str:
        """Release held text at the end of a stream that did not stop on a string."""
        out, self._held = self._held, ""
        if self._scope is not None:
            out, ended = self._scope.feed(out)
            if not ended:
                out += self._scope.finish()
        self.text += out
        return out

    def _partial_len(self, text: str) -> int:
        """Length of the longest suffix of text that is a proper prefix of a stop string."""
        for n in range(min(self._max_len - 1, len(text)), 0, -1):
            tail = text[-n:]
            if any(s.startswith(tail) for s in self._stops):
                return n
        return 0
