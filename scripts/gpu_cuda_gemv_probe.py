"""Does a hand-written CUDA GEMV stream the decode step's weights closer to the floor than
the Triton kernels? A probe for #10's last lead, on the lent H200 (its image has nvcc and
ninja): python3 scripts/gpu_cuda_gemv_probe.py --out DIR.

It builds the batch-1 bf16 CUDA GEMV of `cuda_gemv.py` (PDL launches, so kernels overlap
as the Triton ones do) and times, in CUDA graphs on the Llama-3.2-1B-shaped random model of
`bench engine` (`kernel_fixture.Fixture`):

1. each GEMV alone (16 launches over the 16 layers' weights), for a grid of (R, warps, U),
   against the Triton kernel of the same stage;
2. the layer chain QKV -> O -> gate/up -> down over 16 layers with the best of each, CUDA
   against Triton (the Triton chain is the step's own kernels: RoPE and the KV write in
   QKV's epilogue, which the CUDA QKV lacks), each with and without the Triton attention
   between QKV and O;
3. where the attention's share of a layer goes (`--attn`): the Triton chain with the
   attention as shipped, with its partials only (no combine), with a kernel that only waits
   and stores (the launch and the boundary), with none, and with other split / tile / warp
   settings.

The numbers say how much of the ~48 us a layer (against ~30 of weight reads) a CUDA GEMV
would take back; it is a measurement, not a kernel the engine uses."""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import replace
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cuda_gemv import VARIANTS, build, key
from kernel_fixture import Fixture, bandwidth, device, graph_ms, on_cpu

from ling_local.engines.triton_common import _pdl_start, _pdl_wait


@triton.jit
def _noop_kernel(out_ptr, USE_PDL: tl.constexpr):
    """Wait for the previous kernel, store one zero: a launch and a boundary."""
    _pdl_start(USE_PDL)
    _pdl_wait(USE_PDL)
    off = (tl.program_id(0) * tl.num_programs(1) + tl.program_id(1)) * 64
    tl.store(out_ptr + off + tl.arange(0, 1), tl.zeros((1,), tl.float32))


def triton_chain(fx: Fixture, x: torch.Tensor, scratch, attention=None):
    """The step's Triton kernels over the 16 layers, x [1, H] the residual stream: QKV (RoPE,
    the KV write), `attention(q, layer)` (None: no attention, O reads q), O and down with
    the residual, gate/up."""
    from ling_local.engines import triton_kernels as tk

    w = fx.w
    nh, nkv, hd, eps = w.n_heads, w.n_kv_heads, w.head_dim, w.eps

    def run() -> None:
        for i, layer in enumerate(w.layers):
            q = tk.qkv_rope_kv(x, layer.wqkv, None, fx.slot.k[i], fx.slot.v[i], w.cos, w.sin,
                               fx.pos, nh, nkv, hd, eps)  # fmt: skip
            src = q if attention is None else attention(q, i)
            tk.gemv(src, layer.wo, "o", residual=x, scratch=scratch)
            act = tk.gate_up_silu(x, layer.w13, eps)
            tk.gemv(act, layer.w2, "down", residual=x, scratch=scratch)

    return run


def shipped_attention(fx: Fixture, scratch, cfg=None):
    """`attention(q, layer)` for `triton_chain`: the step's `decode_attention` (`cfg`: the
    shipped config if None)."""
    from ling_local.engines import triton_kernels as tk

    w = fx.w

    def attention(q: torch.Tensor, i: int) -> torch.Tensor:
        return tk.decode_attention(q, fx.slot.k[i], fx.slot.v[i], fx.pos, w.n_heads,
                                   w.n_kv_heads, w.head_dim, scratch, cfg)  # fmt: skip

    return attention


def attention_ablation(fx: Fixture) -> dict:
    """The Triton layer chain (QKV, attention, O, gate/up, down; 16 layers in a graph) with
    the attention as shipped and taken apart: us a layer for each."""
    from ling_local.engines import triton_kernels as tk
    from ling_local.engines.triton_attn import _attn_partial_kernel
    from ling_local.engines.triton_launch import _launch, _pow2

    w = fx.w
    dev = torch.device(device())
    s = tk.Scratch(dev, w.lm_head.shape[0])
    nh, nkv, hd = w.n_heads, w.n_kv_heads, w.head_dim
    ks, vs = fx.slot.k, fx.slot.v
    xb = fx.x[:1].clone()
    cfg0 = tk.ATTN["attn"]
    sink = torch.zeros(nkv * 64 * 64, device=dev)
    m = torch.empty(nh, 64, device=dev)
    lsum = torch.empty(nh, 64, device=dev)
    acc = torch.empty(nh, 64, hd, device=dev)
    count = torch.zeros(nkv, device=dev, dtype=torch.int32)

    def partial_only(q, i):
        """The shipped partial (its rows as `decode_attention` picks them), no combine."""
        out = torch.empty_like(q)
        dot = cfg0.tensor_cores
        _attn_partial_kernel[(nkv, cfg0.splits)](
            q, ks[i], vs[i], fx.pos, m, lsum, acc, count, out, 1, ks[i].shape[1],
            1.0 / math.sqrt(hd), N_HEADS=nh, GROUP=nh // nkv, HEAD_DIM=hd, SPLITS=cfg0.splits,
            BLOCK_R=16 if dot else _pow2(nh // nkv), BLOCK_L=cfg0.block_l,
            BLOCK_S=_pow2(cfg0.splits), FUSED_REDUCE=False, USE_DOT=dot, L2=False,
            ON_GPU=not on_cpu(), num_warps=cfg0.num_warps, **_launch(q),
        )  # fmt: skip
        return out

    def noop(grid):
        def attention(q, i):
            _noop_kernel[grid](sink, **_launch(q))
            return q

        return attention

    cuda_cores = replace(cfg0, tensor_cores=False)
    runs = [("full", shipped_attention(fx, s)),
            ("full cuda-cores", shipped_attention(fx, s, cuda_cores)),
            ("partial", partial_only), ("noop", noop((nkv, cfg0.splits))), ("noop1", noop((1, 1))),
            ("none", None)]  # fmt: skip
    for sp, bl, nw in [(24, 32, 4), (20, 32, 4), (16, 64, 4), (32, 16, 4), (32, 64, 4),
                       (32, 32, 2), (32, 32, 8), (64, 16, 4)]:  # fmt: skip
        cfg = replace(cfg0, splits=sp, block_l=bl, num_warps=nw)
        runs.append((f"full s{sp} l{bl} w{nw}", shipped_attention(fx, s, cfg)))
    runs += [("full", shipped_attention(fx, s)),
             ("full cuda-cores", shipped_attention(fx, s, cuda_cores)), ("none", None)]  # fmt: skip
    q0 = torch.randn(1, nh * hd, device=dev, dtype=torch.bfloat16)
    ref = tk.decode_attention(q0, ks[0], vs[0], fx.pos, nh, nkv, hd, s, cuda_cores).float()
    agree = {}
    for sp, bl in [(32, 32), (16, 64)]:
        got = tk.decode_attention(q0, ks[0], vs[0], fx.pos, nh, nkv, hd, s,
                                  replace(cfg0, splits=sp, block_l=bl)).float()  # fmt: skip
        agree[f"s{sp} l{bl}"] = ((got - ref).norm() / ref.norm()).item()
    print(f"  tensor cores against CUDA cores (rel. err.): {agree}", flush=True)
    res: dict = {"dot_rel_err": agree, "shipped": {"splits": cfg0.splits, "block_l": cfg0.block_l,
                             "num_warps": cfg0.num_warps}}  # fmt: skip
    for label, attention in runs:
        try:
            ms = graph_ms(triton_chain(fx, xb, s, attention), reps=50)
        except Exception as err:  # a variant that does not compile or fit
            res[label] = f"{type(err).__name__}: {str(err)[:160]}"
            print(f"  {label}: {res[label]}", flush=True)
            continue
        us = round(ms * 1e3 / len(w.layers), 2)
        res.setdefault(label, []).append(us)
        print(f"  chain attention {label:22} {us:.2f} us a layer", flush=True)
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=Path("/tmp/out"))
    ap.add_argument("--attn", action="store_true", help="only the attention's ablation (3.)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    result: dict = {"device": "cpu" if on_cpu() else torch.cuda.get_device_name(), **bandwidth()}
    fx = Fixture()
    if args.attn:
        result["attn"] = attention_ablation(fx)
        (args.out / "attn_ablation.json").write_text(json.dumps(result, indent=1))
        return 0
    mod = build()
    from ling_local.engines import triton_kernels as tk

    w = fx.w
    layers = w.layers
    h = layers[0].wo.shape[0]
    inter = layers[0].w2.shape[1]
    nqkv = layers[0].wqkv.shape[0]
    dev, bf = torch.device("cuda"), torch.bfloat16
    x = torch.randn(1, h, device=dev, dtype=bf)
    a = torch.randn(1, h, device=dev, dtype=bf)
    act = torch.randn(1, inter, device=dev, dtype=bf) * 0.1
    out_q = torch.empty(1, nqkv, device=dev, dtype=bf)
    out_h = torch.empty(1, h, device=dev, dtype=bf)
    out_i = torch.empty(1, inter, device=dev, dtype=bf)
    stage = {  # name: (mode, k, weight of layer i, x, res, out, n_out)
        "qkv": (0, h, lambda i: layers[i].wqkv, x, x, out_q, nqkv),
        "o": (1, h, lambda i: layers[i].wo, a, out_h, out_h, h),
        "gate_up": (2, h, lambda i: layers[i].w13, x, x, out_i, inter),
        "down": (1, inter, lambda i: layers[i].w2, act, out_h, out_h, h),
    }

    def cuda_op(name: str, variant: tuple, pdl: bool = True):
        mode, k, wf, xx, res, out, n = stage[name]
        kname = key(mode, k, variant)

        def run() -> None:
            for i in range(len(layers)):
                assert mod.run(kname, wf(i), xx, res, out, n, pdl)

        return run

    # correctness of every variant against fp32 torch on layer 0
    checks = {}
    for name, (mode, k, wf, xx, res, out, n) in stage.items():
        wt = wf(0).float()
        for v in VARIANTS:
            base = torch.randn_like(out) if mode == 1 else None
            if base is None:  # poisoned: every output must be written
                out.fill_(float("nan"))
            else:  # the residual, added in place
                out.copy_(base)
            mod.run(key(mode, k, v), wf(0), xx, res if mode != 1 else out, out, n, False)
            y = xx.float() @ wt.T
            if mode == 1:
                ref = base.float() + y.bfloat16().float()
            elif mode == 2:
                g, u = y[:, :n].bfloat16().float(), y[:, n:].bfloat16().float()
                ref = torch.nn.functional.silu(g) * u
            else:
                ref = y
            err = ((out.float() - ref).norm() / ref.norm()).item()
            checks[f"{name} {v}"] = err
    bad = {c: e for c, e in checks.items() if not (e < 1e-2)}
    result["check_max_rel_err"] = max(checks.values())
    result["check_bad"] = bad
    print(f"checks: max rel err {result['check_max_rel_err']:.2e}, bad {bad}", flush=True)

    nb = {
        "qkv": layers[0].wqkv.numel() * 2,
        "o": layers[0].wo.numel() * 2,
        "gate_up": layers[0].w13.numel() * 2,
        "down": layers[0].w2.numel() * 2,
    }
    alone: dict = {}
    best: dict = {}
    for name in stage:
        rows = []
        for v in VARIANTS:
            ms = graph_ms(cuda_op(name, v))
            us = ms * 1e3 / len(layers)
            rows.append({"variant": list(v), "us": round(us, 2),
                         "tb_s": round(nb[name] / (us * 1e-6) / 1e12, 3)})  # fmt: skip
        rows.sort(key=lambda r: r["us"])
        tri_ms = graph_ms(fx.op(name))
        tri_us = tri_ms * 1e3 / len(layers)
        alone[name] = {"cuda": rows, "triton_us": round(tri_us, 2),
                       "triton_tb_s": round(nb[name] / (tri_us * 1e-6) / 1e12, 3)}  # fmt: skip
        best[name] = tuple(rows[0]["variant"])
        print(f"  {name:8} CUDA best {rows[0]['us']} us {rows[0]['tb_s']} TB/s {best[name]}"
              f" | Triton {tri_us:.2f} us", flush=True)  # fmt: skip
    result["alone"] = alone

    s = tk.Scratch(dev, w.lm_head.shape[0])
    nh, nkv, hd = w.n_heads, w.n_kv_heads, w.head_dim
    ks, vs = fx.slot.k, fx.slot.v
    xb = fx.x[:1].clone()

    def cuda_chain(attn: bool, pdl: bool = True):
        kq, ko, kg, kd = (key(*stage[n][:2], best[n]) for n in ("qkv", "o", "gate_up", "down"))

        def run() -> None:
            for i, layer in enumerate(layers):
                mod.run(kq, layer.wqkv, xb, xb, out_q, nqkv, pdl)
                src = out_q
                if attn:
                    src = tk.decode_attention(out_q[:, :h], ks[i], vs[i], fx.pos, nh, nkv, hd, s)
                mod.run(ko, layer.wo, src, xb, xb, h, pdl)
                mod.run(kg, layer.w13, xb, xb, out_i, inter, pdl)
                mod.run(kd, layer.w2, out_i, xb, xb, h, pdl)

        return run

    def triton_run(attn: bool):
        return triton_chain(fx, xb, s, shipped_attention(fx, s) if attn else None)

    chains: dict = {}
    layer_bytes = sum(nb.values())
    for label, fn in [
        ("cuda", cuda_chain(False)),
        ("cuda_no_pdl", cuda_chain(False, pdl=False)),
        ("triton", triton_run(False)),
        ("cuda+attn", cuda_chain(True)),
        ("triton+attn", triton_run(True)),
        ("cuda_again", cuda_chain(False)),
        ("triton_again", triton_run(False)),
    ]:
        ms = graph_ms(fn, reps=50)
        us = ms * 1e3 / len(layers)
        chains[label] = {"us_per_layer": round(us, 2),
                         "tb_s": round(layer_bytes / (us * 1e-6) / 1e12, 3)}  # fmt: skip
        print(f"  chain {label:13} {us:.2f} us a layer ({chains[label]['tb_s']} TB/s)", flush=True)
    result["chains"] = chains
    result["floor_us_per_layer"] = round(layer_bytes / (result["copy_tb_s"] * 1e12) * 1e6, 2)
    (args.out / "cuda_gemv_probe.json").write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
