"""Durable runs through the real CLI: kill the runner process mid-step, resume, and the
finished steps are not computed again; Ctrl-C cancels the generation in the daemon."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ling_local.agents import RunLog
from tests.agents.conftest import agent_requests, metric, wait_idle
from tests.support import REPO, DaemonProcess, child_env

CHAIN_FILE = """
import os

from ling_local.agents import Chain, Prompt

inputs = {"topic": "a stack class"}

chain = Chain("durable", [
    Prompt("outline", "Outline {{ topic }}.", max_tokens=4),
    Prompt("draft", "# {{ topic }}: {{ outline }}\\n", mode="complete",
           max_tokens=int(os.environ.get("DRAFT_TOKENS", "1800")),
           options={"ignore_eos": True}),
    Prompt("title", "A title for: {{ draft }}", max_tokens=4),
])
"""


@pytest.fixture
def runner_home(tmp_path: Path) -> Path:
    return tmp_path / "runner-home"


def start_cli(daemon: DaemonProcess, home: Path, *args: str, **env_extra: str) -> subprocess.Popen:
    env = child_env(home, LING_LOCAL_URL=daemon.url, LING_LOCAL_TOKEN=daemon.token, **env_extra)
    return subprocess.Popen(
        [sys.executable, "-m", "ling_local", "chain", *args, "--jsonl"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=str(REPO),
    )


def read_until(proc: subprocess.Popen, predicate, timeout: float = 60.0) -> list[dict]:
    """Events the CLI printed, up to the first one `predicate` accepts."""
    events: list[dict] = []
    deadline = time.monotonic() + timeout
    for line in proc.stdout:
        events.append(json.loads(line))
        if predicate(events[-1]):
            return events
        assert time.monotonic() < deadline, "the chain runner took too long"
    raise AssertionError(f"the runner ended early: {events} {proc.stderr.read()}")


def mid_draft(event: dict) -> bool:
    return event["event"] == "Token" and event["index"] == 1


def test_killed_runner_resumes_without_recomputing_finished_steps(
    daemon: DaemonProcess, tmp_path: Path, runner_home: Path
) -> None:
    chain_file = tmp_path / "durable.py"
    chain_file.write_text(CHAIN_FILE)
    with daemon.client() as client:
        cancelled_before = metric(client.metrics(), "ling_cancelled_requests_total")
    proc = start_cli(daemon, runner_home, "run", str(chain_file))
    events = read_until(proc, mid_draft)
    proc.send_signal(signal.SIGKILL)  # no cleanup code runs in the runner
    proc.wait(10)
    proc.stdout.close()
    proc.stderr.close()
    killed_at = time.time()
    run_id = events[0]["run_id"]
    outline = next(e for e in events if e["event"] == "StepFinished")["output"]

    # The daemon noticed the dead client and stopped generating its draft.
    wait_idle(daemon, timeout=10)
    with daemon.client() as client:
        assert metric(client.metrics(), "ling_cancelled_requests_total") == cancelled_before + 1

    log_path = runner_home / "state" / "chains" / "runs.sqlite3"
    with RunLog(log_path) as log:
        record = log.get(run_id)
    assert record.status == "running"  # nobody could mark it: the process was killed
    assert [s.name for s in record.steps] == ["outline"]
    outline_row = record.steps[0]
    assert outline_row.output == outline and outline_row.finished < killed_at

    before = agent_requests(daemon)
    # The file is loaded again on resume; a short draft this time keeps the test quick.
    resume = start_cli(daemon, runner_home, "resume", run_id, DRAFT_TOKENS="8")
    out, err = resume.communicate(timeout=120)
    assert resume.returncode == 0, err
    resumed = [json.loads(line) for line in out.splitlines()]
    assert agent_requests(daemon) - before == 2  # draft and title; the outline was not redone
    kinds = [(e["event"], e.get("index")) for e in resumed if e["event"] != "Token"]
    assert kinds == [
        ("RunStarted", None),
        ("StepSkipped", 0),
        ("StepStarted", 1),
        ("StepFinished", 1),
        ("StepStarted", 2),
        ("StepFinished", 2),
        ("ChainFinished", None),
    ]
    assert resumed[0]["resumed"] is True
    done = resumed[-1]
    assert done["outputs"]["outline"] == outline and done["resumed_steps"] == ["outline"]
    with RunLog(log_path) as log:
        record = log.get(run_id)
    assert record.status == "finished"
    assert record.steps[0] == outline_row  # same row, same timestamps: not recomputed
    assert [s.output for s in record.steps] == list(done["outputs"].values())


def test_ctrl_c_cancels_the_run_and_the_generation(
    daemon: DaemonProcess, tmp_path: Path, runner_home: Path
) -> None:
    chain_file = tmp_path / "durable.py"
    chain_file.write_text(CHAIN_FILE)
    with daemon.client() as client:
        before = client.metrics()
    proc = start_cli(daemon, runner_home, "run", str(chain_file))
    events = read_until(proc, mid_draft)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert "chain resume" in err
    last = json.loads(out.splitlines()[-1])
    assert last["event"] == "ChainError" and last["error_type"] == "cancelled"
    assert last["index"] == 1
    health = wait_idle(daemon, timeout=10)
    assert health.engine_running == 0
    with daemon.client() as client:
        after = client.metrics()
    assert metric(after, "ling_cancelled_requests_total", reason="disconnected") == (
        metric(before, "ling_cancelled_requests_total", reason="disconnected") + 1
    )
    assert (
        0
        < metric(after, "ling_cancelled_tokens_total")
        - metric(before, "ling_cancelled_tokens_total")
        < 160
    )
    with RunLog(runner_home / "state" / "chains" / "runs.sqlite3") as log:
        record = log.get(events[0]["run_id"])
    assert record.status == "cancelled"
    assert [s.name for s in record.steps] == ["outline"]
