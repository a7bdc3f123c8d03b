"""`bench structured` prints the grammar's time per token and the decode step it is compared
with (the numbers themselves are the benchmark's to judge, not a test's)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support import REPO, child_env


def test_prints_the_grammar_cost_against_the_decode_step(profile_path: Path, tmp_path) -> None:
    cmd = [sys.executable, "-m", "ling_local", "bench", "structured", "--profile"]
    cmd += [str(profile_path), "--rounds", "2", "--max-tokens", "40"]
    proc = subprocess.run(
        cmd, env=child_env(tmp_path), cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["rounds"] == 2 and result["constrained_tokens"] > 0
    assert result["grammar_ms_per_token"] > 0 and result["decode_step_ms_median"] > 0
    share = result["grammar_ms_per_token"] / result["decode_step_ms_median"]
    assert abs(result["share_of_step"] - share) < 1e-3 and result["target"] == 0.10
    assert "bench structured: 2/2" in proc.stderr  # progress lines off a terminal
