"""Flag check: every shipped SGLang profile's generated command line parses with SGLang's
own argument parser (`ServerArgs.add_cli_args`), so a renamed or removed flag fails here
instead of at a user's start-up.

Where SGLang is installed (the GPU script runs this with the kit's 0.5.17) it is used as
is. Elsewhere (CI, a laptop) the test installs the SGLang release the Ling profiles need,
without its dependencies, into ``.sglang-parser/`` (git-ignored, reused) and parses with
GPU-only imports stubbed (see flagcheck.py); it skips only when that install fails.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import REPO

SGLANG_FOR_LING = "0.5.23"
PARSER_DEPS = ["msgspec==0.22.0"]
CACHE = REPO / ".sglang-parser" / SGLANG_FOR_LING
FLAGCHECK = Path(__file__).with_name("flagcheck.py")


def _parser_env() -> tuple[dict[str, str], list[str]]:
    """(environment, extra flagcheck args) for the SGLang whose parser is used."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LING_LOCAL_")}
    if importlib.util.find_spec("sglang") is not None:
        return env, []
    if not (CACHE / "sglang" / "srt" / "server_args.py").is_file():
        CACHE.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "-q",
                "--no-deps",
                "--no-compile",
                "--target",
                str(CACHE),
                f"sglang=={SGLANG_FOR_LING}",
                *PARSER_DEPS,
            ],
            capture_output=True,
            text=True,
            timeout=600,
        )
        if done.returncode != 0:
            pytest.skip(
                f"cannot install sglang=={SGLANG_FOR_LING} to read its parser: "
                f"{done.stderr.strip()[-300:]}"
            )
    env["PYTHONPATH"] = os.pathsep.join([str(CACHE), str(REPO)])
    return env, ["--stub-gpu-modules"]


def bad_profile(path: Path, args: list[str]) -> Path:
    path.write_text(
        f'name = "{path.stem}"\n[engine]\nkind = "sglang"\n[model]\npath = "/models/m"\n'
        f"[sglang]\nargs = {json.dumps(args)}\n"
    )
    return path


def test_every_profile_parses_with_sglangs_own_parser(tmp_path: Path) -> None:
    env, extra = _parser_env()
    shipped = sorted(
        p for p in (REPO / "configs").glob("*.toml") if 'kind = "sglang"' in p.read_text()
    )
    assert len(shipped) >= 5
    renamed = bad_profile(tmp_path / "renamed.toml", ["--mamba-scheduler-strategyy", "x"])
    bad_choice = bad_profile(tmp_path / "badchoice.toml", ["--mamba-radix-cache-strategy", "bogus"])
    out = subprocess.run(
        [sys.executable, str(FLAGCHECK), *extra, *map(str, shipped), str(renamed), str(bad_choice)],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=600,
    )
    results = {r["profile"]: r for r in map(json.loads, out.stdout.splitlines())}
    assert set(results) == {p.stem for p in shipped} | {"renamed", "badchoice"}, out.stderr
    for path in shipped:
        assert results[path.stem]["ok"], results[path.stem]
    # The check has teeth: a misspelt flag and a bad choice are both refused.
    assert "mamba-scheduler-strategyy" in results["renamed"]["error"]
    assert "bogus" in results["badchoice"]["error"]
