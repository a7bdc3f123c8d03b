"""The CPU decode step (numba kernels, `cpu_decode`) computes what the general forward
computes: its kernels against a float64 reference, its logits and cached keys and values
against `forward_tokens`' within rounding (float32 there, bfloat16 matmul inputs in torch's
int8 path), its greedy tokens equal wherever the reference's top two are not a near-tie,
and the same bits on 1 and 2 threads."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from ling_local.engines.embedded import cpu_kernels
from ling_local.engines.embedded.llama_runner import LlamaRunner
from ling_local.engines.embedded.quant import int8_available
from tests.support import small_causal_lm

QUANTIZE = [
    "none",
    pytest.param(
        "int8", marks=pytest.mark.skipif(not int8_available(), reason="no CPU int8 matmul")
    ),
]
TOLERANCE = {"none": 1e-5, "int8": 1e-2}
"""Largest logit difference, relative to the largest logit, between the step and
`forward_tokens` (measured: 5e-7 and 5e-3; int8: torch's kernel rounds its inputs and
outputs to bfloat16)."""


@pytest.mark.parametrize("dtype", [np.int8, np.float32])
@pytest.mark.parametrize("shape", [(37, 96), (640, 64), (5, 1536)])
def test_matvec_against_a_float64_reference(dtype: type, shape: tuple[int, int]) -> None:
    rng = np.random.default_rng(0)
    if dtype is np.int8:
        q = rng.integers(-128, 128, shape, dtype=np.int8)
    else:
        q = rng.standard_normal(shape).astype(np.float32)
    scales = rng.uniform(0.001, 0.02, shape[0]).astype(np.float32)
    x = rng.standard_normal(shape[1]).astype(np.float32)
    out = np.empty(shape[0], np.float32)
    for threads in (1, 2):
        cpu_kernels.set_threads(threads)
        cpu_kernels.matvec(q, scales, x, out)
        ref = (q.astype(np.float64) @ x.astype(np.float64)) * scales
        np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())


def test_top_k() -> None:
    v = np.random.default_rng(1).standard_normal(12288).astype(np.float32)
    for k in (1, 16):
        got = cpu_kernels.top_k(v, k)
        assert sorted(got.tolist()) == sorted(torch.topk(torch.from_numpy(v), k).indices.tolist())


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


def _close(fast: torch.Tensor, plain: torch.Tensor, quantize: str) -> None:
    """Logits within rounding; the same argmax unless the reference's top two are closer
    than the difference between the two paths."""
    assert fast.dtype == plain.dtype == torch.float32
    diff = (fast - plain).abs().max().item()
    assert diff <= TOLERANCE[quantize] * plain.abs().max().item()
    top2 = plain.topk(2).values
    if (top2[0] - top2[1]).item() > 2 * diff:
        assert int(fast.argmax()) == int(plain.argmax())


def _compare(runner: LlamaRunner, prompt: list[int], steps: int, quantize: str) -> list[int]:
    """Decode greedily through the step and through forward_tokens side by side, on the
    step's tokens."""
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
            _close(fast, plain, quantize)
            token = int(fast.argmax())
            tokens.append(token)
    finally:
        runner.lean = lean
    assert a.length == b.length == len(prompt) + steps
    kv_a, kv_b = a.kv[:, :, :, : a.length], b.kv[:, :, :, : b.length]
    assert torch.equal(kv_a[:, :, :, : len(prompt)], kv_b[:, :, :, : len(prompt)])  # prefill
    assert (kv_a - kv_b).abs().max() <= TOLERANCE[quantize] * kv_b.abs().max()
    return tokens


@pytest.mark.parametrize("quantize", QUANTIZE)
@pytest.mark.parametrize("kind", ["llama", "llama-gqa", "qwen2"])
def test_lean_step_matches_the_general_forward(kind: str, quantize: str) -> None:
    runner = LlamaRunner(_model(kind), torch.device("cpu"), 256, quantize=quantize)
    assert runner.quantized == (quantize == "int8")
    _compare(runner, list(range(3, 40)), 24, quantize)


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
    _close(*outs, "none")


def test_the_same_bits_on_one_and_two_threads() -> None:
    """Each output row and each head is computed whole by one thread, in the same order."""
    runner = LlamaRunner(_model("llama-gqa"), torch.device("cpu"), 256, quantize="int8")
    before = torch.get_num_threads()
    outs = []
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            cache = runner.new_cache()
            runner.forward(cache, list(range(5, 60)))
            outs.append([runner.forward(cache, [t]) for t in (7, 8, 9)])
    finally:
        torch.set_num_threads(before)
    assert all(torch.equal(a, b) for a, b in zip(*outs, strict=True))


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
    _compare(runner, list(range(5, 205)), 32, quantize)
