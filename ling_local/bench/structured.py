"""`ling-local bench structured`: what `response_format` costs the embedded engine per token,
against its decode step (target: under 10 %).

The profile's engine runs in this process. Each round generates a record under a nested
schema (the engine times its grammar: masks and advances, `GenerationStats.grammar_s`),
then as many tokens of free text from the same prompt; rounds alternate, so the machine's
load falls on both alike."""

from __future__ import annotations

import asyncio
import statistics
from typing import Any

__all__ = ["SCHEMA", "structured_cost"]

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 40},
        "kind": {"enum": ["function", "method", "class"]},
        "arguments": {
            "type": "array",
            "maxItems": 6,
            "items": {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "maxLength": 24},
                    "annotation": {"type": ["string", "null"], "maxLength": 24},
                },
                "required": ["name", "annotation"],
                "additionalProperties": False,
            },
        },
        "returns": {
            "type": "object",
            "properties": {"type": {"type": "string"}, "nullable": {"type": "boolean"}},
            "required": ["type", "nullable"],
            "additionalProperties": False,
        },
        "lines": {"type": "integer", "minimum": 1, "maximum": 9999},
    },
    "required": ["name", "kind", "arguments", "returns", "lines"],
    "additionalProperties": False,
}
PROMPT = (
    "import importlib\n\n\n"
    "def load_module(name: str, path: str | None = None, reload: bool = False):\n"
    "    module = importlib.import_module(name)\n"
    "    return importlib.reload(module) if reload else module\n\n\n"
    "# load_module as a JSON record:\ninfo = "
)


def structured_cost(profile: str, rounds: int, max_tokens: int, temperature: float) -> dict:
    return asyncio.run(_measure(profile, rounds, max_tokens, temperature))


async def _measure(profile: str, rounds: int, max_tokens: int, temperature: float) -> dict:
    from ling_local.bench.progress import progress
    from ling_local.config import load_profile
    from ling_local.engines.base import GenerationRequest, Priority, SamplingParams
    from ling_local.engines.embedded.torch_engine import TorchEngine

    engine = TorchEngine(load_profile(profile))
    await engine.start()
    tokens, grammar_s, tpot_on, tpot_off = 0, 0.0, [], []

    async def run(sampling: SamplingParams, schema: dict | None) -> Any:
        request = GenerationRequest(
            prompt=PROMPT, sampling=sampling, json_schema=schema, priority=Priority.AGENT
        )
        stats = None
        async for delta in engine.stream(request):
            stats = delta.stats or stats
        return stats

    try:
        engine.check_json_schema(SCHEMA)  # the vocabulary and the compile are not per token
        with progress() as bar:
            task = bar.add_task("bench structured", total=rounds)
            for seed in range(rounds):
                kw = {"temperature": temperature, "seed": seed}
                on = await run(SamplingParams(max_tokens=max_tokens, **kw), SCHEMA)
                n = on.completion_tokens
                off = await run(SamplingParams(max_tokens=max(n, 2), ignore_eos=True, **kw), None)
                tokens += n
                grammar_s += on.grammar_s or 0.0
                if on.tpot_s and off.tpot_s:
                    tpot_on.append(on.tpot_s)
                    tpot_off.append(off.tpot_s)
                bar.update(task, advance=1)
        vocab = engine.runner.vocab_size
    finally:
        await engine.stop()
    per_token_ms = grammar_s / max(tokens, 1) * 1e3
    step_ms = statistics.median(tpot_off) * 1e3 if tpot_off else None
    return {
        "profile": profile,
        "vocab": vocab,
        "rounds": rounds,
        "constrained_tokens": tokens,
        "grammar_ms_per_token": round(per_token_ms, 4),
        "decode_step_ms_median": None if step_ms is None else round(step_ms, 3),
        "tpot_constrained_ms_median": round(statistics.median(tpot_on) * 1e3, 3)
        if tpot_on
        else None,
        "share_of_step": None if not step_ms else round(per_token_ms / step_ms, 4),
        "target": 0.10,
    }
