"""Training data: the corpus bundle made by ``python -m training.corpus build`` (permissive
PyPI packages plus the CPython standard library), cut into training documents.

Per epoch, each training file is, with probability ``1 - fim_rate``, one left-to-right document
(tokenized in pieces cut at line starts, after indentation and at random characters, so the
token boundaries a cursor makes are ordinary), otherwise cut into line-aligned chunks that each
become one FIM example, PSM or SPM with equal odds, ending in ``<|fim_end|>``. Chat examples
(:mod:`training.chat`, drawn by :class:`training.pack.EpochBuilder`) make up a small share.
Whole packages are held out (``heldout`` in corpus.json), never files.
"""

from __future__ import annotations

import itertools
import json
import lzma
import random
import re
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class SourceFile:
    package: str
    path: str
    """Path inside the package's wheel (or the stdlib), with forward slashes."""
    text: str


def load_bundle(path: str | Path, limit: int | None = None) -> list[SourceFile]:
    """The files of a ``*.jsonl.xz`` bundle (``limit``: keep about that many, spread evenly)."""
    path = Path(path)
    if path.suffix == ".xz" and path.with_suffix("").exists():
        path = path.with_suffix("")  # not compressed (yet: xz removes it when done)
    opener = lzma.open if path.suffix == ".xz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        files = [SourceFile(d["package"], d["path"], d["text"]) for d in map(json.loads, fh)]
    if limit is not None and len(files) > limit:
        step = len(files) / limit
        files = [files[int(i * step)] for i in range(limit)]
    return files


# --- spans: where a middle is cut out of a text ---------------------------------------------


def line_starts(text: str) -> list[int]:
    """Offsets where each line starts, plus ``len(text)`` at the end."""
    starts = [0]
    starts.extend(m.end() for m in re.finditer("\n", text) if m.end() < len(text))
    starts.append(len(text))
    return starts


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))


def _lines(text: str) -> list[str]:
    return text.split("\n")


def span_line_rest(text: str, rng: random.Random, tries: int = 20) -> tuple[int, int] | None:
    """The rest of one line from a random cursor column (a whole line one time in five)."""
    starts = line_starts(text)
    lines = _lines(text)
    for _ in range(tries):
        i = rng.randrange(len(starts) - 1)
        line = lines[i]
        content = line.rstrip()
        if len(content.strip()) < 2:
            continue
        col = 0 if rng.random() < 0.2 else rng.randrange(_indent(line), len(content) - 1)
        return starts[i] + col, starts[i] + len(line)
    return None


def span_block_body(
    text: str, rng: random.Random, max_lines: int = 12, max_chars: int = 600, tries: int = 30
) -> tuple[int, int] | None:
    """The body of a block: the lines after a line ending in ``:`` up to the dedent."""
    starts = line_starts(text)
    lines = _lines(text)
    headers = [
        i
        for i, line in enumerate(lines[:-1])
        if line.rstrip().endswith(":") and not line.lstrip().startswith("#")
    ]
    for _ in range(min(tries, len(headers))):
        h = rng.choice(headers)
        base = _indent(lines[h])
        end = h + 1
        last = h
        while end < len(lines):
            line = lines[end]
            if line.strip():
                if _indent(line) <= base:
                    break
                last = end
            end += 1
        n = last - h
        if n < 1 or n > max_lines:
            continue
        a, b = starts[h + 1], starts[last + 1] if last + 1 < len(starts) else len(text)
        if b - a <= max_chars:
            return a, b
    return None


def span_lines(text: str, rng: random.Random, lo: int = 2, hi: int = 6) -> tuple[int, int] | None:
    """``lo``..``hi`` whole lines."""
    starts = line_starts(text)
    n_lines = len(starts) - 1
    if n_lines < lo + 1:
        return None
    n = rng.randint(lo, min(hi, n_lines - 1))
    i = rng.randrange(n_lines - n + 1)
    return starts[i], starts[i + n]


def span_random(text: str, rng: random.Random) -> tuple[int, int]:
    """Two random character positions (the StarCoder FIM transform)."""
    a, b = sorted(rng.randrange(len(text) + 1) for _ in range(2))
    return a, b


def training_span(text: str, rng: random.Random) -> tuple[int, int]:
    """Mix of spans: random characters, rest-of-line, block bodies and runs of whole lines."""
    r = rng.random()
    span = None
    if r < 0.35:
        span = span_line_rest(text, rng)
    elif r < 0.55:
        span = span_block_body(text, rng, max_lines=30, max_chars=2000)
    elif r < 0.80:
        span = span_lines(text, rng, 2, 5)
    return span or span_random(text, rng)


# --- training documents ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Doc:
    """One training document: plain text (tokenized in pieces), a FIM triple to be formatted
    as PSM or SPM, or a chat turn (request, answer)."""

    text: str = ""
    fim: tuple[str, str, str] | None = None
    """(prefix, middle, suffix)"""
    mode: str = "psm"
    cuts: tuple[int, ...] = ()
    """Offsets in ``text`` where it is tokenized in separate pieces (see :func:`cut_points`)."""
    chat: tuple[str, str] | None = None
    """(request, answer)"""

    def pieces(self) -> list[str]:
        bounds = [0, *self.cuts, len(self.text)]
        return [self.text[a:b] for a, b in itertools.pairwise(bounds)]


def cut_points(text: str, rng: random.Random, every_chars: int) -> tuple[int, ...]:
    """About one cut per ``every_chars`` characters, a third each at a line start, after a
    line's indentation, and at a random character. Tokenizing the pieces separately puts the
    token boundaries that a cursor creates (a bare newline, a cut word) into plain text too,
    so the model learns to continue from them."""
    starts = line_starts(text)
    points = set()
    for _ in range(len(text) // every_chars):
        r = rng.random()
        i = rng.randrange(len(starts) - 1)
        if r < 1 / 3:
            p = starts[i]
        elif r < 2 / 3:
            p = starts[i] + _indent(text[starts[i] : starts[i + 1]])
        else:
            p = rng.randrange(len(text))
        if 0 < p < len(text):
            points.add(p)
    return tuple(sorted(points))


def chunk_lines(text: str, rng: random.Random, lo_chars: int, hi_chars: int) -> list[str]:
    """Line-aligned pieces of random length in [lo_chars, hi_chars] (a long line stays whole)."""
    chunks: list[str] = []
    cur: list[str] = []
    size = 0
    target = rng.randint(lo_chars, hi_chars)
    for line in text.splitlines(keepends=True):
        if cur and size + len(line) > target:
            chunks.append("".join(cur))
            cur, size, target = [], 0, rng.randint(lo_chars, hi_chars)
        cur.append(line)
        size += len(line)
    if cur:
        chunks.append("".join(cur))
    return chunks


def make_docs(
    files: list[SourceFile],
    rng: random.Random,
    fim_rate: float = 0.6,
    chunk_chars: tuple[int, int] = (1000, 7000),
    cut_every: int = 400,
    chats: list[tuple[str, str]] = (),  # type: ignore[assignment]
) -> list[Doc]:
    """Per file: with probability ``1 - fim_rate`` the whole file left to right (tokenized in
    pieces when ``cut_every`` > 0), otherwise the file cut into line-aligned chunks that each
    become one FIM example (half PSM, half SPM); plus one chat document per ``chats`` item."""
    docs: list[Doc] = [Doc(chat=c) for c in chats]
    for f in files:
        if rng.random() >= fim_rate:
            cuts = cut_points(f.text, rng, cut_every) if cut_every > 0 else ()
            docs.append(Doc(text=f.text, cuts=cuts))
            continue
        for chunk in chunk_lines(f.text, rng, *chunk_chars):
            a, b = training_span(chunk, rng)
            mode = "psm" if rng.random() < 0.5 else "spm"
            docs.append(Doc(fim=(chunk[:a], chunk[a:b], chunk[b:]), mode=mode))
    rng.shuffle(docs)
    return docs
