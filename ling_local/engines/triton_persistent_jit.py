"""The persistent layers kernel's device code (`triton_persistent` launches it and says
why it exists and what it measured): `_layers_kernel` runs the stages of every layer
(`triton_persistent_stages`), one CTA per SM, with grid barriers between them (`_grid_sync`)
and optional global-timer stamps (`_stamp`). Imports triton."""

from __future__ import annotations

import triton
import triton.language as tl

from ling_local.engines.triton_common import _SPIN_LIMIT, _grid_sync, _ticket
from ling_local.engines.triton_persistent_stages import (
    _attn_stage,
    _gate_up_stage,
    _prefetch_rows,
    _qkv_stage,
    _residual_stage,
)


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
