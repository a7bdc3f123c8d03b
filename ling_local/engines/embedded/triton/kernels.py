"""Hand-written Triton kernels for the GPU decode step: the launchers and the step function
(`triton_step`, what a CUDA graph captures).

Five launches per layer and one or two for the output head, each built around what a
batch-1 decode step is: a stream of weight bytes that must never stop.

The RMSNorm weights are folded into the matrices they feed (`setup.fold_norms`, done once at
load): a normalising kernel sums the squares of the x tiles its loop loads anyway and scales
its sums by 1/rms(x) in the epilogue (no second read of x, no barrier before the loop).

* `paired.paired_gemv_kernel`: RMSNorm + a GEMV whose CTA owns two row blocks a fixed
  distance apart, so the epilogue can combine them:
  - QKV (`ROPE_KV`): rows d and d + head_dim/2 of one head are rotated together (RoPE, the
    rotate_half convention), q is written out, k and v go straight into the KV cache at the
    step's positions (no separate RoPE / index_copy kernels);
  - gate/up (`SILU`): rows i and I + i give silu(gate) * up, so the down projection reads the
    [I] product and nothing else.
* `jit.gemv_kernel`: GEMV with an optional RMSNorm and a residual epilogue (O and down
  projections, written into the residual in place). For the output head its epilogue also
  masks the banned tokens and takes the argmax across CTAs (one 64-bit atomic max each; the
  last CTA decodes it), and in a decode graph writes that token and position + 1 where the
  next replay reads them: no argmax, copy or add kernels after the head.
* the greedy head's exact screen (`lm_head_screened`; T = 1, greedy decode graphs):
  `gemv_kernel` with SCREEN streams an int8 copy of the head (half its bytes) and bounds
  every row's logit; `screen.pick_kernel` recomputes in bf16 only the rows whose bound can
  reach the best, and takes their argmax: the full head's token. Its last CTA stores the
  token into the host ring (`token ring`: pinned host memory mapped into the GPU's address
  space), so the host reads each token with no copy between replays.
* `attn.attn_partial_kernel`: flash-decoding over the slot's cache. One CTA per (kv head,
  split) handles the kv head's whole query group for all T tokens, padded to 16 rows for
  the tensor cores; the split boundaries follow the position read on the device, so a
  captured graph spreads the live context, not the cache's capacity, over the splits; at
  T = 1 the last CTA of each kv head combines the splits, at T > 1 `attn_reduce_kernel`
  does, in a second launch.

On Hopper every kernel is launched with programmatic dependent launch: it starts while its
predecessor drains and reads its first weight tile before waiting, which hides most of the
gap between two kernels of a CUDA graph.

Numerics follow the eager PyTorch step: bf16 (the model dtype) wherever PyTorch rounds
(norm output, each matmul output, each RoPE product, silu(gate), silu * up, residual adds),
fp32 accumulation inside each kernel. The attention's probabilities enter the second
product in bf16, as in SDPA's flash kernels, so scores agree to ~1e-3, not bit for bit.

Every kernel handles T tokens (T = 1 decode, k + 1 for a speculative verify): at T = 1
broadcast-and-sum GEMV tiles on the CUDA cores; at T > 1 tiles padded to 16 tokens and
tensor-core dots, block sizes from `setup.VERIFY_CONFIGS`.

Block sizes (`setup`): the best of sweeps on the H200 for the Llama-3.2-1B shape
(`scripts/gpu_kernel_sweep.py`, results in docs/bench/); other shapes run with them too.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
import triton

from ling_local.engines.embedded.triton.attn import attn_partial_kernel, attn_reduce_kernel
from ling_local.engines.embedded.triton.jit import gemv_kernel
from ling_local.engines.embedded.triton.launch import (
    Scratch,
    launch_options,
    on_gpu,
    pow2,
    prefetches,
    prepare,
)
from ling_local.engines.embedded.triton.paired import paired_gemv_kernel
from ling_local.engines.embedded.triton.screen import pick_kernel
from ling_local.engines.embedded.triton.setup import ATTN, AttnConfig, ScreenHead

__all__ = [
    "Scratch",
    "decode_attention",
    "gate_up_silu",
    "gemv",
    "lm_head_argmax",
    "lm_head_screened",
    "qkv_rope_kv",
    "token_ring",
    "triton_step",
]


# --------------------------------------------------------------------------- launchers
def gemv(
    x: torch.Tensor,
    weight: torch.Tensor,
    name: str,
    *,
    residual: torch.Tensor | None = None,
    normed: bool = False,
    eps: float = 0.0,
) -> torch.Tensor:
    """(residual +) rmsnorm?(x) @ weight^T for x [T, K] with kernel `name`'s block sizes
    (`normed`: the norm's weight is folded into `weight`); with a residual, written into
    it."""
    t, k = x.shape
    n = weight.shape[0]
    out = residual if residual is not None else x.new_empty((t, n))
    kw, desc = prepare(name, x, weight)
    gemv_kernel[(triton.cdiv(n, kw["BLOCK_N"]),)](
        x, weight, desc, out, out, x, x, x, x, x, x, x, x, t, n, k, eps, NORM=normed,
        RESIDUAL=residual is not None, ARGMAX=False, CHAIN=False, **kw,
    )  # fmt: skip
    return out


def lm_head_argmax(
    x: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    scratch: Scratch,
    tokens: torch.Tensor | None = None,
    pos: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits of rmsnorm(x) (the norm folded into `weight`; banned tokens -inf) and their
    argmax [T], in one launch. With `tokens` and `pos` (a decode graph), also
    tokens = argmax and pos += T."""
    t, k = x.shape
    n = weight.shape[0]
    logits = x.new_empty((t, n))
    chain = tokens is not None and pos is not None
    argmax = torch.empty(t, dtype=torch.long, device=x.device)
    keys = scratch.get(f"keys{t}", (t,), torch.long, fill=-(2**63))
    count = scratch.get(f"head_count{t}", (1,), torch.int32, fill=0)
    kw, desc = prepare("lm_head", x, weight)
    gemv_kernel[(triton.cdiv(n, kw["BLOCK_N"]),)](
        x, weight, desc, logits, logits, scratch.banned_mask(), keys, count, argmax,
        tokens if chain else argmax, pos if chain else argmax, x, x, t, n, k, eps, NORM=True,
        RESIDUAL=False, ARGMAX=True, CHAIN=chain, **kw,
    )  # fmt: skip
    return logits, argmax


def token_ring(
    ring: torch.Tensor | None, chain: bool, t: int, device: torch.device
) -> tuple[torch.Tensor, int]:
    """Where the screened head's last CTA stores the argmax, and the ring length (0: a
    fresh [T] tensor). A ring (a chaining T = 1 step only) is int64 in pinned host memory
    on a GPU: mapped into the device's address space (UVA), so the kernel writes each token
    straight to the host, at [position % len]."""
    if ring is None:
        return torch.empty(t, dtype=torch.long, device=device), 0
    if not chain or t != 1:
        raise ValueError("a token ring takes a chaining one-token step")
    if ring.dtype != torch.long or ring.dim() != 1:
        raise ValueError("the token ring is a 1-D int64 tensor")
    if device.type == "cuda" and not (ring.device.type == "cpu" and ring.is_pinned()):
        raise ValueError("the token ring of a GPU step lives in pinned host memory")
    return ring, ring.numel()


def lm_head_screened(
    x: torch.Tensor,
    screen: ScreenHead,
    weight: torch.Tensor,
    eps: float,
    scratch: Scratch,
    tokens: torch.Tensor | None = None,
    pos: torch.Tensor | None = None,
    ring: torch.Tensor | None = None,
) -> tuple[None, torch.Tensor]:
    """The argmax [1] of `lm_head_argmax`'s logits for one token, exactly, from the head's
    int8 screen and the bf16 rows it cannot rule out (`screen.py`), in two launches; no
    logits (None). With `tokens` and `pos`, also tokens = argmax and pos += 1; with `ring`
    too (`token_ring`), the argmax goes to ring[pos % len(ring)] instead (returned as the
    argmax)."""
    t, k = x.shape
    if t != 1:
        raise ValueError("the screened head takes one token")
    n = weight.shape[0]
    upper = scratch.get("screen_upper", (1, n), torch.float32)
    low = scratch.get("screen_low", (1,), torch.int32, fill=-(2**31))
    keys = scratch.get("pick_keys", (1,), torch.long, fill=-(2**63))
    count = scratch.get("pick_count", (1,), torch.int32, fill=0)
    chain = tokens is not None and pos is not None
    argmax, ring_len = token_ring(ring, chain, t, x.device)
    kw, desc = prepare("lm_screen", x, screen.q)
    banned = scratch.banned_mask()
    gemv_kernel[(triton.cdiv(n, kw["BLOCK_N"]),)](
        x, screen.q, desc, upper, upper, banned, low, count, argmax, argmax, argmax,
        screen.scale, screen.slack, t, n, k, eps, NORM=True, RESIDUAL=False, ARGMAX=False,
        CHAIN=False, SCREEN=True, **kw,
    )  # fmt: skip
    block_s = pow2(triton.cdiv(n, 64))  # ~64 CTAs: 2048 rows each for a 128K vocab
    pick_kernel[(triton.cdiv(n, block_s),)](
        x, weight, upper, low, keys, count, argmax, tokens if chain else argmax,
        pos if chain else argmax, n, k, eps, BLOCK_S=block_s, BLOCK_K=pow2(k), CHAIN=chain,
        ON_GPU=on_gpu(x), RING=ring_len, num_warps=4, **launch_options(x),
    )  # fmt: skip
    return None, argmax


def gate_up_silu(x: torch.Tensor, w13: torch.Tensor, eps: float) -> torch.Tensor:
    """silu(gate) * up of rmsnorm(x) for W13 = [gate; up] ([2I, H], the norm folded in);
    returns [T, I]."""
    t, k = x.shape
    inter = w13.shape[0] // 2
    out = x.new_empty((t, inter))
    kw, _ = prepare("gate_up", x, w13, paired=True)
    paired_gemv_kernel[(triton.cdiv(inter, kw["BLOCK_N"]),)](
        x, w13, x, out, x, x, x, x, x, t, k, inter, eps, 0, ROPE_KV=False, HAS_BIAS=False,
        N_HEADS=1, N_KV=1, HEAD_DIM=2, **kw,
    )  # fmt: skip
    return out


def qkv_rope_kv(
    x: torch.Tensor,
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
    """Rotated q [T, n_heads * head_dim] of rmsnorm(x) (the norm folded into wqkv);
    rotated k and v written into the caches."""
    t, k = x.shape
    q = x.new_empty((t, n_heads * head_dim))
    kw, _ = prepare("qkv", x, wqkv, max_block_n=head_dim // 2, paired=True)
    if (head_dim // 2) % kw["BLOCK_N"]:
        raise ValueError(f"qkv block_n {kw['BLOCK_N']} does not divide head_dim/2")
    grid = ((n_heads + 2 * n_kv) * (head_dim // 2 // kw["BLOCK_N"]),)
    paired_gemv_kernel[grid](
        x, wqkv, bias if bias is not None else x, q, k_cache, v_cache, cos, sin, pos, t, k, 0,
        eps, k_cache.shape[1], ROPE_KV=True, HAS_BIAS=bias is not None, N_HEADS=n_heads,
        N_KV=n_kv, HEAD_DIM=head_dim, **kw,
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
    scratch: Scratch | None = None,
    cfg: AttnConfig | None = None,
) -> torch.Tensor:
    """Attention of q [T, n_heads * head_dim] (query t at position pos + t, causal) over the
    cache [n_kv, max_len, head_dim]; returns [T, n_heads * head_dim]."""
    cfg = cfg or ATTN["attn"]
    t = q.shape[0]
    group = n_heads // n_kv
    splits = cfg.splits
    rows = t * n_heads
    scratch = scratch or Scratch(q.device, 0)
    f32 = torch.float32
    m = scratch.get(f"attn_m{t}", (rows, splits), f32)
    l_sum = scratch.get(f"attn_l{t}", (rows, splits), f32)
    acc = scratch.get(f"attn_acc{t}", (rows, splits, head_dim), f32)
    count = scratch.get(f"attn_count{t}", (n_kv,), torch.int32, fill=0)
    block_r = max(16, pow2(group * t))  # the query rows, padded for the tensor cores
    # At T = 1 the last CTA of each kv head combines its splits; a verify's CTA would hold
    # too many rows' splits in registers, so a second launch combines them there.
    fused = t == 1
    block_l, warps = (cfg.block_l, cfg.num_warps) if fused else (32, 4)
    out = q.new_empty((t, n_heads * head_dim))
    launch = launch_options(q)
    attn_partial_kernel[(n_kv, splits)](
        q, k_cache, v_cache, pos, m, l_sum, acc, count, out, t, k_cache.shape[1],
        1.0 / math.sqrt(head_dim), N_HEADS=n_heads, GROUP=group, HEAD_DIM=head_dim,
        SPLITS=splits, BLOCK_R=block_r, BLOCK_L=block_l, BLOCK_S=pow2(splits),
        FUSED_REDUCE=fused, L2=prefetches(launch, q), ON_GPU=on_gpu(q), num_warps=warps,
        **launch,
    )  # fmt: skip
    if not fused:
        attn_reduce_kernel[(rows,)](
            m, l_sum, acc, out, HEAD_DIM=head_dim, SPLITS=splits, BLOCK_S=pow2(splits),
            **launch,
        )  # fmt: skip
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
    scratch: Scratch | None = None,
    chain: bool = False,
    screen: ScreenHead | None = None,
    ring: torch.Tensor | None = None,
) -> tuple[torch.Tensor | None, torch.Tensor]:
    """`cuda_graphs`' torch step with these kernels: 5 launches per layer (+1 for a verify's
    attention reduce) and one for the head (two with the screen). `rows` / `cols` are
    unused (the kernels read `pos` and mask themselves). With `chain` the step also advances
    itself (tokens = argmax, pos += T). With `screen` (T = 1, `setup.screen_head`) the head
    is the exact int8 screen (`lm_head_screened`): the same argmax, no logits (None). With
    `ring` too (chain) each token goes to ring[pos % len(ring)], mapped host memory on a
    GPU, and the ring is returned as the argmax."""
    if not w.norms_folded:
        raise ValueError("the Triton step takes weights with folded norms (fold_norms)")
    if scratch is None:
        scratch = Scratch(tokens.device, w.lm_head.shape[0], banned)
    if screen is not None and tokens.shape[0] != 1:
        raise ValueError("the screened head takes one token")
    if ring is not None and screen is None:
        raise ValueError("the token ring is written by the screened head")
    x = F.embedding(tokens, w.embed)  # the residual stream, updated in place
    nh, nkv, hd, eps = w.n_heads, w.n_kv_heads, w.head_dim, w.eps
    for i, layer in enumerate(w.layers):
        q = qkv_rope_kv(
            x, layer.wqkv, layer.bqkv, k_cache[i], v_cache[i], w.cos, w.sin, pos,
            nh, nkv, hd, eps,
        )  # fmt: skip
        attn = decode_attention(q, k_cache[i], v_cache[i], pos, nh, nkv, hd, scratch)
        gemv(attn, layer.wo, "o", residual=x)
        act = gate_up_silu(x, layer.w13, eps)
        gemv(act, layer.w2, "down", residual=x)
    tokens, pos = (tokens, pos) if chain else (None, None)
    if screen is not None:
        return lm_head_screened(x, screen, w.lm_head, w.eps, scratch, tokens, pos, ring)
    return lm_head_argmax(x, w.lm_head, w.eps, scratch, tokens, pos)
