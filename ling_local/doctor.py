"""`ling-local doctor`: what this machine has, what the profile needs, and whether the
daemon answers. Prints a table; exit code 1 when something needed is missing."""

from __future__ import annotations

import platform
import stat
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ling_local import discovery, paths

if TYPE_CHECKING:
    from ling_local.config import Profile

__all__ = ["Check", "collect_checks", "run_doctor"]


@dataclass(slots=True)
class Check:
    name: str
    ok: bool | None
    """True = fine, False = a problem, None = information only."""
    detail: str


def _python_checks() -> list[Check]:
    checks = [Check("python", sys.version_info >= (3, 11), platform.python_version())]
    try:
        import torch

        checks.append(Check("torch", True, torch.__version__))
        if torch.cuda.is_available():
            for i in range(torch.cuda.device_count()):
                free, total = torch.cuda.mem_get_info(i)
                checks.append(
                    Check(
                        f"gpu {i}",
                        True,
                        f"{torch.cuda.get_device_name(i)}, "
                        f"{free / 2**30:.1f} of {total / 2**30:.1f} GiB free",
                    )
                )
        else:
            checks.append(Check("gpus", None, "none seen (the embedded engine runs on the CPU)"))
    except ImportError:
        checks.append(Check("torch", False, "not installed: pip install torch==2.13.0"))
    try:
        import transformers

        checks.append(Check("transformers", True, transformers.__version__))
    except ImportError:
        checks.append(Check("transformers", False, "not installed"))
    return checks


def _profile_checks(name: str) -> list[Check]:
    from ling_local.config import load_profile
    from ling_local.errors import ConfigError

    try:
        profile = load_profile(name)
    except ConfigError as err:
        return [Check("profile", False, err.message)]
    checks = [Check("profile", True, f"{profile.name} ({profile.source})")]
    if profile.engine.kind == "torch":
        for label, value in (("model", profile.model.path), ("draft", profile.model.draft_path)):
            if value is None:
                continue
            directory = profile.resolve_path(value)
            assert directory is not None
            has_config = (directory / "config.json").is_file()
            has_weights = any(directory.glob("*.safetensors"))
            has_tok = (directory / "tokenizer.json").is_file()
            ok = has_config and has_weights and has_tok
            missing = [
                n
                for n, present in (
                    ("config.json", has_config),
                    ("*.safetensors", has_weights),
                    ("tokenizer.json", has_tok),
                )
                if not present
            ]
            checks.append(
                Check(
                    f"{label} files",
                    ok if label == "model" else (ok or None),
                    str(directory) + ("" if ok else f" (missing {', '.join(missing)})"),
                )
            )
            if label == "model" and has_config:
                checks.append(_decode_check(profile, directory))
    else:
        try:
            from ling_local.engines.sglang.checks import profile_checks
        except ImportError:
            return checks
        checks.extend(Check(*c) for c in profile_checks(profile))
    return checks


def _decode_check(profile: Profile, directory: Path) -> Check:
    """Which decode step the embedded engine would run with this profile here, and why
    (`decode_path`, from the model's config.json: nothing is loaded)."""
    try:
        import torch  # noqa: F401 (the checks above say when it is missing)
        from transformers import AutoConfig

        from ling_local.engines.embedded.decode_path import decode_path
        from ling_local.engines.embedded.hf_runner import resolve_device, resolve_dtype
        from ling_local.errors import ConfigError
    except ImportError as err:
        return Check("decode step", None, f"unknown ({err.name} is not installed)")
    settings = profile.model
    try:
        device = resolve_device(settings.device)
        config = AutoConfig.from_pretrained(
            directory, local_files_only=True, trust_remote_code=settings.trust_remote_code
        )
        chosen = decode_path(profile.engine, device, resolve_dtype(settings.dtype, device), config)
    except ConfigError as err:
        return Check("decode step", False, err.message)
    except (OSError, ValueError) as err:
        return Check("decode step", False, f"cannot read {directory / 'config.json'}: {err}")
    return Check("decode step", None, f"{chosen.kernels}: {chosen.why}")


def _daemon_checks() -> list[Check]:
    checks = []
    token_file = paths.token_file()
    if token_file.exists():
        mode = stat.S_IMODE(token_file.stat().st_mode)
        checks.append(Check("token file", mode == 0o600, f"{token_file} (mode {mode:o})"))
    else:
        checks.append(Check("token file", None, f"{token_file} (created by the first serve)"))
    info = discovery.read_daemon_info()
    if info is None:
        checks.append(Check("daemon", None, "not running (start it with `ling-local serve`)"))
        return checks
    from ling_local.client import Client
    from ling_local.errors import LingLocalError

    try:
        with Client(info.url) as client:
            h = client.health()
        decode = f", decode step {h.decode['kernels']}" if h.decode else ""
        checks.append(
            Check(
                "daemon",
                h.ready,
                f"{info.url}: {h.state}, {h.model} ({h.engine}{decode}), pid {info.pid}",
            )
        )
    except LingLocalError as err:
        checks.append(Check("daemon", False, f"{info.url}: {err.message}"))
    return checks


def collect_checks(profile: str) -> list[Check]:
    return [*_python_checks(), *_profile_checks(profile), *_daemon_checks()]


def run_doctor(profile: str) -> int:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    checks = collect_checks(profile)
    table = Table("check", "", "detail")
    marks = {True: "[green]ok[/]", False: "[red]FAIL[/]", None: "[dim]-[/]"}
    for c in checks:
        table.add_row(c.name, marks[c.ok], escape(c.detail))
    Console().print(table)
    return 1 if any(c.ok is False for c in checks) else 0
