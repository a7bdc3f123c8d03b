"""The scripts in examples/ run against the test daemon, as a user would run them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import REPO, DaemonProcess, child_env

SAMPLE = """def mean(values):
    total = 0
    for v in values:
        total += v
    return total / len(values)
"""


def run_example(daemon: DaemonProcess, home: Path, *args: str) -> subprocess.CompletedProcess:
    env = child_env(home, LING_LOCAL_URL=daemon.url, LING_LOCAL_TOKEN=daemon.token)
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=str(REPO),
        timeout=300,
    )


def test_review_and_fix(daemon: DaemonProcess, tmp_path: Path) -> None:
    source = tmp_path / "stats.py"
    source.write_text(SAMPLE)
    done = run_example(
        daemon, tmp_path / "home", "examples/review_and_fix.py", str(source), "--max-tokens", "8"
    )
    assert done.returncode == 0, done.stderr
    assert "finished in" in done.stdout
    for step in ("read", "review", "fix", "check"):
        assert f"── {step} " in done.stderr
    assert source.read_text() == SAMPLE  # the original is never touched
    fixed = source.with_suffix(".fixed.py")
    if "fixed file:" in done.stdout:  # written only when the model's fix compiles
        compile(fixed.read_text(), str(fixed), "exec")
    else:
        assert "nothing written" in done.stdout and not fixed.exists()


@pytest.mark.parametrize("mode", [[], ["--chat"]], ids=["code-model", "chat-model"])
def test_structured_extraction(daemon: DaemonProcess, tmp_path: Path, mode: list[str]) -> None:
    source = tmp_path / "stats.py"
    source.write_text(SAMPLE)
    done = run_example(
        daemon,
        tmp_path / "home",
        "examples/structured_extraction.py",
        str(source),
        *mode,
        "--max-tokens",
        "12",
    )
    # Either a record that validated, or the typed failure after the bounded re-asks —
    # which one depends on the model; a crash or anything else fails. The schema is built
    # from the file, so a record can only name its one function and that one's parameter.
    if done.returncode == 0:
        record = json.loads(done.stdout)
        assert record["name"] == "mean" and set(record["arguments"]) <= {"values"}, record
    else:
        assert done.returncode == 1, done.stderr
        assert "no valid record after 3 attempts" in done.stderr


def test_llama_index_workflow(daemon: DaemonProcess, tmp_path: Path) -> None:
    pytest.importorskip("llama_index.llms.openai_like")
    done = run_example(
        daemon, tmp_path / "home", "examples/llama_index_workflow.py", "--max-tokens", "8"
    )
    assert done.returncode == 0, done.stderr
    assert "context 2048 tokens" in done.stdout
    assert "── draft\ndef solution(*args):" in done.stdout and "── review" in done.stdout
