"""Review a Python file with the local model, then fix it: read → review → fix → check.

    ling-local serve &                      # in another terminal
    python examples/review_and_fix.py path/to/file.py
    python examples/review_and_fix.py path/to/file.py --resume RUN_ID   # after a crash / Ctrl-C

Each step sees the earlier ones' results; every finished step is saved in the run log, so a
run that was interrupted continues where it stopped. The fixed file is written next to the
original as ``<name>.fixed.py`` only when it compiles. (The embedded tiny model is a small
completion model, so expect a poor review from it; a chat model such as Ling-flash on the
SGLang profile writes a real one.)

The requests are sized to the model's context before anything runs: the fix must have room
to write the whole file again after the file and the review, so the review gets what is
left (at most --max-tokens), and a file too long for that is refused up front instead of
being cut off in the middle of its fix. A fix that still runs out of tokens is reported as
cut off, not parsed as code.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from ling_local import Client
from ling_local.agents import (
    Chain,
    ChainError,
    ChainFinished,
    Prompt,
    StepFinished,
    StepRetry,
    StepStarted,
    Token,
)
from ling_local.errors import LingLocalError

REVIEW = Prompt(
    "review",
    "Review this Python file. List its bugs, one per line, most serious first.\n\n"
    "```python\n{{ read }}\n```",
    system="You are a careful senior Python reviewer.",
    temperature=0.0,
)
FIX = Prompt(  # the file first: the daemon's prefix cache still holds it from the review
    "fix",
    "```python\n{{ read }}\n```\n\nRewrite this file to fix these problems:\n{{ review }}\n\n"
    "Answer with the whole fixed file in one ```python block.",
    temperature=0.0,
)
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})[^\n`]*\n", re.M)


def read(path: str) -> str:
    """A local tool step: the file to review."""
    return Path(path).read_text()


def extract_code(answer: str) -> tuple[str, bool]:
    """(the code of the answer's first fenced block, whether that block was closed); an
    answer without a fence is taken as code as it is."""
    opening = _FENCE.search(answer)
    if opening is None:
        return answer, True
    fence = opening.group(1)
    body = answer[opening.end() :]
    closing = re.search(rf"^ {{0,3}}{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$", body, re.M)
    if closing is None:
        return body, False
    return body[: closing.start()], True


def check(fix: str, path: str) -> dict:
    """A local tool step: keep the fix only if it is valid Python."""
    code, closed = extract_code(fix)
    if not closed:
        return {"ok": False, "error": "its code block never ends", "cut_off": True}
    if not code.strip():
        return {"ok": False, "error": "the model wrote no code"}
    try:
        ast.parse(code)
    except SyntaxError as err:
        return {"ok": False, "error": f"line {err.lineno}: {err.msg}"}
    out = Path(path).with_suffix(".fixed.py")
    out.write_text(code)
    return {"ok": True, "written": str(out)}


@dataclass(frozen=True)
class Budget:
    context: int
    review_tokens: int
    fix_tokens: int


class DoesNotFit(Exception):
    """The file, its review and its fix cannot all fit in the model's context."""


def plan(client: Client, source: str, max_tokens: int, fix_tokens: int | None) -> Budget:
    """max_tokens for the review and the fix that fit the model's context, from the token
    counts of the real prompts (one-token requests; the daemon caches their prefixes)."""
    context = next((m.context_length for m in client.models() if m.context_length), 2048)

    def tokens(step: Prompt, **values: str) -> int:
        text, system = step.render(values)
        messages = [{"role": "system", "content": system}] if system else []
        try:
            reply = client.chat([*messages, {"role": "user", "content": text}], max_tokens=1)
        except LingLocalError as err:  # e.g. the prompt alone is longer than the context
            raise DoesNotFit(err.message) from None
        return reply.usage.prompt_tokens

    review_prompt = tokens(REVIEW, read=source)
    fix_prompt = tokens(FIX, read=source, review="")  # plus the review, once it is written
    file_tokens = fix_prompt - tokens(FIX, read="", review="")
    wanted = fix_tokens or file_tokens + file_tokens // 4 + 32  # the file again, and changes
    room = context - fix_prompt - wanted - 1  # what is left for the review
    review = min(max_tokens, room, context - review_prompt - 1)
    if review < min(32, max_tokens):
        raise DoesNotFit(
            f"the file is {file_tokens} tokens: the review prompt ({review_prompt} tokens), "
            f"a review and a fix of {wanted} tokens do not fit the model's {context}-token "
            "context; try a shorter file or a model with a longer context"
        )
    return Budget(context, review, wanted)


def build(budget: Budget) -> Chain:
    return Chain(
        "review-and-fix",
        [
            read,
            replace(REVIEW, max_tokens=budget.review_tokens),
            replace(FIX, max_tokens=budget.fix_tokens),
            check,
        ],
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", help="the Python file to review")
    parser.add_argument("--max-tokens", type=int, default=400, help="the review at most")
    parser.add_argument(
        "--fix-tokens", type=int, help="the fix at most (default: room for the whole file)"
    )
    parser.add_argument("--resume", metavar="RUN_ID", help="continue an interrupted run")
    args = parser.parse_args()
    with Client() as client:
        try:
            budget = plan(client, read(args.path), args.max_tokens, args.fix_tokens)
        except DoesNotFit as err:
            print(f"cannot review and fix {args.path}: {err}", file=sys.stderr)
            return 2
    print(
        f"context {budget.context} tokens: review up to {budget.review_tokens}, "
        f"fix up to {budget.fix_tokens}",
        file=sys.stderr,
    )
    chain = build(budget)
    run = chain.resume(args.resume) if args.resume else chain.start(path=args.path)
    print(f"run {run.run_id}", file=sys.stderr)
    fix_cut_off = False
    for event in run.events():  # Ctrl-C cancels the generation in the daemon
        if isinstance(event, StepStarted):
            print(f"\n── {event.name} " + "─" * 40, file=sys.stderr)
        elif isinstance(event, Token):  # the review and the fix as they are written
            print(event.text, end="", flush=True, file=sys.stderr)
        elif isinstance(event, StepRetry):
            print(f"\n(retrying: {event.reason})", file=sys.stderr)
        elif isinstance(event, StepFinished):
            print(
                f"\n{event.name}: {event.seconds:.1f}s, {event.completion_tokens} tokens",
                file=sys.stderr,
            )
            if event.name == "fix":
                fix_cut_off = event.completion_tokens >= budget.fix_tokens
        elif isinstance(event, ChainError):
            print(f"\nfailed: {event.message}\nresume: --resume {run.run_id}", file=sys.stderr)
            return 1
        elif isinstance(event, ChainFinished):
            result = event.outputs["check"]
            if result["ok"]:
                verdict = f"fixed file: {result['written']}"
            elif fix_cut_off or result.get("cut_off"):
                verdict = (
                    f"the model's fix was cut off at {budget.fix_tokens} tokens "
                    "(finish_reason length) before the file ended; nothing written"
                )
            else:
                verdict = f"the model's fix does not compile ({result['error']}); nothing written"
            print(f"\nrun {event.run_id} finished in {event.seconds:.1f}s; {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
