"""Review a Python file with the local model, then fix it: read → review → fix → check.

    ling-local serve &                      # in another terminal
    python examples/review_and_fix.py path/to/file.py
    python examples/review_and_fix.py path/to/file.py --resume RUN_ID   # after a crash / Ctrl-C

Each step sees the earlier ones' results; every finished step is saved in the run log, so a
run that was interrupted continues where it stopped. The fixed file is written next to the
original as ``<name>.fixed.py`` only when it compiles. (The embedded tiny model is a small
completion model, so expect a poor review from it; a chat model such as Ling-flash on the
SGLang profile writes a real one.)
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path

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


def read(path: str) -> str:
    """A local tool step: the file to review."""
    return Path(path).read_text()


def check(fix: str, path: str) -> dict:
    """A local tool step: keep the fix only if it is valid Python."""
    match = re.search(r"```(?:python|py)?\n(.*?)```", fix, re.DOTALL)
    code = match.group(1) if match else fix
    if not code.strip():
        return {"ok": False, "error": "the model wrote no code"}
    try:
        ast.parse(code)
    except SyntaxError as err:
        return {"ok": False, "error": f"line {err.lineno}: {err.msg}"}
    out = Path(path).with_suffix(".fixed.py")
    out.write_text(code)
    return {"ok": True, "written": str(out)}


def build(max_tokens: int) -> Chain:
    return Chain(
        "review-and-fix",
        [
            read,
            Prompt(
                "review",
                "Review this Python file. List its bugs, one per line, most serious first.\n\n"
                "```python\n{{ read }}\n```",
                system="You are a careful senior Python reviewer.",
                max_tokens=max_tokens,
            ),
            Prompt(
                "fix",
                "Rewrite the file to fix these problems:\n{{ review }}\n\n"
                "```python\n{{ read }}\n```\n\nAnswer with the whole fixed file in one "
                "```python block.",
                max_tokens=max_tokens * 2,
                temperature=0.0,
            ),
            check,
        ],
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", help="the Python file to review")
    parser.add_argument("--max-tokens", type=int, default=400)
    parser.add_argument("--resume", metavar="RUN_ID", help="continue an interrupted run")
    args = parser.parse_args()
    chain = build(args.max_tokens)
    run = chain.resume(args.resume) if args.resume else chain.start(path=args.path)
    print(f"run {run.run_id}", file=sys.stderr)
    for event in run.events():  # Ctrl-C cancels the generation in the daemon
        if isinstance(event, StepStarted):
            print(f"\n── {event.name} " + "─" * 40, file=sys.stderr)
        elif isinstance(event, Token) and event.index == 1:
            print(event.text, end="", flush=True, file=sys.stderr)
        elif isinstance(event, StepRetry):
            print(f"\n(retrying: {event.reason})", file=sys.stderr)
        elif isinstance(event, StepFinished):
            print(
                f"\n{event.name}: {event.seconds:.1f}s, {event.completion_tokens} tokens",
                file=sys.stderr,
            )
        elif isinstance(event, ChainError):
            print(f"\nfailed: {event.message}\nresume: --resume {run.run_id}", file=sys.stderr)
            return 1
        elif isinstance(event, ChainFinished):
            result = event.outputs["check"]
            verdict = (
                f"fixed file: {result['written']}"
                if result["ok"]
                else (f"the model's fix does not compile ({result['error']}); nothing written")
            )
            print(f"\nrun {event.run_id} finished in {event.seconds:.1f}s; {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
