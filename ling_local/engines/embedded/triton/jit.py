"""The Triton kernels of the GPU decode step's GEMVs (device code only): the plain GEMV with
its residual, split-K, argmax and screen epilogues (O, down, the output head, the head's
int8 screen) and the split-K reduce; the paired GEMV of QKV and gate/up is in
`triton_paired`, the shared helpers in `triton_common`, the attention in `triton_attn`, the
screen's epilogue and pick in `triton_screen`. Their launchers and the step function are
in `triton_kernels`, which documents the design. Imports triton: import it only
when `engine.kernels = "triton"` asks for it.

The RMSNorm weights are folded into the matrices that follow them (`triton_setup.fold_norms`),
so a normalising kernel streams raw x against its weights and scales each output by 1/rms
in the epilogue: no per-element norm arithmetic on the weights in the loop, which otherwise
made these kernels ALU-bound (measured: 1.8-3.6 TB/s). At T = 1 the sum of squares comes
from the x tiles the loop loads anyway; a verify (T > 1) reads x in a pass of its own.

After the PDL wait a kernel's critical path is: the first x tile (an L2 round trip), the
stream, the epilogue's store. Everything else is read before the wait when it is constant
or written before the step (the banned mask, biases, the position and its RoPE rows) or
in flight with the first x tile (the residual)."""

from __future__ import annotations

import triton
import triton.language as tl

from ling_local.engines.embedded.triton.common import (
    _accumulate,
    _argmax_key,
    _first_tile,
    _l2_prefetch,
    _load_x,
    _pdl_start,
    _pdl_wait,
    _publish_argmax,
    _round,
    _rstd,
    _w_tile,
)
from ling_local.engines.embedded.triton.screen import _screen_epilogue, _u8_as_f32


@triton.jit
def _gemv_kernel(
    x_ptr,
    w_ptr,
    w_desc,
    out_ptr,
    res_ptr,
    part_ptr,
    banned_ptr,
    key_ptr,
    count_ptr,
    argmax_ptr,
    tokens_ptr,
    pos_ptr,
    oacc_ptr,
    scale_ptr,
    slack_ptr,
    T,
    N,
    K,
    eps,
    l2_bytes,
    NORM: tl.constexpr,
    RESIDUAL: tl.constexpr,
    ADD_ACC: tl.constexpr,
    SPLIT_K: tl.constexpr,
    ARGMAX: tl.constexpr,
    CHAIN: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    USE_DOT: tl.constexpr,
    PREFETCH: tl.constexpr,
    L2: tl.constexpr,
    TMA: tl.constexpr,
    STAGES: tl.constexpr,
    USE_PDL: tl.constexpr,
    ON_GPU: tl.constexpr,
    N_COUNT: tl.constexpr = 0,
    SCREEN: tl.constexpr = False,
    RING: tl.constexpr = 0,
    keep_ctas=0,
    KEEP: tl.constexpr = False,
):
    """out[t, n] = (res[t, n] +) round(s[t] * sum_k x[t, k] * w[n, k]); s = 1/rms(x[t]) if
    NORM (w has the norm's weight folded in), else 1. With SPLIT_K > 1 each CTA stores its
    fp32 partial sum in part[pid_k, t, n] instead. ARGMAX (the output head): banned[n] != 0
    -> -inf, then the argmax epilogue. L2 (SPLIT_K = 1): the first `l2_bytes` of the CTA's rows
    (contiguous) are prefetched to L2 before the PDL wait. TMA: the weight tiles come
    through `w_desc` (a [BLOCK_N, BLOCK_K] tensor descriptor of w) into a ring of STAGES
    shared-memory buffers that Triton keeps in flight (no register double-buffering).
    ADD_ACC (T = 1, RESIDUAL, SPLIT_K = 1; the down projection after `_attn_o_kernel`): the
    residual is first res + round(oacc), the O projection's fp32 sums, which are then zeroed
    for the next layer, and CTA 0 zeroes that kernel's N_COUNT barrier counters
    (count[32 * i]).
    SCREEN (T = 1, NORM; the output head's int8 screen, `triton_screen`): w is the int8
    copy of the head (stored + 128 as uint8), scale / slack its per-row constants; the epilogue stores each row's
    upper bound into out (fp32) and folds the largest lower bound into key (int32, one
    atomic max a CTA) instead of rounding. RING: `_publish_argmax`'s token ring.
    KEEP (register loads): the weight tiles of CTAs pid_n < keep_ctas load as evict_last,
    so they stay in the L2 from one step to the next (`GemvConfig.l2_keep`)."""
    DT: tl.constexpr = out_ptr.dtype.element_ty
    _pdl_start(USE_PDL)
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    offs_t = tl.arange(0, BLOCK_T)
    t_mask = offs_t < T
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_mask = offs_n < N
    w_rows = w_ptr + offs_n.to(tl.int64)[:, None] * K
    k_len = tl.cdiv(K, SPLIT_K * BLOCK_K) * BLOCK_K
    k_start = pid_k * k_len
    k_end = tl.minimum(K, k_start + k_len)
    if L2:
        rows_here = tl.minimum(BLOCK_N, N - pid_n * BLOCK_N)
        row_bytes = K * (w_ptr.dtype.element_ty.primitive_bitwidth // 8)
        nbytes = tl.minimum(l2_bytes, rows_here.to(tl.int64) * row_bytes).to(tl.int32)
        _l2_prefetch(w_ptr + (pid_n * BLOCK_N).to(tl.int64) * K, nbytes, ON_GPU)
    if PREFETCH and not TMA:  # the first weight tile does not depend on the previous kernel
        w0 = _first_tile(w_rows, k_start, n_mask, k_end, pid_n, keep_ctas, BLOCK_K, KEEP)
    else:
        w0 = w_ptr  # unused
    offs = offs_t[:, None] * N + offs_n[None, :]
    m = t_mask[:, None] & n_mask[None, :]
    if ARGMAX or SCREEN:  # constant: read before the wait
        banned = tl.load(banned_ptr + offs_n, mask=n_mask, other=1)
    if SCREEN:
        scale = tl.load(scale_ptr + offs_n, mask=n_mask, other=0.0)
        slack = tl.load(slack_ptr + offs_n, mask=n_mask, other=0.0)
    _pdl_wait(USE_PDL)
    if RESIDUAL and SPLIT_K == 1 and not USE_DOT:  # in flight with the first x tile
        res = tl.load(res_ptr + offs, mask=m, other=0.0).to(tl.float32)
        if ADD_ACC:
            o_sum = tl.load(oacc_ptr + offs, mask=m, other=0.0, cache_modifier=".cg")
            res = _round(res + _round(o_sum, DT), DT)
            tl.store(oacc_ptr + offs, tl.zeros_like(o_sum), mask=m)
            if N_COUNT > 0:  # noqa: SIM102 (constexpr first)
                if pid_n == 0:
                    tl.store(count_ptr + tl.arange(0, N_COUNT) * 32, 0)
    acc = tl.zeros((BLOCK_T, BLOCK_N, 1 if USE_DOT else BLOCK_K), tl.float32)
    acc_dot = tl.zeros((BLOCK_T, BLOCK_N), tl.float32)
    if NORM and USE_DOT:
        rstd = _rstd(x_ptr, offs_t, t_mask, K, eps, BLOCK_T)
    ss = tl.zeros((BLOCK_T, BLOCK_K), tl.float32)  # NORM at T = 1: sum of squares on the way
    if TMA:  # the descriptor zero-fills rows past N and columns past K
        for k0 in tl.range(k_start, k_start + k_len, BLOCK_K, num_stages=STAGES):
            offs_k = k0 + tl.arange(0, BLOCK_K)
            x = _load_x(x_ptr, offs_t, t_mask, offs_k, offs_k < k_end, K)
            w = w_desc.load([pid_n * BLOCK_N, k0])
            if SCREEN:
                w = _u8_as_f32(w, ON_GPU)
            acc, acc_dot = _accumulate(acc, acc_dot, x, w, USE_DOT, DT, ON_GPU)
            if NORM and not USE_DOT:
                ss += x * x
    elif KEEP:  # the first keep_ctas CTAs' tiles stay in the L2 across steps
        if pid_n < keep_ctas:
            acc, acc_dot, ss = _gemv_loop(
                w0, w_rows, x_ptr, offs_t, t_mask, n_mask, k_start, k_len, k_end, K, acc,
                acc_dot, ss, BLOCK_K, NORM, USE_DOT, PREFETCH, SCREEN, DT, ON_GPU, True,
            )  # fmt: skip
        else:
            acc, acc_dot, ss = _gemv_loop(
                w0, w_rows, x_ptr, offs_t, t_mask, n_mask, k_start, k_len, k_end, K, acc,
                acc_dot, ss, BLOCK_K, NORM, USE_DOT, PREFETCH, SCREEN, DT, ON_GPU, False,
            )  # fmt: skip
    else:
        acc, acc_dot, ss = _gemv_loop(
            w0, w_rows, x_ptr, offs_t, t_mask, n_mask, k_start, k_len, k_end, K, acc, acc_dot,
            ss, BLOCK_K, NORM, USE_DOT, PREFETCH, SCREEN, DT, ON_GPU, False,
        )  # fmt: skip
    if USE_DOT:  # noqa: SIM108 (a constexpr branch; Triton compiles only one side)
        y = acc_dot
    else:
        y = tl.sum(acc, axis=2)
    if SCREEN:
        _screen_epilogue(
            y, tl.sum(ss, axis=1), K, eps, offs_n, n_mask, banned, scale, slack, out_ptr, key_ptr
        )  # fmt: skip
    elif SPLIT_K == 1:
        if NORM and USE_DOT:
            y = y * rstd[:, None]
        elif NORM:
            y = y * tl.rsqrt(tl.sum(ss, axis=1) / K + eps)[:, None]
        y = _round(y, DT)
        if RESIDUAL:
            if USE_DOT:  # a verify: after the loop, as its registers are busier
                res = tl.load(res_ptr + offs, mask=m, other=0.0).to(tl.float32)
            y = _round(res + y, DT)
        if ARGMAX:
            y = tl.where((banned != 0)[None, :] | ~m, float("-inf"), y)
        tl.store(out_ptr + offs, y.to(DT), mask=m)
        if ARGMAX:
            _publish_argmax(
                _argmax_key(y, pid_n * BLOCK_N), offs_t, t_mask, key_ptr, count_ptr,
                argmax_ptr, tokens_ptr, pos_ptr, T, CHAIN, ON_GPU, RING,
            )  # fmt: skip
    else:
        tl.store(part_ptr + pid_k * T * N + offs, y, mask=m)


@triton.jit
def _gemv_loop(
    w, w_rows, x_ptr, offs_t, t_mask, n_mask, k_start, k_len, k_end, K, acc, acc_dot, ss,
    BLOCK_K: tl.constexpr, NORM: tl.constexpr, USE_DOT: tl.constexpr, PREFETCH: tl.constexpr,
    SCREEN: tl.constexpr, DT: tl.constexpr, ON_GPU: tl.constexpr, KEPT: tl.constexpr,
):  # fmt: skip
    """`_gemv_kernel`'s loop over its K range with register loads of the weight tiles
    (evict_last if KEPT, else evict_first), from the first tile w (PREFETCH): the running
    sums and the sum of squares of x (NORM). KEPT is a constexpr, so a kernel choosing per
    CTA calls this twice, one call per side of its runtime branch."""
    for k0 in range(k_start, k_start + k_len, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        x = _load_x(x_ptr, offs_t, t_mask, offs_k, offs_k < k_end, K)
        # PREFETCH: the next tile is in flight while this one is multiplied; else a plain
        # loop, left to Triton's pipelining (num_stages) and the occupancy.
        if PREFETCH:
            w_next = _w_tile(w_rows, offs_k + BLOCK_K, n_mask, k_end, KEPT)
            tile = w
        else:
            tile = _w_tile(w_rows, offs_k, n_mask, k_end, KEPT)
        if SCREEN:
            tile = _u8_as_f32(tile, ON_GPU)
        acc, acc_dot = _accumulate(acc, acc_dot, x, tile, USE_DOT, DT, ON_GPU)
        if NORM and not USE_DOT:
            ss += x * x
        if PREFETCH:
            w = w_next
    return acc, acc_dot, ss


@triton.jit
def _splitk_reduce_kernel(
    part_ptr,
    out_ptr,
    res_ptr,
    TN,
    RESIDUAL: tl.constexpr,
    SPLIT_K: tl.constexpr,
    BLOCK: tl.constexpr,
    USE_PDL: tl.constexpr,
):
    DT: tl.constexpr = out_ptr.dtype.element_ty
    _pdl_start(USE_PDL)
    _pdl_wait(USE_PDL)
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < TN
    y = tl.zeros((BLOCK,), tl.float32)
    for s in range(SPLIT_K):
        y += tl.load(part_ptr + s * TN + offs, mask=m, other=0.0)
    y = _round(y, DT)
    if RESIDUAL:
        y = _round(tl.load(res_ptr + offs, mask=m, other=0.0).to(tl.float32) + y, DT)
    tl.store(out_ptr + offs, y.to(DT), mask=m)
