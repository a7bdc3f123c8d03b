"""What the Triton kernel tests share (`test_triton_kernels`, `test_triton_screen`,
`test_token_ring`): the CPU interpreter switched on where there is no GPU (before any kernel
is decorated), the skip mark, the mark of the GPU-only cases, the device, small bf16
tensors, the closeness check, and a small model with its norms folded into its matrices
(the Triton kernels' form).

Under Triton's CPU interpreter (CI) a small subset runs: each shipped kernel once at a tiny
shape and the whole step once. Every other case is marked `gpu` (`GPU_ONLY`): the full
suite runs on a GPU with `pytest -m gpu`, and is skipped without CUDA."""

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
GPU_ONLY = pytest.mark.gpu
"""The full kernel suite beyond the interpreter's subset (skipped without CUDA)."""
DEV = torch.device("cuda" if torch.cuda.is_available() and not INTERPRET else "cpu")
BF16 = torch.bfloat16


def randn(*shape: int, scale: float = 1.0) -> torch.Tensor:
    return (torch.randn(*shape, device=DEV) * scale).to(BF16)


def close(got: torch.Tensor, want: torch.Tensor, rel: float = 1e-2) -> None:
    """Within a couple of bf16 ulps of the output's scale (accumulation order differs)."""
    err = (got.float() - want.float()).abs().max().item()
    assert err <= rel * want.float().abs().max().item() + 1e-6, err


def folded_runner(kind: str, layers: int = 2) -> LlamaRunner:
    """A small Llama ("llama", "llama-tied") or Qwen2 ("qwen2") in bf16 on DEV, its norms
    folded (`fold_norms`, which also stacks the layer matrices)."""
    from ling_local.engines.embedded.triton.setup import fold_norms

    model = small_causal_lm(
        "qwen2" if kind == "qwen2" else "llama",
        tied=kind == "llama-tied",
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=256,
        num_hidden_layers=layers,
        initializer_range=0.1,  # peakier logits than 0.02, so argmax is not a coin toss
    )
    runner = LlamaRunner(model.to(BF16).to(DEV), DEV, max_len=96, cuda_graphs=False)
    fold_norms(runner.weights)
    return runner


@pytest.fixture
def few_ctas(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under the interpreter, which runs a launch's CTAs one after another in Python, the
    whole step at the test shape (hidden 128, vocab 512) with block sizes that make a few
    CTAs a launch instead of tens: every shipped path is kept (QKV's plain loop, L2
    prefetch and L2 keep, down's L2 keep, the heads' TMA tiles, the attention's fused
    combine), so the same code runs, about 5x faster. On a GPU: the shipped block sizes."""
    if not INTERPRET:
        return
    from ling_local.engines.embedded.triton.setup import ATTN, CONFIGS, AttnConfig, GemvConfig

    tiles = {
        "qkv": GemvConfig(block_n=16, block_k=128, num_warps=2, prefetch=False,
                          l2_prefetch=0.5, l2_keep=0.0625),
        "gate_up": GemvConfig(block_n=64, block_k=128, num_warps=8),
        "o": GemvConfig(block_n=32, block_k=128),
        "down": GemvConfig(block_n=32, block_k=256, num_warps=8, l2_keep=0.02),
        "lm_head": GemvConfig(block_n=128, block_k=128, num_warps=2, tma=True),
        "lm_screen": GemvConfig(block_n=128, block_k=128, num_warps=2, num_stages=4, tma=True),
    }  # fmt: skip
    for name, cfg in tiles.items():
        assert name in CONFIGS
        monkeypatch.setitem(CONFIGS, name, cfg)
    monkeypatch.setitem(ATTN, "attn", AttnConfig(splits=2, block_l=32))
