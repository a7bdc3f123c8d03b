"""The decode step's layers in one persistent kernel (T = 1, `PERSISTENT.enabled`; off by
default: measured slower than the per-layer kernels, see below).

The per-layer kernels of `triton_kernels` (five launches a layer) each pay a few
microseconds of launch, first-load and drain latency that PDL hides only in part; on the
H200 that was ~0.3 ms of a 0.9 ms step for the Llama-3.2-1B shape (docs/bench/). Here one
CTA per SM runs every layer: the stages of a layer (QKV + RoPE + cache write, attention,
O + residual, gate/up + SiLU, down + residual) are separated by grid barriers (one atomic
arrive and an acquire-load spin by thread 0, CUTLASS's semaphore pattern), and a CTA that
arrives early asks the L2 for its slice of the next stage's weights before it waits, so the
weight stream does not stop at a stage boundary. The output head stays a kernel of its own
(`triton_kernels.lm_head_argmax`, near the floor already). The embedding row is read by
layer 0 directly and copied into the residual stream by the CTAs on the way.

Each GEMV stage gives every CTA a contiguous run of row tiles and streams weights and the
input row through TMA loads, `STAGES` shared-memory buffers kept in flight by Triton's
pipeliner: a pipelined K loop per tile (one loop over tiles x K steps with the epilogue on a
tile's last step measured slower: 1.198 against 1.159 ms). Numerics are those of the per-layer kernels at T = 1 (bf16
wherever PyTorch rounds, fp32 sums); only the order of the fp32 sums differs.

Measured on the H200 (docs/bench/persistent_*): the barriers cost 1.0-1.25 us each, but with
one CTA per SM the stages stream slower than the per-layer kernels do with several CTAs per
SM, and the attention (~10 us a layer) has nothing to hide its latency behind: best step
1.07 ms against 0.90. `PROFILE` stamps the global timer at each stage end and barrier exit
(`scripts/gpu_persistent_profile.py`) for whoever takes it further.

All CTAs of a launch must be resident at once (the barriers wait for every one): the grid
is at most one CTA per SM. A barrier that waits too long (a deadlock that cannot happen
with a resident grid) sets an error flag instead of hanging; the launcher checks it on its
first eager call. In Triton's CPU interpreter, which runs CTAs one after another, the host
launches the kernel once per stage (`SYNC` off): the same device code, no barriers.

Weights are read through TMA descriptors of the stacked layer matrices
(`triton_setup.fold_norms` puts each kind in one [layers * N, K] allocation); the per-layer
KV caches through a table of their addresses."""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from ling_local.engines.triton_attn import _attend, _combine_splits
from ling_local.engines.triton_common import (
    _l2_prefetch,
    _rope_rows,
    _rotate_store,
    _round,
    _ticket,
)
from ling_local.engines.triton_launch import Scratch, _on_gpu, _pow2
from ling_local.engines.triton_setup import PERSISTENT

__all__ = ["persistent_layers", "persistent_ready"]

_STAGES_PER_LAYER = 5
_SPIN_LIMIT = tl.constexpr(1 << 23)  # acquire loads (~0.5 us each): seconds, then the error flag

# Thread 0 spins until the counter reaches the target (or `limit` loads), then every
# thread learns nothing but its own result: 1 if thread 0 gave up, else 0.
_SPIN_ASM = tl.constexpr(
    "{ .reg .pred p; .reg .u32 t, n; .reg .s32 v; "
    "mov.u32 $0, 0; mov.u32 t, %tid.x; setp.ne.u32 p, t, 0; @p bra DONE; mov.u32 n, 0; "
    "SPIN: ld.acquire.gpu.global.b32 v, [$1]; setp.ge.s32 p, v, $2; @p bra DONE; "
    "add.u32 n, n, 1; setp.lt.u32 p, n, $3; @p bra SPIN; mov.u32 $0, 1; "
    "DONE: }"
)


@triton.jit
def _grid_sync(bar_ptr, target, err_ptr, limit):
    """Every CTA's writes so far visible to every CTA: arrive (fence, CTA barrier, one
    release add) and wait until `target` arrivals. Returns whether this CTA gave up."""
    tl.inline_asm_elementwise(
        "fence.acq_rel.gpu; mov.u32 $0, 0;", "=r", [], dtype=tl.int32, is_pure=False, pack=1
    )
    tl.debug_barrier()
    tl.atomic_add(bar_ptr, 1, sem="release", scope="gpu")
    one = tl.zeros((1,), tl.int32)
    gave_up = tl.inline_asm_elementwise(
        _SPIN_ASM,
        "=r,l,r,r",
        [bar_ptr + one, target + one, limit + one],
        dtype=tl.int32,
        is_pure=False,
        pack=1,
    )
    tl.store(err_ptr + one, gave_up, mask=gave_up != 0)
    tl.debug_barrier()
    # the next stage reads what the others wrote through TMA (the async proxy)
    tl.inline_asm_elementwise(
        "fence.proxy.async.global; mov.u32 $0, 0;",
        "=r",
        [],
        dtype=tl.int32,
        is_pure=False,
        pack=1,
    )
    return tl.max(gave_up, axis=0) != 0


@triton.jit
def _stamp(prof_ptr, index, PROFILE: tl.constexpr):
    """PROFILE: the global timer (ns) into prof[index] (a diagnosis of where a step's time
    goes: `scripts/gpu_persistent_profile.py`)."""
    if PROFILE:
        one = tl.zeros((1,), tl.int32)
        t = tl.inline_asm_elementwise(
            "mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False, pack=1
        )
        tl.store(prof_ptr + index + one, t + one.to(tl.int64))


@triton.jit
def _run(pid, n_tiles, G):
    """This CTA's contiguous run of tiles [first, last) of a stage of n_tiles."""
    per = tl.cdiv(n_tiles, G)
    first = tl.minimum(pid * per, n_tiles)
    return first, tl.minimum(first + per, n_tiles)


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
    n_ctx = pos + 1
    chunk = tl.cdiv(tl.cdiv(n_ctx, SPLITS), BLOCK_L) * BLOCK_L
    d = tl.arange(0, HEAD_DIM)
    r = tl.arange(0, BLOCK_R)
    r_mask = r < GROUP
    for tile in range(pid, N_KV * SPLITS, G):
        kv_head = tile // SPLITS
        split = tile % SPLITS
        start = split * chunk
        end = tl.minimum(tl.minimum(start + chunk, n_ctx), MAX_LEN)
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
        for l0 in range(start, end, BLOCK_L):
            offs_l = l0 + tl.arange(0, BLOCK_L)
            l_mask = offs_l < end
            kv_off = base + offs_l[:, None] * HEAD_DIM + d[None, :]
            k = tl.load(kc_ptr + kv_off, mask=l_mask[:, None], other=0.0, cache_modifier=".cg")
            v = tl.load(vc_ptr + kv_off, mask=l_mask[:, None], other=0.0, cache_modifier=".cg")
            m_i, l_i, acc = _attend(
                q, k, v, offs_l, l_mask, q_pos, m_i, l_i, acc, sm_scale, False, DT, ON_GPU
            )
        rows = head  # t = 0
        row = rows * SPLITS + split
        tl.store(m_ptr + row, m_i, mask=r_mask)
        tl.store(l_ptr + row, l_i, mask=r_mask)
        tl.store(acc_ptr + row[:, None] * HEAD_DIM + d[None, :], acc, mask=r_mask[:, None])
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


@triton.jit
def _layers_kernel(
    tokens_ptr, pos_ptr, embed_ptr, x_ptr, q_ptr, attn_ptr, act_ptr,
    m_ptr, l_ptr, acc_ptr, count_ptr, bar_ptr, err_ptr, kv_table,
    wqkv_ptr, wo_ptr, w13_ptr, w2_ptr, qkv_desc, o_desc, gu_desc, dn_desc, bias_ptr,
    embed_x, x_qkv, x_gu, attn_x, act_x, cos_ptr, sin_ptr, n_layers, H, INTER, MAX_LEN,
    eps, sm_scale, s_lo, s_hi, l2_qkv, l2_o, l2_gu, l2_dn, prof_ptr,
    HAS_BIAS: tl.constexpr, N_HEADS: tl.constexpr, N_KV: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    QKV_N: tl.constexpr, QKV_K: tl.constexpr, QKV_S: tl.constexpr,
    O_N: tl.constexpr, O_K: tl.constexpr, O_S: tl.constexpr,
    GU_N: tl.constexpr, GU_K: tl.constexpr, GU_S: tl.constexpr,
    DN_N: tl.constexpr, DN_K: tl.constexpr, DN_S: tl.constexpr,
    SPLITS: tl.constexpr, BLOCK_L: tl.constexpr, BLOCK_R: tl.constexpr,
    BLOCK_S: tl.constexpr, SYNC: tl.constexpr, ON_GPU: tl.constexpr,
    PROFILE: tl.constexpr = False,
):  # fmt: skip
    """Stages s_lo .. s_hi - 1 of the layers (stage s = layer s // 5, part s % 5: QKV,
    attention, O, gate/up, down) for the token at tokens[0], position pos[0]; x ends as
    the residual stream after the last layer. SYNC: all stages in this launch, grid
    barriers between them (a resident grid); else one stage a launch (the interpreter).
    The GEMVs read their input rows through [1, BLOCK_K] descriptors: embed_x (of the
    embedding table, for layer 0's QKV), x_qkv and x_gu (of x), attn_x, act_x."""
    DT: tl.constexpr = x_ptr.dtype.element_ty
    GROUP: tl.constexpr = N_HEADS // N_KV
    QKV_ROWS: tl.constexpr = (N_HEADS + 2 * N_KV) * HEAD_DIM
    QKV_TILES: tl.constexpr = (N_HEADS + 2 * N_KV) * (HEAD_DIM // 2 // QKV_N)
    pid = tl.program_id(0)
    G = tl.num_programs(0)
    prof = prof_ptr + pid * (2 * n_layers * 5 + 2)  # per CTA: start, then (end, go) a stage
    _stamp(prof, 0, PROFILE)
    pos = tl.load(pos_ptr)
    token = tl.load(tokens_ptr)
    embed_row = embed_ptr + token * H
    if s_lo == 0:  # the residual stream starts as the embedding row (layer 0 reads it there)
        per = tl.cdiv(H, G)
        for e0 in range(pid * per, tl.minimum(pid * per + per, H), 1024):
            offs = e0 + tl.arange(0, 1024)
            m = offs < tl.minimum(pid * per + per, H)
            tl.store(x_ptr + offs, tl.load(embed_row + offs, mask=m), mask=m)
    qkv_first, qkv_last = _run(pid, QKV_TILES, G)
    o_first, o_last = _run(pid, tl.cdiv(H, O_N), G)
    gu_first, gu_last = _run(pid, tl.cdiv(INTER, GU_N), G)
    dn_first, dn_last = _run(pid, tl.cdiv(H, DN_N), G)
    n_stages = n_layers * 5
    gave_up = pid < 0  # no barrier given up yet
    for s in range(s_lo, s_hi):
        layer = s // 5
        part = s % 5
        if part == 0:
            kc = tl.load(kv_table + 2 * layer).to(tl.pointer_type(DT))
            vc = tl.load(kv_table + 2 * layer + 1).to(tl.pointer_type(DT))
            bias = bias_ptr + layer * QKV_ROWS
            if layer == 0:  # x is the embedding row (descriptors cannot be selected)
                _qkv_stage(
                    embed_x, token.to(tl.int32), qkv_desc, 0, bias, q_ptr, kc, vc, cos_ptr, sin_ptr, pos,
                    qkv_first, qkv_last, H, eps, MAX_LEN, HAS_BIAS, N_HEADS, N_KV,
                    HEAD_DIM, QKV_N, QKV_K, QKV_S,
                )  # fmt: skip
            else:
                _qkv_stage(
                    x_qkv, 0, qkv_desc, layer * QKV_ROWS, bias, q_ptr, kc, vc, cos_ptr,
                    sin_ptr, pos, qkv_first, qkv_last, H, eps, MAX_LEN, HAS_BIAS, N_HEADS,
                    N_KV, HEAD_DIM, QKV_N, QKV_K, QKV_S,
                )  # fmt: skip
        elif part == 1:
            kc = tl.load(kv_table + 2 * layer).to(tl.pointer_type(DT))
            vc = tl.load(kv_table + 2 * layer + 1).to(tl.pointer_type(DT))
            _attn_stage(
                q_ptr, kc, vc, pos, m_ptr, l_ptr, acc_ptr, count_ptr, attn_ptr, pid, G,
                MAX_LEN, sm_scale, ON_GPU, N_HEADS, GROUP, HEAD_DIM, SPLITS, BLOCK_R,
                BLOCK_L, BLOCK_S,
            )  # fmt: skip
        elif part == 2:
            _residual_stage(
                attn_x, o_desc, layer * H, x_ptr, o_first, o_last, H, N_HEADS * HEAD_DIM,
                O_N, O_K, O_S,
            )  # fmt: skip
        elif part == 3:
            _gate_up_stage(
                x_gu, gu_desc, layer * 2 * INTER, act_ptr, gu_first, gu_last, H, INTER, eps,
                GU_N, GU_K, GU_S,
            )  # fmt: skip
        else:
            _residual_stage(
                act_x, dn_desc, layer * H, x_ptr, dn_first, dn_last, H, INTER, DN_N, DN_K,
                DN_S,
            )  # fmt: skip
        _stamp(prof, 2 + 2 * s, PROFILE)
        if SYNC and s < n_stages - 1:
            # While the others finish: the next stage's weights of this CTA, to the L2.
            nxt = s + 1
            nl = nxt // 5
            npart = nxt % 5
            if npart == 0:
                # the first tile's a rows on (and its b rows): exact within one head
                per_head = HEAD_DIM // 2 // QKV_N
                first = nl * QKV_ROWS + (qkv_first // per_head) * HEAD_DIM
                first += (qkv_first % per_head) * QKV_N
                rows = (qkv_last - qkv_first) * QKV_N
                limit_rows = n_layers * QKV_ROWS
                _prefetch_rows(wqkv_ptr, first, rows, H, limit_rows, l2_qkv, ON_GPU)
                _prefetch_rows(wqkv_ptr, first + HEAD_DIM // 2, rows, H, limit_rows, l2_qkv, ON_GPU)
            elif npart == 1:  # this CTA's first attention tile: its split of older K and V
                if pid < N_KV * SPLITS:
                    chunk = tl.cdiv(tl.cdiv(pos + 1, SPLITS), BLOCK_L) * BLOCK_L
                    start = (pid % SPLITS) * chunk
                    n_old = tl.minimum(tl.minimum(start + chunk, pos), MAX_LEN) - start
                    base = (pid // SPLITS) * MAX_LEN + start
                    kc = tl.load(kv_table + 2 * nl).to(tl.pointer_type(DT))
                    vc = tl.load(kv_table + 2 * nl + 1).to(tl.pointer_type(DT))
                    nbytes = n_old * HEAD_DIM * 2
                    _prefetch_rows(kc, base, n_old, HEAD_DIM, base + n_old, nbytes, ON_GPU)
                    _prefetch_rows(vc, base, n_old, HEAD_DIM, base + n_old, nbytes, ON_GPU)
            elif npart == 2:
                _prefetch_rows(
                    wo_ptr, nl * H + o_first * O_N, (o_last - o_first) * O_N,
                    N_HEADS * HEAD_DIM, n_layers * H, l2_o, ON_GPU,
                )  # fmt: skip
            elif npart == 3:
                rows = (gu_last - gu_first) * GU_N
                first = nl * 2 * INTER + gu_first * GU_N
                _prefetch_rows(w13_ptr, first, rows, H, n_layers * 2 * INTER, l2_gu, ON_GPU)
                _prefetch_rows(w13_ptr, first + INTER, rows, H, n_layers * 2 * INTER, l2_gu, ON_GPU)
            elif npart == 4:
                _prefetch_rows(
                    w2_ptr, nl * H + dn_first * DN_N, (dn_last - dn_first) * DN_N, INTER,
                    n_layers * H, l2_dn, ON_GPU,
                )  # fmt: skip
            limit = tl.where(gave_up, 1, _SPIN_LIMIT)
            gave_up = gave_up | _grid_sync(bar_ptr, (s + 1 - s_lo) * G, err_ptr, limit)
            _stamp(prof, 3 + 2 * s, PROFILE)
    if SYNC:  # noqa: SIM102 (constexpr first) the last CTA out resets the barrier
        if _ticket(bar_ptr + 1, ON_GPU) == G - 1:
            tl.store(bar_ptr, 0)
            tl.store(bar_ptr + 1, 0)


_STACKS = ("wqkv", "wo", "w13", "w2")


def _stack(w, name: str) -> torch.Tensor:
    """The [layers * N, K] allocation holding every layer's matrix `name`."""
    first = getattr(w.layers[0], name)
    rows, k = first.shape
    return torch.empty(0, dtype=first.dtype, device=first.device).set_(
        first.untyped_storage(), first.storage_offset(), (len(w.layers) * rows, k), (k, 1)
    )


def persistent_ready(w) -> str | None:
    """Why the persistent kernel cannot run these weights, or None: the layer matrices
    must be stacked (`fold_norms` does it) and the tiles must fit the shapes."""
    cfg = PERSISTENT
    for name in _STACKS:
        mats = [getattr(layer, name) for layer in w.layers]
        base = mats[0]
        step = base.numel()
        for i, mat in enumerate(mats):
            if (
                not mat.is_contiguous()
                or mat.untyped_storage().data_ptr() != base.untyped_storage().data_ptr()
                or mat.storage_offset() != base.storage_offset() + i * step
            ):
                return f"the layers' {name} matrices are not stacked in one allocation"
        if (mats[0].shape[1] * mats[0].element_size()) % 16:
            return f"{name} rows are not 16-byte multiples (TMA)"
    if (w.head_dim // 2) % cfg.qkv_n:
        return f"head_dim/2 = {w.head_dim // 2} is not a multiple of the QKV tile {cfg.qkv_n}"
    if any(b > 256 for b in (cfg.qkv_n, cfg.qkv_k, cfg.o_n, cfg.o_k, cfg.gu_n, cfg.gu_k,
                               cfg.dn_n, cfg.dn_k)):  # fmt: skip
        return "a TMA box side is over 256"
    return None


_DESCS: dict[tuple, object] = {}


def _desc(whole: torch.Tensor, bn: int, bk: int):
    from triton.tools.tensor_descriptor import TensorDescriptor

    key = (whole.data_ptr(), tuple(whole.shape), bn, bk)
    if key not in _DESCS:
        if len(_DESCS) > 256:
            _DESCS.clear()
        _DESCS[key] = TensorDescriptor.from_tensor(whole, [bn, bk])
    return _DESCS[key]


def _ctas(device: torch.device) -> int:
    if PERSISTENT.ctas:
        return PERSISTENT.ctas
    if _on_gpu(torch.empty(0, device=device)):
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 3  # the interpreter: a few CTAs, so the runs and the tickets are exercised


def persistent_layers(
    w,
    k_cache: list[torch.Tensor],
    v_cache: list[torch.Tensor],
    tokens: torch.Tensor,
    pos: torch.Tensor,
    scratch: Scratch,
    profile: torch.Tensor | None = None,
) -> torch.Tensor:
    """Every layer of the decode step of tokens[0] at position pos[0] (T = 1) in one
    launch (the interpreter: one a stage); returns the residual stream x [1, H] after the
    last layer, for the output head. `profile` (GPU, int64 [CTAs, 2 + 2 * stages]): the
    global timer at each CTA's start, and at each stage's end and barrier exit."""
    cfg = PERSISTENT
    dev = tokens.device
    h = w.embed.shape[1]
    n_layers = len(w.layers)
    nh, nkv, hd = w.n_heads, w.n_kv_heads, w.head_dim
    inter = w.layers[0].w2.shape[1]
    dt = w.embed.dtype
    f32 = torch.float32
    x = scratch.get("p_x", (1, h), dt)
    q = scratch.get("p_q", (nh * hd,), dt)
    attn = scratch.get("p_attn", (1, nh * hd), dt)
    act = scratch.get("p_act", (1, inter), dt)
    m = scratch.get("p_m", (nh, cfg.splits), f32)
    l_sum = scratch.get("p_l", (nh, cfg.splits), f32)
    acc = scratch.get("p_acc", (nh, cfg.splits, hd), f32)
    count = scratch.get("p_count", (nkv,), torch.int32, fill=0)
    bar = scratch.get("p_bar", (2,), torch.int32, fill=0)
    err = scratch.get("p_err", (1,), torch.int32, fill=0)
    ptrs = [p for i in range(n_layers) for p in (k_cache[i].data_ptr(), v_cache[i].data_ptr())]
    key = "p_kv:" + ",".join(map(str, ptrs[:2]))
    table = scratch.buffers.get(key)
    if table is None:
        table = scratch.buffers[key] = torch.tensor(ptrs, dtype=torch.int64, device=dev)
    stacks = {name: _stack(w, name) for name in _STACKS}
    bias = w.layers[0].bqkv
    if bias is not None:
        bias = scratch.buffers.get("p_bias")
        if bias is None:
            bias = torch.cat([layer.bqkv for layer in w.layers])
            scratch.buffers["p_bias"] = bias
    on_gpu = _on_gpu(tokens)
    g = _ctas(dev)
    es = torch.finfo(dt).bits // 8

    def l2(fraction: float, rows: int, k: int, tiles: int) -> int:
        per_cta = -(-tiles // g) * rows * k * es
        return int(fraction * per_cta) // 16 * 16

    qkv_tiles = (nh + 2 * nkv) * (hd // 2 // cfg.qkv_n)
    args = (
        tokens, pos, w.embed, x, q, attn, act, m, l_sum, acc, count, bar, err, table,
        stacks["wqkv"], stacks["wo"], stacks["w13"], stacks["w2"],
        _desc(stacks["wqkv"], cfg.qkv_n, cfg.qkv_k), _desc(stacks["wo"], cfg.o_n, cfg.o_k),
        _desc(stacks["w13"], cfg.gu_n, cfg.gu_k), _desc(stacks["w2"], cfg.dn_n, cfg.dn_k),
        bias if bias is not None else x, _desc(w.embed, 1, cfg.qkv_k), _desc(x, 1, cfg.qkv_k),
        _desc(x, 1, cfg.gu_k), _desc(attn, 1, cfg.o_k), _desc(act, 1, cfg.dn_k), w.cos, w.sin,
        n_layers, h, inter, k_cache[0].shape[1],
        w.eps, 1.0 / math.sqrt(hd),
    )  # fmt: skip
    l2s = (
        l2(cfg.l2_qkv, cfg.qkv_n, h, qkv_tiles),
        l2(cfg.l2_o, cfg.o_n, nh * hd, -(-h // cfg.o_n)),
        l2(cfg.l2_gate_up, cfg.gu_n, h, -(-inter // cfg.gu_n)),
        l2(cfg.l2_down, cfg.dn_n, inter, -(-h // cfg.dn_n)),
    )
    consts = dict(
        HAS_BIAS=bias is not None, N_HEADS=nh, N_KV=nkv, HEAD_DIM=hd,
        QKV_N=cfg.qkv_n, QKV_K=cfg.qkv_k, QKV_S=cfg.qkv_stages,
        O_N=cfg.o_n, O_K=cfg.o_k, O_S=cfg.o_stages,
        GU_N=cfg.gu_n, GU_K=cfg.gu_k, GU_S=cfg.gu_stages,
        DN_N=cfg.dn_n, DN_K=cfg.dn_k, DN_S=cfg.dn_stages,
        SPLITS=cfg.splits, BLOCK_L=cfg.block_l, BLOCK_R=max(2, _pow2(nh // nkv)),
        BLOCK_S=max(2, _pow2(cfg.splits)), ON_GPU=on_gpu, num_warps=cfg.num_warps,
    )  # fmt: skip
    n_stages = _STAGES_PER_LAYER * n_layers
    if on_gpu:
        prof = profile if profile is not None else err
        _layers_kernel[(g,)](
            *args, 0, n_stages, *l2s, prof, SYNC=True, PROFILE=profile is not None, **consts
        )
        if "p_checked" not in scratch.buffers and not torch.cuda.is_current_stream_capturing():
            torch.cuda.synchronize(dev)
            if int(err.item()):
                raise RuntimeError("the persistent kernel's grid barrier timed out")
            scratch.buffers["p_checked"] = err
    else:
        for s in range(n_stages):
            _layers_kernel[(g,)](*args, s, s + 1, *l2s, err, SYNC=False, **consts)
    return x
