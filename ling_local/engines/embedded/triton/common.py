"""Device helpers every kernel of the Triton decode step shares (`jit` and `paired`'s GEMVs,
`attn`'s attention, `screen`'s pick): programmatic dependent launch, the L2 bulk prefetch,
the CTA ticket, rounding to the model dtype, the tensor-core product, the GEMV loop's pieces,
the QKV epilogue's RoPE rows, rotation and q / k / v stores, and the argmax across CTAs
(order-preserving keys, one atomic max each, the last CTA's decode) that the output head and
the screen's pick share. Imports triton: import it only when the Triton step runs.

Every kernel takes `USE_PDL`: launched with programmatic dependent launch (Hopper and
later), a kernel starts while its predecessor drains, reads the bytes that do not depend on
it (its first weight tile) and only then waits (`pdl_wait`) for the predecessor's results.
Everything a kernel writes, and every activation it reads, comes after that wait. With `L2`
a paired GEMV or the attention also asks the L2 for part of its bytes before the wait
(`l2_prefetch`): while the previous kernel is latency-bound the memory system streams the
next kernel's bytes instead of idling."""

from __future__ import annotations

import triton
import triton.language as tl

__all__ = [
    "MIN_KEY",
    "MIN_KEY32",
    "accumulate",
    "argmax_key",
    "first_tile",
    "l2_prefetch",
    "load_x",
    "mma",
    "ordered",
    "pack_key",
    "pdl_wait",
    "publish_argmax",
    "rope_rows",
    "rotate_store",
    "rounded",
    "row_rstd",
    "ticket",
    "unordered",
    "w_tile",
]


@triton.jit
def pdl_wait(USE_PDL: tl.constexpr):
    """Wait for the previous kernel's results, then let the next kernel start launching."""
    if USE_PDL:
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()


_PREFETCH_ASM = tl.constexpr(
    "{ .reg .pred p; .reg .u32 t; mov.u32 t, %tid.x; setp.eq.u32 p, t, 0; "
    "@p cp.async.bulk.prefetch.L2.global [$1], $2; mov.u32 $0, 0; }"
)


@triton.jit
def l2_prefetch(ptr, nbytes, ON_GPU: tl.constexpr):
    """Ask the L2 for `nbytes` (a multiple of 16) from `ptr` (16-byte aligned): Hopper's
    bulk prefetch, issued by thread 0 alone in pieces of 32 KiB. Holds no registers and
    writes nothing; a no-op in Triton's CPU interpreter."""
    if ON_GPU:
        base = ptr.to(tl.pointer_type(tl.int8))
        for off in range(0, nbytes, 32768):
            size = tl.minimum(nbytes - off, 32768)
            tl.inline_asm_elementwise(
                _PREFETCH_ASM,
                "=r,l,r",
                [base + off + tl.zeros((1,), tl.int32), size + tl.zeros((1,), tl.int32)],
                dtype=tl.int32,
                is_pure=False,
                pack=1,
            )


@triton.jit
def ticket(count_ptr, ON_GPU: tl.constexpr):
    """This CTA's place among the CTAs sharing `count_ptr` (0 first), after its own global
    writes are visible to them: CUTLASS's semaphore pattern (barrier, one release/acquire
    atomic). The last CTA to arrive owns the combined result."""
    if ON_GPU:
        tl.inline_asm_elementwise(
            "fence.acq_rel.gpu; mov.u32 $0, 0;", "=r", [], dtype=tl.int32, is_pure=False, pack=1
        )
    tl.debug_barrier()
    return tl.atomic_add(count_ptr, 1, sem="acq_rel", scope="gpu")


@triton.jit
def rounded(x, dtype: tl.constexpr):
    """x (fp32) rounded to the model dtype, kept in fp32. For bf16 round-to-nearest-even by
    hand: what the GPU's cvt does, while Triton's CPU interpreter truncates on `.to`."""
    if dtype == tl.bfloat16:
        bits = x.to(tl.uint32, bitcast=True)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
        return bits.to(tl.float32, bitcast=True)
    else:
        return x.to(dtype).to(tl.float32)


@triton.jit
def mma(a, b, DT: tl.constexpr, ON_GPU: tl.constexpr):
    """a [M, K] @ b [K, N] on the tensor cores, operands in the model dtype, fp32 out.
    Triton's CPU interpreter has no bf16 matmul: there the same products in fp32."""
    if ON_GPU:
        return tl.dot(a.to(DT), b.to(DT))
    else:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")


@triton.jit
def row_rstd(x_ptr, offs_t, t_mask, K, eps, BLOCK_T: tl.constexpr):
    """1 / rms of each token row of x [T, K], read in a pass of its own: the verify's
    (T > 1) tensor-core loops, where summing squares of the dot operands on the way costs
    more than this pass (measured on the H200: the T = 9 step 1.49 -> 2.05 ms)."""
    BLOCK: tl.constexpr = 4096 // BLOCK_T
    ss = tl.zeros((BLOCK_T, BLOCK), tl.float32)
    for k0 in range(0, K, BLOCK):
        offs_k = k0 + tl.arange(0, BLOCK)
        m = t_mask[:, None] & (offs_k[None, :] < K)
        x = tl.load(x_ptr + offs_t[:, None] * K + offs_k[None, :], mask=m, other=0.0)
        x = x.to(tl.float32)
        ss += x * x
    return tl.rsqrt(tl.sum(ss, axis=1) / K + eps)


@triton.jit
def load_x(x_ptr, offs_t, t_mask, offs_k, k_mask, K):
    """A [T, BLOCK_K] slice of the input, in fp32."""
    return tl.load(
        x_ptr + offs_t[:, None] * K + offs_k[None, :],
        mask=t_mask[:, None] & k_mask[None, :],
        other=0.0,
        eviction_policy="evict_last",
    ).to(tl.float32)


@triton.jit
def w_tile(rows, offs_k, n_mask, k_end, KEPT: tl.constexpr = False):
    """A [rows, BLOCK_K] tile of weights, streamed past the cache (read once a step), or
    with KEPT loaded as evict_last, kept in the L2 across steps (`GemvConfig.l2_keep`).
    (A flag, not the policy's name: Triton 3.6 takes no strings into a jit call.)"""
    mask = n_mask[:, None] & (offs_k[None, :] < k_end)
    if KEPT:
        w = tl.load(rows + offs_k[None, :], mask=mask, other=0.0, eviction_policy="evict_last")
    else:
        w = tl.load(rows + offs_k[None, :], mask=mask, other=0.0, eviction_policy="evict_first")
    return w


@triton.jit
def first_tile(rows, k_start, n_mask, k_end, pid, keep_ctas, BLOCK_K: tl.constexpr,
               KEEP: tl.constexpr):  # fmt: skip
    """A GEMV's first weight tile, loaded before its PDL wait: evict_last for the CTAs
    whose tiles stay in the L2 (KEEP, pid < keep_ctas), else streamed."""
    offs_k = k_start + tl.arange(0, BLOCK_K)
    if KEEP:
        if pid < keep_ctas:
            w = w_tile(rows, offs_k, n_mask, k_end, True)
        else:
            w = w_tile(rows, offs_k, n_mask, k_end)
    else:
        w = w_tile(rows, offs_k, n_mask, k_end)
    return w


@triton.jit
def accumulate(acc, acc_dot, x, w, USE_DOT: tl.constexpr, DT: tl.constexpr, ON_GPU: tl.constexpr):
    """x [T, BLOCK_K] times a weight tile w [BLOCK_N, BLOCK_K] into the running sums: T = 1
    broadcast-and-add into [T, BLOCK_N, BLOCK_K] (reduced once at the end); a verify's
    padded T on the tensor cores into [T, BLOCK_N]."""
    if USE_DOT:
        acc_dot += mma(x, tl.trans(w), DT, ON_GPU)
    else:
        acc += x[:, None, :] * w.to(tl.float32)[None, :, :]
    return acc, acc_dot


@triton.jit
def rope_rows(cos_ptr, sin_ptr, c_off, mask, HALF: tl.constexpr):
    """cos and sin at a block's dims (a) and the dims HALF further (b), in fp32."""
    cos_a = tl.load(cos_ptr + c_off, mask=mask, other=0.0).to(tl.float32)
    sin_a = tl.load(sin_ptr + c_off, mask=mask, other=0.0).to(tl.float32)
    cos_b = tl.load(cos_ptr + c_off + HALF, mask=mask, other=0.0).to(tl.float32)
    sin_b = tl.load(sin_ptr + c_off + HALF, mask=mask, other=0.0).to(tl.float32)
    return cos_a, sin_a, cos_b, sin_b


@triton.jit
def rotate_store(
    a, b, head, rope, q_ptr, q_off, q_mask, kc_ptr, vc_ptr, c_rel, c_mask, MAX_LEN,
    N_HEADS: tl.constexpr, N_KV: tl.constexpr, HEAD_DIM: tl.constexpr,
):  # fmt: skip
    """A QKV block's outputs for head `head` (q heads, then k, then v), its dims a and the
    dims HEAD_DIM / 2 further b, in fp32 already rounded to the model dtype: q and k heads
    rotated (x * cos + rotate_half(x) * sin, rounded as PyTorch; `rope` = rope_rows), q
    stored at q_off, k or v into its kv head's cache [N_KV, MAX_LEN, HEAD_DIM] at c_rel
    (position * HEAD_DIM + dim)."""
    DT: tl.constexpr = q_ptr.dtype.element_ty
    HALF: tl.constexpr = HEAD_DIM // 2
    if head < N_HEADS + N_KV:
        cos_a, sin_a, cos_b, sin_b = rope
        ra = rounded(rounded(a * cos_a, DT) + rounded(-b * sin_a, DT), DT)
        rb = rounded(rounded(b * cos_b, DT) + rounded(a * sin_b, DT), DT)
        a, b = ra, rb
    if head < N_HEADS:
        tl.store(q_ptr + q_off, a.to(DT), mask=q_mask)
        tl.store(q_ptr + q_off + HALF, b.to(DT), mask=q_mask)
    else:
        c_off = ((head - N_HEADS) % N_KV) * MAX_LEN * HEAD_DIM + c_rel
        if head < N_HEADS + N_KV:
            tl.store(kc_ptr + c_off, a.to(DT), mask=c_mask)
            tl.store(kc_ptr + c_off + HALF, b.to(DT), mask=c_mask)
        else:
            tl.store(vc_ptr + c_off, a.to(DT), mask=c_mask)
            tl.store(vc_ptr + c_off + HALF, b.to(DT), mask=c_mask)


MIN_KEY = tl.constexpr(-(2**63))
MIN_KEY32 = tl.constexpr(-(2**31))


@triton.jit
def ordered(f):
    """The int32 whose signed order is the order of the fp32 values f (no NaNs)."""
    bits = f.to(tl.int32, bitcast=True)
    return bits ^ ((bits >> 31) & 0x7FFFFFFF)


@triton.jit
def unordered(key):
    """The fp32 value of an `ordered` key (the map is its own inverse)."""
    return (key ^ ((key >> 31) & 0x7FFFFFFF)).to(tl.float32, bitcast=True)


@triton.jit
def pack_key(value, index):
    """A 64-bit argmax key: order-preserving bits of the value, then the complement of the
    index, so the largest key is the largest value at its first index (torch.argmax's tie
    rule)."""
    return (ordered(value).to(tl.int64) << 32) + (0x7FFFFFFF - index).to(tl.int64)


@triton.jit
def argmax_key(y, n_start):
    """Per token row of y [T, BLOCK] (columns n_start ..): the `pack_key` of its best column."""
    return pack_key(tl.max(y, axis=1), n_start + tl.argmax(y, axis=1))


@triton.jit
def publish_argmax(key, offs_t, t_mask, key_ptr, count_ptr, argmax_ptr, tokens_ptr, pos_ptr,
                   T, CHAIN: tl.constexpr, ON_GPU: tl.constexpr, RING: tl.constexpr = 0):  # fmt: skip
    """Global argmax over all CTAs of the launch from each CTA's `argmax_key`s [T]: one
    atomic max each (none for a CTA without a candidate, key `MIN_KEY`); the last CTA
    decodes the keys into argmax [T], resets them and the counter for the next launch, and
    with CHAIN feeds the tokens to the next step itself (tokens = argmax, pos += T):
    consecutive graph replays need no host op. With RING > 0 (CHAIN) argmax is a ring of
    RING tokens, the one of position p at [p % RING]: in pinned host memory, mapped, the
    host reads each token there with no copy between replays. Returns whether this CTA was
    the last."""
    if CHAIN:  # read ahead of the ticket: only the last CTA writes pos, after every ticket
        p = tl.load(pos_ptr)
    tl.atomic_max(key_ptr + offs_t, key, mask=t_mask & (key > MIN_KEY), sem="relaxed", scope="gpu")
    last = ticket(count_ptr, ON_GPU) == tl.num_programs(0) - 1
    if last:
        # Read with an atomic that changes nothing (threads holding the same element read
        # the same value), reset after a barrier.
        final = tl.atomic_max(key_ptr + offs_t, MIN_KEY, mask=t_mask, sem="acq_rel")
        tl.debug_barrier()
        tl.store(key_ptr + offs_t, MIN_KEY, mask=t_mask)
        low = final - ((final >> 32) << 32)
        token = 0x7FFFFFFF - low
        at = offs_t
        if CHAIN:  # noqa: SIM102 (constexpr branches, one per compile-time flag: p exists with CHAIN)
            if RING > 0:
                at = (p + offs_t) % RING
        tl.store(argmax_ptr + at, token, mask=t_mask)
        if CHAIN:
            tl.store(tokens_ptr + offs_t, token, mask=t_mask)
            tl.store(pos_ptr, p + T)
        tl.store(count_ptr, 0)
    return last
