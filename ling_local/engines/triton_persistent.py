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

import math

import torch

from ling_local.engines.triton_launch import Scratch, _on_gpu, _pow2
from ling_local.engines.triton_persistent_jit import _layers_kernel
from ling_local.engines.triton_setup import PERSISTENT

__all__ = ["persistent_layers", "persistent_ready"]

_STAGES_PER_LAYER = 5
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
