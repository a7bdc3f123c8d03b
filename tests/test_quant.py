"""Weight-only int8 on the CPU: close to the float model, and the same greedy text on the
shipped model for code prompts."""

from __future__ import annotations

import pytest
import torch

from ling_local.engines.embedded.llama_runner import LlamaRunner
from ling_local.engines.embedded.quant import Int8Weight, int8_available, linear, quantize_int8

pytestmark = pytest.mark.skipif(not int8_available(), reason="no CPU int8 matmul in this torch")


def test_int8_linear_is_close_to_float() -> None:
    torch.manual_seed(0)
    w = torch.randn(256, 128) * 0.05
    x = torch.randn(3, 128)
    q = quantize_int8(w)
    assert isinstance(q, Int8Weight) and q.q.dtype == torch.int8
    ref = torch.nn.functional.linear(x, w)
    err = (linear(x, q) - ref).norm() / ref.norm()
    assert err < 0.02


def test_quantized_runner_tracks_the_float_one(model_dir) -> None:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    ref = LlamaRunner(model, torch.device("cpu"), 1024)
    q = LlamaRunner(model, torch.device("cpu"), 1024, quantize="int8")
    assert q.quantized and not ref.quantized
    ids = list(range(5, 205))
    a = ref.forward(ref.new_cache(), ids)
    b = q.forward(q.new_cache(), ids)
    assert ((a - b).norm() / a.norm()) < 0.05
    top_ref = set(a.topk(5).indices.tolist())
    assert int(b.argmax()) in top_ref


def test_shapes_the_int8_kernel_cannot_take_stay_in_float() -> None:
    """torch's CPU int8 kernel segfaults on a reduction length that is not a multiple of 8
    (here the down projection's, intermediate 172): such a model runs in float."""
    from tests.support import small_causal_lm

    model = small_causal_lm("llama", hidden_size=64, intermediate_size=172)
    runner = LlamaRunner(model, torch.device("cpu"), 64, quantize="int8")
    assert not runner.quantized
    logits = runner.forward(runner.new_cache(), [5, 6, 7])
    assert torch.isfinite(logits).all()
