"""Where the persistent layers kernel's time goes, on the lent GPU: for a few configs of
`triton_setup.PERSISTENT`, the whole step's replay time and, from the kernel's own global
timer stamps (PROFILE), per stage kind the span from the previous barrier's release to the
slowest CTA's end, the spread of the CTAs' ends, and each barrier's latency (last arrival
to first release). Writes $OUT/persistent_profile.json.

    python3 scripts/gpu_persistent_profile.py --out $OUT [--configs '[{"ctas": 264}]']
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import traceback
from dataclasses import asdict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from kernel_fixture import CONTEXT, Fixture
from kernel_tune import step_ms

PARTS = ("qkv", "attn", "o", "gate_up", "down")


def profile(fx: Fixture, runs: int = 5) -> dict:
    """Stage and barrier times (us, medians over layers) of the last of `runs` launches."""
    from ling_local.engines import triton_kernels as tk
    from ling_local.engines.triton_persistent import persistent_layers

    w = fx.w
    n_stages = 5 * len(w.layers)
    g = tk.PERSISTENT.ctas or torch.cuda.get_device_properties(0).multi_processor_count
    prof = torch.zeros((g, 2 + 2 * n_stages), dtype=torch.int64, device="cuda")
    scratch = tk.Scratch(torch.device("cuda"), w.lm_head.shape[0])
    tokens = torch.tensor([fx.prompt[-1]], device="cuda")
    pos = torch.tensor([CONTEXT], device="cuda")
    for _ in range(runs):
        persistent_layers(w, fx.slot.k, fx.slot.v, tokens, pos, scratch, profile=prof)
    torch.cuda.synchronize()
    p = prof.cpu().double() / 1e3  # us
    start = p[:, 0]
    ends = p[:, 2::2][:, :n_stages]
    goes = p[:, 3::2][:, : n_stages - 1]
    prev = torch.cat([start[:, None], goes], dim=1)  # each CTA's release into stage s
    span = ends.max(0).values - prev.min(0).values
    spread = ends.max(0).values - ends.min(0).values
    barrier = goes.min(0).values - ends[:, : n_stages - 1].max(0).values
    release = goes.max(0).values - goes.min(0).values
    out: dict = {"ctas": g, "kernel_us": round(float(ends[:, -1].max() - start.min()), 2)}
    for i, part in enumerate(PARTS):
        out[part] = {
            "span_us": round(statistics.median(span[i::5].tolist()), 2),
            "end_spread_us": round(statistics.median(spread[i::5].tolist()), 2),
            "barrier_us": round(statistics.median(barrier[i::5].tolist()), 2)
            if i < len(barrier)
            else None,
            "release_spread_us": round(statistics.median(release[i::5].tolist()), 2),
        }
    out["per_layer_us"] = round(sum(out[q]["span_us"] + (out[q]["barrier_us"] or 0)
                                    for q in PARTS), 2)  # fmt: skip
    return out


def main() -> int:
    cli = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    cli.add_argument("--out", type=Path, required=True)
    cli.add_argument("--configs", default="[{}]", help="JSON list of PERSISTENT changes")
    args = cli.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    from ling_local.engines import triton_kernels as tk

    fx = Fixture()
    base = asdict(tk.PERSISTENT)
    result: dict = {"date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                    "device": torch.cuda.get_device_name(), "base": base, "runs": []}  # fmt: skip
    tk.PERSISTENT.enabled = False
    result["per_layer_kernels_step_ms"] = step_ms(fx, 1, "triton", 200)
    print(f"per-layer kernels: step {result['per_layer_kernels_step_ms']} ms", flush=True)
    for changes in json.loads(args.configs):
        tk.PERSISTENT.update(**base)
        tk.PERSISTENT.update(**{"enabled": True, **changes})  # it ships off
        run: dict = {"changes": changes}
        try:
            run["step_ms"] = step_ms(fx, 1, "triton", 200)
            run["profile"] = profile(fx)
        except Exception:
            run["error"] = traceback.format_exc()[-1500:]
        result["runs"].append(run)
        print(json.dumps(run), flush=True)
        (args.out / "persistent_profile.json").write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
