"""The Triton decode step's attention kernels (device code only): flash-decoding over the
slot's KV cache, split over the live context, each split's query rows on the tensor cores,
the splits combined by the last CTA of each kv head (T = 1) or by a second launch (a
verify). Launched by `kernels.decode_attention`; the shared helpers (PDL wait, the CTA
ticket, rounding, the tensor-core product, the L2 prefetch) are in `common`."""

from __future__ import annotations

import triton
import triton.language as tl

from ling_local.engines.embedded.triton.common import (
    l2_prefetch,
    mma,
    pdl_wait,
    rounded,
    ticket,
)

__all__ = ["attn_partial_kernel", "attn_reduce_kernel"]


@triton.jit
def _combine_splits(
    m_ptr,
    l_ptr,
    acc_ptr,
    out_ptr,
    rows,
    r_mask,
    SPLITS: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_S: tl.constexpr,
):
    """Store the softmax-combined splits of rows `rows` ([R] row = t * heads + head) into
    out [T, heads * HEAD_DIM], rounded to the model dtype. Reads the partials at L2 (.cg):
    other CTAs of the same launch wrote them."""
    DT: tl.constexpr = out_ptr.dtype.element_ty
    s = tl.arange(0, BLOCK_S)
    d = tl.arange(0, HEAD_DIM)
    sm = r_mask[:, None] & (s[None, :] < SPLITS)
    idx = rows[:, None] * SPLITS + s[None, :]  # [R, S]
    m = tl.load(m_ptr + idx, mask=sm, other=float("-inf"), cache_modifier=".cg")
    l_s = tl.load(l_ptr + idx, mask=sm, other=0.0, cache_modifier=".cg")
    m_max = tl.max(m, axis=1)  # finite for real rows: split 0 always holds position 0
    m_max = tl.where(r_mask, m_max, 0.0)
    scale = tl.exp(m - m_max[:, None])
    den = tl.sum(scale * l_s, axis=1)
    den = tl.where(r_mask, den, 1.0)
    acc = tl.load(
        acc_ptr + idx[:, :, None] * HEAD_DIM + d[None, None, :],
        mask=sm[:, :, None],
        other=0.0,
        cache_modifier=".cg",
    )
    out = rounded(tl.sum(scale[:, :, None] * acc, axis=1) / den[:, None], DT)
    tl.store(out_ptr + rows[:, None] * HEAD_DIM + d[None, :], out.to(DT), mask=r_mask[:, None])


@triton.jit
def _attend(q, k, v, offs_l, l_mask, q_pos, m_i, l_i, acc, sm_scale, DT: tl.constexpr,
            ON_GPU: tl.constexpr):  # fmt: skip
    """One online-softmax step of rows q [R, D] over the cache tile k, v [L, D], both
    products on the tensor cores (p in the model dtype, as SDPA's flash kernels do)."""
    s = mma(q, tl.trans(k), DT, ON_GPU) * sm_scale  # [R, L]
    visible = (offs_l[None, :] <= q_pos[:, None]) & l_mask[None, :]
    s = tl.where(visible, s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, axis=1))
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = tl.exp(m_i - m_safe)
    p = tl.exp(s - m_safe[:, None])
    l_i = l_i * alpha + tl.sum(p, axis=1)
    return m_new, l_i, acc * alpha[:, None] + mma(p, v, DT, ON_GPU)


@triton.jit
def _split_range(n_ctx, split, MAX_LEN, SPLITS: tl.constexpr, BLOCK_L: tl.constexpr):
    """Cache positions [start, end) of split `split` when SPLITS splits share the live
    context 0 .. n_ctx - 1 in whole tiles of BLOCK_L (never past the cache)."""
    chunk = tl.cdiv(tl.cdiv(n_ctx, SPLITS), BLOCK_L) * BLOCK_L
    start = split * chunk
    return start, tl.minimum(tl.minimum(start + chunk, n_ctx), MAX_LEN)


@triton.jit
def attn_partial_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    pos_ptr,
    m_ptr,
    l_ptr,
    acc_ptr,
    count_ptr,
    out_ptr,
    T,
    MAX_LEN,
    sm_scale,
    N_HEADS: tl.constexpr,
    GROUP: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    SPLITS: tl.constexpr,
    BLOCK_R: tl.constexpr,
    BLOCK_L: tl.constexpr,
    BLOCK_S: tl.constexpr,
    FUSED_REDUCE: tl.constexpr,
    L2: tl.constexpr,
    USE_PDL: tl.constexpr,
    ON_GPU: tl.constexpr,
):
    """Partial softmax attention of kv head program_id(0)'s query group (rows r = t *
    GROUP + g, padded to BLOCK_R) over split program_id(1) of the cache positions 0 .. pos
    + T - 1; query t sees positions <= pos + t. Stores the running max, sum and
    unnormalised output per (t, head, split); with FUSED_REDUCE the last CTA of the kv head
    combines the splits into out (no second launch). The split's first tile of keys and
    values older than this step is read before the PDL wait, as the previous kernel writes
    only positions pos .. pos + T - 1; with L2 the rest of the split's older keys and values
    are asked of the L2 then too."""
    DT: tl.constexpr = q_ptr.dtype.element_ty
    kv_head = tl.program_id(0)
    split = tl.program_id(1)
    pos = tl.load(pos_ptr)  # written before the step (host or the previous step's chain)
    start, end = _split_range(pos + T, split, MAX_LEN, SPLITS, BLOCK_L)
    d = tl.arange(0, HEAD_DIM)
    base = kv_head * MAX_LEN * HEAD_DIM
    offs_l = start + tl.arange(0, BLOCK_L)
    kv_off = base + offs_l[:, None] * HEAD_DIM + d[None, :]
    old = ((offs_l < end) & (offs_l < pos))[:, None]
    k = tl.load(k_ptr + kv_off, mask=old, other=0.0)
    v = tl.load(v_ptr + kv_off, mask=old, other=0.0)
    if L2:  # positions start + BLOCK_L .. min(end, pos) - 1, contiguous in each cache
        rest = tl.minimum(end, pos) - (start + BLOCK_L)
        if rest > 0:
            row_bytes = HEAD_DIM * (k_ptr.dtype.element_ty.primitive_bitwidth // 8)
            first = base + (start + BLOCK_L).to(tl.int64) * HEAD_DIM
            nbytes = (rest * row_bytes).to(tl.int32)
            l2_prefetch(k_ptr + first, nbytes, ON_GPU)
            l2_prefetch(v_ptr + first, nbytes, ON_GPU)
    pdl_wait(USE_PDL)
    new = ((offs_l < end) & (offs_l >= pos))[:, None]
    k = tl.where(new, tl.load(k_ptr + kv_off, mask=new, other=0.0), k)
    v = tl.where(new, tl.load(v_ptr + kv_off, mask=new, other=0.0), v)
    r = tl.arange(0, BLOCK_R)
    t = r // GROUP
    head = kv_head * GROUP + r % GROUP
    r_mask = t < T
    q = tl.load(
        q_ptr + t[:, None] * (N_HEADS * HEAD_DIM) + head[:, None] * HEAD_DIM + d[None, :],
        mask=r_mask[:, None],
        other=0.0,
    ).to(tl.float32)
    q_pos = pos + t
    m_i = tl.full((BLOCK_R,), float("-inf"), tl.float32)
    l_i = tl.zeros((BLOCK_R,), tl.float32)
    acc = tl.zeros((BLOCK_R, HEAD_DIM), tl.float32)
    m_i, l_i, acc = _attend(q, k, v, offs_l, offs_l < end, q_pos, m_i, l_i, acc, sm_scale, DT,
                            ON_GPU)  # fmt: skip
    for l0 in range(start + BLOCK_L, end, BLOCK_L):  # the split's later tiles
        offs_j = l0 + tl.arange(0, BLOCK_L)
        j_mask = offs_j < end
        kv_j = base + offs_j[:, None] * HEAD_DIM + d[None, :]
        k_j = tl.load(k_ptr + kv_j, mask=j_mask[:, None], other=0.0)
        v_j = tl.load(v_ptr + kv_j, mask=j_mask[:, None], other=0.0)
        m_i, l_i, acc = _attend(q, k_j, v_j, offs_j, j_mask, q_pos, m_i, l_i, acc, sm_scale, DT,
                                ON_GPU)  # fmt: skip
    rows = t * N_HEADS + head
    row = rows * SPLITS + split
    tl.store(m_ptr + row, m_i, mask=r_mask)
    tl.store(l_ptr + row, l_i, mask=r_mask)
    tl.store(acc_ptr + row[:, None] * HEAD_DIM + d[None, :], acc, mask=r_mask[:, None])
    if FUSED_REDUCE:  # noqa: SIM102 (constexpr first: no atomic at all without it)
        if ticket(count_ptr + kv_head, ON_GPU) == SPLITS - 1:
            _combine_splits(m_ptr, l_ptr, acc_ptr, out_ptr, rows, r_mask, SPLITS, HEAD_DIM, BLOCK_S)
            tl.store(count_ptr + kv_head, 0)


@triton.jit
def attn_reduce_kernel(
    m_ptr,
    l_ptr,
    acc_ptr,
    out_ptr,
    HEAD_DIM: tl.constexpr,
    SPLITS: tl.constexpr,
    BLOCK_S: tl.constexpr,
    USE_PDL: tl.constexpr,
):
    """Combine one (token, head)'s splits (a verify's second launch)."""
    pdl_wait(USE_PDL)
    rows = tl.program_id(0) + tl.arange(0, 1)
    _combine_splits(m_ptr, l_ptr, acc_ptr, out_ptr, rows, rows >= 0, SPLITS, HEAD_DIM, BLOCK_S)
