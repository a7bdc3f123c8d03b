"""A/B of the fused attention + O projection in the captured T = 1 step (3 alternations,
PDL early trigger off and on): python3 scripts/gpu_fuse_ab.py (OUT=dir)."""

import json
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "scripts")]
from kernel_fixture import Fixture  # noqa: E402
from kernel_tune import step_ms  # noqa: E402

from ling_local.engines import triton_kernels as tk  # noqa: E402

fx = Fixture()
out = {}
for trig in (False, True):
    tk.SETTINGS.early_trigger = trig
    for _rep in range(3):
        for fuse in (True, False):
            tk.set_config("attn", fuse_o=fuse)
            ms = step_ms(fx, 1, "triton", reps=300)
            out.setdefault(f"trigger={trig} fuse_o={fuse}", []).append(ms)
            print(trig, fuse, ms, flush=True)
Path(os.environ["OUT"], "fuse_ab.json").write_text(json.dumps(out, indent=1))
print(json.dumps(out))
