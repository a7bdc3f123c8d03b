"""The embedded engine's GPU path (CUDA graphs, lagged token reads, graph verify). Runs on
the lent GPU (`pytest -m gpu`); skipped where there is no CUDA device."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import torch

from ling_local.config import profile_from_dict
from ling_local.engines.base import GenerationRequest, Priority, SamplingParams
from ling_local.engines.embedded.torch_engine import TorchEngine
from ling_local.errors import ConfigError

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

EDIT = "def parse(line):\n    key, _, value = line.partition('=')\n    return key\n" * 3


@pytest.fixture(scope="module")
def gpu_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from ling_local.bench.random_model import build_random_llama

    return build_random_llama(
        tmp_path_factory.mktemp("gpu-model"),
        vocab_size=1024,
        hidden_size=256,
        intermediate_size=688,
        num_layers=4,
        num_heads=8,
        num_kv_heads=2,
    )


def _profile(model: Path, dtype: str = "float32", **engine):
    """A profile for the engine's GPU path: the torch step unless `kernels` says otherwise."""
    return profile_from_dict(
        {
            "name": "gpu",
            "model": {"path": str(model), "device": "cuda", "dtype": dtype, "context_length": 1024},
            "engine": {"warmup": False, "cuda_graphs": True, "kernels": "torch", **engine},
        }
    )


async def _gen(
    engine: TorchEngine, prompt: str, n: int, priority=Priority.COMPLETION, **sampling
) -> tuple[str, object]:
    request = GenerationRequest(
        prompt=prompt, priority=priority, sampling=SamplingParams(max_tokens=n, **sampling)
    )
    text, last = "", None
    async for delta in engine.stream(request):
        text += delta.text
        last = delta
    return text, last.stats


def _hf_greedy(model: Path, prompt: str, n: int) -> str:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model)
    hf = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).cuda().eval()
    ids = torch.tensor([tok(prompt, add_special_tokens=False)["input_ids"]], device="cuda")
    out = hf.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False, pad_token_id=0)
    return tok.decode(out[0, ids.shape[1] :], skip_special_tokens=True)


async def test_graph_decoding_equals_transformers(gpu_model: Path) -> None:
    e = TorchEngine(_profile(gpu_model))
    await e.start()
    try:
        assert e.decoder.graphs
        text, stats = await _gen(e, "class A:\n    def f(self):\n", 48, ignore_eos=True)
        again, _ = await _gen(e, "class A:\n    def f(self):\n", 48, ignore_eos=True)
    finally:
        await e.stop()
    assert stats.completion_tokens == 48
    assert text == again == _hf_greedy(gpu_model, "class A:\n    def f(self):\n", 48)


async def test_stop_string_and_cancel_in_a_burst(gpu_model: Path) -> None:
    e = TorchEngine(_profile(gpu_model))
    await e.start()
    try:
        free, _ = await _gen(e, "x = 1\n", 40, ignore_eos=True)
        stop = free[10:13]
        cut, stats = await _gen(e, "x = 1\n", 40, ignore_eos=True, stop=(stop,))
        assert stats.finish_reason == "stop"
        assert cut == free[: free.index(stop)]
        request = GenerationRequest(
            prompt="y = 2\n",
            priority=Priority.CHAT,
            sampling=SamplingParams(max_tokens=900, ignore_eos=True),
        )
        seen = 0
        async for delta in e.stream(request):
            seen += delta.n_tokens
            if seen >= 5 and not request.cancelled:
                request.cancel()
                at_cancel = seen
            last = delta
        assert last.finish_reason == "cancelled"
        assert last.stats.completion_tokens <= at_cancel + 4  # burst lag + one step
    finally:
        await e.stop()


async def test_preempted_chat_resumes_exactly(gpu_model: Path) -> None:
    e = TorchEngine(_profile(gpu_model))
    await e.start()
    try:
        alone, _ = await _gen(e, "import os\n", 200, Priority.CHAT, ignore_eos=True)
        chat = asyncio.create_task(_gen(e, "import os\n", 200, Priority.CHAT, ignore_eos=True))
        await asyncio.sleep(0.01)
        completion, _ = await _gen(e, "def g():\n", 8, ignore_eos=True)
        resumed, _ = await chat
    finally:
        await e.stop()
    assert resumed == alone
    assert completion


async def test_prompt_lookup_verify_graph_is_exact(gpu_model: Path) -> None:
    plain_e = TorchEngine(_profile(gpu_model))
    await plain_e.start()
    try:
        plain, _ = await _gen(plain_e, EDIT, 64, ignore_eos=True)
    finally:
        await plain_e.stop()
    e = TorchEngine(_profile(gpu_model, speculative="prompt_lookup"))
    await e.start()
    try:
        spec, stats = await _gen(e, EDIT, 64, ignore_eos=True)
    finally:
        await e.stop()
    assert spec == plain
    assert stats.verify_steps is not None


async def test_seeded_sampling_in_bursts(gpu_model: Path) -> None:
    e = TorchEngine(_profile(gpu_model, dtype="bfloat16"))
    await e.start()
    try:
        a, _ = await _gen(e, "for", 30, temperature=0.9, seed=5, ignore_eos=True)
        b, _ = await _gen(e, "for", 30, temperature=0.9, seed=5, ignore_eos=True)
    finally:
        await e.stop()
    assert a == b


async def test_compiled_graph_step_runs(gpu_model: Path) -> None:
    e = TorchEngine(_profile(gpu_model, compile=True))
    await e.start()
    try:
        _, stats = await _gen(e, "while True:\n", 32, ignore_eos=True)
    finally:
        await e.stop()
    assert stats.completion_tokens == 32
    assert stats.finish_reason == "length"


def _full_head_tokens(e: TorchEngine, ids: list[int], n: int) -> list[int]:
    """Greedy tokens of the engine's model through its Triton step with the full bf16 head,
    replayed one step at a time: the prefill's token, then n - 1 steps."""
    from ling_local.engines.embedded.cuda_graphs import GraphStep

    runner, banned = e.runner, e.decoder.banned
    slot = runner.new_cache()
    with torch.inference_mode():
        logits = runner.forward(slot, ids).index_fill_(-1, banned, float("-inf"))
        out = [int(logits.argmax())]
        step = GraphStep(runner.weights, slot, 1, runner.max_len, banned=banned, kernels="triton")
        step.load(out, len(ids))
        for _ in range(n - 1):
            step.replay()
            out.append(int(step.argmax))
            step.advance(step.argmax)
    return out


async def test_the_default_on_a_gpu_is_the_triton_step(gpu_model: Path) -> None:
    """`engine.kernels = "auto"`, bf16: the engine takes the Triton step and says so in its
    health; greedy bursts (the head's int8 screen, tokens through the mapped host ring) give
    the tokens of the full bf16 head stepped one at a time, 96 of them; seeded sampling,
    which takes the full head's logits, repeats itself. In float32 "auto" is the torch
    step, with the reason, and "triton" refuses to load."""
    e = TorchEngine(_profile(gpu_model, dtype="bfloat16", kernels="auto"))
    await e.start()
    try:
        assert e.health().decode["kernels"] == "triton", e.health().decode
        assert e.runner.weights.head_screen is not None and e.decoder._ring is not None
        ids = e.tokenizer.encode("class A:\n    def f(self):\n")
        request = GenerationRequest(
            prompt="", prompt_ids=ids, priority=Priority.COMPLETION,
            sampling=SamplingParams(max_tokens=96, ignore_eos=True),
        )  # fmt: skip
        got = [t async for delta in e.stream(request) for t in delta.token_ids]
        a, _ = await _gen(e, "for", 30, temperature=0.9, seed=5, ignore_eos=True)
        b, _ = await _gen(e, "for", 30, temperature=0.9, seed=5, ignore_eos=True)
    finally:
        await e.stop()
    assert len(got) == 96 and a == b
    assert got == _full_head_tokens(e, ids, 96)
    fp32 = TorchEngine(_profile(gpu_model, kernels="auto"))
    await fp32.start()
    try:
        assert fp32.health().decode == {
            "kernels": "torch",
            "why": "the Triton kernels are built and tested for bfloat16 weights, not float32",
        }
    finally:
        await fp32.stop()
    refused = TorchEngine(_profile(gpu_model, kernels="triton"))
    with pytest.raises(ConfigError, match="bfloat16"):
        await refused.start()
