"""The `local` profile: any local Hugging Face model directory, served the way the README
says (`LING_LOCAL_MODEL__PATH=/models/x ling-local serve --profile local`), on the CPU here:
the int8 CPU path, the torch decode step with its reason in `/health` and in `ling-local
doctor`, completions streamed through the API; a missing directory fails with a message
that names it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ling_local.errors import EngineNotReady
from tests.support import REPO, child_env, start_daemon

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def random_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small random-weight Llama with its tokenizer: any HF model directory."""
    from ling_local.bench.random_model import build_random_llama

    return build_random_llama(
        tmp_path_factory.mktemp("hf-model"), hidden_size=64, intermediate_size=176, num_layers=2
    )


def test_local_profile_serves_a_model_directory_on_the_cpu(
    random_model: Path, tmp_path: Path
) -> None:
    env = {"LING_LOCAL_MODEL__PATH": str(random_model), "CUDA_VISIBLE_DEVICES": ""}
    daemon = start_daemon("local", tmp_path / "home", env=env)
    try:
        with daemon.client() as client:
            health = client.health()
            assert health.ready and health.profile == "local" and health.model == "local-model"
            assert health.decode == {
                "kernels": "torch",
                "why": "the Triton step needs a CUDA GPU; the model runs on the cpu",
            }
            with client.stream_complete("def add(a, b):\n", max_tokens=8) as stream:
                text = "".join(chunk.text for chunk in stream)
            assert stream.finish_reason in ("length", "stop")
            assert stream.usage is None or stream.usage.completion_tokens <= 8
        assert isinstance(text, str)
        assert "int8" in daemon.log.read_text()  # the CPU's int8 matmuls (engine log line)
        doctor = subprocess.run(
            [sys.executable, "-m", "ling_local", "doctor", "--profile", "local"],
            capture_output=True, text=True, env=daemon.env, cwd=REPO, timeout=120,
        )  # fmt: skip
        out = " ".join(doctor.stdout.split())
        assert "decode step" in out and "torch: the Triton step needs a CUDA GPU" in out
        assert "decode step torch" in out  # the running daemon's answer, from /health
    finally:
        daemon.stop()


def test_a_missing_model_directory_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-model"
    env = {"LING_LOCAL_MODEL__PATH": str(missing), "CUDA_VISIBLE_DEVICES": ""}
    with pytest.raises((EngineNotReady, RuntimeError), match=r"model directory .* not found"):
        start_daemon("local", tmp_path / "home", env=env, timeout=60)
    doctor = subprocess.run(
        [sys.executable, "-m", "ling_local", "doctor", "--profile", "local"],
        capture_output=True, text=True, timeout=120, cwd=REPO,
        env=child_env(tmp_path / "home2", **env),
    )  # fmt: skip
    assert doctor.returncode == 1
    assert "missing config.json" in " ".join(doctor.stdout.split())
