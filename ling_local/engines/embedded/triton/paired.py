"""The paired GEMV kernel of the GPU decode step (device code only): RMSNorm + a GEMV whose
CTA owns two row blocks a fixed distance apart, combined in the epilogue: QKV (RoPE, q out,
k and v into the KV cache) and gate/up (silu(gate) * up). Its launchers are in `kernels`;
the GEMV loop's pieces it shares with `jit` are in `common`. Imports triton: import it only
when the Triton step runs."""

from __future__ import annotations

import triton
import triton.language as tl

from ling_local.engines.embedded.triton.common import (
    accumulate,
    first_tile,
    l2_prefetch,
    load_x,
    pdl_wait,
    rope_rows,
    rotate_store,
    rounded,
    row_rstd,
    w_tile,
)

__all__ = ["paired_gemv_kernel"]


@triton.jit
def paired_gemv_kernel(
    x_ptr,
    w_ptr,
    bias_ptr,
    out_ptr,
    k_cache_ptr,
    v_cache_ptr,
    cos_ptr,
    sin_ptr,
    pos_ptr,
    T,
    K,
    N_OUT,
    eps,
    MAX_LEN,
    l2_bytes,
    ROPE_KV: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    N_HEADS: tl.constexpr,
    N_KV: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    USE_DOT: tl.constexpr,
    PREFETCH: tl.constexpr,
    L2: tl.constexpr,
    USE_PDL: tl.constexpr,
    ON_GPU: tl.constexpr,
    keep_ctas=0,
    KEEP: tl.constexpr = False,
):
    """RMSNorm(x) @ W^T for two row blocks a and b = a + PAIR, combined in the epilogue
    (W has the norm's weight folded in: the kernel scales by 1/rms(x) after the sums).

    SILU (not ROPE_KV): W = [gate; up] with N_OUT = I rows each; a = gate rows, b = up rows,
    out[t, a] = silu(gate) * up.
    ROPE_KV: W = [q; k; v] heads of HEAD_DIM; a = the first half of a head's dims, b = the
    second; q/k heads are rotated at position pos + t; q goes to out [T, N_HEADS * HEAD_DIM],
    k and v to the caches [N_KV, MAX_LEN, HEAD_DIM] at pos + t.
    L2: the first `l2_bytes` of each of the two row blocks (contiguous) are prefetched to L2
    before the PDL wait.
    KEEP (register loads): CTAs pid < keep_ctas load their tiles as evict_last, so they stay
    in the L2 from one step to the next (`GemvConfig.l2_keep`).
    """
    DT: tl.constexpr = x_ptr.dtype.element_ty
    HALF: tl.constexpr = HEAD_DIM // 2
    pid = tl.program_id(0)
    offs_t = tl.arange(0, BLOCK_T)
    t_mask = offs_t < T
    lane = tl.arange(0, BLOCK_N)
    if ROPE_KV:
        per_head: tl.constexpr = HALF // BLOCK_N
        head = pid // per_head
        dim_a = (pid % per_head) * BLOCK_N + lane
        first_a = head * HEAD_DIM + (pid % per_head) * BLOCK_N
        gap = HALF
        n_mask = lane < BLOCK_N
    else:
        first_a = pid * BLOCK_N
        gap = N_OUT
        n_mask = first_a + lane < N_OUT
    rows_a = first_a + lane  # each block's rows are consecutive
    rows_b = rows_a + gap
    a_rows = w_ptr + rows_a.to(tl.int64)[:, None] * K
    b_rows = w_ptr + rows_b.to(tl.int64)[:, None] * K
    if L2:  # the launcher's count is a whole block's at most; only gate/up's last is partial
        nbytes = l2_bytes
        if not ROPE_KV:
            row_bytes = K * (w_ptr.dtype.element_ty.primitive_bitwidth // 8)
            left = (N_OUT - first_a).to(tl.int64) * row_bytes
            nbytes = tl.minimum(l2_bytes, left).to(tl.int32)
        l2_prefetch(w_ptr + first_a.to(tl.int64) * K, nbytes, ON_GPU)
        l2_prefetch(w_ptr + (first_a + gap).to(tl.int64) * K, nbytes, ON_GPU)
    if PREFETCH:  # the first weight tiles do not depend on the previous kernel
        wa0 = first_tile(a_rows, 0, n_mask, K, pid, keep_ctas, BLOCK_K, KEEP)
        wb0 = first_tile(b_rows, 0, n_mask, K, pid, keep_ctas, BLOCK_K, KEEP)
    else:
        wa0 = w_ptr  # unused
        wb0 = w_ptr
    m2 = t_mask[:, None] & n_mask[None, :]
    if HAS_BIAS:  # constant: read before the wait
        bias_a = tl.load(bias_ptr + rows_a, mask=n_mask, other=0.0).to(tl.float32)[None, :]
        bias_b = tl.load(bias_ptr + rows_b, mask=n_mask, other=0.0).to(tl.float32)[None, :]
    if ROPE_KV:
        # The position was written before the step (by the host, or the previous step's
        # head: kernels that completed before this step's first one), the tables are
        # constant: read before the wait, not after the loop.
        pos = tl.load(pos_ptr)
        p = pos + offs_t  # [BLOCK_T]
        inside = m2 & (p < MAX_LEN)[:, None]  # a step replayed past the cache writes nothing
        # q and k heads rotate (the head as a tensor: the interpreter takes no scalar mask)
        rot = inside & ((head + 0 * p)[:, None] < N_HEADS + N_KV)
        c_off = p[:, None] * HEAD_DIM + dim_a[None, :]
        if not USE_DOT:  # a verify loads them after its loop: its registers are busier
            cos_a, sin_a, cos_b, sin_b = rope_rows(cos_ptr, sin_ptr, c_off, rot, HALF)
    pdl_wait(USE_PDL)
    if USE_DOT:
        rstd = row_rstd(x_ptr, offs_t, t_mask, K, eps, BLOCK_T)
    ss = tl.zeros((BLOCK_T, BLOCK_K), tl.float32)  # T = 1: sum of squares of x, on the way
    acc_a = tl.zeros((BLOCK_T, BLOCK_N, 1 if USE_DOT else BLOCK_K), tl.float32)
    acc_b = tl.zeros((BLOCK_T, BLOCK_N, 1 if USE_DOT else BLOCK_K), tl.float32)
    dot_a = tl.zeros((BLOCK_T, BLOCK_N), tl.float32)
    dot_b = tl.zeros((BLOCK_T, BLOCK_N), tl.float32)
    if KEEP:  # the first keep_ctas CTAs' tiles stay in the L2 across steps
        if pid < keep_ctas:
            acc_a, acc_b, dot_a, dot_b, ss = _paired_loop(
                wa0, wb0, a_rows, b_rows, x_ptr, offs_t, t_mask, n_mask, K, acc_a, acc_b,
                dot_a, dot_b, ss, BLOCK_K, USE_DOT, PREFETCH, DT, ON_GPU, True,
            )  # fmt: skip
        else:
            acc_a, acc_b, dot_a, dot_b, ss = _paired_loop(
                wa0, wb0, a_rows, b_rows, x_ptr, offs_t, t_mask, n_mask, K, acc_a, acc_b,
                dot_a, dot_b, ss, BLOCK_K, USE_DOT, PREFETCH, DT, ON_GPU, False,
            )  # fmt: skip
    else:
        acc_a, acc_b, dot_a, dot_b, ss = _paired_loop(
            wa0, wb0, a_rows, b_rows, x_ptr, offs_t, t_mask, n_mask, K, acc_a, acc_b, dot_a,
            dot_b, ss, BLOCK_K, USE_DOT, PREFETCH, DT, ON_GPU, False,
        )  # fmt: skip
    if USE_DOT:
        a = dot_a
        b = dot_b
    else:
        a = tl.sum(acc_a, axis=2)
        b = tl.sum(acc_b, axis=2)
    if not USE_DOT:
        rstd = tl.rsqrt(tl.sum(ss, axis=1) / K + eps)
    a = a * rstd[:, None]
    b = b * rstd[:, None]
    if HAS_BIAS:
        a += bias_a
        b += bias_b
    a = rounded(a, DT)
    b = rounded(b, DT)
    if ROPE_KV:
        if USE_DOT:  # masked off for v heads: no reads there
            cos_a, sin_a, cos_b, sin_b = rope_rows(cos_ptr, sin_ptr, c_off, rot, HALF)
        q_off = offs_t[:, None] * (N_HEADS * HEAD_DIM) + rows_a[None, :]
        rotate_store(
            a, b, head, (cos_a, sin_a, cos_b, sin_b), out_ptr, q_off, m2, k_cache_ptr,
            v_cache_ptr, p[:, None] * HEAD_DIM + dim_a[None, :], inside, MAX_LEN, N_HEADS,
            N_KV, HEAD_DIM,
        )  # fmt: skip
    else:
        gate = rounded(a / (1.0 + tl.exp(-a)), DT)
        y = rounded(gate * b, DT).to(DT)
        tl.store(out_ptr + offs_t[:, None] * N_OUT + rows_a[None, :], y, mask=m2)


@triton.jit
def _paired_loop(
    wa, wb, a_rows, b_rows, x_ptr, offs_t, t_mask, n_mask, K, acc_a, acc_b, dot_a, dot_b, ss,
    BLOCK_K: tl.constexpr, USE_DOT: tl.constexpr, PREFETCH: tl.constexpr, DT: tl.constexpr,
    ON_GPU: tl.constexpr, KEPT: tl.constexpr,
):  # fmt: skip
    """`paired_gemv_kernel`'s loop over K with register loads of both row blocks' tiles
    (evict_last if KEPT, else evict_first), from the first tiles wa, wb (PREFETCH): the
    running sums of both blocks and the sum of squares of x. KEPT is a constexpr (a cache
    hint is fixed at compile time), hence the two calls in the kernel's KEEP branch."""
    for k0 in range(0, K, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        x = load_x(x_ptr, offs_t, t_mask, offs_k, offs_k < K, K)
        if PREFETCH:  # as in gemv_kernel
            wa_next = w_tile(a_rows, offs_k + BLOCK_K, n_mask, K, KEPT)
            wb_next = w_tile(b_rows, offs_k + BLOCK_K, n_mask, K, KEPT)
            tile_a = wa
            tile_b = wb
        else:
            tile_a = w_tile(a_rows, offs_k, n_mask, K, KEPT)
            tile_b = w_tile(b_rows, offs_k, n_mask, K, KEPT)
        acc_a, dot_a = accumulate(acc_a, dot_a, x, tile_a, USE_DOT, DT, ON_GPU)
        acc_b, dot_b = accumulate(acc_b, dot_b, x, tile_b, USE_DOT, DT, ON_GPU)
        if not USE_DOT:
            ss += x * x
        if PREFETCH:
            wa = wa_next
            wb = wb_next
    return acc_a, acc_b, dot_a, dot_b, ss
