"""Token ids -> text deltas, incrementally, with stop strings.

Byte-level BPE can split one character over several tokens, so text is released only once
it decodes cleanly; text that might be the start of a stop string is held back until the
next token shows whether it is.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

__all__ = ["IncrementalDetokenizer", "StopMatcher"]


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


class StopMatcher:
    """Finds stop strings in streamed text and holds back text that may begin one."""

    __slots__ = ("_held", "_max_len", "_stops", "text")

    def __init__(self, stops: Sequence[str]) -> None:
        self._stops = tuple(s for s in stops if s)
        self._max_len = max((len(s) for s in self._stops), default=0)
        self._held = ""
        self.text = ""
        """Everything released so far."""

    def feed(self, chunk: str) -> tuple[str, bool]:
        """Return (text safe to release now, whether a stop string was reached)."""
        if not self._stops:
            self.text += chunk
            return chunk, False
        pending = self._held + chunk
        first = -1
        for stop in self._stops:
            at = pending.find(stop)
            if at != -1 and (first == -1 or at < first):
                first = at
        if first != -1:
            out = pending[:first]
            self._held = ""
            self.text += out
            return out, True
        hold = self._partial_len(pending)
        out = pending[: len(pending) - hold]
        self._held = pending[len(pending) - hold :]
        self.text += out
        return out, False

    def finish(self) -> str:
        """Release held text at the end of a stream that did not stop on a string."""
        out, self._held = self._held, ""
        self.text += out
        return out

    def _partial_len(self, text: str) -> int:
        """Length of the longest suffix of text that is a proper prefix of a stop string."""
        for n in range(min(self._max_len - 1, len(text)), 0, -1):
            tail = text[-n:]
            if any(s.startswith(tail) for s in self._stops):
                return n
        return 0
