"""The Triton decode step's attention kernels (device code only): flash-decoding over the
slot's KV cache, split over the live context, the splits combined by the last CTA of each kv
head (or by a second launch), and the variant that also does the O projection
(`_attn_o_kernel`). Launched by `triton_kernels.decode_attention` and
`triton_fused.attention_o`; the shared helpers (PDL wait, the CTA ticket, the counter
barrier, rounding, the tensor-core product) are in `triton_common`."""

from __future__ import annotations

import triton
import triton.language as tl

from ling_local.engines.embedded.triton.common import (
    _SPIN_LIMIT,
    _grid_sync,
    _l2_prefetch,
    _mma,
    _pdl_start,
    _pdl_wait,
    _round,
    _ticket,
)


@triton.jit
def _combined(
    m_ptr,
    l_ptr,
    acc_ptr,
    rows,
    r_mask,
    DT: tl.constexpr,
    SPLITS: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_S: tl.constexpr,
):
    """The softmax-combined splits of rows `rows` ([R] row = t * heads + head): [R, HEAD_DIM]
    in fp32, rounded to the model dtype DT. Reads the partials at L2 (.cg): other CTAs of the
    same launch wrote them."""
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
    out = tl.sum(scale[:, :, None] * acc, axis=1)
    return _round(out / den[:, None], DT)


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
    """Store the combined splits of rows `rows` (`_combined`) into out [T, heads *
    HEAD_DIM], in row order."""
    DT: tl.constexpr = out_ptr.dtype.element_ty
    out = _combined(m_ptr, l_ptr, acc_ptr, rows, r_mask, DT, SPLITS, HEAD_DIM, BLOCK_S)
    d = tl.arange(0, HEAD_DIM)
    tl.store(out_ptr + rows[:, None] * HEAD_DIM + d[None, :], out.to(DT), mask=r_mask[:, None])


@triton.jit
def _attend(q, k, v, offs_l, l_mask, q_pos, m_i, l_i, acc, sm_scale, USE_DOT: tl.constexpr,
            DT: tl.constexpr, ON_GPU: tl.constexpr):  # fmt: skip
    """One online-softmax step of rows q [R, D] over the cache tile k, v [L, D]."""
    if USE_DOT:
        s = _mma(q, tl.trans(k), DT, ON_GPU)
    else:
        s = tl.sum(q[:, None, :] * k.to(tl.float32)[None, :, :], axis=2)
    s = s * sm_scale  # [R, L]
    visible = (offs_l[None, :] <= q_pos[:, None]) & l_mask[None, :]
    s = tl.where(visible, s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, axis=1))
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = tl.exp(m_i - m_safe)
    p = tl.exp(s - m_safe[:, None])
    l_i = l_i * alpha + tl.sum(p, axis=1)
    if USE_DOT:  # p in the model dtype, as SDPA's flash kernels do
        pv = _mma(p, v, DT, ON_GPU)
    else:
        pv = tl.sum(p[:, :, None] * v.to(tl.float32)[None, :, :], axis=1)
    return m_new, l_i, acc * alpha[:, None] + pv


@triton.jit
def _split_range(n_ctx, split, MAX_LEN, SPLITS: tl.constexpr, BLOCK_L: tl.constexpr):
    """Cache positions [start, end) of split `split` when SPLITS splits share the live
    context 0 .. n_ctx - 1 in whole tiles of BLOCK_L (never past the cache)."""
    chunk = tl.cdiv(tl.cdiv(n_ctx, SPLITS), BLOCK_L) * BLOCK_L
    start = split * chunk
    return start, tl.minimum(tl.minimum(start + chunk, n_ctx), MAX_LEN)


@triton.jit
def _attend_tiles(
    q, k_ptr, v_ptr, base, lo, end, q_pos, m_i, l_i, acc, sm_scale,
    HEAD_DIM: tl.constexpr, BLOCK_L: tl.constexpr, USE_DOT: tl.constexpr, DT: tl.constexpr,
    ON_GPU: tl.constexpr, CG: tl.constexpr = False,
):  # fmt: skip
    """`_attend` over the cache tiles lo, lo + BLOCK_L, .. < end of the kv head at `base`;
    CG: keys and values read at L2 (written by other CTAs of the same launch)."""
    d = tl.arange(0, HEAD_DIM)
    for l0 in range(lo, end, BLOCK_L):
        offs_l = l0 + tl.arange(0, BLOCK_L)
        l_mask = offs_l < end
        kv_off = base + offs_l[:, None] * HEAD_DIM + d[None, :]
        if CG:
            k = tl.load(k_ptr + kv_off, mask=l_mask[:, None], other=0.0, cache_modifier=".cg")
            v = tl.load(v_ptr + kv_off, mask=l_mask[:, None], other=0.0, cache_modifier=".cg")
        else:
            k = tl.load(k_ptr + kv_off, mask=l_mask[:, None], other=0.0)
            v = tl.load(v_ptr + kv_off, mask=l_mask[:, None], other=0.0)
        m_i, l_i, acc = _attend(
            q, k, v, offs_l, l_mask, q_pos, m_i, l_i, acc, sm_scale, USE_DOT, DT, ON_GPU
        )
    return m_i, l_i, acc


@triton.jit
def _store_partial(m_ptr, l_ptr, acc_ptr, rows, r_mask, split, m_i, l_i, acc,
                   SPLITS: tl.constexpr, HEAD_DIM: tl.constexpr):  # fmt: skip
    """A split's running max, sum and unnormalised output of rows `rows` (t * heads +
    head), at [row * SPLITS + split]."""
    d = tl.arange(0, HEAD_DIM)
    row = rows * SPLITS + split
    tl.store(m_ptr + row, m_i, mask=r_mask)
    tl.store(l_ptr + row, l_i, mask=r_mask)
    tl.store(acc_ptr + row[:, None] * HEAD_DIM + d[None, :], acc, mask=r_mask[:, None])


@triton.jit
def _split_partial(
    q_ptr, k_ptr, v_ptr, pos_ptr, m_ptr, l_ptr, acc_ptr, kv_head, split, T, MAX_LEN, sm_scale,
    N_HEADS: tl.constexpr, GROUP: tl.constexpr, HEAD_DIM: tl.constexpr,
    SPLITS: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_L: tl.constexpr,
    USE_DOT: tl.constexpr, L2: tl.constexpr, USE_PDL: tl.constexpr, ON_GPU: tl.constexpr,
):  # fmt: skip
    """Partial softmax attention of one kv head's query group (rows r = t * GROUP + g) over
    one split of the cache positions 0 .. pos + T - 1; query t sees positions <= pos + t.
    Stores the running max, sum and unnormalised output per (t, head, split) and returns
    the rows (t * heads + head) and their mask. The split's first tile of keys and values
    older than this step is read before the PDL wait (done here), as the previous kernel
    writes only positions pos .. pos + T - 1; with L2 the rest of the split's older keys and
    values are prefetched to L2 then too."""
    DT: tl.constexpr = q_ptr.dtype.element_ty
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
            _l2_prefetch(k_ptr + first, nbytes, ON_GPU)
            _l2_prefetch(v_ptr + first, nbytes, ON_GPU)
    _pdl_wait(USE_PDL)
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
    m_i, l_i, acc = _attend(
        q, k, v, offs_l, offs_l < end, q_pos, m_i, l_i, acc, sm_scale, USE_DOT, DT, ON_GPU
    )
    m_i, l_i, acc = _attend_tiles(
        q, k_ptr, v_ptr, base, start + BLOCK_L, end, q_pos, m_i, l_i, acc, sm_scale, HEAD_DIM,
        BLOCK_L, USE_DOT, DT, ON_GPU,
    )  # fmt: skip
    rows = t * N_HEADS + head
    _store_partial(m_ptr, l_ptr, acc_ptr, rows, r_mask, split, m_i, l_i, acc, SPLITS, HEAD_DIM)
    return rows, r_mask


@triton.jit
def _attn_partial_kernel(
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
    USE_DOT: tl.constexpr,
    L2: tl.constexpr,
    USE_PDL: tl.constexpr,
    ON_GPU: tl.constexpr,
):
    """One (kv head, split) of the attention (`_split_partial`); with FUSED_REDUCE the last
    CTA of the kv head combines the splits into out (no second launch)."""
    _pdl_start(USE_PDL)
    rows, r_mask = _split_partial(
        q_ptr, k_ptr, v_ptr, pos_ptr, m_ptr, l_ptr, acc_ptr, tl.program_id(0),
        tl.program_id(1), T, MAX_LEN, sm_scale, N_HEADS, GROUP, HEAD_DIM, SPLITS, BLOCK_R,
        BLOCK_L, USE_DOT, L2, USE_PDL, ON_GPU,
    )  # fmt: skip
    if FUSED_REDUCE:  # noqa: SIM102 (constexpr first: no atomic at all without it)
        if _ticket(count_ptr + tl.program_id(0), ON_GPU) == SPLITS - 1:
            _combine_splits(m_ptr, l_ptr, acc_ptr, out_ptr, rows, r_mask, SPLITS, HEAD_DIM, BLOCK_S)
            tl.store(count_ptr + tl.program_id(0), 0)


@triton.jit
def _attn_o_kernel(
    q_ptr, k_ptr, v_ptr, pos_ptr, m_ptr, l_ptr, acc_ptr, count_ptr, err_ptr, wo_ptr, oacc_ptr,
    MAX_LEN, H, sm_scale,
    N_HEADS: tl.constexpr, N_KV: tl.constexpr, GROUP: tl.constexpr, HEAD_DIM: tl.constexpr,
    SPLITS: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_L: tl.constexpr,
    BLOCK_S: tl.constexpr, BLOCK_O: tl.constexpr, PHASE: tl.constexpr, L2: tl.constexpr,
    USE_PDL: tl.constexpr, ON_GPU: tl.constexpr,
):  # fmt: skip
    """The attention and the O projection of one token (T = 1) in one launch: CTA (kv head
    g, split s) computes its split's partial (`_split_partial`), waits for the other splits
    of g (a counter barrier over the kv head's SPLITS CTAs, all resident), combines them
    itself, and multiplies its group's output [GROUP * HEAD_DIM] by the O rows s * BLOCK_O
    .. + BLOCK_O, those columns (read before the PDL wait); the sums go to
    oacc [H] (fp32, zero before) by atomic adds: the N_KV groups' split-K of the projection.
    The kernels after it add round(oacc) to the residual (gate/up on its input, down in its
    residual, which also zeroes oacc). No attention output round trip, no O launch.

    PHASE 0: all of it (a GPU); 1 then 2: the partials, then the rest, in two launches (the
    CPU interpreter, which runs CTAs one after another and cannot wait on a barrier). The
    arrival counters (kv head g's at count[32 * g]) are reset by the down projection's
    kernel (`_gemv_kernel` with ADD_ACC), which runs after every CTA here has left: no
    departure count, whose fence would wait for the atomic adds."""
    DT: tl.constexpr = q_ptr.dtype.element_ty
    _pdl_start(USE_PDL)
    kv_head = tl.program_id(0)
    split = tl.program_id(1)
    KQ: tl.constexpr = N_HEADS * HEAD_DIM
    r = tl.arange(0, BLOCK_R)
    d = tl.arange(0, HEAD_DIM)
    head = kv_head * GROUP + r
    r_mask = r < GROUP
    offs_o = split * BLOCK_O + tl.arange(0, BLOCK_O)
    o_mask = offs_o < H
    w_off = offs_o.to(tl.int64)[:, None, None] * KQ + (
        head[None, :, None] * HEAD_DIM + d[None, None, :]
    )
    w_mask = o_mask[:, None, None] & r_mask[None, :, None]
    # constant: in flight while the previous kernel drains
    wo = tl.load(wo_ptr + w_off, mask=w_mask, other=0.0, eviction_policy="evict_first")
    if PHASE != 2:
        _split_partial(
            q_ptr, k_ptr, v_ptr, pos_ptr, m_ptr, l_ptr, acc_ptr, kv_head, split, 1, MAX_LEN,
            sm_scale, N_HEADS, GROUP, HEAD_DIM, SPLITS, BLOCK_R, BLOCK_L, False, L2, USE_PDL,
            ON_GPU,
        )  # fmt: skip
    else:
        _pdl_wait(USE_PDL)
    if PHASE == 0:  # each kv head's counter on a 128-byte line of its own
        _grid_sync(count_ptr + kv_head * 32, SPLITS, err_ptr, _SPIN_LIMIT)
    if PHASE != 1:
        o = _combined(m_ptr, l_ptr, acc_ptr, head, r_mask, DT, SPLITS, HEAD_DIM, BLOCK_S)
        y = tl.sum(tl.sum(wo.to(tl.float32) * o[None, :, :], axis=2), axis=1)
        tl.atomic_add(oacc_ptr + offs_o, y, mask=o_mask, sem="relaxed", scope="gpu")


@triton.jit
def _attn_reduce_kernel(
    m_ptr,
    l_ptr,
    acc_ptr,
    out_ptr,
    HEAD_DIM: tl.constexpr,
    SPLITS: tl.constexpr,
    BLOCK_S: tl.constexpr,
    USE_PDL: tl.constexpr,
):
    """Combine one (token, head)'s splits (the two-launch variant of the attention)."""
    _pdl_start(USE_PDL)
    _pdl_wait(USE_PDL)
    rows = tl.program_id(0) + tl.arange(0, 1)
    _combine_splits(m_ptr, l_ptr, acc_ptr, out_ptr, rows, rows >= 0, SPLITS, HEAD_DIM, BLOCK_S)
