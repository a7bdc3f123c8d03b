"""Editing sessions for `ling-local bench complete`: a file typed key by key, with the
timing, pauses, typos and deletions of a person, stored as JSON in `bench/data/`.

A session is `{"path", "language", "initial", "cursor", "events": [[t_ms, op, arg], ...]}`
with ops `type` (insert `arg` at the cursor; a newline comes with the editor's
auto-indentation, as editors insert it), `backspace` (delete `arg` characters before the
cursor) and `move` (put the cursor at offset `arg`).

`synthesize` writes such a session from a finished file with a typist model fitted to
published keystroke studies of programmers: about 200 ms median between keys inside a
line (log-normal), a pause at each line end, longer "thinking" pauses before a new
definition, about 2 % typos corrected with backspace after a reaction delay, and now and
then a word typed, deleted and typed again.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Session", "load_session", "synthesize"]

DATA_DIR = Path(__file__).with_name("data")
_NEIGHBOURS = "qwertyuiopasdfghjklzxcvbnm"


@dataclass(slots=True)
class Session:
    path: str
    language: str
    events: list[tuple[int, str, str | int]]
    initial: str = ""
    cursor: int = 0
    description: str = ""
    workspace: dict[str, str] = field(default_factory=dict)
    """Other files of the project (path -> text), for workspace context."""

    @property
    def duration_s(self) -> float:
        return self.events[-1][0] / 1000 if self.events else 0.0

    def final_text(self) -> str:
        text, cursor = self.initial, self.cursor
        for _, op, arg in self.events:
            text, cursor = apply(text, cursor, op, arg)
        return text


def apply(text: str, cursor: int, op: str, arg: str | int) -> tuple[str, int]:
    """The document and cursor after one event."""
    if op == "type":
        assert isinstance(arg, str)
        return text[:cursor] + arg + text[cursor:], cursor + len(arg)
    if op == "backspace":
        n = min(int(arg), cursor)
        return text[: cursor - n] + text[cursor:], cursor - n
    if op == "move":
        return text, max(0, min(int(arg), len(text)))
    raise ValueError(f"unknown session op {op!r}")


def load_session(path: str | Path | None = None) -> Session:
    """A session file (default: the one shipped in bench/data)."""
    file = Path(path) if path else next(iter(sorted(DATA_DIR.glob("session_*.json"))))
    data = json.loads(file.read_text(encoding="utf-8"))
    return Session(
        path=data["path"], language=data.get("language", "python"),
        events=[tuple(e) for e in data["events"]], initial=data.get("initial", ""),
        cursor=data.get("cursor", 0), description=data.get("description", ""),
        workspace=data.get("workspace", {}),
    )  # fmt: skip


def synthesize(target: str, *, seed: int = 0, typo_rate: float = 0.02) -> list[list]:
    """Events that type `target` into an empty file like a person would."""
    rng = random.Random(seed)
    events: list[list] = []
    t = 0.0

    def key(op: str, arg: str | int, gap_ms: float) -> None:
        nonlocal t
        t += gap_ms
        events.append([round(t), op, arg])

    for line_no, line in enumerate(target.split("\n")):
        body = line.lstrip(" ")
        indent = " " * (len(line) - len(body))
        if line_no:
            key("type", "\n" + indent, rng.lognormvariate(5.6, 0.5))  # Enter (+ auto-indent)
        if body.startswith(("def ", "class ", "async def ", "@")):
            t += rng.uniform(1500, 4000)  # thinking about the next definition
        words = body.split(" ")
        for w_index, word in enumerate(words):
            token = word + (" " if w_index < len(words) - 1 else "")
            if len(word) > 4 and rng.random() < 0.04:  # typed, thought better of, retyped
                for ch in token:
                    key("type", ch, rng.lognormvariate(5.2, 0.35))
                key("backspace", len(token), rng.uniform(400, 900))
                t += rng.uniform(300, 1200)
            for ch in token:
                if ch.isalpha() and rng.random() < typo_rate:
                    key("type", rng.choice(_NEIGHBOURS), rng.lognormvariate(5.2, 0.35))
                    key("backspace", 1, rng.uniform(180, 450))
                key("type", ch, rng.lognormvariate(5.2, 0.35))
        if rng.random() < 0.15:
            t += rng.uniform(600, 2500)  # reading what was written
    return events
