"""What the model sees: the cursor's document around the cursor, plus snippets from
elsewhere, within the profile's token budget.

Layout of the prefix: context snippets first (as comments, with their paths), then the
document from a line-aligned anchor to the cursor. The anchor moves only when the window
outgrows its budget, and snippets change only when the cursor changes line, so consecutive
keystrokes send prompts that share everything up to the cursor and the engine's prefix
cache serves them.
"""

from __future__ import annotations

from dataclasses import dataclass

from lsp.postprocess import Site
from lsp.tokens import TokenCounter

__all__ = ["CursorContextBuilder", "Prompt", "Snapshot", "Snippet"]

# fmt: off
_HASH_COMMENT = frozenset({
    "python", "ruby", "perl", "r", "shellscript", "sh", "bash", "zsh", "yaml", "toml",
    "makefile", "dockerfile", "elixir", "julia", "nim", "coffeescript", "cmake",
})
# fmt: on
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
        text, offset = self.text, self.offset
        start = text.rfind("\n", 0, offset) + 1
        end = text.find("\n", offset)
        end = len(text) if end < 0 else end
        return Site(text[start:offset], text[offset:end], _nonblank_before(text, start),
                    _nonblank_after(text, end))  # fmt: skip


def _nonblank_before(text: str, line_start: int, limit: int = 50) -> str:
    """The nearest non-blank line above the line starting at `line_start` (no copies of
    the whole document: this runs on every keystroke)."""
    end = line_start - 1
    for _ in range(limit):
        if end < 0:
            return ""
        start = text.rfind("\n", 0, end) + 1
        if text[start:end].strip():
            return text[start:end]
        end = start - 1
    return ""


def _nonblank_after(text: str, line_end: int, limit: int = 50) -> str:
    """The nearest non-blank line below the line ending at `line_end`."""
    start = line_end + 1
    for _ in range(limit):
        if start > len(text):
            return ""
        end = text.find("\n", start)
        end = len(text) if end < 0 else end
        if text[start:end].strip():
            return text[start:end]
        start = end + 1
    return ""


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


class CursorContextBuilder:
    """The editor's side of a prompt: the window around the cursor and the snippets,
    within token budgets (the model's prompt format is `ling_local.prompts.PromptBuilder`)."""

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
