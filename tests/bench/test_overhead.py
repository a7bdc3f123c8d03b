"""A short `bench overhead` run through the CLI: real benchmark daemons over TCP and a unix
socket, completions and chat, bare HTTP and SDK clients. Checks the report's structure and
that every token and every burst the source emitted arrived, on every path."""

from __future__ import annotations

import json
import subprocess
import sys

from ling_local.bench.token_source import Cadence
from tests.support import REPO, child_env

TOKENS = 300
PATHS = {
    f"{t} {e} {c}" for t in ("tcp", "uds") for e in ("completions", "chat") for c in ("raw", "sdk")
}


def test_overhead_report(tmp_path) -> None:
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "ling_local", "bench", "overhead", "--tokens", str(TOKENS)]
    cmd += ["--rounds", "1", "--probes", "3", "--out", str(out), "--json", "--no-progress"]
    proc = subprocess.run(
        cmd, env=child_env(tmp_path / "home"), cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["benchmark"] == "overhead"
    assert data["cadence"] == {"period_ms": 0.78, "burst": 10, "first_token_ms": 7.8}
    configs = {c["name"]: c for c in data["configs"]}
    assert set(configs) == PATHS
    bursts = len(Cadence(0.00078, 10).bursts(TOKENS))
    for c in [data["baseline"], *configs.values()]:
        assert c["all_tokens_arrived"] is True and c["tokens_per_stream"] == TOKENS
        assert c["chunks_per_stream"] == bursts  # one chunk per burst: nothing lost or split
        assert c["ttft_ms"]["median"] > 0 and c["relay_growth_ms"]["n"] == 1
        # every chunk and probe was joined to the source's record of it (by prompt marker)
        assert c["relay_ms"]["n"] == bursts and c["added_ttft_ms"]["n"] == c["ttft_probes"]
        assert 0 < c["request_path_ms"]["median"] < c["ttft_ms"]["median"]
    assert data["baseline"]["ttft_probes"] == 3 * len(PATHS)  # one alternate per probe
    for c in configs.values():
        assert c["ttft_probes"] == 3 and c["daemon_cpu_us_per_token"] > 0
        assert set(c["verdict"]) == {"tpot", "ttft", "keeps_up", "all_tokens_arrived"}
        assert {"median", "min", "max", "values"} <= set(c["ttft_delta_ms"])
    # the source keeps its cadence in-process: TPOT within 30 % of the period
    assert 0.78 * 0.7 < data["baseline"]["tpot_ms"]["median"] < 0.78 * 1.3
    assert data["machine"]["before"]["cores"] >= 1
    assert json.loads((out / "overhead.json").read_text())["configs"] == data["configs"]
    assert (out / "overhead.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md = (out / "overhead.md").read_text()
    assert "in-process (floor)" in md and all(f"| {name} |" in md for name in PATHS)
