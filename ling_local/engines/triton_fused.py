"""The launcher of the fused attention + O projection (`AttnConfig.fuse_o`, off by default):
`_attn_o_kernel` in one launch on a GPU (two in the CPU interpreter), its barrier counters,
and the residency check its barrier needs. The kernels after it take its fp32 sums
(`triton_kernels.gate_up_silu` / `gemv` with `oacc`). Measured on the H200 no faster than
the attention and O kernels, which PDL already overlaps (docs/bench/fuse_ab_h200_run1.json)."""

from __future__ import annotations

import math

import torch

from ling_local.engines.triton_attn import _attn_o_kernel
from ling_local.engines.triton_launch import Scratch, _launch, _on_gpu, _overlaps, _pow2
from ling_local.engines.triton_setup import ATTN, AttnConfig

__all__ = ["attention_o", "attention_o_counters"]


def attention_o(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    pos: torch.Tensor,
    wo: torch.Tensor,
    oacc: torch.Tensor,
    n_heads: int,
    n_kv: int,
    head_dim: int,
    scratch: Scratch,
    cfg: AttnConfig | None = None,
) -> None:
    """The attention of one token's q [1, n_heads * head_dim] over the cache and its O
    projection, added into oacc [1, H] (fp32, zero before): `_attn_o_kernel`, one launch on
    a GPU (two in the CPU interpreter). The kernels after it take oacc (`gate_up_silu`,
    `gemv` of the down projection, which zeroes it)."""
    cfg = cfg or ATTN["attn"]
    if q.shape[0] != 1:
        raise ValueError("attention_o takes one token (T = 1)")
    group = n_heads // n_kv
    splits = cfg.splits
    h = wo.shape[0]
    f32 = torch.float32
    m = scratch.get("attn_m1", (n_heads, splits), f32)
    l_sum = scratch.get("attn_l1", (n_heads, splits), f32)
    acc = scratch.get("attn_acc1", (n_heads, splits, head_dim), f32)
    count = attention_o_counters(scratch, n_kv)
    err = scratch.get("attn_o_err", (1,), torch.int32, fill=0)
    launch = _launch(q)
    on_gpu = _on_gpu(q)
    consts = dict(
        N_HEADS=n_heads, N_KV=n_kv, GROUP=group, HEAD_DIM=head_dim, SPLITS=splits,
        BLOCK_R=_pow2(group), BLOCK_L=cfg.block_l, BLOCK_S=_pow2(splits),
        BLOCK_O=_pow2(-(-h // splits)), L2=cfg.l2_prefetch and _overlaps(launch, q), ON_GPU=on_gpu, num_warps=cfg.num_warps,
        **launch,
    )  # fmt: skip
    args = (
        q, k_cache, v_cache, pos, m, l_sum, acc, count, err, wo, oacc, k_cache.shape[1], h,
        1.0 / math.sqrt(head_dim),
    )  # fmt: skip
    checked = "attn_o_checked" in scratch.buffers
    for phase in (0,) if on_gpu else (1, 2):
        kernel = _attn_o_kernel[(n_kv, splits)](*args, PHASE=phase, **consts)
    if on_gpu and not checked and not torch.cuda.is_current_stream_capturing():
        # Once (a first eager call): the split barrier needs every CTA of the launch
        # resident at once, and a barrier that timed out set the flag.
        resident = _resident_ctas(kernel, q.device)
        if n_kv * splits > resident:  # (the launch gives up at its barrier's spin limit)
            raise RuntimeError(
                f"attn splits {splits}: {n_kv * splits} CTAs of the fused attention exceed "
                f"the {resident} this GPU holds at once at {kernel.n_regs} registers a thread"
            )
        torch.cuda.synchronize(q.device)
        if int(err.item()):
            raise RuntimeError("the fused attention's split barrier timed out")
        scratch.buffers["attn_o_checked"] = err


def attention_o_counters(scratch: Scratch, n_kv: int) -> torch.Tensor:
    """`attention_o`'s barrier counters, kv head g's at [32 * g] (a 128-byte line each);
    zeroed by the down projection after it (`gemv(..., counters=)`)."""
    return scratch.get("attn_o_count", (_pow2(n_kv) * 32,), torch.int32, fill=0)


def _resident_ctas(kernel, device: torch.device) -> int:
    """How many CTAs of a compiled Triton kernel the GPU holds at once (registers,
    threads, shared memory and the CTA limit per SM, times the SMs)."""
    props = torch.cuda.get_device_properties(device)
    warps = kernel.metadata.num_warps
    regs = -(-kernel.n_regs * 32 // 256) * 256 * warps  # allocated per warp in 256s
    smem = props.shared_memory_per_multiprocessor
    per_sm = min(
        getattr(props, "regs_per_multiprocessor", 65536) // max(regs, 1),
        props.max_threads_per_multi_processor // (32 * warps),
        32,
        smem // max(kernel.metadata.shared, 1),
    )
    return per_sm * props.multi_processor_count
