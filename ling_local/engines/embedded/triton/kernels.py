"""Hand-written Triton kernels for the GPU decode step (`engine.kernels = "triton"`).

Five launches per layer and one for the output head, each built around what a batch-1
decode step is: a stream of weight bytes that must never stop.

The RMSNorm weights are folded into the matrices they feed (`fold_norms`, done once at load):
a normalising kernel sums the squares of the x tiles its loop loads anyway and scales its
sums by 1/rms(x) in the epilogue (no second read of x, no barrier before the loop).

* `_paired_gemv_kernel`: RMSNorm + a GEMV whose CTA owns two row blocks a fixed distance
  apart, so the epilogue can combine them:
  - QKV (`ROPE_KV`): rows d and d + head_dim/2 of one head are rotated together (RoPE, the
    rotate_half convention), q is written out, k and v go straight into the KV cache at the
    step's positions (no separate RoPE / index_copy kernels);
  - gate/up (`SILU`): rows i and I + i give silu(gate) * up, so the down projection reads the
    [I] product and nothing else.
* `_gemv_kernel`: GEMV with an optional RMSNorm and a residual epilogue (O and
  down projections, written into the residual in place); optional split-K (fp32 partials
  summed by `_splitk_reduce_kernel`). For the output head its epilogue also masks the
  banned tokens and takes the argmax across CTAs (one 64-bit atomic max each; the last CTA
  decodes it), and in a decode graph writes that token and position + 1 where the next
  replay reads them: no argmax, copy or add kernels after the head.
* the greedy head's exact screen (`lm_head_screened`, `engine.screen_head`; T = 1, greedy
  decode graphs): `_gemv_kernel` with SCREEN streams an int8 copy of the head (half its
  bytes) and bounds every row's logit; `triton_screen._pick_kernel` recomputes in bf16 only
  the rows whose bound can reach the best, and takes their argmax: the full head's token.
* `_attn_partial_kernel`: flash-decoding over the slot's cache. One CTA per (kv head,
  split) handles the kv head's whole query group for all T tokens; the split boundaries
  follow the position read on the device, so a captured graph spreads the live context,
  not the cache's capacity, over the splits; the last CTA of each kv head combines the
  splits (or `_attn_reduce_kernel` does, in a second launch). The group's rows go to the
  tensor cores padded to 16, at T = 1 too (`AttnConfig.tensor_cores`: 3.3 us a layer less
  than broadcast-and-sum, whose cross-thread reductions were the partial's critical path).
* `_attn_o_kernel` (`AttnConfig.fuse_o`, off by default; T = 1): the attention and the O
  projection in one launch — each split CTA combines its kv head's splits after a counter
  barrier and adds its slice of the projection into fp32 sums that gate/up (on its input)
  and down (in its residual) fold into the residual. Exact, but measured no faster on the
  H200 than the two kernels, which PDL already overlaps (docs/bench/fuse_ab_h200_run1.json);
  its launcher is `triton_fused.attention_o`.

On Hopper every kernel is launched with programmatic dependent launch (`triton_jit`): it
starts while its predecessor drains and reads its first weight tile before waiting, which
hides most of the gap between two kernels of a CUDA graph.

Numerics follow the eager PyTorch step: bf16 (the model dtype) wherever PyTorch rounds
(norm output, each matmul output, each RoPE product, silu(gate), silu * up, residual adds),
fp32 accumulation inside each kernel. Attention keeps p and v in fp32 (SDPA's kernels round p
to bf16), so scores agree to ~1e-3, not bit for bit.

Every kernel handles T tokens (T = 1 decode, k + 1 for a speculative verify): at T = 1
broadcast-and-sum tiles on the CUDA cores; at T > 1 tiles padded to 16 tokens and
tensor-core dots (GEMVs and attention), block sizes from `VERIFY_CONFIGS`.

Block sizes (`triton_setup`): the best of sweeps on the H200 for the Llama-3.2-1B shape
(`scripts/gpu_kernel_sweep.py`, results in docs/bench/); other shapes run with them too.
The device code is in `triton_jit` (GEMVs), `triton_paired` (QKV, gate/up),
`triton_attn`, `triton_screen` (the head's screen) and `triton_common` (shared helpers).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
import triton

from ling_local.engines.embedded.triton import setup as triton_setup
from ling_local.engines.embedded.triton.attn import _attn_partial_kernel, _attn_reduce_kernel
from ling_local.engines.embedded.triton.jit import _gemv_kernel, _splitk_reduce_kernel
from ling_local.engines.embedded.triton.launch import (
    Scratch,
    _launch,
    _on_gpu,
    _overlaps,
    _pow2,
    _prepare,
)
from ling_local.engines.embedded.triton.paired import _paired_gemv_kernel
from ling_local.engines.embedded.triton.screen import _pick_kernel
from ling_local.engines.embedded.triton.setup import *  # noqa: F403 (re-exported for the sweep script)
from ling_local.engines.embedded.triton.setup import ATTN, CONFIGS, AttnConfig, ScreenHead

__all__ = [
    *triton_setup.__all__,
    "Scratch",
    "lm_head_screened",
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
    scratch: Scratch | None = None,
    oacc: torch.Tensor | None = None,
    counters: torch.Tensor | None = None,
) -> torch.Tensor:
    """(residual +) rmsnorm?(x) @ weight^T for x [T, K] with kernel `name`'s block sizes
    (`normed`: the norm's weight is folded into `weight`); with a residual, written into
    it. With `oacc` (T = 1, a residual; the down projection after `attention_o`) the
    residual is first residual + round(oacc), and oacc is zeroed, and so are `counters`
    (`attention_o`'s barrier counters)."""
    t, k = x.shape
    n = weight.shape[0]
    out = residual if residual is not None else x.new_empty((t, n))
    cfg = CONFIGS[name]
    split = cfg.split_k if t == 1 else 1
    if split > 1 and normed:
        raise ValueError("split-K with the norm is not implemented")
    if oacc is not None and (t != 1 or residual is None or split > 1):
        raise ValueError("oacc takes T = 1, a residual and no split-K")
    part = out
    if split > 1:
        shape, f32 = (split, t, n), torch.float32
        part = (
            scratch.get(f"part{n}", shape, f32)
            if scratch
            else torch.empty(shape, dtype=f32, device=x.device)
        )
    kw, desc, l2_bytes = _prepare(name, x, weight, split)
    _gemv_kernel[(triton.cdiv(n, kw["BLOCK_N"]), split)](
        x, weight, desc, out, out, part, x, x, counters if counters is not None else x, x, x,
        x, oacc if oacc is not None else x, x, x, t, n, k, eps, l2_bytes, NORM=normed,
        RESIDUAL=residual is not None, ADD_ACC=oacc is not None, SPLIT_K=split, ARGMAX=False,
        CHAIN=False, N_COUNT=0 if counters is None else counters.numel() // 32, **kw,
    )  # fmt: skip
    if split > 1:
        block = 1024
        _splitk_reduce_kernel[(triton.cdiv(t * n, block),)](
            part, out, out, t * n, RESIDUAL=residual is not None, SPLIT_K=split, BLOCK=block,
            **_launch(x),
        )  # fmt: skip
    return out


def lm_head_argmax(
    x: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    scratch: Scratch,
    tokens: torch.Tensor | None = None,
    pos: torch.Tensor | None = None,
    ring: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits of rmsnorm(x) (the norm folded into `weight`; banned tokens -inf) and their
    argmax [T], in one launch. With `tokens` and `pos` (a decode graph), also
    tokens = argmax and pos += T; with `ring` too (`_token_ring`), the argmax goes to
    ring[pos % len(ring)] instead (returned as the argmax)."""
    t, k = x.shape
    n = weight.shape[0]
    logits = x.new_empty((t, n))
    chain = tokens is not None and pos is not None
    argmax, ring_len = _token_ring(ring, chain, t, x.device)
    keys = scratch.get(f"keys{t}", (t,), torch.long, fill=-(2**63))
    count = scratch.get(f"head_count{t}", (1,), torch.int32, fill=0)
    kw, desc, l2_bytes = _prepare("lm_head", x, weight)
    _gemv_kernel[(triton.cdiv(n, kw["BLOCK_N"]), 1)](
        x, weight, desc, logits, logits, logits, scratch.banned_mask(), keys, count, argmax,
        tokens if chain else argmax, pos if chain else argmax, x, x, x, t, n, k, eps, l2_bytes,
        NORM=True, RESIDUAL=False, ADD_ACC=False, SPLIT_K=1, ARGMAX=True, CHAIN=chain,
        RING=ring_len, **kw,
    )  # fmt: skip
    return logits, argmax


def _token_ring(
    ring: torch.Tensor | None, chain: bool, t: int, device: torch.device
) -> tuple[torch.Tensor, int]:
    """Where a head's last CTA stores the argmax, and the ring length (0: a fresh [T]
    tensor). A ring (a chaining T = 1 step only) is int64 in pinned host memory on a GPU:
    mapped into the device's address space (UVA), so the kernel writes each token straight
    to the host, at [position % len]."""
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
    int8 screen and the bf16 rows it cannot rule out (`triton_screen`), in two launches;
    no logits (None). With `tokens` and `pos`, also tokens = argmax and pos += 1; `ring`
    as for `lm_head_argmax`."""
    t, k = x.shape
    if t != 1:
        raise ValueError("the screened head takes one token")
    n = weight.shape[0]
    upper = scratch.get("screen_upper", (1, n), torch.float32)
    low = scratch.get("screen_low", (1,), torch.int32, fill=-(2**31))
    keys = scratch.get("pick_keys", (1,), torch.long, fill=-(2**63))
    count = scratch.get("pick_count", (1,), torch.int32, fill=0)
    chain = tokens is not None and pos is not None
    argmax, ring_len = _token_ring(ring, chain, t, x.device)
    kw, desc, l2_bytes = _prepare("lm_screen", x, screen.q)
    banned = scratch.banned_mask()
    _gemv_kernel[(triton.cdiv(n, kw["BLOCK_N"]), 1)](
        x, screen.q, desc, upper, upper, upper, banned, low, count, argmax, argmax, argmax, x,
        screen.scale, screen.slack, t, n, k, eps, l2_bytes, NORM=True, RESIDUAL=False,
        ADD_ACC=False, SPLIT_K=1, ARGMAX=False, CHAIN=False, SCREEN=True, **kw,
    )  # fmt: skip
    block_s = _pow2(triton.cdiv(n, 64))  # ~64 CTAs: 2048 rows each for a 128K vocab
    _pick_kernel[(triton.cdiv(n, block_s),)](
        x, weight, upper, low, keys, count, argmax, tokens if chain else argmax,
        pos if chain else argmax, n, k, eps, BLOCK_S=block_s, BLOCK_K=_pow2(k), CHAIN=chain,
        ON_GPU=_on_gpu(x), RING=ring_len, num_warps=4, **_launch(x),
    )  # fmt: skip
    return None, argmax


def gate_up_silu(
    x: torch.Tensor, w13: torch.Tensor, eps: float, oacc: torch.Tensor | None = None
) -> torch.Tensor:
    """silu(gate) * up of rmsnorm(x) for W13 = [gate; up] ([2I, H], the norm folded in);
    returns [T, I]. With `oacc` (T = 1, after `attention_o`) of rmsnorm(round(x +
    round(oacc))), the residual after the O projection."""
    t, k = x.shape
    if oacc is not None and t != 1:
        raise ValueError("oacc takes T = 1")
    inter = w13.shape[0] // 2
    out = x.new_empty((t, inter))
    kw, desc, l2_bytes = _prepare("gate_up", x, w13, paired=True)
    _paired_gemv_kernel[(triton.cdiv(inter, kw["BLOCK_N"]),)](
        x, w13, desc, x, out, x, x, x, x, x, oacc if oacc is not None else x, t, k, inter, eps,
        0, l2_bytes, ROPE_KV=False, HAS_BIAS=False, ADD_ACC=oacc is not None, N_HEADS=1,
        N_KV=1, HEAD_DIM=2, **kw,
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
    kw, desc, l2_bytes = _prepare("qkv", x, wqkv, max_block_n=head_dim // 2, paired=True)
    if (head_dim // 2) % kw["BLOCK_N"]:
        raise ValueError(f"qkv block_n {kw['BLOCK_N']} does not divide head_dim/2")
    grid = ((n_heads + 2 * n_kv) * (head_dim // 2 // kw["BLOCK_N"]),)
    _paired_gemv_kernel[grid](
        x, wqkv, desc, bias if bias is not None else x, q, k_cache, v_cache, cos, sin, pos, x,
        t, k, 0, eps, k_cache.shape[1], l2_bytes,
        ROPE_KV=True, HAS_BIAS=bias is not None, ADD_ACC=False, N_HEADS=n_heads, N_KV=n_kv,
        HEAD_DIM=head_dim, **kw,
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
    if t == 1:  # a kv head's query group: on the tensor cores, its rows padded to 16 (and
        # tiles of at least 16 positions), or broadcast-and-sum on the CUDA cores
        dot = cfg.tensor_cores and cfg.block_l >= 16
        block_r = max(16, _pow2(group)) if dot else _pow2(group)
        block_l, warps = cfg.block_l, cfg.num_warps
    else:  # a verify: rows padded to 16 for the tensor cores
        block_r, block_l, warps, dot = max(16, _pow2(group * t)), 32, 4, True
    # The combine holds every split of every row of the CTA: at T > 1 too many registers
    # for one CTA, so a second launch does it there.
    fused = cfg.fused_reduce and t == 1
    out = q.new_empty((t, n_heads * head_dim))
    launch = _launch(q)
    _attn_partial_kernel[(n_kv, splits)](
        q, k_cache, v_cache, pos, m, l_sum, acc, count, out, t, k_cache.shape[1],
        1.0 / math.sqrt(head_dim),
        N_HEADS=n_heads, GROUP=group, HEAD_DIM=head_dim, SPLITS=splits, BLOCK_R=block_r,
        BLOCK_L=block_l, BLOCK_S=_pow2(splits), FUSED_REDUCE=fused, USE_DOT=dot,
        L2=cfg.l2_prefetch and _overlaps(launch, q), ON_GPU=_on_gpu(q), num_warps=warps,
        **launch,
    )  # fmt: skip
    if not fused:
        _attn_reduce_kernel[(rows,)](
            m, l_sum, acc, out, HEAD_DIM=head_dim, SPLITS=splits, BLOCK_S=_pow2(splits),
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
    """`cuda_graphs._step` with these kernels: 5 launches per layer (+1 per split-K GEMV or
    unfused attention reduce) and one for the head. `rows` / `cols` are unused (the
    kernels read `pos` and mask themselves). With `chain` the step also advances itself (tokens =
    argmax, pos += T). With `screen` (T = 1, `triton_setup.screen_head`) the head is the
    exact int8 screen (`lm_head_screened`): the same argmax, no logits (None). With `ring`
    (chain, T = 1) each token goes to ring[pos % len(ring)], mapped host memory on a GPU
    (`lm_head_argmax`), and the ring is returned as the argmax."""
    if not w.norms_folded:
        raise ValueError("the Triton step takes weights with folded norms (fold_norms)")
    if scratch is None:
        scratch = Scratch(tokens.device, w.lm_head.shape[0], banned)
    if screen is not None and tokens.shape[0] != 1:
        raise ValueError("the screened head takes one token")
    x = F.embedding(tokens, w.embed)  # the residual stream, updated in place
    nh, nkv, hd, eps = w.n_heads, w.n_kv_heads, w.head_dim, w.eps
    for i, layer in enumerate(w.layers):
        q = qkv_rope_kv(
            x, layer.wqkv, layer.bqkv, k_cache[i], v_cache[i], w.cos, w.sin, pos,
            nh, nkv, hd, eps,
        )  # fmt: skip
        attn = decode_attention(q, k_cache[i], v_cache[i], pos, nh, nkv, hd, scratch)
        gemv(attn, layer.wo, "o", residual=x, scratch=scratch)
        act = gate_up_silu(x, layer.w13, eps)
        gemv(act, layer.w2, "down", residual=x, scratch=scratch)
    return _head(x, w, scratch, tokens, pos, chain, screen, ring)


def _head(x, w, scratch, tokens, pos, chain, screen, ring=None):
    """The step's output head: the screened argmax (`screen`) or the full head's."""
    tokens, pos = (tokens, pos) if chain else (None, None)
    if screen is not None:
        return lm_head_screened(x, screen, w.lm_head, w.eps, scratch, tokens, pos, ring)
    return lm_head_argmax(x, w.lm_head, w.eps, scratch, tokens, pos, ring)
