"""What the Triton kernel tests share (`test_triton_kernels`, `test_triton_persistent`): the
CPU interpreter switched on where there is no GPU (before any kernel is decorated), the skip
mark, the device, small bf16 tensors, the closeness check, and a small model with its norms
folded into its matrices (the Triton kernels' form)."""

from __future__ import annotations

import importlib.util
import os

import pytest
import torch

from ling_local.engines.embedded.llama_runner import LlamaRunner
from tests.support import small_causal_lm

if importlib.util.find_spec("triton") is not None and not torch.cuda.is_available():
    # No GPU: Triton's CPU interpreter runs the kernels (set before they are decorated;
    # nothing else in the suite uses triton). CI installs triton with the test extra.
    os.environ.setdefault("TRITON_INTERPRET", "1")
INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
NEEDS_TRITON = pytest.mark.skipif(
    importlib.util.find_spec("triton") is None or not (INTERPRET or torch.cuda.is_available()),
    reason="needs triton, with TRITON_INTERPRET=1 (CPU) or a CUDA GPU",
)
DEV = torch.device("cuda" if torch.cuda.is_available() and not INTERPRET else "cpu")
BF16 = torch.bfloat16


def triton_kernels():
    """`ling_local.engines.embedded.triton.kernels`, imported after the interpreter switch."""
    from ling_local.engines.embedded.triton import kernels as triton_kernels

    return triton_kernels


def randn(*shape: int, scale: float = 1.0) -> torch.Tensor:
    return (torch.randn(*shape, device=DEV) * scale).to(BF16)


def close(got: torch.Tensor, want: torch.Tensor, rel: float = 1e-2) -> None:
    """Within a couple of bf16 ulps of the output's scale (accumulation order differs)."""
    err = (got.float() - want.float()).abs().max().item()
    assert err <= rel * want.float().abs().max().item() + 1e-6, err


def folded_runner(kind: str) -> LlamaRunner:
    """A small Llama ("llama", "llama-tied") or Qwen2 ("qwen2") in bf16 on DEV, its norms
    folded (`fold_norms`, which also stacks the layer matrices)."""
    model = small_causal_lm(
        "qwen2" if kind == "qwen2" else "llama",
        tied=kind == "llama-tied",
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=256,
        initializer_range=0.1,  # peakier logits than 0.02, so argmax is not a coin toss
    )
    runner = LlamaRunner(model.to(BF16).to(DEV), DEV, max_len=96, cuda_graphs=False)
    triton_kernels().fold_norms(runner.weights)
    return runner
