"""`bench serve` against the real daemon (shared session fixture, embedded model), through
the library and through the CLI, plus the API pieces it relies on."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest

from ling_local.bench.serve import ServeConfig, run_serve
from tests.support import REPO, DaemonProcess, child_env

INPUT, OUTPUT = 24, 8


def test_serve_numbers_are_sane(daemon: DaemonProcess) -> None:
    cfg = ServeConfig(
        base_url=daemon.url,
        api_key=daemon.token,
        input_len=INPUT,
        output_len=OUTPUT,
        num_prompts=3,
        runs=2,
    )
    result = run_serve(cfg, progress=False)
    assert result.target["vocab_from"] == "the server's /v1/models"
    assert len(result.runs) == 2
    for run in result.runs:
        assert (run.completed, run.failed, run.errors) == (3, 0, [])
        for r in run.requests:  # ignore_eos and token-id prompts make both lengths exact
            assert (r["prompt_len"], r["output_len"]) == (INPUT, OUTPUT)
            # a fast engine may hand every token over in one chunk: TTFT == latency then
            assert 0 < r["ttft_ms"] <= r["latency_ms"] and r["chunks"] >= 1
            assert r["tpot_ms"] == pytest.approx((r["latency_ms"] - r["ttft_ms"]) / (OUTPUT - 1))
        assert run.ttft_ms.min > 0 and run.tpot_ms.min >= 0
        # one ITL sample per token after those of the first chunk
        assert (run.itl_ms.n if run.itl_ms else 0) <= 3 * (OUTPUT - 1)
        assert run.output_throughput == pytest.approx(3 * OUTPUT / run.duration_s)
    # spreading a gap over its tokens keeps the total: ITLs sum to at most latency − TTFT
    itl_total = sum(sum(run) for run in result.samples["itl"])
    gaps = sum(r["latency_ms"] - r["ttft_ms"] for run in result.runs for r in run.requests)
    assert 0 <= itl_total <= gaps + 1e-6
    assert set(result.spread()) >= {"ttft_median_ms", "tpot_mean_ms", "output_throughput"}


def test_cli_writes_json_png_and_markdown(daemon: DaemonProcess, tmp_path) -> None:
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "ling_local", "bench", "serve", "--base-url", daemon.url]
    cmd += ["--api-key", daemon.token, "--input-len", "16", "--output-len", "4"]
    cmd += ["--num-prompts", "2", "--out", str(out), "--json", "--no-progress"]
    proc = subprocess.run(
        cmd, env=child_env(tmp_path / "home"), cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["benchmark"] == "serve" and data["config"]["api_key"] == "***"
    assert data["runs"][0]["completed"] == 2
    assert json.loads((out / "serve.json").read_text())["runs"] == data["runs"]
    assert (out / "serve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md = (out / "serve.md").read_text()
    assert "| TTFT ms |" in md and "| TPOT ms |" in md and "ling-local bench serve" in md


def test_progress_is_plain_lines_when_not_on_a_terminal(daemon: DaemonProcess, tmp_path) -> None:
    """Piped (a log, CI, `| tee`), the progress is lines on stderr, not a silent live bar;
    the result still goes to stdout alone."""
    cmd = [sys.executable, "-m", "ling_local", "bench", "serve", "--base-url", daemon.url]
    cmd += ["--api-key", daemon.token, "--input-len", "16", "--output-len", "4"]
    cmd += ["--num-prompts", "3", "--runs", "2", "--out", str(tmp_path / "out")]
    proc = subprocess.run(
        cmd, env=child_env(tmp_path / "home"), cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    for stage in ("warm-up: 0/1", "warm-up: 1/1", "run 1/2: 0/3", "run 1/2: 3/3", "run 2/2: 3/3"):
        assert any(line.startswith(f"bench serve: {stage} (") for line in lines), proc.stderr
    assert "bench serve: run" not in proc.stdout and "TTFT" in proc.stdout


def test_openai_backend_against_the_daemon(daemon: DaemonProcess) -> None:
    """Any OpenAI-compatible server: base URL with /v1, model id from /v1/models."""
    cfg = ServeConfig(
        backend="openai",
        base_url=daemon.url + "/v1",
        api_key=daemon.token,
        input_len=16,
        output_len=4,
        num_prompts=2,
    )
    result = run_serve(cfg, progress=False)
    assert result.runs[0].completed == 2
    with daemon.client() as client:
        assert result.target["model"] == client.models()[0].id


def test_stream_reports_running_token_counts(daemon: DaemonProcess) -> None:
    """stream_options.continuous_usage_stats: counts on every chunk, ending at max_tokens."""
    body = {
        "prompt": list(range(5, 25)),
        "max_tokens": 12,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    counts, final = [], None
    with daemon.http() as http, http.stream("POST", "/v1/completions", json=body) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if not line.startswith("data: {"):
                continue
            event = json.loads(line[6:])
            if event["choices"]:
                counts.append(event["usage"]["completion_tokens"])
                assert event["usage"]["prompt_tokens"] == 20
            else:
                final = event["usage"]
    assert counts == sorted(counts) and counts[-1] == 12 and final["completion_tokens"] == 12
    with daemon.http() as http:
        model = http.get("/v1/models").json()["data"][0]
    assert isinstance(model["vocab_size"], int) and model["vocab_size"] > 20


def test_daemon_tcp_connections_have_nagle_off() -> None:
    """SSE chunks must not wait for delayed ACKs: accepted sockets get TCP_NODELAY."""
    from ling_local.server.serve import _bind_tcp

    listener = _bind_tcp("127.0.0.1", 0)
    listener.listen()
    with listener, socket.create_connection(listener.getsockname()) as _:
        accepted, _addr = listener.accept()
        with accepted:
            assert accepted.proto == socket.IPPROTO_TCP
            assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
