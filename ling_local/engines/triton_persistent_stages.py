"""The stages of the persistent layers kernel (`triton_persistent_jit._layers_kernel`,
device code only): each GEMV stage streams a CTA's run of row tiles, weights and input row
through TMA loads in a pipelined K loop per tile; the attention stage is flash-decoding of
the one query with the last split of a kv head combining; `_prefetch_rows` asks the L2 for a
stage's weights while a CTA waits at a barrier. Numerics are the per-layer kernels' at
T = 1. Imports triton."""

from __future__ import annotations

import triton
import triton.language as tl

from ling_local.engines.triton_attn import (
    _attend_tiles,
    _combine_splits,
    _split_range,
    _store_partial,
)
from ling_local.engines.triton_common import (
    _l2_prefetch,
    _rope_rows,
    _rotate_store,
    _round,
    _ticket,
)


@triton.jit
def _x_tile(x_desc, x_row, kk, BK: tl.constexpr):
    """Step kk's [BK] slice of an activation row, in fp32: a TMA load like the weights',
    so Triton's pipeliner keeps it in flight with them (a plain load here put an L2 round
    trip on every step: measured 1.32 ms a step on the H200)."""
    return tl.reshape(x_desc.load([x_row, kk * BK]), (BK,)).to(tl.float32)


@triton.jit
def _pair_step(x_desc, x_row, desc, row_a, row_b, kk, acc_a, acc_b, ss, BK: tl.constexpr):
    """One K step of two row blocks (rows row_a.. and row_b..) against the input row:
    the running products and the input's sum of squares (for the RMSNorm)."""
    x = _x_tile(x_desc, x_row, kk, BK)
    wa = desc.load([row_a, kk * BK])
    wb = desc.load([row_b, kk * BK])
    acc_a += x[None, :] * wa.to(tl.float32)
    acc_b += x[None, :] * wb.to(tl.float32)
    return acc_a, acc_b, ss + x * x


@triton.jit
def _qkv_rows(j, pos, cos_ptr, sin_ptr, bias_ptr, HAS_BIAS: tl.constexpr,
              HEAD_DIM: tl.constexpr, BN: tl.constexpr):  # fmt: skip
    """QKV tile j's constant epilogue rows: RoPE's cos / sin at pos for its dims a and
    b = a + HEAD_DIM / 2, and its biases (zeros without)."""
    HALF: tl.constexpr = HEAD_DIM // 2
    PER_HEAD: tl.constexpr = HALF // BN
    lane = tl.arange(0, BN)
    dim_a = (j % PER_HEAD) * BN + lane
    rows_a = (j // PER_HEAD) * HEAD_DIM + dim_a
    rope = _rope_rows(cos_ptr, sin_ptr, pos * HEAD_DIM + dim_a, lane < BN, HALF)
    bias_a = tl.zeros((BN,), tl.float32)
    bias_b = tl.zeros((BN,), tl.float32)
    if HAS_BIAS:
        bias_a = tl.load(bias_ptr + rows_a).to(tl.float32)
        bias_b = tl.load(bias_ptr + rows_a + HALF).to(tl.float32)
    return rope, bias_a, bias_b


@triton.jit
def _qkv_epilogue(
    acc_a, acc_b, ss, j, rows, q_ptr, kc_ptr, vc_ptr, pos, K, eps, MAX_LEN,
    N_HEADS: tl.constexpr, N_KV: tl.constexpr, HEAD_DIM: tl.constexpr, BN: tl.constexpr,
):  # fmt: skip
    """QKV tile j's outputs from its sums: scaled by 1/rms, biased, rotated (q, k) and
    stored (q to q_ptr, k and v into the caches at pos)."""
    DT: tl.constexpr = q_ptr.dtype.element_ty
    PER_HEAD: tl.constexpr = HEAD_DIM // 2 // BN
    rope, bias_a, bias_b = rows
    lane = tl.arange(0, BN)
    head = j // PER_HEAD
    dim_a = (j % PER_HEAD) * BN + lane
    rstd = tl.rsqrt(tl.sum(ss, axis=0) / K + eps)
    a = _round(tl.sum(acc_a, axis=1) * rstd + bias_a, DT)
    b = _round(tl.sum(acc_b, axis=1) * rstd + bias_b, DT)
    inside = lane < tl.where(pos < MAX_LEN, BN, 0)  # a replay past the cache: nothing
    _rotate_store(
        a, b, head, rope, q_ptr, head * HEAD_DIM + dim_a, lane < BN, kc_ptr, vc_ptr,
        pos * HEAD_DIM + dim_a, inside, MAX_LEN, N_HEADS, N_KV, HEAD_DIM,
    )  # fmt: skip


@triton.jit
def _qkv_stage(
    x_desc, x_row, desc, row0, bias_ptr, q_ptr, kc_ptr, vc_ptr, cos_ptr, sin_ptr, pos, first,
    last, K, eps, MAX_LEN,
    HAS_BIAS: tl.constexpr, N_HEADS: tl.constexpr, N_KV: tl.constexpr,
    HEAD_DIM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, STAGES: tl.constexpr,
):  # fmt: skip
    """Tiles [first, last) of rmsnorm(x) @ Wqkv^T (norm folded in): tile j holds BN dims
    d of one head and the dims d + HEAD_DIM / 2 (RoPE's pair); q goes to q_ptr, k and v into
    the layer's caches at `pos`. A pipelined K loop per tile."""
    HALF: tl.constexpr = HEAD_DIM // 2
    PER_HEAD: tl.constexpr = HALF // BN
    ksteps = tl.cdiv(K, BK)
    for j in range(first, last):
        a0 = (j // PER_HEAD) * HEAD_DIM + (j % PER_HEAD) * BN
        rows = _qkv_rows(j, pos, cos_ptr, sin_ptr, bias_ptr, HAS_BIAS, HEAD_DIM, BN)
        acc_a = tl.zeros((BN, BK), tl.float32)
        acc_b = tl.zeros((BN, BK), tl.float32)
        ss = tl.zeros((BK,), tl.float32)
        for kk in tl.range(0, ksteps, num_stages=STAGES):
            acc_a, acc_b, ss = _pair_step(
                x_desc, x_row, desc, row0 + a0, row0 + a0 + HALF, kk, acc_a, acc_b, ss, BK
            )
        _qkv_epilogue(acc_a, acc_b, ss, j, rows, q_ptr, kc_ptr, vc_ptr, pos, K, eps,
                      MAX_LEN, N_HEADS, N_KV, HEAD_DIM, BN)  # fmt: skip


@triton.jit
def _gate_up_epilogue(acc_a, acc_b, ss, j, out_ptr, K, N_OUT, eps, BN: tl.constexpr):
    DT: tl.constexpr = out_ptr.dtype.element_ty
    rstd = tl.rsqrt(tl.sum(ss, axis=0) / K + eps)
    a = _round(tl.sum(acc_a, axis=1) * rstd, DT)
    b = _round(tl.sum(acc_b, axis=1) * rstd, DT)
    gate = _round(a / (1.0 + tl.exp(-a)), DT)
    rows = j * BN + tl.arange(0, BN)
    tl.store(out_ptr + rows, _round(gate * b, DT).to(DT), mask=rows < N_OUT)


@triton.jit
def _gate_up_stage(
    x_desc, desc, row0, out_ptr, first, last, K, N_OUT, eps,
    BN: tl.constexpr, BK: tl.constexpr, STAGES: tl.constexpr,
):  # fmt: skip
    """Tiles [first, last) of silu(gate) * up of rmsnorm(x) (W13 = [gate; up], the norm
    folded in): tile j holds gate rows j * BN .. and the up rows N_OUT further."""
    ksteps = tl.cdiv(K, BK)
    for j in range(first, last):
        acc_a = tl.zeros((BN, BK), tl.float32)
        acc_b = tl.zeros((BN, BK), tl.float32)
        ss = tl.zeros((BK,), tl.float32)
        for kk in tl.range(0, ksteps, num_stages=STAGES):
            acc_a, acc_b, ss = _pair_step(
                x_desc, 0, desc, row0 + j * BN, row0 + N_OUT + j * BN, kk, acc_a, acc_b, ss, BK
            )
        _gate_up_epilogue(acc_a, acc_b, ss, j, out_ptr, K, N_OUT, eps, BN)


@triton.jit
def _residual_stage(
    x_desc, desc, row0, res_ptr, first, last, N, K,
    BN: tl.constexpr, BK: tl.constexpr, STAGES: tl.constexpr,
):  # fmt: skip
    """Tiles [first, last) of res += x @ W^T (the O and down projections), in place; the
    residual rows are read at a tile's start, in flight during its stream."""
    DT: tl.constexpr = res_ptr.dtype.element_ty
    ksteps = tl.cdiv(K, BK)
    for j in range(first, last):
        rows = j * BN + tl.arange(0, BN)
        res = tl.load(res_ptr + rows, mask=rows < N, other=0.0, cache_modifier=".cg")
        acc = tl.zeros((BN, BK), tl.float32)
        for kk in tl.range(0, ksteps, num_stages=STAGES):
            x = _x_tile(x_desc, 0, kk, BK)
            w = desc.load([row0 + j * BN, kk * BK])
            acc += x[None, :] * w.to(tl.float32)
        y = _round(res.to(tl.float32) + _round(tl.sum(acc, axis=1), DT), DT)
        tl.store(res_ptr + rows, y.to(DT), mask=rows < N)


@triton.jit
def _attn_stage(
    q_ptr, kc_ptr, vc_ptr, pos, m_ptr, l_ptr, acc_ptr, count_ptr, out_ptr, pid, G, MAX_LEN,
    sm_scale, ON_GPU: tl.constexpr, N_HEADS: tl.constexpr, GROUP: tl.constexpr,
    HEAD_DIM: tl.constexpr, SPLITS: tl.constexpr, BLOCK_R: tl.constexpr,
    BLOCK_L: tl.constexpr, BLOCK_S: tl.constexpr,
):  # fmt: skip
    """Flash-decoding of the one query (at `pos`) over positions 0 .. pos: tile
    (kv head, split) for tiles pid, pid + G, ...; the last split of a kv head to finish
    combines them into out (`triton_attn`'s partial kernel at T = 1)."""
    DT: tl.constexpr = q_ptr.dtype.element_ty
    N_KV: tl.constexpr = N_HEADS // GROUP
    d = tl.arange(0, HEAD_DIM)
    r = tl.arange(0, BLOCK_R)
    r_mask = r < GROUP
    for tile in range(pid, N_KV * SPLITS, G):
        kv_head = tile // SPLITS
        split = tile % SPLITS
        start, end = _split_range(pos + 1, split, MAX_LEN, SPLITS, BLOCK_L)
        base = kv_head * MAX_LEN * HEAD_DIM
        head = kv_head * GROUP + r
        q = tl.load(
            q_ptr + head[:, None] * HEAD_DIM + d[None, :],
            mask=r_mask[:, None],
            other=0.0,
            cache_modifier=".cg",
        ).to(tl.float32)
        q_pos = pos + 0 * r
        m_i = tl.full((BLOCK_R,), float("-inf"), tl.float32)
        l_i = tl.zeros((BLOCK_R,), tl.float32)
        acc = tl.zeros((BLOCK_R, HEAD_DIM), tl.float32)
        m_i, l_i, acc = _attend_tiles(
            q, kc_ptr, vc_ptr, base, start, end, q_pos, m_i, l_i, acc, sm_scale, HEAD_DIM,
            BLOCK_L, False, DT, ON_GPU, CG=True,
        )  # fmt: skip
        rows = head  # t = 0
        _store_partial(m_ptr, l_ptr, acc_ptr, rows, r_mask, split, m_i, l_i, acc, SPLITS, HEAD_DIM)
        if _ticket(count_ptr + kv_head, ON_GPU) == SPLITS - 1:
            _combine_splits(m_ptr, l_ptr, acc_ptr, out_ptr, rows, r_mask, SPLITS, HEAD_DIM, BLOCK_S)
            tl.store(count_ptr + kv_head, 0)


@triton.jit
def _prefetch_rows(w_ptr, row, n_rows, K, limit_rows, nbytes, ON_GPU: tl.constexpr):
    """Ask the L2 for up to `nbytes` of weight rows row .. row + n_rows (never past
    limit_rows, the end of the stacked matrix)."""
    rows = tl.maximum(tl.minimum(n_rows, limit_rows - row), 0)
    row_bytes = K * (w_ptr.dtype.element_ty.primitive_bitwidth // 8)
    size = (tl.minimum(nbytes, rows.to(tl.int64) * row_bytes) // 16 * 16).to(tl.int32)
    if size > 0:
        _l2_prefetch(w_ptr + row.to(tl.int64) * K, size, ON_GPU)
