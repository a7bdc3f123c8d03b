"""The greedy output head's exact screen (device code only): the argmax of the logits from
an int8 copy of the head and one bf16 row per possible winner, not the whole bf16 head.

The head is most of a small model's bytes per token (Llama-3.2-1B: 525 of 2,471 MB), and a
greedy step needs only its argmax. The int8 copy (per-row absmax scales, built once by
`setup.screen_head`) halves what the head reads. Each row n also keeps `slack`, an
upper bound on what its quantisation can move a logit per unit of input norm: the rounding
error's norm ||w_n - scale_n q_n|| plus an allowance for fp32 summation (the worst case of a
K-term dot product, twice), so by Cauchy-Schwarz |logit_n - screened_n| <= ||x|| slack_n
for the normalised input x, whatever x is. Two launches:

1. `jit.gemv_kernel` with SCREEN streams the int8 rows (stored + 128 as uint8, turned into
   fp32 by byte permutes, `u8_as_f32`); its epilogue (`screen_epilogue`) stores each
   row's upper bound and folds the largest lower bound L into one int32 key.
2. `pick_kernel`: each of about 64 CTAs reads its slice of the upper bounds; a row whose
   upper bound cannot reach L, less two bf16 rounding steps, cannot be the argmax of the
   rounded logits, and is skipped. The few rows left (3 for random weights, measured) get
   their exact logit from their bf16 row, rounded as the exact head rounds, and the argmax
   over them, first index on ties, is the exact head's argmax
   (`common.publish_argmax` takes it across CTAs and chains the next step, as the
   exact head's epilogue does).

Nothing is approximate in the result: a row the screen cannot rule out is recomputed, so a
flat distribution only makes the pick slower. Why 8 bits and not fewer: the bound holds for
every x, so it grows with the rounding step, and on the bench's model shape
(docs/bench/screen_bits_cpu.json, measured by a script since deleted) the rows it cannot rule out go
from 17 (median; 71 at most) at 8 bits to ~10,000 at 6 and all 128,256 at 4, even with a
scale per 32 columns. The logits themselves are not produced:
sampling uses the exact head. Shared helpers are in `common`."""

from __future__ import annotations

import triton
import triton.language as tl

from ling_local.engines.embedded.triton.common import (
    MIN_KEY,
    MIN_KEY32,
    ordered,
    pack_key,
    pdl_wait,
    publish_argmax,
    rounded,
    unordered,
)

__all__ = ["pick_kernel", "screen_epilogue", "u8_as_f32"]

_BOUND_GROWTH = tl.constexpr(1.0 + 2.0**-10)  # the bound's own fp32 rounding, generously
_VALUE_SLACK = tl.constexpr(2.0**-20)  # rstd, scale and the sum's last roundings, relative
_ROUNDING = tl.constexpr(2.0**-6)  # >= two bf16 steps at the logit's magnitude
_TINY = tl.constexpr(2.0**-126)


# Four bytes u of a register to four fp32 values u - 128 without int-to-float conversions
# (a quarter of the FMA rate on Hopper, which made the screen ALU-bound): each byte goes into
# the low mantissa of 2^23 (prmt), and one subtraction takes 2^23 + 128 away, exactly.
_U8_ASM = tl.constexpr(
    "{ .reg .b32 hi; mov.b32 hi, 0x4B000000; "
    "prmt.b32 $0, $4, hi, 0x7650; prmt.b32 $1, $4, hi, 0x7651; "
    "prmt.b32 $2, $4, hi, 0x7652; prmt.b32 $3, $4, hi, 0x7653; "
    "sub.f32 $0, $0, 0f4B000080; sub.f32 $1, $1, 0f4B000080; "
    "sub.f32 $2, $2, 0f4B000080; sub.f32 $3, $3, 0f4B000080; }"
)


@triton.jit
def u8_as_f32(w, ON_GPU: tl.constexpr):
    """The screen's weight tile (uint8, the int8 value + 128) as its int8 values in fp32."""
    if ON_GPU:
        return tl.inline_asm_elementwise(
            _U8_ASM, "=r,=r,=r,=r,r", [w], dtype=tl.float32, is_pure=True, pack=4
        )
    else:
        return w.to(tl.int32).to(tl.float32) - 128.0


@triton.jit
def screen_epilogue(
    y, ss, K, eps, offs_n, n_mask, banned, scale, slack, upper_ptr, low_ptr
):  # fmt: skip
    """The screen's bounds from y [1, BLOCK_N] = sum_k x[k] q[n, k] and ss [1] = sum_k x[k]^2
    (one token): upper[n] = screened + bound, stored; max over the block of screened -
    bound, folded into low_ptr's ordered key. Banned and missing rows: -inf both."""
    rstd = tl.rsqrt(ss / K + eps)
    norm = tl.sqrt(ss) * rstd  # ||x|| after the norm
    value = y * (scale[None, :] * rstd[:, None])
    bound = norm[:, None] * slack[None, :] * _BOUND_GROWTH + tl.abs(value) * _VALUE_SLACK
    ok = (banned == 0)[None, :] & n_mask[None, :]
    up = tl.where(ok, value + bound, float("-inf"))
    low = tl.max(tl.where(ok, value - bound, float("-inf")), axis=1)
    tl.store(upper_ptr + offs_n[None, :], up, mask=n_mask[None, :])
    tl.atomic_max(low_ptr + tl.arange(0, 1), ordered(low), sem="relaxed", scope="gpu")


@triton.jit
def _candidates(upper_ptr, rows, N, low):
    """Which of rows can hold the argmax of the rounded logits: their upper bound reaches
    the largest lower bound less two bf16 steps (a rounded logit ties within one)."""
    u = tl.load(upper_ptr + rows, mask=rows < N, other=float("-inf"))
    reach = low - _ROUNDING * tl.maximum(tl.abs(low), tl.abs(u)) - _TINY
    return (u >= reach) & (u > float("-inf"))


@triton.jit
def pick_kernel(
    x_ptr, w_ptr, upper_ptr, low_ptr, key_ptr, count_ptr, argmax_ptr, tokens_ptr, pos_ptr,
    N, K, eps,
    BLOCK_S: tl.constexpr, BLOCK_K: tl.constexpr,
    CHAIN: tl.constexpr, USE_PDL: tl.constexpr, ON_GPU: tl.constexpr, RING: tl.constexpr = 0,
):  # fmt: skip
    """Rows pid * BLOCK_S .. + BLOCK_S of the pick (module doc): the exact logit of each of
    the screen's candidates there, first to last (a whole bf16 row each, BLOCK_K >= K; rows
    ruled out are not read), the best of them published across CTAs. Few CTAs with long
    slices: their tickets, which all arrive at once, are what the pick's time is made of.
    The last CTA also resets the screen's lower-bound key for the next launch."""
    DT: tl.constexpr = w_ptr.dtype.element_ty
    pdl_wait(USE_PDL)
    offs_t = tl.arange(0, 1)
    low = tl.max(unordered(tl.load(low_ptr + offs_t, cache_modifier=".cg")), axis=0)
    rows = tl.program_id(0) * BLOCK_S + tl.arange(0, BLOCK_S)
    cand = _candidates(upper_ptr, rows, N, low)
    left = tl.sum(cand.to(tl.int32), axis=0)
    best = tl.full((1,), MIN_KEY, tl.int64)
    if left > 0:
        offs_k = tl.arange(0, BLOCK_K)
        k_mask = offs_k < K
        x = tl.load(x_ptr + offs_k, mask=k_mask, other=0.0).to(tl.float32)
        rstd = tl.rsqrt(tl.sum(x * x, axis=0) / K + eps)
        while left > 0:
            row = tl.min(tl.where(cand, rows, 2**31 - 1), axis=0)
            w = tl.load(w_ptr + row.to(tl.int64) * K + offs_k, mask=k_mask, other=0.0)
            y = rounded(tl.sum(w.to(tl.float32) * x, axis=0) * rstd, DT)
            best = tl.maximum(best, pack_key(y, row))
            cand = cand & (rows != row)
            left -= 1
    last = publish_argmax(
        best, offs_t, offs_t < 1, key_ptr, count_ptr, argmax_ptr, tokens_ptr, pos_ptr, 1, CHAIN,
        ON_GPU, RING,
    )  # fmt: skip
    if last:
        tl.store(low_ptr + offs_t, tl.full((1,), MIN_KEY32, tl.int32))
