"""Profiles -> the launch_server command line and environment. The Ling profiles must
reproduce the published recipe (shared/reference/sglang.md) flag for flag."""

from __future__ import annotations

import shlex
import stat

import pytest
import yaml

from ling_local.config import SAFE_GPU_ENV, load_profile, profile_from_dict
from ling_local.engines.sglang import build_command
from ling_local.engines.sglang.command import child_environment, model_reference
from ling_local.errors import ConfigError

# The Ling-3.0-flash cookbook cell (B200 BF16, DSpark), as published.
COOKBOOK_DSPARK = """
SGLANG_RAGGED_VERIFY_MODE=static SGLANG_OPT_FUSED_KDA_VERIFY=1 \\
python -m sglang.launch_server --model-path inclusionAI/Ling-3.0-flash --tp-size 4 \\
  --trust-remote-code --speculative-algorithm DSPARK \\
  --speculative-draft-model-path inclusionAI/Ling-3.0-flash-dspark \\
  --enable-linear-replayssm-spec --linear-replayssm-cache-len 32 \\
  --attention-backend trtllm_mla --flashinfer-allreduce-fusion-backend auto \\
  --mem-fraction-static 0.8
"""
NEXTN_VARIANT = (
    "--speculative-algorithm NEXTN --speculative-num-steps 5 "
    "--speculative-eagle-topk 1 --speculative-num-draft-tokens 6"
)
# Our one documented addition to every Ling profile: prefix reuse for completion.
PREFIX_CACHE = ["--mamba-radix-cache-strategy", "extra_buffer"]
DSPARK_ONLY = [
    "--speculative-draft-model-path",
    "--enable-linear-replayssm-spec",
    "--linear-replayssm-cache-len",
]


def parse(command: str) -> tuple[dict[str, str], list[str]]:
    """(env, flags) of a shell command line like the published one."""
    words = shlex.split(command.replace("\\\n", " "))
    env = {}
    while "=" in words[0]:
        key, value = words.pop(0).split("=", 1)
        env[key] = value
    assert words[:3] == ["python", "-m", "sglang.launch_server"]
    return env, words[3:]


def pairs(flags: list[str]) -> list[tuple[str, str | None]]:
    out: list[tuple[str, str | None]] = []
    for word in flags:
        if word.startswith("--"):
            out.append((word, None))
        else:
            out[-1] = (out[-1][0], word)
    return out


def generated(profile: str) -> tuple[dict[str, str], list[str]]:
    """(profile-specific env, flags without the daemon-owned ones: streaming mode, warm-up,
    address, port and key)."""
    cmd = build_command(load_profile(profile), port=40000, api_key="k" * 64)
    assert cmd.argv[1:3] == ["-m", "sglang.launch_server"]
    tail = [
        "--incremental-streaming-output",
        "--skip-server-warmup",
        "--host",
        "127.0.0.1",
        "--config",
        str(cmd.key_file),
    ]
    assert cmd.argv[-6:] == tail
    env = {k: v for k, v in cmd.env.items() if k not in SAFE_GPU_ENV and k != "PYTHONUNBUFFERED"}
    for key, value in SAFE_GPU_ENV.items():
        assert cmd.env[key] == value
    return env, cmd.argv[3:-6]


def test_dspark_profile_is_the_cookbook_cell_plus_prefix_cache() -> None:
    env, flags = generated("ling-3.0-flash-dspark")
    published_env, published = parse(COOKBOOK_DSPARK)
    assert env == published_env
    expected = published[:-2] + PREFIX_CACHE + published[-2:]  # same order, one addition
    assert flags == expected


def test_fp8_profile_adds_ep_size_4_to_the_cell() -> None:
    env, flags = generated("ling-3.0-flash-fp8")
    published_env, published = parse(COOKBOOK_DSPARK)
    assert env == published_env
    expected = dict(pairs(published)) | {
        "--model-path": "inclusionAI/Ling-3.0-flash-fp8",
        "--ep-size": "4",
        PREFIX_CACHE[0]: PREFIX_CACHE[1],
    }
    assert dict(pairs(flags)) == expected
    assert len(pairs(flags)) == len(expected)


def test_nextn_profile_swaps_dspark_for_the_published_nextn_variant() -> None:
    env, flags = generated("ling-3.0-flash-nextn")
    _, published = parse(COOKBOOK_DSPARK)
    base = {f: v for f, v in pairs(published) if f not in DSPARK_ONLY}
    expected = base | dict(pairs(NEXTN_VARIANT.split())) | {PREFIX_CACHE[0]: PREFIX_CACHE[1]}
    assert env == {}  # the two KDA verify variables belong to DSpark's ragged verify
    assert dict(pairs(flags)) == expected
    assert len(pairs(flags)) == len(expected)


def test_tiny_profile_runs_on_one_gpu_with_prefix_reuse() -> None:
    _, flags = generated("ling-3.0-tiny")
    assert dict(pairs(flags)) == {
        "--model-path": "inclusionAI/Ling-3.0-tiny",
        "--trust-remote-code": None,
        "--mamba-radix-cache-strategy": "extra_buffer",
        "--mem-fraction-static": "0.8",
    }


def test_no_profile_enables_custom_logit_processors() -> None:
    for name in (
        "ling-3.0-flash-dspark",
        "ling-3.0-flash-nextn",
        "ling-3.0-flash-fp8",
        "ling-3.0-tiny",
        "sglang-generic",
    ):
        assert "--enable-custom-logit-processor" not in generated(name)[1]


def sglang_profile(**sglang) -> dict:
    return {"name": "p", "engine": {"kind": "sglang"}, "model": {"path": "/m"}, "sglang": sglang}


@pytest.mark.parametrize(
    ("sglang", "message"),
    [
        ({"args": ["--port", "1"]}, "--port is set by the daemon"),
        ({"args": ["--api-key=x"]}, "--api-key is set by the daemon"),
        ({"args": ["--config", "x.yaml"]}, "--config is set by the daemon"),
        ({"args": ["--tp-size", "2"]}, "use tp_size instead"),
        ({"args": ["--enable-custom-logit-processor"]}, "is refused"),
        ({"env": {"NCCL_NVLS_ENABLE": "1"}}, "allow_nvlink_multicast"),
    ],
)
def test_bad_sglang_settings_fail_at_load_with_the_field_name(sglang: dict, message: str) -> None:
    with pytest.raises(ConfigError, match="sglang") as err:
        profile_from_dict(sglang_profile(**sglang))
    assert message in err.value.message


def test_nvlink_multicast_stays_off_unless_explicitly_allowed() -> None:
    locked = profile_from_dict(sglang_profile(env={"FOO": "1"}))
    env = build_command(locked, port=1, api_key="k").env
    assert env["FOO"] == "1" and all(env[k] == v for k, v in SAFE_GPU_ENV.items())
    allowed = profile_from_dict(
        sglang_profile(allow_nvlink_multicast=True, env={"NCCL_NVLS_ENABLE": "1"})
    )
    env = build_command(allowed, port=1, api_key="k").env
    assert env["NCCL_NVLS_ENABLE"] == "1" and "NVSHMEM_DISABLE_NVLS" not in env


def test_child_environment_drops_the_daemons_own_settings() -> None:
    cmd = build_command(profile_from_dict(sglang_profile()), port=1, api_key="k")
    env = child_environment(cmd, {"LING_LOCAL_TOKEN": "secret", "HF_HOME": "/hf", "PATH": "/b"})
    assert "LING_LOCAL_TOKEN" not in env
    assert env["HF_HOME"] == "/hf" and env["NCCL_NVLS_ENABLE"] == "0"


def test_the_key_and_port_are_in_a_private_config_file_never_on_the_command_line() -> None:
    # Any local user can read /proc/PID/cmdline: with the port there, another user could
    # bind it during the minutes SGLang spends loading, and receive the key (issue 39).
    cmd = build_command(profile_from_dict(sglang_profile()), port=40123, api_key="s3cret" * 8)
    assert not any("s3cret" in a for a in cmd.argv) and "--api-key" not in cmd.argv
    assert "--port" not in cmd.argv and not any("40123" in a for a in cmd.argv)
    assert "s3cret" not in cmd.redacted()
    assert cmd.argv[-2:] == ["--config", str(cmd.key_file)]
    cmd.write_key_file()
    assert stat.S_IMODE(cmd.key_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(cmd.key_file.parent.stat().st_mode) == 0o700
    assert yaml.safe_load(cmd.key_file.read_text()) == {"api-key": "s3cret" * 8, "port": 40123}
    cmd.remove_key_file()
    assert not cmd.key_file.exists()


def test_the_key_file_is_never_written_through_a_symlink(tmp_path) -> None:
    cmd = build_command(profile_from_dict(sglang_profile()), port=2, api_key="k" * 64)
    victim = tmp_path / "victim"
    victim.write_text("data")
    cmd.key_file.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    cmd.key_file.symlink_to(victim)
    cmd.write_key_file()  # the stale link goes; a new file is created in its place
    assert victim.read_text() == "data"
    assert not cmd.key_file.is_symlink() and "k" * 64 in cmd.key_file.read_text()


def test_model_reference_keeps_hub_ids_and_resolves_local_dirs(tmp_path) -> None:
    (tmp_path / "m").mkdir()
    profile = profile_from_dict(sglang_profile(), source=str(tmp_path / "p.toml"))
    assert model_reference(profile, "inclusionAI/Ling-3.0-flash") == "inclusionAI/Ling-3.0-flash"
    assert model_reference(profile, "./m") == str(tmp_path / "m")
    assert model_reference(profile, "m") == str(tmp_path / "m")
