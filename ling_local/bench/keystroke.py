"""`bench keystroke`: the editor's case on a shipped profile: the file so far is cached
and a keystroke adds a few tokens; time to the first new token against nothing cached, and
decode TPOT through the engine's streaming API."""

from __future__ import annotations

import asyncio
import statistics
from pathlib import Path

from ling_local.bench.engine import engine_stream

__all__ = ["keystroke_latency"]


def keystroke_latency(
    profile_name: str = "tiny",
    prefix_tokens: int = 1500,
    new_prompt_tokens: int = 8,
    decode_tokens: int = 128,
    repeats: int = 7,
) -> dict:
    """The editor's case on a profile as shipped: the file so far (`prefix_tokens`) is in
    the prefix cache and a keystroke adds `new_prompt_tokens`; how long until the first new
    token, against the same prompt with nothing cached; plus decode TPOT through the
    engine's streaming API."""
    from ling_local.config import load_profile
    from ling_local.engines.embedded.torch_engine import TorchEngine

    profile = load_profile(profile_name)

    async def main() -> dict:
        engine = TorchEngine(profile)
        await engine.start()
        source = (Path(__file__).resolve().parents[1] / "scheduler.py").read_text() * 8
        ids = engine.tokenize(source)
        n = prefix_tokens
        cold, warm, tpot = [], [], []
        for i in range(repeats):
            prompt = ids[: n + new_prompt_tokens * (i + 1)]
            engine.decoder.cache.clear()
            stamps, _, stats = await engine_stream(engine, prompt, 1)
            cold.append(stats.ttft_s * 1e3)
            engine.decoder.cache.clear()
            await engine_stream(engine, prompt[:-new_prompt_tokens], 1)  # the file so far
            stamps, _, stats = await engine_stream(engine, prompt, 1)
            assert stats.cached_tokens >= len(prompt) - new_prompt_tokens
            warm.append(stats.ttft_s * 1e3)
        for i in range(3):
            engine.decoder.cache.clear()
            stamps, _, _ = await engine_stream(engine, ids[i * 7 : i * 7 + 256], decode_tokens)
            tpot.append((stamps[-1] - stamps[0]) / (len(stamps) - 1) * 1e3)
        await engine.stop()
        return {
            "profile": profile_name,
            "prefix_tokens": n,
            "new_prompt_tokens": new_prompt_tokens,
            "ttft_cold_ms_median": round(statistics.median(cold), 2),
            "ttft_cached_prefix_ms_median": round(statistics.median(warm), 2),
            "ttft_cached_prefix_ms_runs": [round(w, 2) for w in warm],
            "decode_tpot_ms_median_256ctx": round(statistics.median(tpot), 3),
        }

    return asyncio.run(main())
