"""What the model sees: the cursor's document around the cursor, plus snippets from
elsewhere, within the profile's token budget.

Layout of the prefix: context snippets first (as comments, with their paths), then the
document from a line-aligned anchor to the cursor. The anchor moves only when the window
outgrows its budget, and snippets change only when the cursor changes line, so consecutive
keystrokes send prompts that share everything up to the cursor and the engine's prefix
cache serves them.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field

from lsp.postprocess import Site
from lsp.tokens import TokenCounter

__all__ = ["OpenDocuments", "Prompt", "PromptBuilder", "Snapshot", "Snippet", "words"]

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_COMMON = frozenset(
    [
        "self",
        "def",
        "return",
        "if",
        "else",
        "elif",
        "for",
        "in",
        "while",
        "and",
        "or",
        "not",
        "is",
        "None",
        "True",
        "False",
        "import",
        "from",
        "class",
        "pass",
        "the",
        "a",
        "to",
        "of",
        "const",
        "let",
        "var",
        "function",
        "this",
        "new",
        "null",
        "true",
        "false",
        "int",
        "str",
    ]
)
_HASH_COMMENT = frozenset(
    [
        "python",
        "ruby",
        "perl",
        "r",
        "shellscript",
        "sh",
        "bash",
        "zsh",
        "yaml",
        "toml",
        "makefile",
        "dockerfile",
        "elixir",
        "julia",
        "nim",
        "coffeescript",
        "cmake",
    ]
)
_DASH_COMMENT = frozenset(["lua", "sql", "haskell", "elm", "ada", "vhdl"])

SNIPPET_SHARE = 0.4
"""At most this share of the prefix budget goes to snippets when the document needs it."""


@dataclass(frozen=True, slots=True)
class Snapshot:
    """One document at one cursor position, as a request sees it."""

    uri: str
    text: str
    offset: int
    language_id: str = ""
    version: int | None = None
    path: str = ""

    @property
    def before(self) -> str:
        return self.text[: self.offset]

    @property
    def after(self) -> str:
        return self.text[self.offset :]

    @property
    def line(self) -> int:
        return self.text.count("\n", 0, self.offset)

    def site(self) -> Site:
        start = self.text.rfind("\n", 0, self.offset) + 1
        end = self.text.find("\n", self.offset)
        end = len(self.text) if end < 0 else end
        prev_line = next(
            (x for x in reversed(self.text[: max(start - 1, 0)].split("\n")[-50:]) if x.strip()),
            "",
        )
        next_line = next((x for x in self.text[end + 1 :].split("\n", 50)[:50] if x.strip()), "")
        return Site(
            self.text[start : self.offset], self.text[self.offset : end], prev_line, next_line
        )


@dataclass(frozen=True, slots=True)
class Snippet:
    path: str
    text: str
    score: float
    source: str


@dataclass(frozen=True, slots=True)
class Prompt:
    prefix: str
    suffix: str
    snippets: tuple[Snippet, ...] = ()
    window_start: int = 0


def words(text: str) -> frozenset[str]:
    return frozenset(w for w in _WORD.findall(text) if w not in _COMMON)


def comment_prefix(language_id: str) -> str:
    if language_id in _HASH_COMMENT:
        return "#"
    if language_id in _DASH_COMMENT:
        return "--"
    return "//"


def render_snippets(snippets: list[Snippet], language_id: str, own_path: str) -> str:
    c = comment_prefix(language_id)
    parts = []
    for s in snippets:
        body = "\n".join(f"{c} {line}".rstrip() for line in s.text.rstrip("\n").split("\n"))
        parts.append(f"{c} Path: {s.path}\n{body}\n")
    if parts:
        parts.append(f"{c} Path: {own_path}\n")
    return "".join(parts)


class PromptBuilder:
    def __init__(self, counter: TokenCounter, prefix_tokens: int, suffix_tokens: int) -> None:
        self.counter = counter
        self.prefix_tokens = prefix_tokens
        self.suffix_tokens = suffix_tokens
        self._anchors: dict[str, int] = {}

    def forget(self, uri: str) -> None:
        self._anchors.pop(uri, None)

    def _window_start(self, uri: str, before: str, cap: int) -> int:
        """A line start such that the window fits in `cap` chars and rarely moves."""
        if len(before) <= cap:
            return 0
        anchor = self._anchors.get(uri)
        if (
            anchor is not None
            and 0 < anchor <= len(before)
            and before[anchor - 1] == "\n"
            and cap // 2 <= len(before) - anchor <= cap
        ):
            return anchor
        target = len(before) - int(cap * 0.8)
        anchor = before.find("\n", target) + 1 or target
        if len(before) - anchor < cap // 4:  # one giant line: cut inside it
            anchor = len(before) - int(cap * 0.8)
        self._anchors[uri] = anchor
        return anchor

    def build(self, snap: Snapshot, snippets: list[Snippet]) -> Prompt:
        before, after = snap.before, snap.after
        budget = self.counter.chars_for(self.prefix_tokens)
        cap = budget if not snippets else max(budget - int(budget * SNIPPET_SHARE), budget // 2)
        start = self._window_start(snap.uri, before, cap)
        window = before[start:]
        chosen: list[Snippet] = []
        room = budget - len(window)
        header = len(snap.path) + 12
        for s in snippets:
            cost = len(s.text) + s.text.count("\n") * 3 + header * 2
            if cost <= room:
                chosen.append(s)
                room -= cost
        prefix = render_snippets(chosen, snap.language_id, snap.path or "this file") + window
        suffix_cap = self.counter.chars_for(self.suffix_tokens)
        suffix = after[:suffix_cap]
        if len(after) > suffix_cap and "\n" in suffix:
            suffix = suffix[: suffix.rfind("\n") + 1]
        return Prompt(prefix, suffix, tuple(chosen), start)


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
        query = words("\n".join(snap.before.split("\n")[-self.window_lines :]))
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
