"""Training data: the CPython standard library's own Python source (PSF licence).

Which files: every ``*.py`` under ``sysconfig.get_paths()["stdlib"]`` except ``site-packages``
/ ``dist-packages``, files that are not valid UTF-8, machine-generated tables (the
``encodings`` codec tables made by gencodec, ``pydoc_data/topics.py``, ``_sysconfigdata*``) and files that contain
our special-token strings. The stdlib's own tests are kept: they are ordinary Python.

Held out: a file is held out when the SHA-1 of its path relative to the stdlib root falls in the
lowest ~3 % (:func:`is_heldout`); the split depends on the path alone, so it is the same on
every machine that has the same stdlib.
"""

from __future__ import annotations

import hashlib
import itertools
import random
import re
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from training.tokenizer import SPECIAL_TOKENS

HELDOUT_PER_MILLE = 30
_SKIP_DIRS = {"site-packages", "dist-packages", "__pycache__"}


@dataclass(frozen=True, slots=True)
class SourceFile:
    path: str
    """Path relative to the stdlib root, with forward slashes."""
    text: str
    sha256: str


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def is_heldout(rel_path: str) -> bool:
    digest = hashlib.sha1(rel_path.encode()).hexdigest()
    return int(digest[:8], 16) % 1000 < HELDOUT_PER_MILLE


def _is_generated(rel_path: str, text: str) -> bool:
    if rel_path == "pydoc_data/topics.py" or rel_path.startswith("_sysconfigdata"):
        return True
    return rel_path.startswith("encodings/") and "decoding_table = (" in text


def collect_files(root: Path | None = None, limit: int | None = None) -> list[SourceFile]:
    """All usable stdlib source files, sorted by path (``limit``: keep every n-th, for smoke)."""
    root = root or stdlib_root()
    files: list[SourceFile] = []
    for p in sorted(root.rglob("*.py")):
        rel = p.relative_to(root).as_posix()
        if _SKIP_DIRS & set(p.relative_to(root).parts) or not p.is_file():
            continue
        raw = p.read_bytes()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            continue
        if not text.strip() or _is_generated(rel, text) or any(s in text for s in SPECIAL_TOKENS):
            continue
        files.append(SourceFile(rel, text, hashlib.sha256(raw).hexdigest()))
    if limit is not None and len(files) > limit:
        step = len(files) / limit
        files = [files[int(i * step)] for i in range(limit)]
    return files


def split_files(files: list[SourceFile]) -> tuple[list[SourceFile], list[SourceFile]]:
    train = [f for f in files if not is_heldout(f.path)]
    heldout = [f for f in files if is_heldout(f.path)]
    return train, heldout


def file_list_digest(files: list[SourceFile]) -> str:
    """SHA-256 over ``"<sha256>  <path>\\n"`` lines, sorted by path (like ``sha256sum``)."""
    lines = "".join(f"{f.sha256}  {f.path}\n" for f in sorted(files, key=lambda f: f.path))
    return hashlib.sha256(lines.encode()).hexdigest()


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
    if r < 0.3:
        span = span_line_rest(text, rng)
    elif r < 0.5:
        span = span_block_body(text, rng, max_lines=30, max_chars=2000)
    elif r < 0.65:
        span = span_lines(text, rng)
    return span or span_random(text, rng)


# --- training documents ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Doc:
    """One training document: plain text, or a FIM triple to be formatted as PSM or SPM."""

    text: str = ""
    fim: tuple[str, str, str] | None = None
    """(prefix, middle, suffix)"""
    mode: str = "psm"
    cuts: tuple[int, ...] = ()
    """Offsets in ``text`` where it is tokenized in separate pieces (see :func:`cut_points`)."""

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
    fim_rate: float = 0.5,
    chunk_chars: tuple[int, int] = (1000, 7000),
    cut_every: int = 0,
) -> list[Doc]:
    """Per file: with probability ``1 - fim_rate`` the whole file left to right (tokenized in
    pieces when ``cut_every`` > 0), otherwise the file cut into line-aligned chunks that each
    become one FIM example (half PSM, half SPM)."""
    docs: list[Doc] = []
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
