"""The fixed FIM eval set drawn from held-out stdlib files, shipped as ``eval_set.jsonl.gz``.

Each line: ``{"kind": "single"|"multi", "span", "file", "prefix", "suffix", "middle"}``.
single: the rest of one line from a random cursor column (or one whole line).
multi: the body of a block (``block``) or 2-6 whole lines (``lines``), at least two lines.
Prefix and suffix are cut at line starts so that together they fit in about 1,000 tokens.
"""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

from tokenizers import Tokenizer

from training.data import SourceFile, span_block_body, span_line_rest, span_lines
from training.tokenizer import encode

PREFIX_TOKENS = 768
SUFFIX_TOKENS = 256


def _trim_prefix(tok: Tokenizer, prefix: str, max_tokens: int) -> str:
    """The end of ``prefix`` that fits ``max_tokens``, starting at a line start when cut."""
    cut = prefix[-max_tokens * 6 :]
    while cut and len(encode(tok, cut)) > max_tokens:
        cut = cut[max(1, len(cut) // 8) :]
    if len(cut) < len(prefix) and cut.count("\n") > 1:
        cut = cut[cut.index("\n") + 1 :]
    return cut


def _trim_suffix(tok: Tokenizer, suffix: str, max_tokens: int) -> str:
    """The start of ``suffix`` that fits ``max_tokens``, ending at a line end when cut."""
    cut = suffix[: max_tokens * 6]
    while cut and len(encode(tok, cut)) > max_tokens:
        cut = cut[: len(cut) * 7 // 8]
    if len(cut) < len(suffix) and cut.count("\n") > 1:
        cut = cut[: cut.rindex("\n") + 1]
    return cut


def _draw(text: str, kind: str, rng: random.Random) -> tuple[str, tuple[int, int] | None]:
    if kind == "single":
        return "line", span_line_rest(text, rng)
    if rng.random() < 0.5:
        span = span_block_body(text, rng)
        if span and text[span[0] : span[1]].strip().count("\n") >= 1:
            return "block", span
    return "lines", span_lines(text, rng)


def build_eval_set(
    tok: Tokenizer, files: list[SourceFile], n_single: int, n_multi: int, seed: int = 1234
) -> list[dict]:
    """Deterministic examples from ``files`` (the held-out files)."""
    rng = random.Random(seed)
    usable = [f for f in files if f.text.count("\n") >= 8]
    examples: list[dict] = []
    for kind, n in (("single", n_single), ("multi", n_multi)):
        made = 0
        while made < n:
            f = rng.choice(usable)
            span_kind, span = _draw(f.text, kind, rng)
            if span is None:
                continue
            a, b = span
            middle = f.text[a:b]
            if not middle.strip() or (kind == "multi" and middle.strip().count("\n") < 1):
                continue
            examples.append(
                {
                    "kind": kind,
                    "span": span_kind,
                    "file": f.path,
                    "prefix": _trim_prefix(tok, f.text[:a], PREFIX_TOKENS),
                    "suffix": _trim_suffix(tok, f.text[b:], SUFFIX_TOKENS),
                    "middle": middle,
                }
            )
            made += 1
    return examples


def save_eval_set(examples: list[dict], path: str | Path) -> None:
    data = "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in examples).encode()
    with open(path, "wb") as fh, gzip.GzipFile(fileobj=fh, mode="wb", mtime=0) as gz:
        gz.write(data)
