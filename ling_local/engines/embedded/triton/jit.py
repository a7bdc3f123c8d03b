"""The plain GEMV kernel of the GPU decode step (device code only): the O and down
projections with their residual, the output head with its argmax epilogue, and the head's
int8 screen. The paired GEMV of QKV and gate/up is in `paired`, the shared helpers in
`common`, the attention in `attn`, the screen's epilogue and pick in `screen`; the launchers
and the step function are in `kernels`, which documents the design. Imports triton: import
it only when the Triton step runs.

The RMSNorm weights are folded into the matrices that follow them (`setup.fold_norms`), so
a normalising kernel streams raw x against its weights and scales each output by 1/rms in
the epilogue: no per-element norm arithmetic on the weights in the loop, which otherwise
made these kernels ALU-bound (measured: 1.8-3.6 TB/s). At T = 1 the sum of squares comes
from the x tiles the loop loads anyway; a verify (T > 1) reads x in a pass of its own.

After the PDL wait a kernel's critical path is: the first x tile (an L2 round trip), the
stream, the epilogue's store. Everything else is read before the wait when it is constant
or written before the step (the banned mask, the screen's scales) or in flight with the
first x tile (the residual)."""

from __future__ import annotations

import triton
import triton.language as tl

from ling_local.engines.embedded.triton.common import (
    accumulate,
    argmax_key,
    first_tile,
    load_x,
    pdl_wait,
    publish_argmax,
    rounded,
    row_rstd,
    w_tile,
)
from ling_local.engines.embedded.triton.screen import screen_epilogue, u8_as_f32

__all__ = ["gemv_kernel"]


@triton.jit
def gemv_kernel(
    x_ptr,
    w_ptr,
    w_desc,
    out_ptr,
    res_ptr,
    banned_ptr,
    key_ptr,
    count_ptr,
    argmax_ptr,
    tokens_ptr,
    pos_ptr,
    scale_ptr,
    slack_ptr,
    T,
    N,
    K,
    eps,
    NORM: tl.constexpr,
    RESIDUAL: tl.constexpr,
    ARGMAX: tl.constexpr,
    CHAIN: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    USE_DOT: tl.constexpr,
    PREFETCH: tl.constexpr,
    TMA: tl.constexpr,
    STAGES: tl.constexpr,
    USE_PDL: tl.constexpr,
    ON_GPU: tl.constexpr,
    SCREEN: tl.constexpr = False,
    RING: tl.constexpr = 0,
    keep_ctas=0,
    KEEP: tl.constexpr = False,
):
    """out[t, n] = (res[t, n] +) round(s[t] * sum_k x[t, k] * w[n, k]); s = 1/rms(x[t]) if
    NORM (w has the norm's weight folded in), else 1. ARGMAX (the output head): banned[n]
    != 0 -> -inf, then the argmax epilogue (`publish_argmax`; RING its token ring). TMA:
    the weight tiles come through `w_desc` (a [BLOCK_N, BLOCK_K] tensor descriptor of w)
    into a ring of STAGES shared-memory buffers that Triton keeps in flight (no register
    double-buffering).
    SCREEN (T = 1, NORM; the output head's int8 screen, `screen.py`): w is the int8 copy
    of the head (stored + 128 as uint8), scale / slack its per-row constants; the epilogue
    stores each row's upper bound into out (fp32) and folds the largest lower bound into
    key (int32, one atomic max a CTA) instead of rounding.
    KEEP (register loads): the weight tiles of CTAs pid_n < keep_ctas load as evict_last,
    so they stay in the L2 from one step to the next (`GemvConfig.l2_keep`)."""
    DT: tl.constexpr = out_ptr.dtype.element_ty
    pid_n = tl.program_id(0)
    offs_t = tl.arange(0, BLOCK_T)
    t_mask = offs_t < T
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_mask = offs_n < N
    w_rows = w_ptr + offs_n.to(tl.int64)[:, None] * K
    k_len = tl.cdiv(K, BLOCK_K) * BLOCK_K
    if PREFETCH and not TMA:  # the first weight tile does not depend on the previous kernel
        w0 = first_tile(w_rows, 0, n_mask, K, pid_n, keep_ctas, BLOCK_K, KEEP)
    else:
        w0 = w_ptr  # unused
    offs = offs_t[:, None] * N + offs_n[None, :]
    m = t_mask[:, None] & n_mask[None, :]
    if ARGMAX or SCREEN:  # constant: read before the wait
        banned = tl.load(banned_ptr + offs_n, mask=n_mask, other=1)
    if SCREEN:
        scale = tl.load(scale_ptr + offs_n, mask=n_mask, other=0.0)
        slack = tl.load(slack_ptr + offs_n, mask=n_mask, other=0.0)
    pdl_wait(USE_PDL)
    if RESIDUAL and not USE_DOT:  # in flight with the first x tile
        res = tl.load(res_ptr + offs, mask=m, other=0.0).to(tl.float32)
    acc = tl.zeros((BLOCK_T, BLOCK_N, 1 if USE_DOT else BLOCK_K), tl.float32)
    acc_dot = tl.zeros((BLOCK_T, BLOCK_N), tl.float32)
    if NORM and USE_DOT:
        rstd = row_rstd(x_ptr, offs_t, t_mask, K, eps, BLOCK_T)
    ss = tl.zeros((BLOCK_T, BLOCK_K), tl.float32)  # NORM at T = 1: sum of squares on the way
    if TMA:  # the descriptor zero-fills rows past N and columns past K
        for k0 in tl.range(0, k_len, BLOCK_K, num_stages=STAGES):
            offs_k = k0 + tl.arange(0, BLOCK_K)
            x = load_x(x_ptr, offs_t, t_mask, offs_k, offs_k < K, K)
            w = w_desc.load([pid_n * BLOCK_N, k0])
            if SCREEN:
                w = u8_as_f32(w, ON_GPU)
            acc, acc_dot = accumulate(acc, acc_dot, x, w, USE_DOT, DT, ON_GPU)
            if NORM and not USE_DOT:
                ss += x * x
    elif KEEP:  # the first keep_ctas CTAs' tiles stay in the L2 across steps
        if pid_n < keep_ctas:
            acc, acc_dot, ss = _gemv_loop(
                w0, w_rows, x_ptr, offs_t, t_mask, n_mask, k_len, K, acc, acc_dot, ss,
                BLOCK_K, NORM, USE_DOT, PREFETCH, SCREEN, DT, ON_GPU, True,
            )  # fmt: skip
        else:
            acc, acc_dot, ss = _gemv_loop(
                w0, w_rows, x_ptr, offs_t, t_mask, n_mask, k_len, K, acc, acc_dot, ss,
                BLOCK_K, NORM, USE_DOT, PREFETCH, SCREEN, DT, ON_GPU, False,
            )  # fmt: skip
    else:
        acc, acc_dot, ss = _gemv_loop(
            w0, w_rows, x_ptr, offs_t, t_mask, n_mask, k_len, K, acc, acc_dot, ss, BLOCK_K,
            NORM, USE_DOT, PREFETCH, SCREEN, DT, ON_GPU, False,
        )  # fmt: skip
    if USE_DOT:  # noqa: SIM108 (a constexpr branch; Triton compiles only one side)
        y = acc_dot
    else:
        y = tl.sum(acc, axis=2)
    if SCREEN:
        screen_epilogue(
            y, tl.sum(ss, axis=1), K, eps, offs_n, n_mask, banned, scale, slack, out_ptr, key_ptr
        )  # fmt: skip
    else:
        if NORM and USE_DOT:
            y = y * rstd[:, None]
        elif NORM:
            y = y * tl.rsqrt(tl.sum(ss, axis=1) / K + eps)[:, None]
        y = rounded(y, DT)
        if RESIDUAL:
            if USE_DOT:  # a verify: after the loop, as its registers are busier
                res = tl.load(res_ptr + offs, mask=m, other=0.0).to(tl.float32)
            y = rounded(res + y, DT)
        if ARGMAX:
            y = tl.where((banned != 0)[None, :] | ~m, float("-inf"), y)
        tl.store(out_ptr + offs, y.to(DT), mask=m)
        if ARGMAX:
            publish_argmax(
                argmax_key(y, pid_n * BLOCK_N), offs_t, t_mask, key_ptr, count_ptr,
                argmax_ptr, tokens_ptr, pos_ptr, T, CHAIN, ON_GPU, RING,
            )  # fmt: skip


@triton.jit
def _gemv_loop(
    w, w_rows, x_ptr, offs_t, t_mask, n_mask, k_len, K, acc, acc_dot, ss,
    BLOCK_K: tl.constexpr, NORM: tl.constexpr, USE_DOT: tl.constexpr, PREFETCH: tl.constexpr,
    SCREEN: tl.constexpr, DT: tl.constexpr, ON_GPU: tl.constexpr, KEPT: tl.constexpr,
):  # fmt: skip
    """`gemv_kernel`'s loop over K with register loads of the weight tiles (evict_last if
    KEPT, else evict_first), from the first tile w (PREFETCH): the running sums and the sum
    of squares of x (NORM). KEPT is a constexpr (a cache hint is fixed at compile time), so
    a kernel choosing per CTA calls this twice, one call per side of its runtime branch."""
    for k0 in range(0, k_len, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        x = load_x(x_ptr, offs_t, t_mask, offs_k, offs_k < K, K)
        # PREFETCH: the next tile is in flight while this one is multiplied; else a plain
        # loop, left to Triton's pipelining (num_stages) and the occupancy.
        if PREFETCH:
            w_next = w_tile(w_rows, offs_k + BLOCK_K, n_mask, K, KEPT)
            tile = w
        else:
            tile = w_tile(w_rows, offs_k, n_mask, K, KEPT)
        if SCREEN:
            tile = u8_as_f32(tile, ON_GPU)
        acc, acc_dot = accumulate(acc, acc_dot, x, tile, USE_DOT, DT, ON_GPU)
        if NORM and not USE_DOT:
            ss += x * x
        if PREFETCH:
            w = w_next
    return acc, acc_dot, ss
