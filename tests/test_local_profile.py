"""The `local` profile: any local Hugging Face model directory, served the way the README
says (`LING_LOCAL_MODEL__PATH=/models/x ling-local serve --profile local`), on the CPU here:
the int8 CPU path, the torch decode step with its reason in `/health` and in `ling-local
doctor`, completions streamed through the API; a missing directory fails with a message
that names it."""

from __future__ import annotations

from pathlib import Path

import pytest

from ling_local.doctor import collect_checks
from ling_local.errors import EngineNotReady
from tests.support import start_daemon

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def random_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small random-weight Llama with its tokenizer: any HF model directory."""
    from ling_local.bench.random_model import build_random_llama

    return build_random_llama(
        tmp_path_factory.mktemp("hf-model"), hidden_size=64, intermediate_size=176, num_layers=2
    )


def test_local_profile_serves_a_model_directory_on_the_cpu(
    random_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
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
        # `ling-local doctor --profile local` here, against the running daemon (the model
        # on the CPU even where there is a GPU: the daemon above was kept off it too)
        for name, value in (*env.items(), ("LING_LOCAL_MODEL__DEVICE", "cpu")):
            monkeypatch.setenv(name, value)
        monkeypatch.setenv("LING_LOCAL_HOME", str(daemon.home))
        checks = {c.name: c for c in collect_checks("local")}
        assert checks["decode step"].ok is None  # information
        assert checks["decode step"].detail == (
            "torch: the Triton step needs a CUDA GPU; the model runs on the cpu"
        )
        assert checks["daemon"].ok and "decode step torch" in checks["daemon"].detail
    finally:
        daemon.stop()


def test_a_missing_model_directory_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = tmp_path / "no-such-model"
    env = {"LING_LOCAL_MODEL__PATH": str(missing), "CUDA_VISIBLE_DEVICES": ""}
    with pytest.raises((EngineNotReady, RuntimeError), match=r"model directory .* not found"):
        start_daemon("local", tmp_path / "home", env=env, timeout=60)
    monkeypatch.setenv("LING_LOCAL_MODEL__PATH", str(missing))
    checks = {c.name: c for c in collect_checks("local")}
    assert checks["model files"].ok is False
    assert "missing config.json" in checks["model files"].detail
    assert "decode step" not in checks  # nothing to decide without a model
