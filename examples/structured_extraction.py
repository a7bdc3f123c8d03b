"""Structured extraction: a typed, validated record about a Python file, from the local model.

    python examples/structured_extraction.py path/to/file.py          # a code model (tiny)
    python examples/structured_extraction.py path/to/file.py --chat   # a chat model (Ling-flash)

The schema is a pydantic model. It goes to the daemon as OpenAI ``response_format``, and
the daemon's engine (the embedded one as well as SGLang) constrains decoding to it: even the
small embedded model can only write a JSON object of that shape. What the schema cannot
say is still checked: an answer that does not validate (cut off by ``max_tokens``, say) is
asked again with the validation error, at most ``max_reasks`` times. A code model is best
asked to *continue code*: the prompt ends where a Python variable's value starts.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pydantic import BaseModel, Field

from ling_local.agents import Chain, Prompt
from ling_local.errors import StructuredOutputError


class FunctionInfo(BaseModel):
    name: str = Field(max_length=40, description="the name of the file's main function")
    arguments: list[str] = Field(
        default_factory=list, max_length=8, description="its parameter names"
    )


def steps(chat: bool, max_tokens: int) -> list[Prompt]:
    if chat:
        question = Prompt(
            "info",
            "Which is the main function of this file, and what are its parameters?\n\n"
            "```python\n{{ source }}\n```",
            schema=FunctionInfo,
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
            schema=FunctionInfo,
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
    chain = Chain("extract", steps(args.chat, args.max_tokens))
    try:
        result = chain.run(source=_head(Path(args.path).read_text(), args.max_chars))
    except StructuredOutputError as err:
        print(f"no valid record after {err.attempts} attempts: {err.errors[-1]}", file=sys.stderr)
        return 1
    info: FunctionInfo = result["info"]  # a validated FunctionInfo, not a dict
    print(info.model_dump_json())
    return 0


if __name__ == "__main__":
    sys.exit(main())
