"""The whole-step tune of `gpu_kernel_sweep.py --tune-step`: coordinate descent on the
replay time of the captured decode step over a space of (kernel, field, values), for what a
kernel timed alone cannot show: how kernels overlap (the L2 prefetch of the next kernel's
weights while this one runs, the successor's launch point, register and shared-memory
footprints that let CTAs of two kernels share an SM). Beside the sweep script."""

from __future__ import annotations

import statistics
from dataclasses import asdict

import torch
from kernel_fixture import MAX_LEN, Fixture, on_cpu

__all__ = ["SPACES", "step_ms", "tune_step"]


def step_ms(fx: Fixture, t: int, kernels: str, reps: int = 60) -> float:
    """Median time of one replay of the captured T-token step (5 batches of reps / 5);
    kernels "triton-screen": the Triton step with the greedy head's int8 screen."""
    from ling_local.engines.embedded.cuda_graphs import GraphStep

    if on_cpu():
        reps = 5
    start = len(fx.prompt)
    screen = kernels == "triton-screen"
    step = GraphStep(fx.w, fx.slot, t, MAX_LEN, kernels="triton" if screen else kernels,
                     screen=screen)  # fmt: skip
    step.load(fx.prompt[-t:], start)
    for _ in range(3):
        step.replay()
    if on_cpu():
        fx.slot.graphs.clear()
        return 0.0
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(5):
        step.load(fx.prompt[-t:], start)
        a.record()
        for _ in range(reps // 5):
            step.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / (reps // 5))
    fx.slot.graphs.clear()
    return round(statistics.median(times), 4)


# From the shipped configs, in this order, each value kept if the step gets faster.
STEP_SPACE: list[tuple[str, str, list]] = [
    ("attn", "block_l", [16]),
    ("attn", "num_warps", [8]),
    ("attn", "l2_prefetch", [False, True]),
    ("o", "l2_prefetch", [0.5, 1.0]),
    ("qkv", "l2_prefetch", [0.5, 1.0]),
    ("gate_up", "l2_prefetch", [0.125, 0.25, 0.5]),
    ("down", "l2_prefetch", [0.125, 0.25, 0.5]),
    ("lm_head", "l2_prefetch", [0.0625, 0.125]),
    ("settings", "early_trigger", [True]),
    ("o", "l2_prefetch", [0.5, 1.0]),
    ("qkv", "l2_prefetch", [0.5, 1.0]),
    ("gate_up", "l2_prefetch", [0.0, 0.125, 0.25, 0.5]),
    ("down", "l2_prefetch", [0.0, 0.125, 0.25, 0.5]),
    ("attn", "splits", [16]),
    ("o", "block_n", [8]),
    ("qkv", "block_n", [8]),
    ("down", "block_n", [8]),
]


# From a TMA sweep's best: which kernels keep TMA inside the PDL-overlapped step (each
# swapped back to its shipped config).
TMA_SPACE: list[tuple[str, str, list]] = [
    ("lm_head", "config", ["shipped"]),
    ("qkv", "config", ["shipped"]),
    ("o", "config", ["shipped"]),
    ("gate_up", "config", ["shipped"]),
    ("attn", "block_l", [32]),
    ("gate_up", "l2_prefetch", [0.0, 0.125]),
    ("o", "l2_prefetch", [0.0, 1.0]),
    ("settings", "pdl", [False]),
]


# After a kernel change, around the shipped configs: the L2 fractions that depend on the
# kernels' latency, and the head's register-load config against its TMA one.
CHECK_SPACE: list[tuple[str, str, list]] = [
    ("qkv", "l2_prefetch", [0.0, 1.0]),
    ("o", "l2_prefetch", [0.5]),
    ("down", "l2_prefetch", [0.0, 0.5]),
    (
        "lm_head",
        "config",
        [dict(block_n=16, block_k=128, prefetch=False, num_stages=1, l2_prefetch=0.0625)],
    ),
]
# The persistent layers kernel (`triton_persistent`): its tiles, pipeline depths, attention
# splits and L2 fractions (the sweep's step times compare it with the per-layer kernels).
PERSISTENT_SPACE: list[tuple[str, str, list]] = [
    ("persistent", "gu_stages", [3, 6]),
    ("persistent", "gu_n", [16, 64]),
    ("persistent", "gu_k", [64, 256]),
    ("persistent", "dn_stages", [4, 8]),
    ("persistent", "dn_k", [128]),
    ("persistent", "dn_n", [8]),
    ("persistent", "o_stages", [6]),
    ("persistent", "o_n", [8]),
    ("persistent", "qkv_stages", [4, 8]),
    ("persistent", "qkv_k", [128]),
    ("persistent", "splits", [8, 32]),
    ("persistent", "block_l", [16]),
    ("persistent", "l2_gate_up", [0.0, 0.5]),
    ("persistent", "l2_down", [0.0, 0.5]),
    ("persistent", "l2_qkv", [0.0]),
    ("persistent", "l2_o", [0.0]),
    ("persistent", "num_warps", [4]),
]
# The fused attention + O projection (`_attn_o_kernel`): its options and the prefetch
# fractions of the kernels around it, then the unfused kernels against it.
FUSE_SPACE: list[tuple[str, str, list]] = [
    ("attn", "block_l", [16]),
    ("attn", "l2_prefetch", [False, True]),
    ("gate_up", "l2_prefetch", [0.125, 0.25]),
    ("qkv", "l2_prefetch", [0.0, 1.0]),
    ("down", "l2_prefetch", [0.0, 0.25]),
    ("settings", "early_trigger", [True]),
    ("attn", "fuse_o", [False]),
]
# Plain loops pipelined by Triton (cp.async ring, `num_stages`) against the register
# double-buffering: a minimal GEMV streamed gate/up's matrix at 3.73 TB/s that way
# (docs/bench/layout_probe_h200_run1.json) against the shipped kernel's 3.45.
GEMV_SPACE: list[tuple[str, str, list]] = [
    (
        "gate_up",
        "config",
        [
            dict(block_n=16, block_k=128, num_warps=8, prefetch=False, num_stages=3),
            dict(block_n=16, block_k=128, num_warps=8, prefetch=False, num_stages=4),
            dict(block_n=8, block_k=256, num_warps=4, prefetch=False, num_stages=3),
            dict(block_n=16, block_k=256, num_warps=8, prefetch=False, num_stages=3),
        ],
    ),
    (
        "down",
        "config",
        [
            dict(block_n=4, block_k=1024, num_warps=8, prefetch=False, num_stages=3),
            dict(block_n=4, block_k=512, num_warps=4, prefetch=False, num_stages=3),
            dict(block_n=8, block_k=512, num_warps=8, prefetch=False, num_stages=3),
        ],
    ),
    ("o", "config", [dict(block_n=4, block_k=1024, prefetch=False, num_stages=3)]),
    ("settings", "early_trigger", [True]),
]
# More of each CTA's weight slice in registers before the PDL wait (up to all of it), so
# the kernel's critical path after the wait is its x load, the sums and the epilogue.
PRELOAD_SPACE: list[tuple[str, str, list]] = [
    (
        "o",
        "config",
        [dict(block_n=4, block_k=2048, num_warps=8), dict(block_n=8, block_k=2048, num_warps=8)],
    ),
    (
        "qkv",
        "config",
        [
            dict(block_n=4, block_k=2048, num_warps=8),
            dict(block_n=4, block_k=1024, num_warps=4, l2_prefetch=0.5),
        ],
    ),
    ("down", "config", [dict(block_n=4, block_k=2048, num_warps=8)]),
    ("settings", "early_trigger", [True]),
]
# The greedy head's int8 screen (`triton_screen`), timed in the screened step: its tiles.
SCREEN_SPACE: list[tuple[str, str, list]] = [
    (
        "lm_screen",
        "config",
        [
            dict(block_n=32, block_k=256, num_warps=4, tma=True),
            dict(block_n=16, block_k=256, num_warps=4, tma=True),
            dict(block_n=64, block_k=256, num_warps=4, tma=True),
            dict(block_n=32, block_k=256, num_warps=8, tma=True),
            dict(block_n=32, block_k=128, num_warps=2, tma=True),
            dict(block_n=32, block_k=256, num_warps=4, num_stages=4, tma=True),
            dict(block_n=8, block_k=1024, num_warps=4),
            dict(block_n=16, block_k=512, num_warps=4),
        ],
    ),
    ("lm_screen", "num_stages", [4, 6]),
    (
        "lm_screen",
        "config",
        [
            dict(block_n=16, block_k=256, num_warps=2, num_stages=4, tma=True),
            dict(block_n=64, block_k=128, num_warps=4, tma=True),
            dict(block_n=64, block_k=128, num_warps=4, num_stages=5, tma=True),
        ],
    ),
    ("lm_screen", "l2_prefetch", [0.0625]),
]
# After the attention moved to the tensor cores at T = 1 (`AttnConfig.tensor_cores`): its
# splits, tiles and warps (the layer chain's probe, docs/bench/attn_ablation_h200_run3.json,
# found them within 0.5 us a layer), the CUDA cores against it, and the L2 fractions of the
# kernels around it, whose latency it changed. Timed with the greedy head's screen, as
# shipped.
ATTN_SPACE: list[tuple[str, str, list]] = [
    ("attn", "splits", [24, 48]),
    ("attn", "num_warps", [2]),
    ("attn", "block_l", [16, 64]),
    ("attn", "l2_prefetch", [False, True]),
    ("qkv", "l2_prefetch", [0.25, 1.0]),
    ("o", "l2_prefetch", [0.5]),
    ("attn", "tensor_cores", [False]),
]

# Weights kept in the L2 from one step to the next (`GemvConfig.l2_keep`, evict_last loads
# for the first CTAs of every layer's launch), in the greedy graph: the fractions are of
# each kind's bytes over the 16 layers of the 1B shape (gate/up 1072 MB, down 537, QKV 201,
# O 134), against a 50 MB L2 that the head's and QKV's bulk prefetches also use.
KEEP_SPACE: list[tuple[str, str, list]] = [
    ("qkv", "l2_keep", [0.0, 0.03125, 0.125]),
    ("down", "l2_keep", [0.0, 0.01, 0.04]),
    ("gate_up", "l2_keep", [0.01, 0.02]),
    ("o", "l2_keep", [0.125]),
    ("qkv", "l2_keep", [0.0, 0.0625]),
    ("down", "l2_keep", [0.0, 0.02]),
]

SPACES = {
    "keep": KEEP_SPACE,
    "attn": ATTN_SPACE,
    "screen": SCREEN_SPACE,
    "step": STEP_SPACE,
    "preload": PRELOAD_SPACE,
    "gemv": GEMV_SPACE,
    "fuse": FUSE_SPACE,
    "tma": TMA_SPACE,
    "check": CHECK_SPACE,
    "persistent": PERSISTENT_SPACE,
}


def _get(name: str, field: str):
    from ling_local.engines.embedded.triton import kernels as tk

    if field == "config":
        return tk.CONFIGS[name]
    if name == "settings":
        return getattr(tk.SETTINGS, field)
    if name == "persistent":
        return getattr(tk.PERSISTENT, field)
    table = tk.ATTN if name == "attn" else tk.CONFIGS
    return getattr(table[name], field)


def _set(name: str, field: str, value) -> None:
    from ling_local.engines.embedded.triton import kernels as tk

    if field == "config":  # "shipped", a dict of GemvConfig fields, or a GemvConfig
        if value == "shipped":
            value = tk.SHIPPED[name]
        tk.CONFIGS[name] = value if isinstance(value, tk.GemvConfig) else tk.GemvConfig(**value)
    elif name == "settings":
        setattr(tk.SETTINGS, field, value)
    else:
        tk.set_config(name, **{field: value})


def tune_step(fx: Fixture, space=STEP_SPACE, reps: int = 200, kernels: str = "triton") -> dict:
    """Coordinate descent on the T = 1 step's time over `space` (`step_ms` of `kernels`);
    a value is kept when the step is at least 0.2 % faster. Returns the trail and the
    final configs."""
    from ling_local.engines.embedded.triton import kernels as tk

    best = step_ms(fx, 1, kernels, reps)
    trail = [{"start": best}]
    print(f"  tune start {best} ms", flush=True)
    for name, field, values in space:
        keep = _get(name, field)
        for value in values:
            if value == keep:
                continue
            _set(name, field, value)
            try:
                ms = step_ms(fx, 1, kernels, reps)
            except Exception as err:
                ms = f"failed: {type(err).__name__}: {str(err)[:200]}"
            trail.append({"kernel": name, field: value, "ms": ms})
            print(f"  tune {name}.{field}={value}: {ms} (best {best})", flush=True)
            if isinstance(ms, float) and ms < best * 0.998:
                best, keep = ms, value
            _set(name, field, keep)
    final = {n: asdict(c) for n, c in tk.CONFIGS.items()}
    final.update({n: asdict(c) for n, c in tk.ATTN.items()})
    final.update(pdl=tk.SETTINGS.pdl, early_trigger=tk.SETTINGS.early_trigger)
    final["persistent"] = asdict(tk.PERSISTENT)
    return {"best_ms": best, "trail": trail, "configs": final}
