"""scripts/gpu_sglang_check.py at toy scale against the stand-in: the same code path the
lead runs on the H200 (model writing, profile, daemon start, functional checks, timing of
daemon vs direct /generate, orderly stop without orphans), minus the GPU."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support import REPO, child_env


def test_gpu_check_script_runs_end_to_end_on_the_standin(tmp_path: Path) -> None:
    env = child_env(tmp_path / "home", OUT=str(tmp_path))
    out = subprocess.run(
        [
            sys.executable,
            str(REPO / "scripts" / "gpu_sglang_check.py"),
            "--standin",
            "--shape",
            "tiny",
            "--model-dir",
            str(tmp_path / "model"),
            "--runs",
            "2",
            "--prompt-tokens",
            "48",
            "--new-tokens",
            "12",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=600,
    )
    result = json.loads((tmp_path / "gpu_sglang_check.json").read_text())
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert result["ok"] is True
    assert {"completion", "fim", "chat", "cancellation", "no orphans"} <= set(result["checks"])
    assert {
        "api key on no command line",
        "api key file removed",
        "sglang refuses requests without the key",
    } <= set(result["checks"])
    for mode in ("ids", "text"):
        for side in ("daemon", "sglang"):
            row = result["overhead"][mode][side]
            assert row["tokens"] == 12 and row["ttft_ms"] > 0 and row["tpot_ms"] > 0
    assert "TTFT ms" in out.stdout and (tmp_path / "daemon.log").is_file()
