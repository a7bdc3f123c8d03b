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


def bracket_balance(line: str) -> int:
    """Opening minus closing brackets in a line of Python, outside its string literals and
    its comment (a string that spans lines is not followed)."""
    depth, quote, i = 0, "", 0
    while i < len(line):
        c = line[i]
        if quote:
            if c == "\\":
                i += 1
            elif line.startswith(quote, i):
                i += len(quote) - 1
                quote = ""
        elif c == "#":
            break
        elif c in "\"'":
            quote = c * 3 if line.startswith(c * 3, i) else c
            i += len(quote) - 1
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        i += 1
    return depth


class ScopeLimit:
    """Ends a fill-in-the-middle answer where what it writes belongs to the suffix or is a
    loop. Once the answer has a line of its own, it ends before:

    - a line indented no deeper than ``indent`` (the code after the cursor) that follows a
      blank line: a new paragraph at the suffix's level (the next method, the next block of
      statements) is what the suffix already holds, while statements that follow on from the
      answer's lines with no blank line between are shown, as are lines inside brackets the
      answer left open;
    - a line that repeats one of the answer's own lines (at least :attr:`REPEAT_MIN`
      characters): a small model going round in circles.

    The answer ends after its last line before such a line, with that line's newline unless
    the suffix starts with one (``keep_newline``). The cursor's line and the first line of
    its own stream as they come; a later line is released when it is complete, and blank
    lines between are held back until the next line decides."""

    REPEAT_MIN = 8

    __slots__ = (
        "_blank",
        "_cut",
        "_depth",
        "_indent",
        "_line",
        "_opened",
        "_pos",
        "_released",
        "_seen",
        "_text",
        "_trim",
    )

    def __init__(self, indent: int, keep_newline: bool = True) -> None:
        self._indent = indent
        self._trim = 0 if keep_newline else 1
        """Characters of the kept text's last newline that are not released."""
        self._text = ""
        self._released = 0
        self._pos = 0
        """Start of the line being looked at."""
        self._line = 0
        self._opened = False
        """Whether a line with text has been kept (the answer's first line of its own)."""
        self._blank = False
        """Whether the last complete line is blank."""
        self._seen: set[str] = set()
        self._depth = 0
        """Brackets the kept lines leave open: a line inside them continues a statement."""
        self._cut = 0
        """Just after the newline that ends the last line of the answer that is kept."""

    def _ends_before(self, line: str, body: str, complete: bool) -> bool:
        """Whether the answer ends before `line` (`body`: the line stripped)."""
        if not body or not self._opened:
            return False
        if complete and len(body) >= self.REPEAT_MIN and body in self._seen:
            return True
        return self._blank and not self._depth and indent_width(line) <= self._indent

    def _end(self) -> tuple[str, bool]:
        stop = max(self._released, self._cut - self._trim)
        out, self._released = self._text[self._released : stop], stop
        return out, True

    def feed(self, chunk: str) -> tuple[str, bool]:
        """Return (text safe to release now, whether the answer ends here)."""
        self._text += chunk
        text = self._text
        while (nl := text.find("\n", self._pos)) != -1:
            line = text[self._pos : nl]
            body = line.strip()
            if self._ends_before(line, body, complete=True):
                return self._end()
            self._blank = not body
            if body:
                self._opened = True
                self._seen.add(body)
                self._depth = max(0, self._depth + bracket_balance(line))
            if body or self._line == 0:
                self._cut = nl + 1
            self._pos, self._line = nl + 1, self._line + 1
        partial = text[self._pos :]
        body = partial.strip()
        if self._ends_before(partial, body, complete=False):
            return self._end()
        safe = max(0, self._cut - self._trim)
        if self._line == 0 or (body and not self._opened):
            safe = len(text)  # the cursor's line, or the first line of its own: stream it
        safe = max(safe, self._released)
        out, self._released = text[self._released : safe], safe
        return out, False

    def finish(self) -> str:
        """Whatever is held back, at the end of an answer that ended on its own (unless its
        last, unfinished line repeats an earlier one)."""
        partial = self._text[self._pos :]
        if self._ends_before(partial, partial.strip(), complete=True):
            return self._end()[0]
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
