"""Block-size sweep of the Triton decode kernels on the GPU, then the whole step.

For the random Llama-3.2-1B-shaped model of `bench engine` (bf16, 512-token context):

1. the device's copy bandwidth (the floor's denominator);
2. every kernel of the decode step (qkv, attn, o, gate_up, down, lm_head) under a grid of
   block sizes: each variant launched once per layer's weights (16 launches, as in a real
   step, so L2 never holds the weights), captured in a CUDA graph, replays timed with
   events; compiled first in parallel worker processes (Triton's disk cache);
3. the whole captured step with the best of each (the full head and the greedy head's
   screen), the PyTorch graph step for reference, and T = 9 (a verify);
4. the Triton step against the PyTorch step, teacher-forced: logits error and argmax, and
   the screened head's argmax against the full head's.

Writes $OUT/kernel_sweep.json (every number) and $OUT/best.json (the winning block sizes,
for LING_LOCAL_TRITON_CONFIGS); prints a table last. With --tune-step, a coordinate descent
on the whole step's time (`kernel_tune.SPACES`: L2 fractions, the attention's splits and
tiles, sizes that change which kernels' CTAs share an SM) writes every config to best.json
instead.
    python3 scripts/gpu_kernel_sweep.py --out $OUT [--quick] [--tune-step [--space keep]]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import sys
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402
from kernel_fixture import MAX_LEN, Fixture, bandwidth, graph_ms  # noqa: E402
from kernel_grid import focused, grid  # noqa: E402  (beside this script)
from kernel_tune import SPACES, step_ms, tune_step  # noqa: E402


# --------------------------------------------------------------------------- workers
def _compile_worker(jobs: list[tuple[str, dict]]) -> list[str]:
    """Run each (kernel, config) once on a 1-layer fixture: Triton compiles it into the
    shared disk cache. Returns the failures."""
    from ling_local.engines.embedded.triton.setup import apply_config

    fx = Fixture(layers=1)
    failed = []
    for name, cfg in jobs:
        try:
            apply_config(name, cfg)
            with torch.inference_mode():
                fx.op(name)()
            torch.cuda.synchronize()
        except Exception as err:  # reported; the variant is skipped
            failed.append(f"{name} {cfg}: {type(err).__name__}: {str(err)[:300]}")
    return failed


def precompile(jobs: list[tuple[str, dict]], workers: int) -> list[str]:
    ctx = mp.get_context("spawn")
    chunks = [jobs[i::workers] for i in range(workers)]
    with ctx.Pool(workers) as pool:
        results = pool.map(_compile_worker, [c for c in chunks if c])
    return [f for r in results for f in r]


# --------------------------------------------------------------------------- measures
def sweep(fx: Fixture, variants: dict[str, list[dict]], failed: set[str]) -> dict:
    from ling_local.engines.embedded.triton.setup import apply_config

    results: dict = {}
    for name, cfgs in variants.items():
        rows = []
        nbytes = fx.op_bytes(name)
        launches = 4 if name.endswith("lm_head") else len(fx.w.layers)
        for cfg in cfgs:
            key = f"{name} {cfg}"
            if any(f.startswith(key) for f in failed):
                continue
            try:
                apply_config(name, cfg)
                ms = graph_ms(fx.op(name))
                rows.append(
                    dict(
                        cfg=cfg,
                        us=round(ms * 1e3 / launches, 2),
                        tb_s=round(nbytes / (ms * 1e-3) / 1e12, 3),
                    )
                )
            except Exception as err:
                rows.append(dict(cfg=cfg, error=f"{type(err).__name__}: {str(err)[:200]}"))
        ok = sorted((r for r in rows if "us" in r), key=lambda r: r["us"])
        results[name] = {"best": ok[0] if ok else None, "top": ok[:8], "n": len(rows),
                         "errors": [r for r in rows if "error" in r][:5]}  # fmt: skip
        if ok:
            apply_config(name, ok[0]["cfg"])
        print(f"  {name:15} best {ok[0]['us'] if ok else '-'} us {ok[0]['cfg'] if ok else ''}",
              flush=True)  # fmt: skip
    return results


def step_times(fx: Fixture) -> dict:
    """The captured step's replay time: the T = 1 Triton step as configured, with the full
    head and with the greedy head's screen, the PyTorch graph step, and T = 9 (a verify)
    for both."""
    out = {}

    def timed(label: str, t: int, kernels: str) -> None:
        try:
            out[label] = step_ms(fx, t, kernels)
        except Exception as err:
            out[label] = f"failed: {type(err).__name__}: {str(err)[:200]}"
        print(f"  step {label}: {out[label]}", flush=True)

    timed("triton", 1, "triton")
    timed("triton, screened head", 1, "triton-screen")
    for label, t, kernels in (("torch graph", 1, "torch"), ("triton T=9", 9, "triton"),
                              ("torch graph T=9", 9, "torch")):  # fmt: skip
        timed(label, t, kernels)
    return out


def agreement(fx: Fixture, steps: int = 48) -> dict:
    """Teacher-forced: both steps fed the torch step's tokens from the same cache state."""
    from ling_local.engines.embedded.cuda_graphs import GraphStep

    w = fx.w
    start = len(fx.prompt)
    slot2 = fx.runner.new_cache()
    with torch.inference_mode():
        fx.runner.forward(slot2, fx.prompt)
    slot3 = fx.runner.new_cache()
    with torch.inference_mode():
        fx.runner.forward(slot3, fx.prompt)
    ref = GraphStep(w, fx.slot, 1, MAX_LEN, kernels="torch")
    tri = GraphStep(w, slot2, 1, MAX_LEN, kernels="triton")
    scr = GraphStep(w, slot3, 1, MAX_LEN, kernels="triton", screen=True)
    token, rel, same, clear_same, clear = fx.prompt[-1], [], 0, 0, 0
    screen_same, reach = 0, []
    with torch.inference_mode():
        for i in range(steps):
            for step in (ref, tri, scr):
                step.load([token], start + i)
                step.replay()
            screen_same += bool(torch.equal(scr.argmax, tri.argmax))
            # rows the screen could not rule out against the largest logit (the pick's own
            # test, against the largest lower bound, keeps these and a few more)
            upper = scr.scratch.buffers["screen_upper"][0]
            reach.append(int((upper >= tri.logits[0].float().max()).sum()))
            a, b = ref.logits.float(), tri.logits.float()
            rel.append(((a - b).norm() / a.norm()).item())
            top2 = a.topk(2, dim=-1).values[0]
            margin = (top2[0] - top2[1]).item()
            eq = bool(torch.equal(ref.argmax, tri.argmax))
            same += eq
            if margin > 0.05:
                clear += 1
                clear_same += eq
            token = int(ref.argmax[0])
    fx.slot.graphs.clear()
    return {
        "steps": steps,
        "logits_rel_err_median": statistics.median(rel),
        "logits_rel_err_max": max(rel),
        "argmax_equal": same,
        "argmax_equal_where_margin_gt_0.05": f"{clear_same}/{clear}",
        "screened_argmax_equal_full_head": f"{screen_same}/{steps}",
        "screen_rows_reaching_the_max_median": statistics.median(reach),
        "screen_rows_reaching_the_max_max": max(reach),
    }


def main() -> int:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp")))
    cli.add_argument("--quick", action="store_true")
    cli.add_argument("--workers", type=int, default=min(12, os.cpu_count() or 4))
    cli.add_argument("--only", default="", help="comma-separated kernels to sweep")
    cli.add_argument(
        "--focused", type=Path, help="a previous kernel_sweep.json: sweep around its best"
    )
    cli.add_argument("--space", choices=tuple(SPACES), default="step",
                     help="--tune-step's space (kernel_tune.SPACES)")  # fmt: skip
    cli.add_argument(
        "--tune-step",
        action="store_true",
        help="tune the whole step (--space) after the sweep; without --only or --focused "
        "there is no sweep and the tune starts from the shipped configs",
    )
    args = cli.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    result: dict = {"date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                    "device": torch.cuda.get_device_name()}  # fmt: skip

    def save() -> None:
        (args.out / "kernel_sweep.json").write_text(json.dumps(result, indent=1, default=str))

    import triton

    result["versions"] = {"torch": torch.__version__, "triton": triton.__version__}
    result["bandwidth"] = bandwidth()
    print(f"bandwidth {result['bandwidth']}", flush=True)
    variants = grid(args.quick, half_head=64 // 2)
    if args.focused:
        variants = focused(args.focused)
    if args.only:
        variants = {k: v for k, v in variants.items() if k in args.only.split(",")}
    if args.tune_step and not (args.only or args.focused):
        variants = {}
    jobs = [(name, cfg) for name, cfgs in variants.items() for cfg in cfgs]
    t0 = time.time()
    failed = precompile(jobs, args.workers) if args.workers else []
    result["compile"] = {"variants": len(jobs), "seconds": round(time.time() - t0, 1),
                         "failed": failed[:20], "n_failed": len(failed)}  # fmt: skip
    print(f"compiled {len(jobs)} variants in {result['compile']['seconds']}s, "
          f"{len(failed)} failed", flush=True)  # fmt: skip
    for f in failed[:5]:
        print("  ", f)
    save()
    fx = Fixture()
    result["sweep"] = sweep(fx, variants, set(failed))
    best = {n: r["best"]["cfg"] for n, r in result["sweep"].items() if r["best"]}
    (args.out / "best.json").write_text(json.dumps(best, indent=1))
    save()
    if args.tune_step:
        try:
            result["tune_step"] = tune_step(fx, SPACES[args.space], reps=200)
            (args.out / "best.json").write_text(
                json.dumps(result["tune_step"]["configs"], indent=1)
            )
        except Exception:
            result["tune_step"] = traceback.format_exc()[-2000:]
        save()
    try:
        result["step_ms"] = step_times(fx)
    except Exception:
        result["step_ms"] = traceback.format_exc()[-2000:]
    save()
    try:
        result["agreement"] = agreement(fx)
    except Exception:
        result["agreement"] = traceback.format_exc()[-2000:]
    save()
    floor = sum(p.numel() * 2 for p in fx.model.parameters()) / (
        result["bandwidth"]["copy_tb_s"] * 1e12
    )
    result["floor_ms"] = round(floor * 1e3, 4)
    save()
    print("\nkernel           best us   TB/s   config")
    for name, r in result["sweep"].items():
        if r["best"]:
            print(f"{name:15} {r['best']['us']:8.2f} {r['best']['tb_s']:6.2f}   {r['best']['cfg']}")
    print(f"step: {result['step_ms']}")
    print(f"agreement: {result['agreement']}")
    print(f"floor {result['floor_ms']} ms ({result['bandwidth']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
