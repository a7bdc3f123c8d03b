"""The Triton decode step's settings: block sizes per kernel (`CONFIGS` for T = 1,
`VERIFY_CONFIGS` for a verify's T > 1, `ATTN`), the JSON override the sweep script writes
(`LING_LOCAL_TRITON_CONFIGS`), what a model needs for these kernels, the norm folding they
expect and the output head's int8 screen. Imports no triton."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from pathlib import Path

import torch

__all__ = [
    "ATTN",
    "CONFIGS",
    "VERIFY_CONFIGS",
    "AttnConfig",
    "GemvConfig",
    "ModelShape",
    "ScreenHead",
    "apply_config",
    "fold_norms",
    "fold_weight",
    "load_configs",
    "screen_head",
    "set_config",
    "stack_layers",
    "unsupported_reason",
]


@dataclass(frozen=True, slots=True)
class GemvConfig:
    block_n: int
    """Output rows per CTA (for the paired kernels: per half, so a CTA reads 2 * block_n)."""
    block_k: int
    """Reduction elements per loop iteration (8 bf16 = one 16-byte load per thread-row)."""
    num_warps: int = 4
    prefetch: bool = True
    """Register loads: load the next weight tile while multiplying this one (and the first
    before the PDL wait); False: a plain loop left to Triton's pipelining (`num_stages`)."""
    num_stages: int = 3
    tma: bool = False
    """The plain GEMV at T = 1 (the output head and its screen): weight tiles through a TMA
    tensor descriptor into `num_stages` shared-memory buffers kept in flight by Triton's
    pipeliner (Hopper; block_k <= 256), instead of register loads; `prefetch` is then
    unused."""
    l2_prefetch: float = 0.0
    """The paired GEMV (QKV, gate/up): fraction of each of the CTA's two row blocks asked of
    the L2 (a bulk prefetch, Hopper) before the PDL wait, so the weights stream while the
    previous kernel runs (0: none)."""
    l2_keep: float = 0.0
    """T = 1, register loads: fraction of the launch's CTAs (the first ones) whose weight
    tiles load as evict_last, so they stay in the L2 from one step to the next and are not
    read from HBM again; the rest stream as evict_first (0: all stream)."""

    def __post_init__(self) -> None:
        for name in ("l2_prefetch", "l2_keep"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} {getattr(self, name)} is not a fraction in [0, 1]")


@dataclass(frozen=True, slots=True)
class AttnConfig:
    """Flash-decoding over the live context. At T = 1 the last CTA of each kv head combines
    the splits and the kv head's query group goes to the tensor cores padded to 16 rows; a
    verify (T > 1) combines them in a second launch (all its rows' splits would not fit one
    CTA's registers)."""

    splits: int = 16
    """Flash-decoding splits per kv head, over the live context."""
    block_l: int = 32
    """Cache positions per loop iteration at T = 1 (at least 16: a tensor-core tile)."""
    num_warps: int = 4

    def __post_init__(self) -> None:
        if self.block_l < 16 or self.block_l & (self.block_l - 1):
            raise ValueError(f"block_l {self.block_l} is not a power of two >= 16")
        if self.splits < 1:
            raise ValueError(f"splits {self.splits} is not at least 1")


# The best of the sweeps on the H200 for Llama-3.2-1B (H 2048, I 8192, 32/8 heads of 64,
# vocab 128256), scripts/gpu_kernel_sweep.py: block sizes from the per-kernel sweeps
# (docs/bench/kernel_sweep_h200_run3.json, the head's from the TMA sweep), L2 prefetch
# fractions from the whole-step tunes (--tune-step, docs/bench/kernel_sweep_tune_h200_run1.json
# and kernel_sweep_check_h200_run1.json): CTAs per launch in the comments.
CONFIGS: dict[str, GemvConfig] = {
    # 3072 rows -> 384 CTAs of 8 rows
    # l2_keep (qkv, down): the first CTAs' weights kept in the L2 from step to step, 12.6 +
    # 10.7 MB over the 16 layers; the step 0.8088 -> 0.8022 ms (--tune-step --space keep,
    # H200, 2026-12-02, docs/bench/keep_tune_h200_run1.json); more did not pay.
    "qkv": GemvConfig(
        block_n=4, block_k=512, num_warps=2, prefetch=False, l2_prefetch=0.5, l2_keep=0.0625
    ),
    # 16384 rows -> 512 CTAs of 32 rows
    "gate_up": GemvConfig(block_n=16, block_k=128, num_warps=8),
    # 2048 rows -> 512 CTAs
    "o": GemvConfig(block_n=4, block_k=1024),
    "down": GemvConfig(block_n=4, block_k=1024, num_warps=8, l2_keep=0.02),
    # 128256 rows -> 4008 CTAs; TMA (docs/bench/kernel_sweep_tma_h200_run1.json: 126 us,
    # 4.16 TB/s, vs 144 us with register loads; the step 0.943 -> 0.928 ms in
    # docs/bench/kernel_sweep_final_h200_run1.json).
    "lm_head": GemvConfig(block_n=32, block_k=128, num_warps=2, num_stages=3, tma=True),
    # The greedy head's int8 screen (`screen.py`), 4008 CTAs of 32 rows through TMA
    # (docs/bench/screen_tune_h200_run{2,3}.json).
    "lm_screen": GemvConfig(block_n=32, block_k=128, num_warps=2, num_stages=4, tma=True),
}
ATTN = {"attn": AttnConfig(splits=32, block_l=32, num_warps=4)}
VERIFY_CONFIGS: dict[str, GemvConfig] = {
    "qkv": GemvConfig(block_n=32, block_k=256, prefetch=False, num_stages=4),
    "gate_up": GemvConfig(block_n=32, block_k=256),
    "o": GemvConfig(block_n=16, block_k=256, prefetch=False, num_stages=4),
    "down": GemvConfig(block_n=16, block_k=256, prefetch=False, num_stages=4),
    "lm_head": GemvConfig(block_n=64, block_k=64, prefetch=False),
}
"""T > 1 (a verify): tensor-core tiles of 16 (padded) tokens x block_n rows x block_k."""


def fold_weight(matrix: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """The matrix [N, K] that rmsnorm-without-weight(x) must meet to give what the matrix
    gives after rmsnorm(x) with weight g: W[:, k] * g[k], in W's dtype."""
    return (matrix.float() * g.float()[None, :]).to(matrix.dtype)


def fold_norms(w) -> None:
    """Fold each RMSNorm weight into the matrix it feeds (`fold_weight`) and make the norm
    weights ones: the same function, and the form the Triton kernels take. The output head
    gets a folded copy (the embedding stays as it is)."""
    if w.norms_folded:
        return
    for layer in w.layers:
        layer.wqkv = fold_weight(layer.wqkv, layer.ln_in)
        layer.ln_in = torch.ones_like(layer.ln_in)
        layer.w13 = fold_weight(layer.w13, layer.ln_post)
        layer.ln_post = torch.ones_like(layer.ln_post)
    w.lm_head = fold_weight(w.lm_head, w.norm)
    w.norm = torch.ones_like(w.norm)
    w.norms_folded = True
    stack_layers(w)


@dataclass(frozen=True, slots=True)
class ScreenHead:
    """The output head's int8 screen (`screen.py`): q [V, K], the int8 values + 128 as
    uint8 (what the kernel's byte permutes take), with per-row scales (w ~ scale * (q -
    128)), and per row `slack` >= ||w - scale * (q - 128)|| + (4K + 64) 2^-24 ||w||, the
    most the quantisation and fp32 summation (twice the worst case of a K-term fp32 dot
    product, for the screen's and the exact recompute's) can move a logit per unit of
    input norm."""

    q: torch.Tensor
    scale: torch.Tensor
    slack: torch.Tensor


def screen_head(w) -> ScreenHead:
    """The screen of `w.lm_head` (the norm folded in: call after `fold_norms`), built on
    the head's device in fp64 blocks of 2^24 elements and kept on the weights
    (`w.head_screen`)."""
    if not w.norms_folded:
        raise ValueError("the head's screen takes folded norms (fold_norms first)")
    if w.head_screen is not None:
        return w.head_screen
    head = w.lm_head
    n = head.shape[0]
    rows = max(1, 2**24 // head.shape[1])
    q = torch.empty(head.shape, dtype=torch.uint8, device=head.device)
    scale = torch.empty(n, dtype=torch.float32, device=head.device)
    slack = torch.empty(n, dtype=torch.float32, device=head.device)
    for i in range(0, n, rows):
        block = head[i : i + rows].double()
        s = block.abs().amax(dim=1).clamp_min(1e-30) / 127.0
        s32 = s.float()
        qi = torch.round(block / s32.double()[:, None]).clamp_(-127, 127)
        err = (block - qi * s32.double()[:, None]).norm(dim=1)
        bound = err + block.norm(dim=1) * (4 * head.shape[1] + 64) * 2.0**-24
        q[i : i + rows] = (qi + 128).to(torch.uint8)
        scale[i : i + rows] = s32
        # fp64 -> fp32 rounded up, so the stored bound is still a bound
        b32 = bound.float()
        up = torch.nextafter(b32, torch.full_like(b32, float("inf")))
        slack[i : i + rows] = torch.where(b32.double() < bound, up, b32)
    w.head_screen = ScreenHead(q, scale, slack)
    return w.head_screen


_STACKED = ("wqkv", "wo", "w13", "w2")


def stack_layers(w) -> None:
    """Put each kind of layer matrix (wqkv, wo, w13, w2) in one [layers, N, K] allocation,
    the layers' tensors views of it. Kept because every shipped block size and L2 fraction
    was tuned and measured with this layout (it was made for a persistent kernel, since
    deleted; the per-layer kernels without it were not measured again). The torch steps
    see the same tensors."""
    for name in _STACKED:
        whole = torch.stack([getattr(layer, name) for layer in w.layers])
        for i, layer in enumerate(w.layers):
            setattr(layer, name, whole[i])


def load_configs(path: str | os.PathLike) -> None:
    """Take block sizes from a JSON file of the sweep script's form
    ({"qkv": {"block_n": 8, ...}, "attn": {...}, "verify:qkv": {...}}); unknown names
    refused."""
    for name, fields in json.loads(Path(path).read_text()).items():
        apply_config(name, fields)


def apply_config(name: str, fields: dict) -> None:
    """Kernel `name`'s block sizes from scratch ("attn", a `CONFIGS` name, or
    "verify:<name>" for the T > 1 tiles); unknown names refused."""
    if name in ATTN:
        ATTN[name] = AttnConfig(**fields)
    elif name in CONFIGS:
        CONFIGS[name] = GemvConfig(**fields)
    elif name.startswith("verify:") and name[7:] in VERIFY_CONFIGS:
        VERIFY_CONFIGS[name[7:]] = GemvConfig(**fields)
    else:
        raise ValueError(f"unknown kernel {name!r}")


if os.environ.get("LING_LOCAL_TRITON_CONFIGS"):
    load_configs(os.environ["LING_LOCAL_TRITON_CONFIGS"])


@dataclass(frozen=True, slots=True)
class ModelShape:
    """What the kernels need to know of a model to say whether they can run it."""

    head_dim: int
    n_heads: int
    n_kv_heads: int
    qk_norm: bool
    """Per-head q/k RMSNorm (Qwen3)."""
    dtype: torch.dtype

    @classmethod
    def of_weights(cls, w) -> ModelShape:
        """The shape of loaded `LlamaWeights`."""
        qk_norm = any(layer.q_norm is not None for layer in w.layers)
        return cls(w.head_dim, w.n_heads, w.n_kv_heads, qk_norm, w.embed.dtype)

    @classmethod
    def of_config(cls, config, dtype: torch.dtype) -> ModelShape:
        """The shape a Hugging Face config describes, loaded in `dtype`."""
        heads = config.num_attention_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        kv = getattr(config, "num_key_value_heads", None) or heads
        return cls(head_dim, heads, kv, config.model_type == "qwen3", dtype)


def unsupported_reason(shape: ModelShape) -> str | None:
    """Why these kernels cannot run a model of this shape, or None when they can."""
    if shape.qk_norm:
        return "per-head q/k norms (Qwen3) are not implemented in the Triton kernels"
    if shape.dtype != torch.bfloat16:
        name = str(shape.dtype).removeprefix("torch.")
        return f"the Triton kernels are built and tested for bfloat16 weights, not {name}"
    d = shape.head_dim
    if d & (d - 1) or d < 16:
        return f"head_dim {d} is not a power of two >= 16"
    if shape.n_heads % shape.n_kv_heads:
        return "query heads are not a multiple of kv heads"
    if (d // 2) % CONFIGS["qkv"].block_n:
        return f"head_dim/2 = {d // 2} is not a multiple of CONFIGS['qkv'].block_n"
    return None


def set_config(name: str, **changes) -> None:
    """Change fields of one kernel's block sizes (the sweep script's variants): "attn", a
    `CONFIGS` name, or "verify:<name>" for the T > 1 tiles; unknown names refused."""
    if name in ATTN:
        ATTN[name] = replace(ATTN[name], **changes)
    elif name in CONFIGS:
        CONFIGS[name] = replace(CONFIGS[name], **changes)
    elif name.startswith("verify:") and name[7:] in VERIFY_CONFIGS:
        VERIFY_CONFIGS[name[7:]] = replace(VERIFY_CONFIGS[name[7:]], **changes)
    else:
        raise ValueError(f"unknown kernel {name!r}")
