"""Profiles: shipped ones load, bad ones fail with the field name, env overrides work."""

from __future__ import annotations

import pytest

from ling_local.config import list_profiles, load_profile
from ling_local.errors import ConfigError


def test_every_shipped_profile_loads() -> None:
    profiles = list_profiles()
    assert "tiny" in profiles
    for name in profiles:
        p = load_profile(name)
        assert p.name == name
        assert p.served_model_name


def test_tiny_is_the_embedded_default() -> None:
    p = load_profile("tiny")
    assert p.engine.kind == "torch"
    assert p.model.device == "cpu"
    assert p.resolve_path(p.model.path).name == "tiny"


@pytest.mark.parametrize(
    ("toml", "field"),
    [
        ('[model]\npath = "x"\ndtype = "float8"\n', "model.dtype"),
        ('[model]\npath = "x"\ncontext_length = -5\n', "model.context_length"),
        ('[model]\npath = "x"\n[engine]\nkind = "vllm"\n', "engine.kind"),
        ('[model]\npath = "x"\n[sampling]\ntemperature = 9\n', "sampling.temperature"),
        ('[model]\npath = "x"\n[scheduler]\nmax_running = 0\n', "scheduler.max_running"),
        ('[model]\npath = "x"\n[engine]\nspeed = 3\n', "engine.speed"),
        ('[engine]\nkind = "torch"\n', "model"),
        ('[model]\npath = "x"\ndevice = "tpu"\n', "model.device"),
        ('[model]\npath = "x"\n[engine]\nkernels = "cuda"\n', "engine.kernels"),
        ('[model]\npath = "x"\n[engine]\nkernels = "triton"\ncuda_graphs = false\n', "cuda_graphs"),
        ('[model]\npath = "x"\n[engine]\nkernels = "triton"\ncompile = true\n', "compile"),
    ],
)
def test_bad_profile_names_the_field(tmp_path, toml: str, field: str) -> None:
    f = tmp_path / "bad.toml"
    f.write_text(toml)
    with pytest.raises(ConfigError) as err:
        load_profile(str(f))
    assert field in err.value.message


def test_toml_syntax_error_is_a_config_error(tmp_path) -> None:
    f = tmp_path / "broken.toml"
    f.write_text("[model\npath=")
    with pytest.raises(ConfigError, match="cannot read profile"):
        load_profile(str(f))


def test_unknown_profile_lists_known_ones() -> None:
    with pytest.raises(ConfigError, match="tiny"):
        load_profile("no-such-profile")


def test_env_overrides_one_field(monkeypatch) -> None:
    monkeypatch.setenv("LING_LOCAL_MODEL__CONTEXT_LENGTH", "1024")
    monkeypatch.setenv("LING_LOCAL_SCHEDULER__PREEMPT", "false")
    p = load_profile("tiny")
    assert p.model.context_length == 1024
    assert p.scheduler.preempt is False
    assert p.model.path == "builtin:tiny"


def test_bad_env_override_names_the_field(monkeypatch) -> None:
    monkeypatch.setenv("LING_LOCAL_MODEL__DTYPE", "int3")
    with pytest.raises(ConfigError, match=r"model\.dtype"):
        load_profile("tiny")


def test_user_profiles_shadow_shipped_ones(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("LING_LOCAL_HOME", str(tmp_path))
    d = tmp_path / "config" / "profiles"
    d.mkdir(parents=True)
    (d / "tiny.toml").write_text('description = "mine"\n[model]\npath = "/m"\n')
    (d / "extra.toml").write_text('[model]\npath = "rel/model"\n')
    assert load_profile("tiny").description == "mine"
    extra = load_profile("extra")
    assert extra.resolve_path(extra.model.path) == d / "rel" / "model"
