"""Structured extraction: a typed, validated record about a Python file, from the local model.

    python examples/structured_extraction.py path/to/file.py          # a code model (tiny)
    python examples/structured_extraction.py path/to/file.py --chat   # a chat model (Ling-flash)

The schema is a pydantic model. It goes to the daemon as OpenAI ``response_format``, and
the daemon's engine (the embedded one as well as SGLang) constrains decoding to it: even the
small embedded model can only write a JSON object of that shape. The schema is built from
the file itself (Python's ``ast``): one alternative for each of the file's functions, with
its name and its own parameter names, so the record can be wrong about which function is the
main one but never names one that does not exist. What the schema cannot say is still
checked: an answer that does not validate (cut off by ``max_tokens``, say) is asked again
with the validation error, at most ``max_reasks`` times. A code model is best
asked to *continue code*: the prompt ends where a Python variable's value starts.
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path
from typing import Any, Literal, Union

from pydantic import BaseModel, Field, create_model, field_validator

from ling_local.agents import Chain, Prompt
from ling_local.errors import StructuredOutputError


class FunctionInfo(BaseModel):
    name: str = Field(max_length=40, description="the name of the file's main function")
    arguments: list[str] = Field(
        default_factory=list, max_length=8, description="its parameter names"
    )

    @field_validator("arguments")
    @classmethod
    def _once_each(cls, value: list[str]) -> list[str]:
        return list(dict.fromkeys(value))


def functions(source: str, lines: int | None = None) -> dict[str, list[str]]:
    """The file's functions and methods defined in its first ``lines`` lines (all when None),
    each with its parameter names; none if the file does not parse."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return {}
    found: dict[str, list[str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and (
            lines is None or node.lineno <= lines
        ):
            a = node.args
            params = [*a.posonlyargs, *a.args, *a.kwonlyargs, *filter(None, [a.vararg, a.kwarg])]
            found.setdefault(node.name, [p.arg for p in params])
    return found


def grounded(found: dict[str, list[str]]) -> Any:
    """`FunctionInfo` narrowed to this file: one alternative for each of its functions, with
    that name and arguments among that function's parameter names (a JSON-schema `anyOf`
    that the daemon constrains decoding to)."""
    if not found:
        return FunctionInfo
    options = []
    for name, params in found.items():
        arguments: Any = list[Literal[tuple(params)]] if params else list[str]
        options.append(
            create_model(
                f"FunctionInfo_{name}",
                __base__=FunctionInfo,
                name=(Literal[name], Field(description="the name of the file's main function")),
                arguments=(
                    arguments,
                    Field(
                        default_factory=list, max_length=len(params), description="its parameters"
                    ),
                ),
            )
        )
    return Union[tuple(options)]  # noqa: UP007 (a runtime union of generated models)


def steps(chat: bool, max_tokens: int, schema: Any = FunctionInfo) -> list[Prompt]:
    if chat:
        question = Prompt(
            "info",
            "Which is the main function of this file, and what are its parameters?\n\n"
            "```python\n{{ source }}\n```",
            schema=schema,
            max_tokens=max_tokens,
            temperature=0.0,
        )
    else:
        question = Prompt(
            "info",
            "source = '''\n{{ source }}'''\n\n# The main function of `source` as a JSON record:\n"
            "info = ",
            mode="complete",
            stop=["\n"],
            schema=schema,
            max_tokens=max_tokens,
            temperature=0.0,
        )
    return [question]


def _head(text: str, max_chars: int) -> str:
    """The file's first lines, at most ``max_chars`` characters."""
    if len(text) <= max_chars:
        return text
    return text[: text.rfind("\n", 0, max_chars) + 1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path")
    parser.add_argument("--chat", action="store_true", help="ask a chat model (not a code model)")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument(
        "--max-chars",
        type=int,
        default=5000,
        help="send at most this much of the file (whole lines): the embedded model's context "
        "is 2,048 tokens",
    )
    args = parser.parse_args()
    text = Path(args.path).read_text()
    source = _head(text, args.max_chars)
    schema = grounded(functions(text, source.count("\n")))
    chain = Chain("extract", steps(args.chat, args.max_tokens, schema))
    try:
        result = chain.run(source=source)
    except StructuredOutputError as err:
        print(f"no valid record after {err.attempts} attempts: {err.errors[-1]}", file=sys.stderr)
        return 1
    info: FunctionInfo = result["info"]  # a validated FunctionInfo, not a dict
    print(info.model_dump_json())
    return 0


if __name__ == "__main__":
    sys.exit(main())
