"""`bench edit`: the code-editing workload for speculative decoding on the embedded engine.

The prompt holds a real source file, then the start of the same file again with a small
change (an identifier renamed); the model continues the rewrite, which mostly copies what
it has seen. The same greedy generation runs plain, with prompt lookup (n-gram drafts from
the prompt and output) and with the draft model, through the engine's streaming API;
reported: time per output token, acceptance length, and whether the outputs are identical.
"""

from __future__ import annotations

import asyncio
import statistics
from pathlib import Path

from ling_local.bench.engine_stream import engine_stream

__all__ = ["EDIT_SOURCE", "edit_speedup", "edit_workload"]

EDIT_SOURCE = Path(__file__).resolve().parents[1] / "scheduler.py"
"""The file the workload rewrites (real code of this project, ~200 lines)."""


def edit_workload(text: str, budget_chars: int) -> tuple[str, str]:
    """(prompt, what a faithful rewrite continues with): the file cut to `budget_chars`
    at a line end, then the same text with one identifier renamed, its first fifth given."""
    cut = text[:budget_chars]
    cut = cut[: cut.rfind("\n") + 1]
    edited = cut.replace("ticket", "entry")
    head = edited[: len(edited) // 5]
    head = head[: head.rfind("\n") + 1]
    prompt = f"{cut}\n\n# The same module, with `ticket` renamed to `entry`:\n{head}"
    return prompt, edited[len(head) :]


def edit_speedup(
    profile_name: str = "tiny",
    new_tokens: int = 200,
    repeats: int = 3,
    modes: tuple[str, ...] = ("none", "prompt_lookup", "draft"),
) -> dict:
    """Median ms per output token of each mode on the code-editing prompt, the acceptance
    length of the speculative ones and whether their tokens equal the plain run's."""
    from ling_local.config import load_profile
    from ling_local.engines.embedded.torch_engine import TorchEngine

    def fit(engine: TorchEngine) -> list[int]:
        """The workload's prompt ids, cut so the prompt and the answer fit the context
        (~3.5 characters a token here, trimmed until they do)."""
        context, text = engine.context_length, EDIT_SOURCE.read_text()
        budget = int((context - new_tokens - 64) * 3.5 / 1.3)
        while True:
            ids = engine.tokenize(edit_workload(text, budget)[0])
            if len(ids) + new_tokens + 16 <= context:
                return ids
            budget = int(budget * 0.9)

    async def run(mode: str, prompt_ids: list[int] | None) -> tuple[dict, list[int]]:
        profile = load_profile(profile_name)
        profile.engine.speculative = mode  # type: ignore[assignment]
        profile.engine.warmup = False
        engine = TorchEngine(profile)
        await engine.start()
        try:
            if prompt_ids is None:  # the first mode's engine builds the prompt
                prompt_ids = fit(engine)
            await engine_stream(engine, prompt_ids[:64], 8)  # first-call costs
            tpots, ids, stats = [], [], None
            for _ in range(repeats):
                engine.decoder.cache.clear()  # the same cold prompt each time
                stamps, ids, stats = await engine_stream(engine, prompt_ids, new_tokens)
                tpots.append((stamps[-1] - stamps[0]) / (len(ids) - 1) * 1e3)
        finally:
            await engine.stop()
        row = {
            "tpot_ms": round(statistics.median(tpots), 3),
            "runs_ms": [round(t, 3) for t in tpots],
            "accept_length": round(stats.accept_length, 2) if stats.accept_length else None,
            "tokens": ids,
        }
        return row, prompt_ids

    async def main() -> dict:
        out: dict = {"profile": profile_name, "new_tokens": new_tokens, "source": EDIT_SOURCE.name}
        prompt_ids, plain = None, None
        for mode in modes:
            row, prompt_ids = await run(mode, prompt_ids)
            out.setdefault("prompt_tokens", len(prompt_ids))
            tokens = row.pop("tokens")
            if mode == "none":
                plain = tokens
            elif plain is not None:
                row["same_tokens_as_plain"] = tokens == plain
            out[mode] = row
        return out

    return asyncio.run(main())
