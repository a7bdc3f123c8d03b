"""scripts/serve_vs_engine.py --smoke: the H200 measurement's steps on the CPU (a tiny
random model, the torch step): bench engine's TPOT, a daemon started with the `local`
profile, its decode step from /health, TPOT through the streaming API, both printed and
written. The numbers themselves are the GPU run's to judge."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def test_smoke_run_prints_both_tpots(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LING_LOCAL_")}
    env["PYTHONPATH"] = str(REPO)
    out = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "serve_vs_engine.py"), "--smoke", "--runs", "1",
         "--repeats", "1", "--out", str(tmp_path)],
        capture_output=True, text=True, env=env, cwd=REPO, timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads((tmp_path / "serve_vs_engine.json").read_text())
    assert result["engine_tpot_ms"] > 0 and result["daemon_tpot_ms"] > 0
    assert result["daemon"]["requests"] == 2
    assert result["daemon_decode"]["kernels"] == "torch"
    assert "needs a CUDA GPU" in result["daemon_decode"]["why"]
    last = out.stdout.strip().splitlines()[-1]
    assert last.startswith("TPOT: bench engine ") and "daemon through the streaming API" in last
