"""scripts/gpu_kernel_sweep.py end to end on the CPU (--cpu-smoke: a tiny shape under
Triton's CPU interpreter, one kernel's variants): the sweep picks a best variant, the whole
step runs, the Triton step agrees with the PyTorch one, and best.json is a file the kernels
load (what the GPU run hands to `bench engine`); the whole-step tune runs a short space and
writes every config."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs triton"),
]


def test_cpu_smoke_run(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LING_LOCAL_")}
    env["PYTHONWARNINGS"] = "ignore"  # numpy's overflow notes from the interpreter
    out = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "gpu_kernel_sweep.py"), "--cpu-smoke",
         "--only", "o", "--tune-step", "--out", str(tmp_path)],
        capture_output=True, text=True, env=env, timeout=900, cwd=REPO,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads((tmp_path / "kernel_sweep.json").read_text())
    best = result["sweep"]["o"]["best"]
    assert best is not None and best["us"] > 0
    assert set(result["step_ms"]) >= {"triton", "torch graph", "triton T=9"}
    assert all(not str(v).startswith("failed") for v in result["step_ms"].values())
    agreement = result["agreement"]
    assert agreement["argmax_equal"] == agreement["steps"]
    assert agreement["logits_rel_err_max"] < 0.03
    steps = agreement["steps"]  # the greedy head's int8 screen: the full head's argmax
    assert agreement["screened_argmax_equal_full_head"] == f"{steps}/{steps}"
    assert "triton, screen_head" in result["step_ms"]
    tune = result["tune_step"]
    assert isinstance(tune, dict), tune  # a traceback string when it failed
    tried = [t for t in tune["trail"] if "kernel" in t]
    assert len(tried) == 3 and all(isinstance(t["ms"], float) for t in tried)
    chosen = json.loads((tmp_path / "best.json").read_text())  # every config, after the tune
    assert chosen["o"].items() >= best["cfg"].items()
    assert set(chosen) >= {"qkv", "o", "gate_up", "down", "lm_head", "attn", "early_trigger"}
    code = (
        "import sys; from ling_local.engines.embedded.triton import setup as s; "
        f"s.load_configs({str(tmp_path / 'best.json')!r}); print(s.CONFIGS['o'])"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env=env, cwd=REPO, check=True)  # fmt: skip
    assert f"block_n={best['cfg']['block_n']}" in loaded.stdout
