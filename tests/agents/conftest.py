"""Fixtures for the chain tests: all of them run against the session's real daemon."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ling_local.agents import RunLog
from tests.support import DaemonProcess


def metric(text: str, name: str, **labels: str) -> float:
    """Sum of the samples called `name` whose labels include `labels`."""
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total


def agent_requests(daemon: DaemonProcess) -> float:
    with daemon.client() as client:
        return metric(client.metrics(), "ling_requests_total", priority="agent")


def wait_idle(daemon: DaemonProcess, timeout: float = 15.0):
    """/health once nothing runs or waits in the daemon (fails the test after `timeout`)."""
    deadline = time.monotonic() + timeout
    with daemon.client() as client:
        while True:
            health = client.health()
            if health.running == 0 and health.engine_running == 0 and health.queued == 0:
                return health
            assert time.monotonic() < deadline, f"the daemon is still busy: {health}"
            time.sleep(0.05)


async def await_idle(daemon: DaemonProcess, timeout: float = 15.0):
    return await asyncio.to_thread(wait_idle, daemon, timeout)


@pytest.fixture
def run_log(tmp_path: Path) -> RunLog:
    log = RunLog(tmp_path / "runs.sqlite3")
    yield log
    log.close()
