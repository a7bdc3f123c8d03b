"""The scripts in examples/ run against the test daemon, as a user would run them."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import REPO, DaemonProcess, child_env, shipped_model_available, start_daemon

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


@pytest.fixture(scope="module")
def tiny_daemon(tmp_path_factory: pytest.TempPathFactory) -> DaemonProcess:
    """The shipped tiny model, as `ling-local serve` runs it by default (2,048-token context):
    what the example meets on a fresh install."""
    if not shipped_model_available():
        pytest.skip("the shipped tiny model is not in this checkout")
    daemon = start_daemon("tiny", tmp_path_factory.mktemp("tiny-home"), timeout=300)
    yield daemon
    daemon.stop()


def _example_module():
    spec = importlib.util.spec_from_file_location(
        "review_and_fix", REPO / "examples/review_and_fix.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)  # its dataclasses look themselves up there
    spec.loader.exec_module(module)
    return sys.modules[spec.name]


@pytest.mark.parametrize(
    ("answer", "code", "closed"),
    [
        ("Here:\n```python\nx = 1\n```\nDone.", "x = 1\n", True),
        ("```py\nx = 1\n```", "x = 1\n", True),
        ("~~~\nx = 1\n~~~\n", "x = 1\n", True),
        ("````python\ns = '```'\n```\n````", "s = '```'\n```\n", True),  # a longer fence
        ("```python\nx = 1\ny = ", "x = 1\ny = ", False),  # cut off: never closed
        ("x = 1\n", "x = 1\n", True),  # no fence: the answer is the code
    ],
)
def test_review_and_fix_takes_the_code_out_of_its_fence(
    answer: str, code: str, closed: bool
) -> None:
    assert _example_module().extract_code(answer) == (code, closed)


def _budget(stderr: str) -> tuple[int, int, int]:
    found = re.search(r"context (\d+) tokens: review up to (\d+), fix up to (\d+)", stderr)
    assert found, stderr
    return int(found[1]), int(found[2]), int(found[3])


def test_review_and_fix_fits_its_requests_to_the_context_and_streams_the_fix(
    tiny_daemon: DaemonProcess, tmp_path: Path
) -> None:
    source = tmp_path / "stats.py"
    source.write_text(SAMPLE)
    done = run_example(tiny_daemon, tmp_path / "home", "examples/review_and_fix.py", str(source))
    assert done.returncode == 0, done.stderr
    context, review, fix = _budget(done.stderr)
    assert context == 2048 and 32 <= review <= 400 and fix < context
    written = done.stderr.split("── fix ", 1)[1].split("\nfix: ", 1)[0].split("\n", 1)[1]
    assert written.strip(), "the fix was not shown as it was written"
    tokens = int(re.search(r"\nfix: [\d.]+s, (\d+) tokens", done.stderr)[1])
    if tokens >= fix:
        assert "cut off" in done.stdout, done.stdout
    if "does not compile" in done.stdout:  # only for a fix whose block was complete
        assert _example_module().extract_code(written)[1], written
    assert re.search(r"fixed file: |cut off|does not compile \(line \d+", done.stdout), done.stdout


def test_review_and_fix_says_a_fix_that_ran_out_of_tokens_was_cut_off(
    tiny_daemon: DaemonProcess, tmp_path: Path
) -> None:
    source = tmp_path / "stats.py"
    source.write_text(SAMPLE)
    done = run_example(
        tiny_daemon,
        tmp_path / "home",
        "examples/review_and_fix.py",
        str(source),
        "--fix-tokens",
        "12",
    )
    assert done.returncode == 0, done.stderr
    assert "fix: " in done.stderr and ", 12 tokens" in done.stderr
    assert "cut off at 12 tokens (finish_reason length)" in done.stdout, done.stdout
    assert "does not compile" not in done.stdout
    assert not source.with_suffix(".fixed.py").exists()


@pytest.mark.parametrize("size", ["fix-does-not-fit", "prompt-does-not-fit"])
def test_review_and_fix_refuses_a_file_the_context_cannot_hold(
    tiny_daemon: DaemonProcess, tmp_path: Path, size: str
) -> None:
    source = tmp_path / "big.py"
    if size == "fix-does-not-fit":  # ~1,600 tokens: the prompt fits, a rewrite of it does not
        source.write_text((REPO / "examples" / "structured_extraction.py").read_text())
    else:
        source.write_text("".join(f"def f{i}(x):\n    return x * {i}\n\n\n" for i in range(150)))
    done = run_example(tiny_daemon, tmp_path / "home", "examples/review_and_fix.py", str(source))
    assert done.returncode == 2, done.stderr
    assert "cannot review and fix" in done.stderr and "2048" in done.stderr, done.stderr
    assert "── review" not in done.stderr  # nothing was run that could not finish


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
