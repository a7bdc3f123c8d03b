"""The H200 scripts at toy scale against the stand-in: the same code paths the lead runs on
the GPU (model writing, profile, daemon start, functional checks, timing of daemon vs
direct /generate at two answer lengths, the limit checks, orderly stop without orphans;
the Ling rehearsal's variants and checks), minus the GPU."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support import REPO, child_env

#: Speed limits are for the real machines: here, with a handful of toy requests on a
#: loaded VM, a miss is expected and says nothing (tests never depend on wall-clock speed).
_LIMITS = ("TTFT added", "TPOT added", "daemon CPU")


def _run(script: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = child_env(tmp_path / "home", OUT=str(tmp_path))
    return subprocess.run(
        [sys.executable, str(REPO / "scripts" / script), "--standin", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=600,
    )


def test_gpu_check_script_runs_end_to_end_on_the_standin(tmp_path: Path) -> None:
    out = _run(
        "gpu_sglang_check.py",
        tmp_path,
        *("--shape", "tiny", "--model-dir", str(tmp_path / "model"), "--runs", "2"),
        *("--prompt-tokens", "48", "--new-tokens", "12", "24"),
    )
    result = json.loads((tmp_path / "gpu_sglang_check.json").read_text())
    failed = [name for name, c in result["checks"].items() if not c["ok"]]
    assert all(name.startswith(_LIMITS) for name in failed), out.stdout[-3000:] + out.stderr
    assert out.returncode == (1 if failed else 0)  # a missed limit fails the run, loudly
    assert all(f"[FAIL] {name}" in out.stdout for name in failed)
    assert {"completion", "fim", "chat", "cancellation", "no orphans"} <= set(result["checks"])
    assert {
        "api key on no command line",
        "api key file removed",
        "the child's port is verified before the key is sent",
        "sglang refuses requests without the key",
        "daemon CPU per token flat in the answer's length (ids prompt)",
    } <= set(result["checks"])
    for mode in ("ids", "text"):
        for n in ("12", "24"):
            row = result["overhead"][mode][n]
            assert row["daemon"]["tokens"] == int(n) == row["sglang"]["tokens"]
            assert row["daemon"]["ttft_ms"] > 0 and row["sglang"]["tpot_ms"] > 0
            assert row["daemon_cpu_us_per_token"] > 0
    assert "TTFT ms" in out.stdout and (tmp_path / "daemon.log").is_file()


def test_ling_rehearsal_script_runs_its_checks_on_the_standin(tmp_path: Path) -> None:
    out = _run("gpu_ling_rehearsal.py", tmp_path, "--root", str(tmp_path / "models"), "--runs", "1")
    result = json.loads((tmp_path / "ling_rehearsal.json").read_text())
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert result["served"] == "dspark as profiled"  # the stand-in takes every flag
    assert {
        "completion",
        "fim",
        "chat",
        "streaming",
        "multi-token events relayed exactly",
        "speculation stats in ling",
        "prefix reuse on the hybrid model",
        "cancellation",
        "no orphans",
    } == set(result["checks"])
    assert set(result["overhead"]) == {"ids", "text"}
    assert (tmp_path / "rehearsal_logs.txt").read_text().count("=====") >= 2
