"""The product path for `bench quality`: eval examples through the embedded engine with the
profile's prompt format (what the daemon does for a `/v1/completions` request with a
`suffix`): SPM or PSM, token healing, banned FIM control tokens, and where the answer ends
(the rest of the cursor's line, or the lines of the cursor's scope) decided by the daemon
alone, as any client that sends only a prefix and a suffix gets it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from ling_local.config import Profile
from ling_local.engines.base import GenerationRequest, Priority, SamplingParams
from ling_local.engines.embedded.torch_engine import TorchEngine
from ling_local.prompts import BuiltPrompt, PromptBuilder

__all__ = ["ISSUE_EXAMPLES", "daemon_chat", "daemon_examples", "daemon_predictor"]

MAX_NEW = {"single": 48, "multi": 128}


@asynccontextmanager
async def _engine(
    profile: Profile, heal: bool = True
) -> AsyncIterator[tuple[TorchEngine, PromptBuilder]]:
    """A started engine for `profile` and its prompt builder; stopped on the way out."""
    engine = TorchEngine(profile)
    await engine.start()
    try:
        yield (
            engine,
            PromptBuilder(
                profile.prompt, engine.tokenizer, heal=heal and engine.supports_token_healing
            ),
        )
    finally:
        await engine.stop()


async def _collect(
    engine: TorchEngine,
    built: BuiltPrompt,
    max_tokens: int,
    *,
    priority: Priority = Priority.CHAT,
) -> str:
    """The greedy answer to one built prompt, as the daemon would stream it."""
    request = GenerationRequest(
        prompt=built.text,
        prompt_ids=built.ids,
        priority=priority,
        sampling=SamplingParams(
            max_tokens=max_tokens,
            stop=built.stop,
            stop_token_ids=built.stop_token_ids,
            scope=built.scope,
        ),
        first_token_ids=built.first_token_ids,
        heal_text=built.heal_text,
    )
    return "".join([delta.text async for delta in engine.stream(request)])


def daemon_predictor(profile: Profile) -> Callable[[list[dict]], list[str]]:
    """A predictor running each example through a TorchEngine built from `profile`."""

    async def run(examples: list[dict]) -> list[str]:
        async with _engine(profile) as (engine, prompts):
            return [
                await _collect(
                    engine,
                    prompts.fim(e["prefix"], e["suffix"]),
                    MAX_NEW[e["kind"]],
                    priority=Priority.COMPLETION,
                )
                for e in examples
            ]

    return lambda examples: asyncio.run(run(examples))


def daemon_chat(profile: Profile, requests: list[str], max_tokens: int = 256) -> list[str]:
    """Greedy answers to one-turn chat requests, with the profile's chat template."""

    async def run() -> list[str]:
        async with _engine(profile, heal=False) as (engine, prompts):
            return [
                await _collect(engine, prompts.chat([{"role": "user", "content": r}]), max_tokens)
                for r in requests
            ]

    return asyncio.run(run())


#: The examples of issue 25, verbatim: (name, kind, prompt, suffix or None, max_tokens).
ISSUE_EXAMPLES: list[tuple[str, str, str, str | None, int]] = [
    ("README fibonacci", "completion", "def fibonacci(n):\n", None, 48),
    ("class Point __init__", "completion", "class Point:\n    def __init__(self, x, y):\n",
     None, 48),
    ("with open FIM", "completion", "with open(path, ", ") as f:\n    data = f.read()\n", 48),
    ("from collections import (space)", "completion", "from collections import ", None, 16),
    ("from collections import", "completion", "from collections import", None, 16),
    ("TUI reverse a string", "chat", "Write a Python function that reverses a string.", None,
     256),
]  # fmt: skip


def daemon_examples(profile: Profile) -> list[dict]:
    """The issue's examples through the daemon's prompt path (greedy)."""

    async def run() -> list[dict]:
        out = []
        async with _engine(profile) as (engine, prompts):
            for name, kind, prompt, suffix, max_tokens in ISSUE_EXAMPLES:
                if kind == "chat":
                    built = prompts.chat([{"role": "user", "content": prompt}])
                else:
                    built = prompts.completion(prompt, suffix)
                text = await _collect(engine, built, max_tokens)
                out.append({"name": name, "prompt": prompt, "suffix": suffix, "output": text})
        return out

    return asyncio.run(run())
