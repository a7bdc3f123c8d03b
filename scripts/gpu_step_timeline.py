"""The captured Triton decode step's kernel timeline on the GPU: what each kernel adds.

With programmatic dependent launch the step's kernels overlap, so a kernel's own duration
says little. From torch.profiler's CUPTI records of a few replays of the T = 1 step (the
random Llama-3.2-1B-shaped model of `bench engine`, 512-token context) this takes, per kind
of kernel (embedding, the layer's qkv / attention / o / gate_up / down, the head; with
--screen the head's int8 screen and its pick), the median over layers and replays of:

* `dur`: its start to its end (including the time it waits for its predecessor);
* `adds`: its end minus the previous kernel's end, its share of the step's critical path;
* `early`: how long before the previous kernel's end it started.

Writes $OUT/step_timeline.json and prints the table.
    python3 scripts/gpu_step_timeline.py --out $OUT
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

import torch  # noqa: E402
from kernel_fixture import MAX_LEN, Fixture  # noqa: E402


def layer_roles() -> list[str]:
    """The kernels of one layer, in launch order, as the shipped configs launch them."""
    from ling_local.engines import triton_kernels as tk

    attn = tk.ATTN["attn"]
    if attn.fuse_o:
        return ["qkv", "attn_o", "gate_up", "down"]
    return ["qkv", "attn", *([] if attn.fused_reduce else ["attn_reduce"]), "o", "gate_up", "down"]


def main() -> int:
    cli = argparse.ArgumentParser()
    cli.add_argument("--out", type=Path, default=Path("/tmp"))
    cli.add_argument("--replays", type=int, default=10)
    cli.add_argument("--screen", action="store_true", help="the greedy head's int8 screen")
    cli.add_argument(
        "--ring", action="store_true", help="the head writes the token into the host ring"
    )
    args = cli.parse_args()
    from torch.profiler import ProfilerActivity, profile

    from ling_local.engines.cuda_graphs import GraphStep

    fx = Fixture()
    ring = torch.full((64,), -1, dtype=torch.long, pin_memory=True) if args.ring else None
    step = GraphStep(fx.w, fx.slot, 1, MAX_LEN, kernels="triton", screen=args.screen, ring=ring)
    head = ["lm_screen", "pick"] if args.screen else ["lm_head"]
    start = len(fx.prompt)
    step.load(fx.prompt[-1:], start)
    for _ in range(5):
        step.replay()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(args.replays):
            step.replay()
            torch.cuda.synchronize()  # replays apart: each one's kernels on their own
    events = sorted(
        (ev for ev in prof.events() if ev.device_type == torch.autograd.DeviceType.CUDA),
        key=lambda ev: ev.time_range.start,
    )
    # split into replays at the gaps the synchronisations leave
    replays: list[list] = [[]]
    for ev in events:
        if replays[-1] and ev.time_range.start - replays[-1][-1].time_range.end > 50:
            replays.append([])
        replays[-1].append(ev)
    n_layers = len(fx.w.layers)
    per_layer = layer_roles()
    stats: dict[str, dict[str, list[float]]] = {}
    steps_us = []
    for rep in replays:
        if len(rep) != 1 + len(head) + len(per_layer) * n_layers:
            continue
        roles = ["embed", *per_layer * n_layers, *head]
        steps_us.append(rep[-1].time_range.end - rep[0].time_range.start)
        for i, (ev, role) in enumerate(zip(rep, roles, strict=True)):
            s = stats.setdefault(role, {"dur": [], "adds": [], "early": []})
            s["dur"].append(ev.time_range.end - ev.time_range.start)
            if i:
                prev = rep[i - 1].time_range.end
                s["adds"].append(ev.time_range.end - prev)
                s["early"].append(prev - ev.time_range.start)
    table = {
        role: {k: round(statistics.median(v), 2) for k, v in s.items() if v}
        for role, s in stats.items()
    }
    result = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "device": torch.cuda.get_device_name(),
        "replays_used": len(steps_us),
        "replays_seen": len(replays),
        "step_us_median": round(statistics.median(steps_us), 1) if steps_us else None,
        "kernels": table,
        "layer_adds_us": round(sum(table.get(r, {}).get("adds", 0.0) for r in per_layer), 2),
        "first_replay": [
            (
                ev.name[:60],
                round(ev.time_range.start - replays[0][0].time_range.start, 2),
                round(ev.time_range.end - ev.time_range.start, 2),
            )
            for ev in replays[0]
        ],
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "step_timeline.json").write_text(json.dumps(result, indent=1))
    print(json.dumps({k: v for k, v in result.items() if k != "first_replay"}, indent=1))
    print("first replay:", len(replays[0]), "kernels;", result["first_replay"][:8])
    return 0


if __name__ == "__main__":
    sys.exit(main())
