"""Hand-written Triton kernels for the GPU decode step (`engine.kernels = "triton"`).

Five kernels per layer instead of inductor's fused graph, each built around what a batch-1
decode step is: a stream of weight bytes.

* `_paired_gemv_kernel`: RMSNorm prologue + a GEMV whose CTA owns two row blocks a fixed
  distance apart, so the epilogue can combine them:
  - QKV (`ROPE_KV`): rows d and d + head_dim/2 of one head are rotated together (RoPE, the
    rotate_half convention), q is written out, k and v go straight into the KV cache at the
    step's positions (no separate RoPE / index_copy kernels);
  - gate/up (`SILU`): rows i and I + i give silu(gate) * up, so the down projection reads the
    [I] product and nothing else.
* `_gemv_kernel`: GEMV with an optional RMSNorm prologue (the output head) and a residual
  epilogue (O and down projections, written into the residual in place); split-K writes fp32
  partials that `_splitk_reduce_kernel` sums, rounds and adds to the residual.
* `_attn_partial_kernel` + `_attn_reduce_kernel`: flash-decoding over the slot's cache. One
  CTA per (kv head, split) handles the kv head's whole query group for all T tokens; the
  split boundaries follow the position read on the device, so a captured graph spreads the
  live context, not the cache's capacity, over the splits.

Numerics follow the eager PyTorch step: bf16 (the model dtype) wherever PyTorch rounds
(norm output, each matmul output, each RoPE product, silu(gate), silu * up, residual adds),
fp32 accumulation inside each kernel. Attention keeps p and v in fp32 (SDPA's kernels round p
to bf16), so scores agree to ~1e-3, not bit for bit.

Every kernel handles T tokens (T = 1 decode, k + 1 for a speculative verify) with the token
axis as a small leading block: tuned for T = 1; at T > 1 the broadcast-and-sum tiles grow
with T and a `tl.dot` version would serve better (not written).

Performance: UNMEASURED. The block sizes below are first guesses for an H200 (132 SMs, aim at
2-4 CTAs per SM for every GEMV, 16-byte loads along K) and exist to be swept by
`scripts/gpu_engine_profile.py --variants triton,triton:down.split_k=4,...`. Only the Triton CPU
interpreter (TRITON_INTERPRET=1) has run this code so far (tests/test_triton_kernels.py).

The kernels themselves (device code) are in `triton_jit`. This module imports triton at the
top: import it only when `engine.kernels` asks for it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
import triton

from ling_local.engines.triton_jit import (
    _attn_partial_kernel,
    _attn_reduce_kernel,
    _gemv_kernel,
    _paired_gemv_kernel,
    _splitk_reduce_kernel,
)

__all__ = ["CONFIGS", "GemvConfig", "triton_step", "unsupported_reason"]


@dataclass(frozen=True, slots=True)
class GemvConfig:
    block_n: int
    """Output rows per CTA (for the paired kernels: per half, so a CTA reads 2 * block_n)."""
    block_k: int
    """Reduction elements per loop iteration (8 bf16 = one 16-byte load per thread-row)."""
    split_k: int = 1
    """CTAs sharing one row block's K range (fp32 partials + one reduce kernel)."""
    num_warps: int = 4


# Llama-3.2-1B (H 2048, I 8192, 32/8 heads of 64, vocab 128256): CTAs per launch in the
# comments. First guesses, to be swept on the H200.
CONFIGS: dict[str, GemvConfig] = {
    "qkv": GemvConfig(block_n=8, block_k=256),  # 3072 rows -> 192 CTAs of 16 rows
    "gate_up": GemvConfig(block_n=16, block_k=256),  # 16384 rows -> 512 CTAs of 32 rows
    "o": GemvConfig(block_n=8, block_k=256),  # 2048 rows -> 256 CTAs
    "down": GemvConfig(block_n=8, block_k=512, split_k=2),  # 256 x 2 = 512 CTAs
    "lm_head": GemvConfig(block_n=32, block_k=256),  # 128256 rows -> 4008 CTAs
}
ATTN_SPLITS = 16
"""Flash-decoding splits per kv head (8 kv heads -> 128 CTAs), over the live context."""
ATTN_BLOCK_L = 32
"""Cache positions per attention loop iteration at T = 1 (halved as the query rows grow)."""
ATTN_NUM_WARPS = 4
"""Warps of an attention CTA at T = 1 (more for a verify's larger tile)."""


def unsupported_reason(w) -> str | None:
    """Why these kernels cannot run this model's weights, or None when they can."""
    if any(layer.q_norm is not None for layer in w.layers):
        return "per-head q/k norms (Qwen3) are not implemented in the Triton kernels"
    d = w.head_dim
    if d & (d - 1) or d < 16:
        return f"head_dim {d} is not a power of two >= 16"
    if w.n_heads % w.n_kv_heads:
        return "query heads are not a multiple of kv heads"
    for name in ("qkv",):
        if (d // 2) % CONFIGS[name].block_n:
            return f"head_dim/2 = {d // 2} is not a multiple of CONFIGS['qkv'].block_n"
    return None


# --------------------------------------------------------------------------- launchers
def _pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def _block_k(cfg: GemvConfig, block_t: int) -> int:
    # The accumulator is [T, block_n, block_k]: keep it about the T = 1 size.
    return max(16, cfg.block_k // block_t)


def gemv(
    x: torch.Tensor,
    weight: torch.Tensor,
    cfg: GemvConfig,
    *,
    residual: torch.Tensor | None = None,
    norm: torch.Tensor | None = None,
    eps: float = 0.0,
) -> torch.Tensor:
    """(residual +) rmsnorm?(x) @ weight^T for x [T, K]; with a residual, written into it."""
    t, k = x.shape
    n = weight.shape[0]
    out = residual if residual is not None else x.new_empty((t, n))
    block_t = _pow2(t)
    split = cfg.split_k
    part = out if split == 1 else torch.empty((split, t, n), dtype=torch.float32, device=x.device)
    grid = (triton.cdiv(n, cfg.block_n), split)
    _gemv_kernel[grid](
        x,
        weight,
        out,
        out,
        norm if norm is not None else x,
        part,
        t,
        n,
        k,
        eps,
        NORM=norm is not None,
        RESIDUAL=residual is not None,
        SPLIT_K=split,
        BLOCK_T=block_t,
        BLOCK_N=cfg.block_n,
        BLOCK_K=_block_k(cfg, block_t),
        num_warps=cfg.num_warps,
    )
    if split > 1:
        block = 1024
        _splitk_reduce_kernel[(triton.cdiv(t * n, block),)](
            part, out, out, t * n, RESIDUAL=residual is not None, SPLIT_K=split, BLOCK=block
        )
    return out


def gate_up_silu(
    x: torch.Tensor, norm: torch.Tensor, w13: torch.Tensor, eps: float
) -> torch.Tensor:
    """silu(gate) * up of rmsnorm(x) for W13 = [gate; up] ([2I, H]); returns [T, I]."""
    t, k = x.shape
    inter = w13.shape[0] // 2
    cfg = CONFIGS["gate_up"]
    out = x.new_empty((t, inter))
    block_t = _pow2(t)
    _paired_gemv_kernel[(triton.cdiv(inter, cfg.block_n),)](
        x, w13, norm, x, out, x, x, x, x, x, t, k, inter, eps, 0,
        ROPE_KV=False, HAS_BIAS=False, N_HEADS=1, N_KV=1, HEAD_DIM=2,
        BLOCK_T=block_t, BLOCK_N=cfg.block_n, BLOCK_K=_block_k(cfg, block_t),
        num_warps=cfg.num_warps,
    )  # fmt: skip
    return out


def qkv_rope_kv(
    x: torch.Tensor,
    norm: torch.Tensor,
    wqkv: torch.Tensor,
    bias: torch.Tensor | None,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    pos: torch.Tensor,
    n_heads: int,
    n_kv: int,
    head_dim: int,
    eps: float,
) -> torch.Tensor:
    """Rotated q [T, n_heads * head_dim]; rotated k and v written into the caches."""
    t, k = x.shape
    cfg = CONFIGS["qkv"]
    q = x.new_empty((t, n_heads * head_dim))
    block_t = _pow2(t)
    grid = ((n_heads + 2 * n_kv) * (head_dim // 2 // cfg.block_n),)
    _paired_gemv_kernel[grid](
        x, wqkv, norm, bias if bias is not None else x, q, k_cache, v_cache, cos, sin, pos,
        t, k, 0, eps, k_cache.shape[1],
        ROPE_KV=True, HAS_BIAS=bias is not None, N_HEADS=n_heads, N_KV=n_kv,
        HEAD_DIM=head_dim, BLOCK_T=block_t, BLOCK_N=cfg.block_n,
        BLOCK_K=_block_k(cfg, block_t), num_warps=cfg.num_warps,
    )  # fmt: skip
    return q


def decode_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    pos: torch.Tensor,
    n_heads: int,
    n_kv: int,
    head_dim: int,
) -> torch.Tensor:
    """Attention of q [T, n_heads * head_dim] (query t at position pos + t, causal) over the
    cache [n_kv, max_len, head_dim]; returns [T, n_heads * head_dim]."""
    t = q.shape[0]
    group = n_heads // n_kv
    splits = ATTN_SPLITS
    rows = t * n_heads
    f32 = dict(dtype=torch.float32, device=q.device)
    m = torch.empty((rows, splits), **f32)
    l_sum = torch.empty((rows, splits), **f32)
    acc = torch.empty((rows, splits, head_dim), **f32)
    block_r = _pow2(group * t)
    block_l = max(8, ATTN_BLOCK_L * _pow2(group) // block_r)
    # The [rows, positions, head_dim] product tile grows with T: more warps, not spills.
    warps = min(16, max(ATTN_NUM_WARPS, block_r * block_l * head_dim // 2048))
    _attn_partial_kernel[(n_kv, splits)](
        q, k_cache, v_cache, pos, m, l_sum, acc, t, k_cache.shape[1], 1.0 / math.sqrt(head_dim),
        N_HEADS=n_heads, GROUP=group, HEAD_DIM=head_dim, SPLITS=splits,
        BLOCK_R=block_r, BLOCK_L=block_l, num_warps=warps,
    )  # fmt: skip
    out = q.new_empty((t, n_heads * head_dim))
    _attn_reduce_kernel[(rows,)](
        m, l_sum, acc, out, HEAD_DIM=head_dim, SPLITS=splits, BLOCK_S=_pow2(splits)
    )
    return out


def triton_step(
    w,
    k_cache: list[torch.Tensor],
    v_cache: list[torch.Tensor],
    tokens: torch.Tensor,
    pos: torch.Tensor,
    rows: torch.Tensor,
    cols: torch.Tensor,
    banned: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`cuda_graphs._step` with these kernels: 5 + 1 per split-K GEMV launches per layer.
    `rows` / `cols` are unused (the kernels read `pos` and mask themselves)."""
    x = F.embedding(tokens, w.embed)  # the residual stream, updated in place
    nh, nkv, hd, eps = w.n_heads, w.n_kv_heads, w.head_dim, w.eps
    for i, layer in enumerate(w.layers):
        q = qkv_rope_kv(
            x, layer.ln_in, layer.wqkv, layer.bqkv, k_cache[i], v_cache[i], w.cos, w.sin, pos,
            nh, nkv, hd, eps,
        )  # fmt: skip
        attn = decode_attention(q, k_cache[i], v_cache[i], pos, nh, nkv, hd)
        gemv(attn, layer.wo, CONFIGS["o"], residual=x)
        act = gate_up_silu(x, layer.ln_post, layer.w13, eps)
        gemv(act, layer.w2, CONFIGS["down"], residual=x)
    logits = gemv(x, w.lm_head, CONFIGS["lm_head"], norm=w.norm, eps=eps)
    logits = logits.index_fill(-1, banned, float("-inf"))
    return logits, logits.argmax(dim=-1)


def set_config(name: str, **changes: int) -> None:
    """Change one projection's block sizes (the profile script's sweeps)."""
    CONFIGS[name] = replace(CONFIGS[name], **changes)
