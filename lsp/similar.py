"""Snippets from the other open documents: the windows of lines most like the code around
the cursor, by Jaccard similarity of their identifier sets (what Copilot does for its
"similar files" context). Window word sets are cached per document version."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field

from lsp.context import Snapshot, Snippet

__all__ = ["OpenDocuments", "words"]

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# fmt: off
_COMMON = frozenset({
    "self", "def", "return", "if", "else", "elif", "for", "in", "while", "and", "or", "not",
    "is", "None", "True", "False", "import", "from", "class", "pass", "the", "a", "to", "of",
    "const", "let", "var", "function", "this", "new", "null", "true", "false", "int", "str",
})
# fmt: on


def words(text: str) -> frozenset[str]:
    return frozenset(w for w in _WORD.findall(text) if w not in _COMMON)


@dataclass(slots=True)
class _Windows:
    version: int | None
    path: str
    items: list[tuple[str, frozenset[str]]] = field(default_factory=list)


class OpenDocuments:
    """Snippets from the other open documents most like the code around the cursor
    (Jaccard similarity of identifier sets over sliding windows of lines)."""

    def __init__(self, window_lines: int = 20, step: int = 10) -> None:
        self.window_lines = window_lines
        self.step = step
        self._docs: dict[str, _Windows] = {}

    def forget(self, uri: str) -> None:
        self._docs.pop(uri, None)

    def _windows(self, uri: str, path: str, version: int | None, text: str) -> _Windows:
        cached = self._docs.get(uri)
        if cached is not None and cached.version == version and version is not None:
            return cached
        lines = text.split("\n")
        items = []
        for i in range(0, max(len(lines) - self.step, 1), self.step):
            chunk = "\n".join(lines[i : i + self.window_lines])
            if chunk.strip():
                items.append((chunk, words(chunk)))
        entry = _Windows(version, path, items)
        self._docs[uri] = entry
        return entry

    def similar(
        self,
        snap: Snapshot,
        documents: list[tuple[str, str, int | None, str]],
        *,
        limit: int = 3,
        min_score: float = 0.1,
        deadline: float | None = None,
    ) -> list[Snippet]:
        """Best windows of `documents` ((uri, path, version, text), the cursor's excluded)."""
        lines = snap.text[: snap.offset].rsplit("\n", self.window_lines)
        query = words("\n".join(lines[-self.window_lines :]))
        if not query:
            return []
        scored: list[Snippet] = []
        for uri, path, version, text in documents:
            if uri == snap.uri:
                continue
            if deadline is not None and time.perf_counter() > deadline:
                break
            best: tuple[float, str] | None = None
            for chunk, ws in self._windows(uri, path, version, text).items:
                union = len(query | ws)
                score = len(query & ws) / union if union else 0.0
                if best is None or score > best[0]:
                    best = (score, chunk)
            if best is not None and best[0] >= min_score:
                scored.append(Snippet(path, best[1], best[0], "open"))
        scored.sort(key=lambda s: -s.score)
        return scored[:limit]
