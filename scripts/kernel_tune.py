"""The whole-step tune of `gpu_kernel_sweep.py --tune-step`: coordinate descent on the
replay time of the captured decode step over a space of (kernel, field, values), for what a
kernel timed alone cannot show: how kernels overlap (the L2 prefetch of the next kernel's
weights while this one runs, register and shared-memory footprints that let CTAs of two
kernels share an SM, weights kept in the L2 from step to step). Beside the sweep script."""

from __future__ import annotations

import statistics
from dataclasses import asdict

import torch
from kernel_fixture import MAX_LEN, Fixture

__all__ = ["SPACES", "apply_move", "current", "step_ms", "tune_step"]


def step_ms(fx: Fixture, t: int, kernels: str, reps: int = 60) -> float:
    """Median time of one replay of the captured T-token step (5 batches of reps / 5);
    kernels "triton-screen": the Triton step with the greedy head's int8 screen."""
    from ling_local.engines.embedded.cuda_graphs import GraphStep

    start = len(fx.prompt)
    screen = kernels == "triton-screen"
    step = GraphStep(fx.w, fx.slot, t, MAX_LEN, kernels="triton" if screen else kernels,
                     screen=screen)  # fmt: skip
    step.load(fx.prompt[-t:], start)
    for _ in range(3):
        step.replay()
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


# From the shipped configs, in this order, each value kept if the step gets faster: the
# attention's splits, tiles and warps, the paired GEMVs' L2 prefetch fractions (they depend
# on the latency of the kernel before), and row blocks that change which kernels' CTAs
# share an SM. Timed in the greedy graph, as shipped (the screened head).
STEP_SPACE: list[tuple[str, str, list]] = [
    ("attn", "splits", [24, 48]),
    ("attn", "num_warps", [2, 8]),
    ("attn", "block_l", [16, 64]),
    ("qkv", "l2_prefetch", [0.25, 1.0]),
    ("gate_up", "l2_prefetch", [0.125]),
    ("o", "block_n", [8]),
    ("qkv", "block_n", [8]),
    ("down", "block_n", [8]),
]

# Weights kept in the L2 from one step to the next (`GemvConfig.l2_keep`, evict_last loads
# for the first CTAs of every layer's launch): the fractions are of each kind's bytes over
# the 16 layers of the 1B shape (gate/up 1072 MB, down 537, QKV 201, O 134), against a
# 50 MB L2 that the head's and QKV's bulk prefetches also use.
KEEP_SPACE: list[tuple[str, str, list]] = [
    ("qkv", "l2_keep", [0.0, 0.03125, 0.125]),
    ("down", "l2_keep", [0.0, 0.01, 0.04]),
    ("gate_up", "l2_keep", [0.01, 0.02]),
    ("o", "l2_keep", [0.125]),
    ("qkv", "l2_keep", [0.0, 0.0625]),
    ("down", "l2_keep", [0.0, 0.02]),
]

# The greedy head's int8 screen (`screen.py`): its tiles, TMA or register loads.
SCREEN_SPACE: list[tuple[str, str, list]] = [
    (
        "lm_screen",
        "config",
        [
            dict(block_n=32, block_k=256, num_warps=4, tma=True),
            dict(block_n=16, block_k=256, num_warps=4, tma=True),
            dict(block_n=64, block_k=256, num_warps=4, tma=True),
            dict(block_n=32, block_k=256, num_warps=8, tma=True),
            dict(block_n=32, block_k=256, num_warps=4, num_stages=4, tma=True),
            dict(block_n=8, block_k=1024, num_warps=4),
            dict(block_n=16, block_k=512, num_warps=4),
        ],
    ),
    ("lm_screen", "num_stages", [3, 6]),
    (
        "lm_screen",
        "config",
        [
            dict(block_n=16, block_k=256, num_warps=2, num_stages=4, tma=True),
            dict(block_n=64, block_k=128, num_warps=4, tma=True),
            dict(block_n=64, block_k=128, num_warps=4, num_stages=5, tma=True),
        ],
    ),
]

# Three cheap moves, for the script's own test (a short GPU check).
SMOKE_SPACE: list[tuple[str, str, list]] = [
    ("attn", "block_l", [16]),
    ("qkv", "l2_prefetch", [1.0]),
    ("o", "block_n", [8]),
]

SPACES = {"step": STEP_SPACE, "keep": KEEP_SPACE, "screen": SCREEN_SPACE, "smoke": SMOKE_SPACE}


def current(name: str, field: str):
    from ling_local.engines.embedded.triton import setup

    if field == "config":
        return setup.CONFIGS[name]
    table = setup.ATTN if name == "attn" else setup.CONFIGS
    return getattr(table[name], field)


def apply_move(name: str, field: str, value) -> None:
    from ling_local.engines.embedded.triton import setup

    if field == "config":  # a dict of GemvConfig fields, or a GemvConfig
        setup.CONFIGS[name] = (
            value if isinstance(value, setup.GemvConfig) else setup.GemvConfig(**value)
        )
    else:
        setup.set_config(name, **{field: value})


def tune_step(
    fx: Fixture, space=STEP_SPACE, reps: int = 200, kernels: str = "triton-screen"
) -> dict:
    """Coordinate descent on the T = 1 step's time over `space` (`step_ms` of `kernels`);
    a value is kept when the step is at least 0.2 % faster. Returns the trail and the
    final configs."""
    from ling_local.engines.embedded.triton import setup

    best = step_ms(fx, 1, kernels, reps)
    trail = [{"start": best}]
    print(f"  tune start {best} ms", flush=True)
    for name, field, values in space:
        keep = current(name, field)
        for value in values:
            if value == keep:
                continue
            apply_move(name, field, value)
            try:
                ms = step_ms(fx, 1, kernels, reps)
            except Exception as err:
                ms = f"failed: {type(err).__name__}: {str(err)[:200]}"
            trail.append({"kernel": name, field: value, "ms": ms})
            print(f"  tune {name}.{field}={value}: {ms} (best {best})", flush=True)
            if isinstance(ms, float) and ms < best * 0.998:
                best, keep = ms, value
            apply_move(name, field, keep)
    final = {n: asdict(c) for n, c in setup.CONFIGS.items()}
    final.update({n: asdict(c) for n, c in setup.ATTN.items()})
    return {"best_ms": best, "trail": trail, "configs": final}
