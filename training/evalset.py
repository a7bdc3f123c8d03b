"""The fixed eval sets drawn from the held-out packages (never trained on), shipped as
``ling_local/bench/data/fim_eval_set.jsonl.gz`` and ``chat_eval_set.jsonl.gz``.

FIM, each line: ``{"kind": "single"|"multi", "span", "file", "prefix", "suffix", "middle"}``.
single: the rest of one line from a random cursor column (or one whole line).
multi: 2-4 whole lines (``lines``), at least two of them not blank.
Prefix and suffix are cut at line starts so that together they fit in about 1,000 tokens.
``file`` is ``package/path``.

Chat, each line: ``{"request", "reference", "name", "file"}``: "Write a Python function that
<docstring summary>" for a documented function of a held-out package.
"""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

from tokenizers import Tokenizer

from training.chat import documented_functions
from training.data import SourceFile, span_line_rest, span_lines
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
    return "lines", span_lines(text, rng, 2, 4)


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
            if kind == "multi" and sum(bool(line.strip()) for line in middle.split("\n")) < 2:
                continue
            examples.append(
                {
                    "kind": kind,
                    "span": span_kind,
                    "file": f"{f.package}/{f.path}",
                    "prefix": _trim_prefix(tok, f.text[:a], PREFIX_TOKENS),
                    "suffix": _trim_suffix(tok, f.text[b:], SUFFIX_TOKENS),
                    "middle": middle,
                }
            )
            made += 1
    return examples


def build_chat_set(files: list[SourceFile], n: int, seed: int = 1234) -> list[dict]:
    """``n`` requests "Write a Python function that ..." from documented functions of
    ``files``, at most four per file, in a fixed random order."""
    rng = random.Random(seed)
    found = []
    for f in files:
        examples = [e for e in documented_functions(f.text, rng) if " that " in e.request]
        rng.shuffle(examples)
        for e in examples[:4]:
            request = "Write a Python function that " + e.request.split(" that ", 1)[1]
            found.append({"request": request, "reference": e.answer, "name": e.name,
                          "file": f"{f.package}/{f.path}"})  # fmt: skip
    rng.shuffle(found)
    return found[:n]


def save_eval_set(examples: list[dict], path: str | Path) -> None:
    data = "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in examples).encode()
    with open(path, "wb") as fh, gzip.GzipFile(fileobj=fh, mode="wb", mtime=0) as gz:
        gz.write(data)
