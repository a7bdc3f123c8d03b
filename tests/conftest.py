from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import (
    DaemonProcess,
    start_daemon,
    write_profile,
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked `gpu` (the full Triton kernel suite, the engine's GPU path) run with
    `pytest -m gpu` on a CUDA machine and are skipped without one."""
    gpu = [item for item in items if item.get_closest_marker("gpu")]
    if not gpu:
        return
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (marked gpu: run with -m gpu on one)")
    for item in gpu:
        item.add_marker(skip)


@pytest.fixture(autouse=True)
def _isolated_home(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No test ever touches the real ~/.config or ~/.local: everything goes to a tmp home."""
    monkeypatch.setenv("LING_LOCAL_HOME", str(tmp_path_factory.mktemp("home")))
    for var in ("LING_LOCAL_URL", "LING_LOCAL_TOKEN"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small random-weight Llama with a real tokenizer: the daemon, the clients and the
    engine's mechanics do not depend on what the model knows, and it loads and decodes in a
    fraction of the shipped model's time. The shipped model has tests of its own
    (`test_tiny_model.py`, `test_readme.py`, the examples)."""
    from ling_local.bench.random_model import build_random_llama

    return build_random_llama(  # every matrix dimension a multiple of 32 (int8, q8_0 blocks)
        tmp_path_factory.mktemp("model"),
        vocab_size=1024,
        hidden_size=64,
        intermediate_size=192,
        num_layers=2,
    )


@pytest.fixture(scope="session")
def profile_path(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_profile(tmp_path_factory.mktemp("profiles") / "test.toml", str(model_dir))


@pytest.fixture(scope="session")
def daemon(profile_path: Path, tmp_path_factory: pytest.TempPathFactory) -> DaemonProcess:
    """One real daemon (uvicorn, loopback TCP) shared by the session's tests."""
    d = start_daemon(profile_path, tmp_path_factory.mktemp("daemon-home"))
    yield d
    d.stop()


@pytest.fixture(scope="module")
def app_client(profile_path: Path):
    """The daemon's app in-process (same factory as `serve`), with its lifespan running."""
    from starlette.testclient import TestClient

    from ling_local.config import load_profile
    from ling_local.server.app import create_app

    app = create_app(load_profile(str(profile_path)), token="test-token", wait_for_engine=True)
    with TestClient(
        app, base_url="http://127.0.0.1:8741", headers={"Authorization": "Bearer test-token"}
    ) as client:
        yield client


@pytest.fixture(scope="session")
def draft_dir(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A smaller random Llama with the same tokenizer as the random `model_dir`."""
    from ling_local.bench.random_model import build_random_llama

    return build_random_llama(
        tmp_path_factory.mktemp("draft"),
        vocab_size=1024,
        hidden_size=32,
        num_layers=1,
        num_heads=2,
        seed=1,
    )
