"""The product path for `bench quality`: eval examples through the embedded engine with the
profile's prompt format (what the daemon does for a `/v1/completions` request with a
`suffix`): SPM or PSM, token healing, banned FIM control tokens, single-line requests
stopped at the newline as the editor asks for them."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from ling_local.config import Profile
from ling_local.engines.base import GenerationRequest, Priority, SamplingParams
from ling_local.engines.embedded.torch_engine import TorchEngine
from ling_local.prompts import PromptBuilder

__all__ = ["daemon_predictor"]

MAX_NEW = {"single": 48, "multi": 128}


def daemon_predictor(profile: Profile) -> Callable[[list[dict]], list[str]]:
    """A predictor running each example through a TorchEngine built from `profile`."""

    async def run(examples: list[dict]) -> list[str]:
        engine = TorchEngine(profile)
        await engine.start()
        prompts = PromptBuilder(
            profile.prompt, engine.tokenizer, heal=engine.supports_token_healing
        )
        out = []
        try:
            for e in examples:
                built = prompts.fim(e["prefix"], e["suffix"])
                stop = (*built.stop, "\n") if e["kind"] == "single" else built.stop
                request = GenerationRequest(
                    prompt=built.text,
                    prompt_ids=built.ids,
                    priority=Priority.COMPLETION,
                    sampling=SamplingParams(
                        max_tokens=MAX_NEW[e["kind"]],
                        stop=stop,
                        stop_token_ids=built.stop_token_ids,
                    ),
                    first_token_ids=built.first_token_ids,
                    heal_text=built.heal_text,
                )
                text = []
                async for delta in engine.stream(request):
                    text.append(delta.text)
                out.append("".join(text))
        finally:
            await engine.stop()
        return out

    return lambda examples: asyncio.run(run(examples))
