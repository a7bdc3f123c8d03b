"""The embedded engine's decode strategies give the same greedy tokens as plain decoding:
the graph-step path (run eagerly on the CPU: same code minus the capture), prompt-lookup and
draft-model speculation."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from ling_local.config import profile_from_dict
from ling_local.engines.base import GenerationRequest, Priority, SamplingParams
from ling_local.engines.embedded.cuda_graphs import GraphStep
from ling_local.engines.embedded.decoding import Decoder
from ling_local.engines.embedded.torch_engine import TorchEngine
from ling_local.errors import ConfigError

# A code-editing prompt: the second copy invites the model to copy the first.
EDIT = """def parse(line):
    key, _, value = line.partition("=")
    return key.strip(), value.strip()


def load(path):
    with open(path) as f:
        return dict(parse(line) for line in f if line.strip())


# the same two functions, reformatted
def parse(line):
    key, _, value = line.partition("=")
"""


def _profile(model_dir: Path, draft_dir: Path | None = None, speculative: str = "none"):
    model = {"path": str(model_dir), "context_length": 2048}
    if draft_dir is not None:
        model["draft_path"] = str(draft_dir)
    return profile_from_dict(
        {"name": "t", "model": model, "engine": {"speculative": speculative, "warmup": False}}
    )


async def _run(engine: TorchEngine, prompt: str, n: int, **sampling) -> tuple[list[int], object]:
    request = GenerationRequest(
        prompt=prompt,
        priority=Priority.COMPLETION,
        sampling=SamplingParams(max_tokens=n, ignore_eos=True, **sampling),
    )
    text, last = "", None
    async for delta in engine.stream(request):
        text += delta.text
        last = delta
    return text, last.stats


async def _engine(profile) -> TorchEngine:
    e = TorchEngine(profile)
    await e.start()
    return e


async def test_graph_step_matches_the_plain_forward(model_dir: Path) -> None:
    e = await _engine(_profile(model_dir))
    try:
        runner = e.runner
        ids = e.tokenize(EDIT)
        plain = runner.new_cache()
        runner.forward(plain, ids[:-1])
        graphed = runner.new_cache()
        runner.forward(graphed, ids[:-1])
        step = GraphStep(runner.weights, graphed, 1, runner.max_len)
        token = int(runner.forward(plain, [ids[-1]]).argmax())
        step.load([ids[-1]], len(ids) - 1)  # the last prompt token, through the step
        step.replay()
        assert int(step.argmax[0]) == token
        for _ in range(10):  # chained on the "device", compared with plain decoding
            logits = runner.forward(plain, [token])
            step.advance(step.argmax)
            step.replay()
            assert torch.allclose(step.logits[0].float(), logits, atol=1e-4)
            token = int(logits.argmax())
            assert int(step.argmax[0]) == token
    finally:
        await e.stop()


async def test_triton_kernels_are_refused_at_load_off_a_gpu(model_dir: Path) -> None:
    profile = _profile(model_dir)
    profile.engine.kernels = "triton"
    with pytest.raises(ConfigError, match="needs a CUDA GPU"):
        await _engine(profile)


async def test_burst_decoding_gives_the_plain_tokens(model_dir: Path) -> None:
    e = await _engine(_profile(model_dir))
    try:
        plain, plain_stats = await _run(e, EDIT, 40)
        e.runner.use_graphs = True  # the GPU path's logic, steps run eagerly on the CPU
        e.decoder = Decoder(e.runner, e.decoder.cache)
        e.decoder.cache.clear()
        burst, stats = await _run(e, EDIT, 40)
        again, _ = await _run(e, EDIT, 40)  # reuses the prefix after a burst
        short, short_stats = await _run(e, EDIT, 3)
    finally:
        await e.stop()
    assert burst == plain == again
    assert stats.completion_tokens == plain_stats.completion_tokens == 40
    assert short_stats.completion_tokens == 3
    assert plain.startswith(short)


async def _plain_text(model_dir: Path, prompt: str, n: int) -> str:
    """What plain greedy decoding gives (a fresh engine, no speculation)."""
    e = await _engine(_profile(model_dir))
    try:
        return (await _run(e, prompt, n))[0]
    finally:
        await e.stop()


async def test_prompt_lookup_is_exact_and_accepts_copies(model_dir: Path) -> None:
    plain = await _plain_text(model_dir, EDIT, 48)
    e = await _engine(_profile(model_dir, speculative="prompt_lookup"))
    try:
        spec, stats = await _run(e, EDIT, 48)
    finally:
        await e.stop()
    assert spec == plain
    assert stats.verify_steps is not None and stats.verify_steps < 47
    assert stats.accept_length > 1.0


async def test_prompt_lookup_in_graph_bursts(model_dir: Path) -> None:
    """The GPU path's logic (graph steps, run eagerly on the CPU): a burst of plain steps
    hands over to a verify as soon as the output so far has a match to copy, so prompt
    lookup keeps proposing after a stretch with nothing to copy."""
    plain = await _plain_text(model_dir, EDIT, 64)
    e = await _engine(_profile(model_dir, speculative="prompt_lookup"))
    try:
        e.runner.use_graphs = True
        e.decoder = Decoder(e.runner, e.decoder.cache, num_speculative=e.decoder.k)
        spec, stats = await _run(e, EDIT, 64)
    finally:
        await e.stop()
    assert spec == plain
    # 1.0 when the burst never hands back (what it did before); ~1.35 without graphs
    assert stats.accept_length > 1.2, stats


async def test_draft_speculation_is_exact(model_dir: Path, draft_dir: Path) -> None:
    plain_e = await _engine(_profile(model_dir))
    try:
        plain, _ = await _run(plain_e, "class Point:\n    def __init__(self, x, y):\n", 30)
    finally:
        await plain_e.stop()
    e = await _engine(_profile(model_dir, draft_dir, speculative="draft"))
    try:
        spec, stats = await _run(e, "class Point:\n    def __init__(self, x, y):\n", 30)
        _, sampled_stats = await _run(e, "x = ", 5, temperature=0.8, seed=3)
    finally:
        await e.stop()
    assert spec == plain
    assert stats.accept_length is not None and stats.accept_length >= 1.0
    assert sampled_stats.accept_length is None  # sampling never speculates


async def test_plain_decode_runs_until_the_worker_is_wanted(model_dir: Path) -> None:
    """Off the graph path, one step decodes token after token until should_yield says a
    cancel or an arrival wants the worker, or the generation ends."""
    e = await _engine(_profile(model_dir))
    try:
        request = GenerationRequest(
            prompt=EDIT,
            priority=Priority.COMPLETION,
            sampling=SamplingParams(max_tokens=20, ignore_eos=True),
        )
        gen = e._new_generation(request)  # stepped here, not by the (idle) worker
        checks: list[int] = []

        def wanted_on_third_check() -> bool:
            checks.append(1)
            return len(checks) >= 3

        with torch.inference_mode():
            assert e.decoder.step(gen, lambda: False) is None  # the prompt, first token
            assert gen.n_generated == 1
            assert e.decoder.step(gen, wanted_on_third_check) is None
            assert gen.n_generated == 4
            assert e.decoder.step(gen, lambda: False) == "length"
            assert gen.n_generated == 20
        e.decoder.release(gen)
    finally:
        await e.stop()
