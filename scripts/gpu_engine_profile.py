"""Where a decode step's time goes on the GPU: our captured step vs the gpt-fast-style loop.

For the random Llama-3.2-1B-shaped model of `bench engine`: the replay time of one captured
decode step (T = 1) of the embedded engine (eager kernels, compiled), the gpt-fast-style
compiled step, and per step the kernels each one runs (torch.profiler, CUPTI), grouped by
name, with the gap between the kernels' sum and the step's wall time. Writes
$OUT/engine_profile.json and prints tables. One call on the lent H200:

    python3 scripts/gpu_engine_profile.py --variants eager,compiled,gptfast

The Triton step (`engine.kernels = "triton"`) has a script of its own that sweeps its block
sizes and times the whole step: scripts/gpu_kernel_sweep.py.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ling_local.bench.baselines import build_bench_model, copy_bandwidth  # noqa: E402
from ling_local.bench.engine import LLAMA_1B  # noqa: E402

OUT = Path(os.environ.get("OUT") or tempfile.gettempdir())
RESULT: dict = {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z")}


def record(key: str, value) -> None:
    RESULT[key] = value
    (OUT / "engine_profile.json").write_text(json.dumps(RESULT, indent=1, default=str))


def time_calls(fn, n: int = 200) -> float:
    """Device time per call (ms), back to back."""
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(n):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / n


def kernels(fn, steps: int = 20) -> dict:
    """Kernels per step, grouped by name: count and microseconds per step."""
    from torch.profiler import ProfilerActivity, profile

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            fn()
        torch.cuda.synchronize()
    groups: dict[str, list[float]] = defaultdict(list)
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA and ev.device_time_total > 0:
            groups[ev.name].append(ev.device_time_total)
    rows = sorted(
        ((name, len(v) / steps, sum(v) / steps) for name, v in groups.items()),
        key=lambda r: -r[2],
    )
    total = sum(r[2] for r in rows)
    count = sum(r[1] for r in rows)
    return {
        "kernels_per_step": round(count, 1),
        "kernel_us_per_step": round(total, 1),
        "top": [(n[:110], round(c, 2), round(us, 2)) for n, c, us in rows[:45]],
    }


def show(name: str, step_ms: float, k: dict) -> None:
    print(
        f"\n== {name}: {step_ms:.4f} ms/step; {k['kernels_per_step']} kernels, "
        f"{k['kernel_us_per_step']:.0f} us of kernels; gap {step_ms * 1e3 - k['kernel_us_per_step']:.0f} us"
    )
    for n, c, us in k["top"][:30]:
        print(f"  {us:8.1f} us  x{c:5.1f}  {n}")


def gptfast_step(hf, context: int, dev: torch.device):
    """One decode step of the gpt-fast-style loop of `bench engine`, as a callable."""
    import torch._inductor.config as inductor

    from ling_local.bench.gptfast import _Model

    inductor.coordinate_descent_tuning = True
    inductor.triton.unique_kernel_names = True
    inductor.fx_graph_cache = True
    model = _Model(hf, context)

    def decode_one(x, pos):
        return model.forward(x, pos)[:, -1].argmax(-1)

    decode = torch.compile(decode_one, mode="reduce-overhead", fullgraph=True)
    x = torch.tensor([[5]], device=dev)
    pos = torch.tensor([600], device=dev)
    return lambda: decode(x, pos)


def main() -> int:
    cli = argparse.ArgumentParser()
    cli.add_argument("--variants", default="eager,compiled,gptfast")
    # A decode graph advances itself one position per replay: room for ~250 replays at 600.
    cli.add_argument("--context", type=int, default=1024)
    args = cli.parse_args()
    from transformers import AutoModelForCausalLM

    from ling_local.engines.cuda_graphs import GraphStep
    from ling_local.engines.llama_runner import LlamaRunner

    dev = torch.device("cuda")
    path = build_bench_model(Path(tempfile.gettempdir()) / "ling-bench-llama-1b", dev, LLAMA_1B)
    hf = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).to(dev).eval()
    weight_bytes = sum(p.numel() * p.element_size() for p in hf.parameters())
    bw = copy_bandwidth(dev)
    record("floor_ms", weight_bytes / bw * 1e3)
    record("copy_tb_s", bw / 1e12)
    print(f"floor {weight_bytes / bw * 1e3:.3f} ms at {bw / 1e12:.2f} TB/s", flush=True)
    variants = args.variants.split(",")
    runner = LlamaRunner(hf, dev, args.context)
    for v in variants:
        t0 = time.perf_counter()
        try:
            if v == "unaligned":  # the compiled step without the alignment promise
                import torch._inductor.config as inductor

                from ling_local.engines import cuda_graphs

                cuda_graphs.step_function(1, True)
                inductor.assume_aligned_inputs = False
                torch._dynamo.reset()
                cuda_graphs._compiled[(1, 1)] = torch.compile(
                    cuda_graphs._step, fullgraph=True, dynamic=False
                )
            if v in ("eager", "compiled", "autotune", "unaligned"):
                if v == "autotune":  # inductor's own matmul choices, benchmarked per shape
                    from ling_local.engines import cuda_graphs

                    cuda_graphs.step_function(1, True)  # inductor settings as for compiled
                    cuda_graphs._compiled[(1, 1)] = torch.compile(
                        cuda_graphs._step, mode="max-autotune-no-cudagraphs", fullgraph=True
                    )
                slot = runner.new_cache()
                step = GraphStep(runner.weights, slot, 1, args.context, compile_step=v != "eager")
                step.load([5], 600)
                ms = time_calls(step.replay)
                k = kernels(step._run)  # the same kernels, launched without the graph
            elif v == "gptfast":
                call = gptfast_step(hf, args.context, dev)
                ms = time_calls(call)
                k = kernels(call)
            else:
                continue
        except Exception as err:  # report and go on
            print(f"{v}: failed: {type(err).__name__}: {err}", flush=True)
            record(v, {"error": f"{type(err).__name__}: {err}"[:500]})
            continue
        record(v, {"step_ms": ms, "build_s": time.perf_counter() - t0, **k})
        show(v, ms, k)
    return 0


if __name__ == "__main__":
    with torch.inference_mode():
        sys.exit(main())
