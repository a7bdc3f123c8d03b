"""Chat examples made from the corpus's own documented functions: the docstring's summary
becomes the request ("Write a Python function that returns ..."), the function becomes the
answer, in a fenced ``python`` block. This teaches the ChatML turn shape and the fence, so the
TUI's "write a function that ..." gets code back."""

from __future__ import annotations

import ast
import random
import re
import textwrap
from dataclasses import dataclass

__all__ = ["ChatExample", "documented_functions", "request_for"]

MIN_LINES, MAX_LINES, MAX_CHARS = 3, 30, 1200
"""Answer size after the docstring is cut to its summary: short answers end well inside the
256 tokens the chat evaluation allows (the first run's answers, with whole docstrings, often
did not)."""
_FIRST_SENTENCE = re.compile(r"^(.+?[.!?])(\s|$)", re.S)
_VERB_ES = re.compile(r"(s|sh|ch|x|z|o)$")
_NOT_VERBS = {"this", "the", "a", "an", "helper", "internal", "private", "utility", "function",
              "method", "wrapper", "decorator", "see", "same", "alias", "deprecated", "todo",
              "returns", "note", "test", "tests"}  # fmt: skip


@dataclass(frozen=True, slots=True)
class ChatExample:
    request: str
    answer: str
    name: str


def summary_of(doc: str) -> str | None:
    """The docstring's first sentence as one line, or None when it is not a usable request."""
    para = doc.strip().split("\n\n", 1)[0]
    para = " ".join(line.strip() for line in para.splitlines())
    m = _FIRST_SENTENCE.match(para)
    text = (m.group(1) if m else para).strip()
    if not 12 <= len(text) <= 160 or not text[0].isalpha() or any(c in text for c in "`>:{|="):
        return None
    return text.rstrip(".")


def _third_person(summary: str) -> str | None:
    """ "Return the sum" -> "returns the sum"; None when the summary does not start with a verb
    in the imperative (we cannot tell, so those become another kind of request)."""
    first, _, rest = summary.partition(" ")
    word = first.lower()
    if not rest or not word.isalpha() or word in _NOT_VERBS or first[0].islower():
        return None
    if word.endswith(("ing", "ed", "ion", "ly", "al", "er", "or")):
        return None  # a noun or an adjective ("Decoding iterator", "Internal helper")
    if word.endswith("s") and not word.endswith("ss"):
        return None  # already "Returns ...", or a noun phrase ("Details ...")
    if word.endswith("y") and word[-2:-1] not in "aeiou":
        verb = word[:-1] + "ies"
    elif _VERB_ES.search(word):
        verb = word + "es"
    else:
        verb = word + "s"
    return f"{verb} {rest}"


def request_for(summary: str, name: str, args: str, rng: random.Random) -> str:
    """A user request for a function with this docstring summary (a few phrasings)."""
    phrase = _third_person(summary)
    lower = summary[0].lower() + summary[1:]
    if phrase is not None and rng.random() < 0.8:
        lead = rng.choice(
            [
                "Write a Python function that",
                "Write a function that",
                "Write a Python function that",
                "Create a Python function that",
            ]
        )
        return f"{lead} {phrase}."
    if rng.random() < 0.5:
        return f"Implement `{name}({args})` in Python: {lower}."
    return f"# {summary}\nWrite this as a Python function."


def _source(
    node: ast.FunctionDef | ast.AsyncFunctionDef, lines: list[str], summary: str
) -> str | None:
    """The function's source with its docstring cut to the one-line summary."""
    start = node.lineno - 1  # without decorators: they often need imports the answer lacks
    end = node.end_lineno or node.lineno
    doc = node.body[0]
    d0, d1 = doc.lineno - 1, doc.end_lineno or doc.lineno
    indent = lines[d0][: len(lines[d0]) - len(lines[d0].lstrip())]
    end_mark = "" if summary.endswith(("!", "?")) else "."
    short = f'{indent}"""{summary}{end_mark}"""'
    text = textwrap.dedent("\n".join([*lines[start:d0], short, *lines[d1:end]]))
    n = text.count("\n") + 1
    if not MIN_LINES <= n <= MAX_LINES or len(text) > MAX_CHARS:
        return None
    return text


def documented_functions(text: str, rng: random.Random) -> list[ChatExample]:
    """Every usable documented top-level function (and method not using ``self``) of a file."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    lines = text.splitlines()
    out = []
    candidates = list(tree.body)
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            candidates.extend(n for n in node.body if _is_static(n))
    for node in candidates:
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        if node.name.startswith("__") or node.name.lstrip("_").startswith("test"):
            continue
        doc = ast.get_docstring(node)
        summary = summary_of(doc) if doc else None
        source = _source(node, lines, summary) if summary else None
        if summary is None or source is None:
            continue
        args = ", ".join(a.arg for a in node.args.args)
        out.append(
            ChatExample(
                request_for(summary, node.name, args, rng), f"```python\n{source}\n```", node.name
            )
        )
    return out


def _is_static(node: ast.stmt) -> bool:
    if not isinstance(node, ast.FunctionDef):
        return False
    return any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in node.decorator_list)
