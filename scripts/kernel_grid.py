"""The block-size variants `gpu_kernel_sweep.py` times: a full grid per Triton kernel, or a
focused one around a previous sweep's best. Plain data, no GPU needed."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

__all__ = ["focused", "grid"]


def _fits(per_thread: float) -> bool:
    return 4 <= per_thread <= 64


def grid(quick: bool, half_head: int = 32) -> dict[str, list[dict]]:
    """Variants per kernel; accumulator elements per thread kept in [4, 64] (no spills).
    "verify:<name>" are the T = 9 (tensor-core) tiles of the same kernel. The output head's
    include its TMA tiles (what ships); the other GEMVs load their tiles into registers (TMA
    there was faster alone and slower in the step: docs/performance.md)."""
    out: dict[str, list[dict]] = {}
    paired = []
    for bn, bk, w in itertools.product((4, 8, 16, 32), (128, 256, 512, 1024, 2048), (2, 4, 8)):
        if _fits(2 * bn * bk / (32 * w)):
            paired.append(dict(block_n=bn, block_k=bk, num_warps=w))
    out["qkv"] = [c for c in paired if half_head % c["block_n"] == 0]
    out["gate_up"] = [c for c in paired if c["block_k"] <= 1024]
    o, down = [], []
    for bn, bk, w in itertools.product((1, 2, 4, 8, 16), (256, 512, 1024, 2048), (2, 4, 8)):
        if not _fits(bn * bk / (32 * w)):
            continue
        o.append(dict(block_n=bn, block_k=bk, num_warps=w))
        if bk > 256 and bn < 16:
            down.append(dict(block_n=bn, block_k=bk, num_warps=w))
    out["o"], out["down"] = o, down
    head = []
    for bn, bk, w in itertools.product((4, 8, 16, 32, 64), (128, 256, 512, 1024, 2048), (4, 8)):
        if _fits(bn * bk / (32 * w)):
            head.append(dict(block_n=bn, block_k=bk, num_warps=w))
    # the head's shipped form: weight tiles through TMA descriptors (a box of at most 256 per
    # side; `num_stages` shared-memory buffers, at most ~200 KB a CTA)
    for bn, bk, w, st in itertools.product((8, 16, 32, 64), (64, 128, 256), (2, 4, 8), (3, 5)):
        if _fits(bn * bk / (32 * w)) and st * bn * bk * 2 <= 200_000:
            head.append(dict(block_n=bn, block_k=bk, num_warps=w, num_stages=st, tma=True))
    out["lm_head"] = head
    attn = []
    for s, bl, w in itertools.product((8, 16, 32), (16, 32, 64), (2, 4)):
        if 4 * bl * 64 / (32 * w) <= 128:
            attn.append(dict(splits=s, block_l=bl, num_warps=w))
    out["attn"] = attn
    for name in ("qkv", "gate_up", "o", "down", "lm_head"):
        variants = []
        for bn, bk, w in itertools.product((16, 32, 64), (64, 128, 256), (4, 8)):
            if bn * bk <= 8192 and (name != "qkv" or half_head % bn == 0):
                variants.append(dict(block_n=bn, block_k=bk, num_warps=w))
        out[f"verify:{name}"] = variants
    if quick:
        out = {k: v[:: max(1, len(v) // 4)] for k, v in out.items()}
    return out


def _current(cfg: dict) -> dict | None:
    """A config of an older sweep in today's fields: None for a variant since deleted
    (split-K, the attention's two-launch reduce at T = 1), its fields then dropped."""
    if cfg.get("split_k", 1) != 1 or cfg.get("fused_reduce", True) is not True:
        return None
    return {k: v for k, v in cfg.items() if k not in ("split_k", "fused_reduce")}


def focused(previous: Path) -> dict[str, list[dict]]:
    """The previous sweep's best six per kernel (double-buffered), and the plain-loop form
    of the best three (prefetch off) at 1 and 3 pipeline stages, and for the verify tiles
    the plain loop at 2 to 4 (the tensor-core path, where Triton pipelines through shared
    memory)."""
    data = json.loads(previous.read_text())["sweep"]
    out: dict[str, list[dict]] = {}
    for name, result in data.items():
        top = [c for r in result["top"] if (c := _current(r["cfg"])) is not None][:6]
        variants = [dict(c) for c in top]
        stages = (2, 3, 4) if name.startswith("verify:") else (1, 3)
        if name != "attn":
            for c in top[:3]:
                variants += [dict(c, prefetch=False, num_stages=n) for n in stages]
        out[name] = variants
    return out
