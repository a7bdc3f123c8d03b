"""The CPU decode step's kernels, JIT-compiled by numba (see `cpu_decode` for why).

A step of a small model on a laptop is bound by reading the weights from memory: a
matrix-vector product streams each int8 row once, converts it to float32 and multiplies it
with the float32 activations, accumulating in float32 (`fastmath` lets LLVM reorder the sum
into AVX2 lanes; no flag that assumes finite values is set), asking for the rows a few ahead
of the one it reads (`_AHEAD`). The rows of every matmul are split between the threads
(`prange`); attention splits its query heads.

Compiled on first use and cached on disk (`cache=True`: next to this file, or in the
user's cache directory where the package is read-only), so only the first start after an
install pays the compilation (~10 s on the 2-core VM); later ones load it in ~0.7 s, most
of it numba's own import and registries.

Threading: numba's OpenMP layer comes first (on Linux it is a GNU OpenMP like torch's, its
team's threads spin briefly between the step's parallel regions), then its own work queue,
which wakes its threads through a condition variable (1.5x slower a step, measured)."""

from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.core import cgutils
from numba.extending import intrinsic

__all__ = ["decode_step", "set_threads"]

if numba.config.THREADING_LAYER == "default":  # the user's NUMBA_THREADING_LAYER wins
    numba.config.THREADING_LAYER_PRIORITY = ["omp", "workqueue", "tbb"]

_FAST = {"reassoc", "contract", "arcp", "nsz"}
"""fastmath without nnan/ninf: a sum may be reordered, a value may still be inf."""


def set_threads(n: int) -> None:
    """Threads for the kernels called from this thread (numba's count is per thread)."""
    n = max(1, min(n, numba.config.NUMBA_NUM_THREADS))
    if numba.get_num_threads() != n:
        numba.set_num_threads(n)


@intrinsic
def _prefetch_line(typingctx, row, offset):  # pragma: no cover - compiled
    """A hint to fetch the cache line of row[offset] (LLVM's prefetch: for a read, no
    temporal locality: a weight is read once a step)."""

    def codegen(context, builder, signature, args):
        data = context.make_array(signature.args[0])(context, builder, args[0]).data
        i8p, i32 = ir.IntType(8).as_pointer(), ir.IntType(32)
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]), "llvm.prefetch.p0"
        )
        address = builder.bitcast(builder.gep(data, [args[1]]), i8p)
        builder.call(fn, [address, i32(0), i32(0), i32(1)])
        return context.get_dummy_value()

    return types.void(row, offset), codegen


_AHEAD = 8
"""Rows a matmul asks for ahead of the one it reads: the hardware prefetcher alone left a
thread streaming the int8 weights from memory at 10.5 GB/s, with this at 14 (all the tiny
model's matmuls, 1 thread: 3.35 -> 2.37 ms; 2 threads 1.85 -> 1.35; 4 to 16 rows ahead
measured the same)."""


@njit(cache=True, inline="always")
def _prefetch_row(q, o):  # pragma: no cover - compiled
    if o < q.shape[0]:
        row = q[o]
        for i in range(0, row.shape[0], 64):
            _prefetch_line(row, i)


@njit(fastmath=_FAST, cache=True, inline="always")
def _dot(row, x):  # pragma: no cover - compiled
    acc = np.float32(0.0)
    for i in range(x.shape[0]):
        acc += np.float32(row[i]) * x[i]
    return acc


@njit(fastmath=_FAST, cache=True)
def _rms_norm(x, weight, eps, out):  # pragma: no cover - compiled
    ss = np.float32(0.0)
    for i in range(x.shape[0]):
        ss += x[i] * x[i]
    r = np.float32(1.0) / np.sqrt(ss / np.float32(x.shape[0]) + eps)
    for i in range(x.shape[0]):
        out[i] = x[i] * r * weight[i]


@njit(fastmath=_FAST, cache=True, parallel=True)
def matvec(q, scales, x, out):  # pragma: no cover - compiled
    """out = (q @ x) * scales: q int8 (or float32) [rows, n], x float32 [n]."""
    for o in prange(q.shape[0]):
        _prefetch_row(q, o + _AHEAD)
        out[o] = _dot(q[o], x) * scales[o]


@njit(fastmath=_FAST, cache=True, parallel=True)
def _matvec_add(q, scales, x, out):  # pragma: no cover - compiled
    for o in prange(q.shape[0]):
        _prefetch_row(q, o + _AHEAD)
        out[o] += _dot(q[o], x) * scales[o]


@njit(fastmath=_FAST, cache=True, parallel=True)
def _gate_up(q, scales, x, act):  # pragma: no cover - compiled
    """act = silu(gate) * up, gate and up the two halves of q @ x."""
    inter = act.shape[0]
    for o in prange(inter):
        _prefetch_row(q, o + _AHEAD)
        _prefetch_row(q, inter + o + _AHEAD)
        g = _dot(q[o], x) * scales[o]
        u = _dot(q[inter + o], x) * scales[inter + o]
        act[o] = g / (np.float32(1.0) + np.exp(-g)) * u


@njit(fastmath=_FAST, cache=True, parallel=True)
def _attend(qkv, block, n_heads, head_dim, end, out):  # pragma: no cover - compiled
    """Softmax attention of each query head over its KV head's first `end` positions;
    block is one layer's [2, kv_heads, max_len, head_dim] cache."""
    group = n_heads // block.shape[1]
    scale = np.float32(1.0 / np.sqrt(head_dim))
    for h in prange(n_heads):
        q = qkv[h * head_dim : (h + 1) * head_dim]
        keys, values = block[0, h // group], block[1, h // group]
        p = np.empty(end, np.float32)
        top = np.float32(-3.0e38)
        for t in range(end):
            acc = np.float32(0.0)
            for j in range(head_dim):
                acc += q[j] * keys[t, j]
            p[t] = acc * scale
            top = max(top, p[t])
        total = np.float32(0.0)
        for t in range(end):
            p[t] = np.exp(p[t] - top)
            total += p[t]
        o = out[h * head_dim : (h + 1) * head_dim]
        o[:] = 0.0
        for t in range(end):
            weight = p[t] / total
            for j in range(head_dim):
                o[j] += weight * values[t, j]


@njit(cache=True)
def top_k(v, k):  # pragma: no cover - compiled
    """Indices of the k largest values of v, in no particular order."""
    idx = np.arange(k)
    low = 0
    for j in range(1, k):
        if v[idx[j]] < v[idx[low]]:
            low = j
    for t in range(k, v.shape[0]):
        if v[t] > v[idx[low]]:
            idx[low] = t
            for j in range(k):
                if v[idx[j]] < v[idx[low]]:
                    low = j
    return idx


@njit(fastmath=_FAST, cache=True)
def decode_step(
    token,
    pos,
    embed,
    ln_in,
    ln_post,
    norm,
    wqkv,
    sqkv,
    bqkv,
    wo,
    so,
    w13,
    s13,
    w2,
    s2,
    head,
    shead,
    exact,
    k,
    cos,
    sin,
    eps,
    n_heads,
    kv,
    logits,
):  # pragma: no cover - compiled
    """Feed `token` at `pos` through every layer, writing its keys and values into kv
    [layers, 2, kv_heads, max_len, head_dim] and the logits into `logits`. Per-layer
    matrices are stacked [layers, out, in] with per-row scales [layers, out]; bqkv is
    [layers, q+k+v] or empty. With k > 0 the head is a screen: its k best rows are
    rescored with the float rows of `exact`."""
    n_kv, head_dim = kv.shape[2], kv.shape[4]
    nq, nk, half = n_heads * head_dim, n_kv * head_dim, head_dim // 2
    x = embed[token].astype(np.float32)  # the residual stream
    h = np.empty(x.shape[0], np.float32)
    qkv = np.empty(wqkv.shape[1], np.float32)
    attn = np.empty(nq, np.float32)
    act = np.empty(w13.shape[1] // 2, np.float32)
    c, s = cos[pos], sin[pos]
    for i in range(wqkv.shape[0]):
        _rms_norm(x, ln_in[i], eps, h)
        matvec(wqkv[i], sqkv[i], h, qkv)
        if bqkv.shape[0] > 0:
            qkv += bqkv[i]
        for r in range(n_heads + n_kv):  # RoPE (rotate_half) on the q and k rows
            base = r * head_dim
            for j in range(half):
                a, b = qkv[base + j], qkv[base + half + j]
                qkv[base + j] = a * c[j] - b * s[j]
                qkv[base + half + j] = b * c[half + j] + a * s[half + j]
        block = kv[i]
        for g in range(n_kv):
            block[0, g, pos] = qkv[nq + g * head_dim : nq + (g + 1) * head_dim]
            block[1, g, pos] = qkv[nq + nk + g * head_dim : nq + nk + (g + 1) * head_dim]
        _attend(qkv, block, n_heads, head_dim, pos + 1, attn)
        _matvec_add(wo[i], so[i], attn, x)
        _rms_norm(x, ln_post[i], eps, h)
        _gate_up(w13[i], s13[i], h, act)
        _matvec_add(w2[i], s2[i], act, x)
    _rms_norm(x, norm, eps, h)
    matvec(head, shead, h, logits)
    if k > 0:
        for t in top_k(logits, k):
            logits[t] = _dot(exact[t], h)
