"""scripts/gpu_kernel_sweep.py and its data.

On the CPU (no kernel runs): every variant of the sweep's grids and every move of the
whole-step tune's spaces is a config the shipped kernels take, and the best.json the script
writes is a file the kernels load. On a GPU (`-m gpu`): the script end to end on the
Llama-3.2-1B shape, one kernel's quick grid and the smoke tune: it picks a best variant, the
whole step runs, the Triton step agrees with the PyTorch one, the screened head gives the
full head's argmax, and best.json holds every config after the tune."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "scripts"


@pytest.fixture
def scripts(monkeypatch: pytest.MonkeyPatch):
    """The scripts' modules (beside each other, as the sweep imports them), with the
    kernels' configs restored after the test."""
    from ling_local.engines.embedded.triton import setup

    monkeypatch.syspath_prepend(str(SCRIPTS))
    for table in (setup.CONFIGS, setup.VERIFY_CONFIGS, setup.ATTN):
        for name, cfg in list(table.items()):
            monkeypatch.setitem(table, name, cfg)
    import kernel_grid
    import kernel_tune

    return kernel_grid, kernel_tune, setup


def test_every_grid_variant_is_a_config(scripts) -> None:
    kernel_grid, _, setup = scripts
    previous = REPO / "docs" / "bench" / "kernel_sweep_h200_run3.json"
    grids = [kernel_grid.grid(quick=False), kernel_grid.grid(quick=True, half_head=16)]
    if previous.is_file():
        grids.append(kernel_grid.focused(previous))
    for variants in grids:
        assert set(variants) >= {"qkv", "gate_up", "o", "down", "lm_head", "attn"}
        for name, configs in variants.items():
            assert configs, name
            for cfg in configs:
                setup.apply_config(name, cfg)
    assert any(c.get("tma") for c in grids[0]["lm_head"])  # the head's shipped form


def test_every_tune_move_applies_to_the_shipped_configs(scripts) -> None:
    _, kernel_tune, _ = scripts
    assert set(kernel_tune.SPACES) == {"step", "keep", "screen", "smoke"}
    for space in kernel_tune.SPACES.values():
        for name, field, values in space:
            keep = kernel_tune.current(name, field)
            for value in values:
                kernel_tune.apply_move(name, field, value)
                if field != "config":
                    assert kernel_tune.current(name, field) == value
            kernel_tune.apply_move(name, field, keep)


def test_best_json_loads_into_the_kernels(scripts, tmp_path: Path) -> None:
    """What `--tune-step` writes (every config) is what LING_LOCAL_TRITON_CONFIGS loads."""
    _, _, setup = scripts
    configs = {n: asdict(c) for n, c in setup.CONFIGS.items()}
    configs.update({n: asdict(c) for n, c in setup.ATTN.items()})
    configs["o"] = dict(configs["o"], block_n=8)
    best = tmp_path / "best.json"
    best.write_text(json.dumps(configs))
    env = {k: v for k, v in os.environ.items() if not k.startswith("LING_LOCAL_")}
    code = "from ling_local.engines.embedded.triton import setup as s; print(s.CONFIGS['o'])"
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True,
        env={**env, "LING_LOCAL_TRITON_CONFIGS": str(best)},
    )  # fmt: skip
    assert "block_n=8," in loaded.stdout
    best.write_text(json.dumps({"pdl": True}))  # a knob that is gone is refused
    with pytest.raises(ValueError, match="unknown kernel 'pdl'"):
        setup.load_configs(best)


@pytest.mark.gpu
@pytest.mark.slow
def test_the_sweep_on_a_gpu(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LING_LOCAL_")}
    out = subprocess.run(
        [sys.executable, str(SCRIPTS / "gpu_kernel_sweep.py"), "--quick", "--only", "o",
         "--workers", "4", "--tune-step", "--space", "smoke", "--out", str(tmp_path)],
        capture_output=True, text=True, env=env, timeout=600, cwd=REPO,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads((tmp_path / "kernel_sweep.json").read_text())
    best = result["sweep"]["o"]["best"]
    assert best is not None and best["us"] > 0
    assert set(result["step_ms"]) >= {"triton", "triton, screened head", "torch graph"}
    assert all(isinstance(v, float) for v in result["step_ms"].values()), result["step_ms"]
    agreement = result["agreement"]
    assert agreement["logits_rel_err_max"] < 0.05
    steps = agreement["steps"]
    assert agreement["screened_argmax_equal_full_head"] == f"{steps}/{steps}"
    tune = result["tune_step"]
    assert isinstance(tune, dict), tune  # a traceback string when it failed
    tried = [t for t in tune["trail"] if "kernel" in t]
    assert len(tried) == 3 and all(isinstance(t["ms"], float) for t in tried)
    chosen = json.loads((tmp_path / "best.json").read_text())  # every config, after the tune
    assert set(chosen) >= {"qkv", "o", "gate_up", "down", "lm_head", "lm_screen", "attn"}
