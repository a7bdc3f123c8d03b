"""The lean single-token CPU step computes exactly what the general forward does: the same
logits bit for bit, the same keys and values in the cache, so the same greedy tokens."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from ling_local.engines.embedded.llama_runner import LlamaRunner
from ling_local.engines.embedded.quant import int8_available
from tests.support import small_causal_lm

QUANTIZE = [
    "none",
    pytest.param(
        "int8", marks=pytest.mark.skipif(not int8_available(), reason="no CPU int8 matmul")
    ),
]


def _model(kind: str):
    if kind == "llama":
        return small_causal_lm("llama")
    if kind == "llama-gqa":  # 2 query heads per KV head, separate output head
        return small_causal_lm("llama", tied=False, num_key_value_heads=2)
    if kind == "qwen2":  # biases on q, k, v
        return small_causal_lm("qwen2", tied=False, num_key_value_heads=2)
    if kind == "qwen3":  # q/k norms: not on the lean step
        return small_causal_lm("qwen3", tied=False, num_key_value_heads=2, head_dim=32)
    raise ValueError(kind)


def _compare(runner: LlamaRunner, prompt: list[int], steps: int) -> list[int]:
    """Decode greedily through the lean step and through forward_tokens side by side."""
    lean = runner.lean
    assert lean is not None
    a, b = runner.new_cache(), runner.new_cache()
    token = int(runner.forward(a, prompt).argmax())
    assert int(runner.forward(b, prompt).argmax()) == token
    tokens = [token]
    try:
        for _ in range(steps):
            runner.lean = lean
            fast = runner.forward(a, [token])
            runner.lean = None
            plain = runner.forward(b, [token])
            assert fast.dtype == plain.dtype == torch.float32
            assert torch.equal(fast, plain)
            token = int(fast.argmax())
            tokens.append(token)
    finally:
        runner.lean = lean
    assert a.length == b.length == len(prompt) + steps
    assert torch.equal(a.kv[:, :, :, : a.length], b.kv[:, :, :, : b.length])
    return tokens


@pytest.mark.parametrize("quantize", QUANTIZE)
@pytest.mark.parametrize("kind", ["llama", "llama-gqa", "qwen2"])
def test_lean_step_is_bit_identical(kind: str, quantize: str) -> None:
    runner = LlamaRunner(_model(kind), torch.device("cpu"), 256, quantize=quantize)
    assert runner.quantized == (quantize == "int8")
    _compare(runner, list(range(3, 40)), 24)


def test_lean_step_after_a_crop() -> None:
    """Cropping the cache (a prefix reused, speculation rolled back), then decoding on."""
    runner = LlamaRunner(_model("llama"), torch.device("cpu"), 256, quantize="none")
    lean = runner.lean
    outs = []
    for step in (lean, None):
        runner.lean = step
        cache = runner.new_cache()
        runner.forward(cache, list(range(5, 60)))
        runner.crop(cache, 30)
        runner.forward(cache, [7])
        outs.append(runner.forward(cache, [8]))
    runner.lean = lean
    assert torch.equal(*outs)


def test_q_norm_models_stay_on_the_general_path() -> None:
    runner = LlamaRunner(_model("qwen3"), torch.device("cpu"), 128)
    assert runner.lean is None
    cache = runner.new_cache()
    runner.forward(cache, list(range(3, 20)))
    assert runner.forward(cache, [5]).shape == (512,)


@pytest.mark.parametrize("quantize", QUANTIZE)
def test_lean_step_on_the_test_model(model_dir: Path, quantize: str) -> None:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    runner = LlamaRunner(model, torch.device("cpu"), 512, quantize=quantize)
    _compare(runner, list(range(5, 205)), 32)
