"""Does the weights' layout cap the decode GEMVs' streaming rate? A probe for the GPU.

The shipped T = 1 GEMVs read row-major weights: each CTA's tile is BLOCK_N rows, BLOCK_K
columns at a time, so one tile touches BLOCK_N rows 4-16 KiB apart. Isolated, they stream at
~3.45 TB/s (gate/up) against the 4.2 TB/s copy rate. This probe times, for the two big
matrices of the Llama-3.2-1B shape (gate/up [16384, 2048], down [2048, 8192]):

* the shipped kernels (`gate_up_silu`, `gemv(..., "down", residual=)`), for reference;
* a minimal GEMV over the same row-major weights;
* the same GEMV over a tile-blocked copy ([tiles, K / BLOCK_K, BLOCK_N, BLOCK_K]): every
  tile one contiguous chunk, every CTA's slice one contiguous span.

Each variant runs once per layer's weights (16 copies, so L2 never holds them) in a CUDA
graph. Writes $OUT/layout_probe.json and prints TB/s.
    python3 scripts/gpu_layout_probe.py --out $OUT
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from kernel_fixture import bandwidth, graph_ms  # noqa: E402

LAYERS = 16


@triton.jit
def _probe_gemv(
    x_ptr, w_ptr, out_ptr, K,
    BLOCKED: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, STAGES: tl.constexpr,
):  # fmt: skip
    """out[n] = sum_k x[k] * w[n, k] for the CTA's BLOCK_N rows; w row-major [N, K], or
    BLOCKED: [N / BLOCK_N, K / BLOCK_K, BLOCK_N, BLOCK_K]."""
    pid = tl.program_id(0)
    r = tl.arange(0, BLOCK_N)
    c = tl.arange(0, BLOCK_K)
    n_kb = K // BLOCK_K
    acc = tl.zeros((BLOCK_N, BLOCK_K), tl.float32)
    for kb in tl.range(0, n_kb, num_stages=STAGES):
        if BLOCKED:
            off = ((pid * n_kb + kb).to(tl.int64) * BLOCK_N + r[:, None]) * BLOCK_K + c[None, :]
        else:
            off = (pid * BLOCK_N + r[:, None]).to(tl.int64) * K + kb * BLOCK_K + c[None, :]
        w = tl.load(w_ptr + off, eviction_policy="evict_first")
        x = tl.load(x_ptr + kb * BLOCK_K + c, eviction_policy="evict_last").to(tl.float32)
        acc += w.to(tl.float32) * x[None, :]
    tl.store(out_ptr + pid * BLOCK_N + r, tl.sum(acc, axis=1).to(out_ptr.dtype.element_ty))


def blocked(w: torch.Tensor, bn: int, bk: int) -> torch.Tensor:
    n, k = w.shape
    return w.view(n // bn, bn, k // bk, bk).permute(0, 2, 1, 3).contiguous()


def probe(name: str, n: int, k: int) -> list[dict]:
    """Every variant on one matrix shape [n, k]."""
    from ling_local.engines import triton_kernels as tk

    dev = torch.device("cuda")
    bf16 = torch.bfloat16
    ws = [torch.randn(n, k, device=dev).mul_(0.02).to(bf16) for _ in range(LAYERS)]
    x = torch.randn(1, k, device=dev).to(bf16)
    out = torch.empty(n, device=dev, dtype=bf16)
    res = torch.zeros(1, n, device=dev, dtype=bf16)
    rows = []

    def record(kernel: str, fn, **cfg) -> None:
        try:
            ms = graph_ms(fn)
            row = {"us": round(ms / LAYERS * 1e3, 2)}
            row["tb_s"] = round(n * k * 2 / (ms / LAYERS * 1e-3) / 1e12, 3)
        except Exception as err:  # a config the GPU refuses
            row = {"failed": f"{type(err).__name__}: {str(err)[:120]}"}
        row = {"matrix": name, "kernel": kernel, **cfg, **row}
        print(row, flush=True)
        rows.append(row)

    if name == "gate_up":
        record("shipped", lambda: [tk.gate_up_silu(x, w, 1e-5) for w in ws])
    else:
        record("shipped", lambda: [tk.gemv(x, w, "down", residual=res) for w in ws])

    def launches(mats: list, lay: str, bn: int, bk: int, warps: int):
        def run() -> None:
            for w in mats:
                _probe_gemv[(n // bn,)](
                    x, w, out, k, BLOCKED=lay == "blocked", BLOCK_N=bn, BLOCK_K=bk,
                    STAGES=3, num_warps=warps,
                )  # fmt: skip

        return run

    for bn in (8, 16, 32):
        for bk in (128, 256):
            wb = [blocked(w, bn, bk) for w in ws]
            for warps in (4, 8):
                for lay, mats in (("row-major", ws), ("blocked", wb)):
                    record(lay, launches(mats, lay, bn, bk, warps), bn=bn, bk=bk, warps=warps)
            del wb
    # the blocked copy computes the same sums
    want = (x.float() @ ws[0].float().T).view(-1)
    _probe_gemv[(n // 16,)](x, blocked(ws[0], 16, 128), out, k, BLOCKED=True, BLOCK_N=16,
                            BLOCK_K=128, STAGES=3, num_warps=4)  # fmt: skip
    err = ((out.float() - want).abs().max() / want.abs().max()).item()
    rows.append({"matrix": name, "blocked_rel_err": err})
    return rows


def main() -> int:
    cli = argparse.ArgumentParser()
    cli.add_argument("--out", type=Path, default=Path("/tmp"))
    args = cli.parse_args()
    result: dict = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "device": torch.cuda.get_device_name(),
        "bandwidth": bandwidth(),
        "runs": [],
    }
    shapes = {"gate_up": (16384, 2048), "down": (2048, 8192)}
    for name, (n, k) in shapes.items():
        result["runs"] += probe(name, n, k)
        torch.cuda.empty_cache()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "layout_probe.json").write_text(json.dumps(result, indent=1))
    for name in shapes:
        best: dict = {}
        for row in result["runs"]:
            kind = row.get("kernel")
            ok = row["matrix"] == name and "tb_s" in row
            if ok and (kind not in best or row["tb_s"] > best[kind]["tb_s"]):
                best[kind] = row
        print(name, {k: (v["us"], v["tb_s"]) for k, v in best.items()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
