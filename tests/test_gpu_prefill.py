"""Time to first token on the GPU: the prompt attention runs as flash attention (cold and
past a cached prefix), a cached prefix extended eagerly or through the T = EXTEND graph step
(PyTorch and Triton kernels) gives the full prefill's logits in bf16, and after the warm-up
no request captures a graph or runs a new prefill shape. Runs on the lent GPU
(`pytest -m gpu`); skipped where there is no CUDA device."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from ling_local.config import profile_from_dict
from ling_local.engines.base import GenerationRequest, Priority, SamplingParams
from ling_local.engines.embedded.torch_engine import TorchEngine

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


@pytest.fixture(scope="module")
def qwen_like(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two layers of the Qwen2.5-0.5B shape (14 query heads on 2 kv heads of 64, hidden
    896): the Triton kernels compiled here are the ones the benchmark's model uses."""
    from ling_local.bench.random_model import build_random_llama

    return build_random_llama(
        tmp_path_factory.mktemp("qwen-like"),
        vocab_size=1024,
        hidden_size=896,
        intermediate_size=4864,
        num_layers=2,
        num_heads=14,
        num_kv_heads=2,
        dtype="bfloat16",
    )


async def _engine(model: Path, kernels: str, warmup: bool) -> TorchEngine:
    e = TorchEngine(
        profile_from_dict(
            {
                "name": "gpu",
                "model": {"path": str(model), "device": "cuda", "context_length": 2048},
                "engine": {"warmup": warmup, "kernels": kernels, "cache_slots": 2},
            }
        )
    )
    await e.start()
    return e


def _close(a: torch.Tensor, b: torch.Tensor) -> None:
    """bf16 prefills through different kernels: the same logits up to rounding."""
    assert torch.nn.functional.cosine_similarity(a, b, dim=0) > 0.999
    assert (a - b).abs().max() < 0.05 * b.abs().max()


def test_prompt_attention_runs_as_flash_attention() -> None:
    from torch.backends.cuda import SDPAParams, can_use_flash_attention

    q = torch.empty(1, 14, 300, 64, device="cuda", dtype=torch.bfloat16)
    k = torch.empty(1, 2, 1800, 64, device="cuda", dtype=torch.bfloat16)
    assert can_use_flash_attention(SDPAParams(q, k, k, None, 0.0, False, True), False)
    k0 = torch.empty(1, 2, 300, 64, device="cuda", dtype=torch.bfloat16)
    assert can_use_flash_attention(SDPAParams(q, k0, k0, None, 0.0, True, True), False)


@pytest.mark.parametrize("kernels", ["torch", "triton"])
async def test_a_cached_prefix_extended_gives_the_full_prefills_logits(
    qwen_like: Path, kernels: str
) -> None:
    e = await _engine(qwen_like, kernels, warmup=False)
    try:
        runner, decoder = e.runner, e.decoder
        ids = torch.randint(5, 1000, (600,), generator=torch.Generator().manual_seed(0)).tolist()
        with torch.inference_mode():
            full = runner.forward(runner.new_cache(), ids)
            slot = decoder.cache.slots[0]
            runner.forward(slot.cache, ids[:-100])  # eager, bottom-right causal flash
            _close(runner.forward(slot.cache, ids[-100:]), full)
            runner.crop(slot.cache, len(ids) - 9)
            extended = decoder._extend(slot, ids[-9:])  # the T = EXTEND graph step
            allowed = torch.isfinite(extended)  # the step's head masks the banned FIM tokens
            assert allowed.sum() >= extended.numel() - 8
            _close(extended[allowed], full[allowed])
            assert slot.cache.length == len(ids)
    finally:
        await e.stop()


@pytest.mark.parametrize("kernels", ["torch", "triton"])
async def test_after_the_warm_up_no_request_loads_or_captures(
    qwen_like: Path, kernels: str
) -> None:
    e = await _engine(qwen_like, kernels, warmup=True)
    ids = torch.randint(5, 1000, (1500,), generator=torch.Generator().manual_seed(1)).tolist()
    traces = []
    try:
        for prompt, temperature in (
            (ids, 0.0),
            (ids + ids[:12], 0.0),
            (ids[7:1900], 0.8),
            (ids[7:] + ids[:300], 0.0),
        ):
            request = GenerationRequest(
                prompt="",
                prompt_ids=prompt,
                priority=Priority.COMPLETION,
                sampling=SamplingParams(max_tokens=24, ignore_eos=True, temperature=temperature),
            )
            async for delta in e.stream(request):
                if delta.stats is not None:
                    traces.append(delta.stats.trace)
    finally:
        await e.stop()
    assert [t["prefill"] for t in traces] == ["eager", "graph", "eager", "eager"]
    for trace in traces:
        assert trace["captures"] == 0 and trace["new_shapes"] == 0, trace
