"""`engine.kernels = "auto"` (the default): which decode step the embedded engine takes and
the reason it gives, from the profile, the device and the model's config.

Without a GPU the reasons that come after "no CUDA device" are reached by asking about a
CUDA device that is not there: the decision reads only its type, and a decision that would
take the Triton step (naming the GPU) is the one case left to the GPU tests."""

from __future__ import annotations

import importlib.util

import pytest
import torch
from transformers import GPT2Config, LlamaConfig, Qwen2Config, Qwen3Config

from ling_local.config import EngineSettings, load_profile
from ling_local.engines.embedded.decode_path import decode_path
from ling_local.errors import ConfigError

CUDA = torch.device("cuda")
CPU = torch.device("cpu")
BF16 = torch.bfloat16


def _llama(**shape) -> LlamaConfig:
    return LlamaConfig(
        **{"hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2, **shape}
    )


def test_auto_is_the_default() -> None:
    assert EngineSettings().kernels == "auto"
    assert load_profile("local").engine.kernels == "auto"


def test_on_the_cpu_the_torch_step_with_the_reason() -> None:
    for kernels in ("auto", "torch"):
        path = decode_path(EngineSettings(kernels=kernels), CPU, torch.float32, _llama())
        assert path.kernels == "torch"
    assert "needs a CUDA GPU" in decode_path(EngineSettings(), CPU, BF16, _llama()).why
    assert (
        "engine.kernels = 'torch'"
        in decode_path(EngineSettings(kernels="torch"), CUDA, BF16, _llama()).why
    )
    assert decode_path(EngineSettings(), CPU, BF16, _llama()).as_dict() == {
        "kernels": "torch",
        "why": "the Triton step needs a CUDA GPU; the model runs on the cpu",
    }


@pytest.mark.parametrize(
    ("engine", "dtype", "config", "reason"),
    [
        ({}, BF16, GPT2Config(), "Llama/Mistral/Qwen2-style models, not gpt2"),
        ({"cuda_graphs": False}, BF16, _llama(), "engine.cuda_graphs is off"),
        ({"compile": True}, BF16, _llama(), "engine.compile asks for the compiled torch step"),
        ({}, torch.float32, _llama(), "bfloat16 weights, not float32"),
        ({}, torch.float16, _llama(), "bfloat16 weights, not float16"),
        ({}, BF16, Qwen3Config(), "per-head q/k norms (Qwen3)"),
        ({}, BF16, _llama(hidden_size=192, num_attention_heads=4), "head_dim 48"),
        ({}, BF16, _llama(num_key_value_heads=3), "not a multiple of kv heads"),
    ],
)
def test_why_a_gpu_would_run_the_torch_step(engine, dtype, config, reason: str) -> None:
    """`auto` falls back to the torch step with the reason; `triton` refuses to load with
    it (`triton` with `compile` or without CUDA graphs is refused by the profile itself)."""
    path = decode_path(EngineSettings(**engine), CUDA, dtype, config)
    assert path.kernels == "torch"
    assert reason in path.why
    if not engine:
        with pytest.raises(ConfigError, match=r"engine\.kernels = 'triton': ") as refused:
            decode_path(EngineSettings(kernels="triton"), CUDA, dtype, config)
        assert reason in refused.value.message


def test_without_triton_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "triton" else find_spec(name)
    )
    path = decode_path(EngineSettings(), CUDA, BF16, Qwen2Config(hidden_size=256))
    assert (path.kernels, path.why) == ("torch", "the triton package is not installed")


def test_explicit_triton_on_the_cpu_is_refused() -> None:
    with pytest.raises(ConfigError, match="needs a CUDA GPU"):
        decode_path(EngineSettings(kernels="triton"), CPU, BF16, _llama())
