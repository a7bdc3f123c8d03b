"""`ling-local doctor` on GPU profiles: GPUs and driver, memory against the model, NCCL
settings, model/draft files, SGLang importable. nvidia-smi is replaced by a script that
prints what the real one prints for `--query-gpu ... --format=csv,noheader,nounits`."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ling_local.config import load_profile
from ling_local.engines.sglang.checks import profile_checks
from tests.sglang.conftest import write_standin_profile
from tests.sglang.test_remote import remote_profile
from tests.support import REPO, DaemonProcess, child_env


def fake_nvidia_smi(bin_dir: Path, gpus: int, free_mib: int = 180_000) -> None:
    rows = "\\n".join(f"{i}, NVIDIA B200, 183359, {free_mib}, 580.95.05" for i in range(gpus))
    script = bin_dir / "nvidia-smi"
    script.write_text(f"#!/bin/sh\nprintf '{rows}\\n'\n")
    script.chmod(0o755)


@pytest.fixture
def path_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))
    return bin_dir


def checks(profile) -> dict[str, tuple[bool | None, str]]:
    return {name: (ok, detail) for name, ok, detail in profile_checks(profile)}


def test_ling_profile_on_a_machine_without_gpus_or_weights(path_dir: Path) -> None:
    found = checks(load_profile("ling-3.0-flash-dspark"))
    assert found["nvidia gpus"][0] is False and "needs 4" in found["nvidia gpus"][1]
    assert found["model files"] == (
        False,
        "inclusionAI/Ling-3.0-flash not found; "
        "download it: huggingface-cli download inclusionAI/Ling-3.0-flash",
    )
    assert found["draft files"][0] is False
    assert found["nccl"][0] is True and "NCCL_NVLS_ENABLE=0" in found["nccl"][1]


def test_gpus_memory_and_files_of_a_local_model(path_dir: Path, tmp_path: Path, model_dir):
    fake_nvidia_smi(path_dir, gpus=4)
    profile = load_profile(
        write_standin_profile(tmp_path / "p.toml", model_dir, sglang={"tp_size": 4})
    )
    found = checks(profile)
    assert found["nvidia gpus"] == (True, "4 x NVIDIA B200, driver 580.95.05; needs 4")
    assert found["model files"][0] is True
    assert found["gpu memory"][0] is True and "tp 4" in found["gpu memory"][1]
    # The stand-in is what `python -m sglang.launch_server` finds on this profile's path.
    assert found["sglang"][0] is True
    too_many = load_profile(
        write_standin_profile(tmp_path / "q.toml", model_dir, sglang={"tp_size": 8})
    )
    assert checks(too_many)["nvidia gpus"][0] is False


def test_incomplete_model_directory_names_what_is_missing(
    path_dir: Path, tmp_path: Path, model_dir: Path
) -> None:
    broken = tmp_path / "broken"
    shutil.copytree(model_dir, broken)
    (broken / "tokenizer.json").unlink()
    profile = load_profile(write_standin_profile(tmp_path / "p.toml", broken))
    ok, detail = checks(profile)["model files"]
    assert ok is False and "tokenizer" in detail


def test_not_enough_gpu_memory_is_a_failure(path_dir: Path, tmp_path: Path, model_dir):
    fake_nvidia_smi(path_dir, gpus=1, free_mib=0)
    profile = load_profile(write_standin_profile(tmp_path / "p.toml", model_dir))
    ok, detail = checks(profile)["gpu memory"]
    assert ok is False and "too little room" in detail


def test_remote_profile_checks_the_server(
    daemon: DaemonProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    profile = load_profile(remote_profile(tmp_path / "r.toml", daemon.url + "/v1"))
    monkeypatch.delenv("UPSTREAM_KEY", raising=False)
    assert checks(profile)["remote key"][0] is False
    monkeypatch.setenv("UPSTREAM_KEY", daemon.token)
    assert checks(profile)["remote server"] == (True, f"{daemon.url}/v1: test")


def test_doctor_command_fails_on_a_ling_profile_here(tmp_path: Path) -> None:
    env = child_env(tmp_path, PATH=str(tmp_path))
    out = subprocess.run(
        [sys.executable, "-m", "ling_local", "doctor", "--profile", "ling-3.0-flash-dspark"],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=120,
    )
    assert out.returncode == 1
    assert "huggingface-cli download" in out.stdout and "nccl" in out.stdout
