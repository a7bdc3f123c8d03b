"""`ling-local doctor` for GPU profiles (SGLang, remote): what the profile needs against what
this machine has. Each check is (name, ok, detail): ok is True, False (a problem that
stops the engine from starting) or None (information).

Nothing here imports SGLang or touches a GPU context: GPUs come from ``nvidia-smi``, the
SGLang version from package metadata in the interpreter the child would run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from ling_local.config import SAFE_GPU_ENV, Profile

__all__ = ["gpu_inventory", "model_files", "profile_checks"]

Check = tuple[str, bool | None, str]
#: The first SGLang release seen to serve BailingMoeV3 (Ling-3.0); 0.5.17 does not.
LING3_MIN_SGLANG = (0, 5, 23)
_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "float8_e4m3fn": 1, "int8": 1}


def gpu_inventory() -> list[dict] | None:
    """[{index, name, total_gib, free_gib, driver}] from nvidia-smi; None without it."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    query = "index,name,memory.total,memory.free,driver_version"
    try:
        out = subprocess.run(
            [exe, f"--query-gpu={query}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    gpus = []
    for line in out.strip().splitlines():
        idx, name, total, free, driver = (p.strip() for p in line.split(","))
        gpus.append(
            {
                "index": int(idx),
                "name": name,
                "total_gib": float(total) / 1024,
                "free_gib": float(free) / 1024,
                "driver": driver,
            }
        )
    return gpus


def _local_dir(profile: Profile, ref: str) -> Path | None:
    from ling_local.engines.sglang.command import local_model_dir, model_reference

    return local_model_dir(model_reference(profile, ref))


def model_files(directory: Path) -> tuple[list[str], int]:
    """(missing pieces, bytes of weights) of a Hugging Face model directory."""
    weights = [*directory.glob("*.safetensors"), *directory.glob("*.bin")]
    missing = []
    if not (directory / "config.json").is_file():
        missing.append("config.json")
    if not weights:
        missing.append("weights (*.safetensors)")
    index = directory / "model.safetensors.index.json"
    if index.is_file():
        shards = set(json.loads(index.read_text()).get("weight_map", {}).values())
        absent = sorted(s for s in shards if not (directory / s).exists())
        if absent:
            missing.append(f"{len(absent)} of {len(shards)} weight shards ({absent[0]}, ...)")
    if not any((directory / f).is_file() for f in ("tokenizer.json", "tokenizer.model")):
        missing.append("tokenizer (tokenizer.json)")
    return missing, sum(w.stat().st_size for w in weights if w.exists())


def _files_check(profile: Profile, label: str, ref: str) -> tuple[Check, int]:
    directory = _local_dir(profile, ref)
    if directory is None:
        hint = f"; download it: huggingface-cli download {ref}" if ref.count("/") == 1 else ""
        return (f"{label} files", False, f"{ref} not found{hint}"), 0
    missing, size = model_files(directory)
    if missing:
        return (f"{label} files", False, f"{directory}: missing {', '.join(missing)}"), size
    return (f"{label} files", True, f"{directory} ({size / 2**30:.1f} GiB of weights)"), size


def _estimated_weight_bytes(profile: Profile) -> int:
    """params x bytes from config.json, when the weights are not on disk yet."""
    directory = _local_dir(profile, profile.model.path)
    try:
        cfg = json.loads((directory / "config.json").read_text())  # type: ignore[operator]
    except (OSError, TypeError, ValueError):
        return 0
    h, layers = cfg.get("hidden_size", 0), cfg.get("num_hidden_layers", 0)
    inter = cfg.get("moe_intermediate_size") or cfg.get("intermediate_size", 0)
    experts = (cfg.get("num_experts") or cfg.get("n_routed_experts") or 1) + (
        cfg.get("num_shared_experts") or 0
    )
    params = 2 * cfg.get("vocab_size", 0) * h + layers * (4 * h * h + 3 * h * inter * experts)
    return params * _BYTES.get(str(cfg.get("torch_dtype", "bfloat16")), 2)


def _memory_check(profile: Profile, gpus: list[dict], weight_bytes: int) -> Check:
    s = profile.sglang
    if not weight_bytes:
        weight_bytes = _estimated_weight_bytes(profile)
    if not weight_bytes:
        return ("gpu memory", None, "model size unknown until it is downloaded")
    used = sorted(gpus, key=lambda g: g["free_gib"], reverse=True)[: s.tp_size]
    fraction = s.mem_fraction_static or 0.8
    per_gpu = weight_bytes / 2**30 / s.tp_size
    budget = min(g["free_gib"] for g in used) * fraction
    detail = (
        f"~{per_gpu:.1f} GiB of weights per GPU (tp {s.tp_size}); "
        f"{fraction:g} of the emptiest GPU's free memory = {budget:.1f} GiB"
    )
    return (
        "gpu memory",
        per_gpu < budget * 0.9,
        detail
        + ("" if per_gpu < budget * 0.9 else ": too little room for the weights and a KV cache"),
    )


def _sglang_check(profile: Profile) -> Check:
    python = profile.sglang.python or sys.executable
    env = {**os.environ, **profile.sglang.env}
    code = (
        "import importlib.util as u, importlib.metadata as m\n"
        "spec = u.find_spec('sglang')\n"
        "print('missing' if spec is None else m.version('sglang'))\n"
    )
    try:
        out = subprocess.run(
            [python, "-c", code], capture_output=True, text=True, env=env, timeout=60
        )
    except (OSError, subprocess.SubprocessError) as err:
        return ("sglang", False, f"cannot run {python}: {err}")
    version = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else ""
    if out.returncode != 0 and "PackageNotFoundError" in out.stderr:
        return ("sglang", True, f"importable from {python} (version unknown)")
    if out.returncode != 0 or not version or version == "missing":
        return ("sglang", False, f"not importable by {python}: pip install 'ling-local[sglang]'")
    directory = _local_dir(profile, profile.model.path)
    arch = ""
    if directory is not None and (directory / "config.json").is_file():
        arch = (json.loads((directory / "config.json").read_text()).get("architectures") or [""])[0]
    numbers = tuple(int(p) for p in version.split(".")[:3] if p.isdigit())
    if ("BailingMoeV3" in arch or "Ling-3.0" in profile.model.path) and numbers < LING3_MIN_SGLANG:
        need = ".".join(map(str, LING3_MIN_SGLANG))
        return ("sglang", False, f"{version} cannot serve Ling-3.0 (BailingMoeV3); needs >= {need}")
    return ("sglang", True, f"{version} ({python})")


def _nccl_check(profile: Profile) -> Check:
    if profile.sglang.allow_nvlink_multicast:
        return (
            "nccl",
            None,
            "NVLink multicast left to NCCL's default "
            "(sglang.allow_nvlink_multicast): never on a host whose GPUs others share",
        )
    settings = ", ".join(f"{k}={v}" for k, v in SAFE_GPU_ENV.items())
    extra = [
        f"{k}={v}" for k, v in os.environ.items() if k.startswith("NCCL_") and k not in SAFE_GPU_ENV
    ]
    return (
        "nccl",
        True,
        f"NVLink multicast off ({settings})" + (f"; also set: {', '.join(extra)}" if extra else ""),
    )


def _remote_checks(profile: Profile) -> list[Check]:
    import httpx

    r = profile.remote
    headers = {}
    if r.api_key_env:
        if not os.environ.get(r.api_key_env):
            return [("remote key", False, f"{r.api_key_env} is not set")]
        headers["Authorization"] = f"Bearer {os.environ[r.api_key_env]}"
    try:
        res = httpx.get(
            r.base_url.rstrip("/") + "/models", headers=headers, timeout=5, trust_env=False
        )
        res.raise_for_status()
        ids = [m.get("id") for m in res.json().get("data", [])]
    except (httpx.HTTPError, ValueError) as err:
        return [("remote server", False, f"{r.base_url}: {type(err).__name__}: {err}")]
    if r.model is not None and r.model not in ids:
        return [("remote server", False, f"{r.base_url} does not serve {r.model!r} ({ids})")]
    return [("remote server", True, f"{r.base_url}: {', '.join(map(str, ids))}")]


def profile_checks(profile: Profile) -> list[Check]:
    if profile.engine.kind == "remote":
        return _remote_checks(profile)
    checks: list[Check] = []
    gpus = gpu_inventory()
    need = profile.sglang.tp_size
    if not gpus:
        why = "nvidia-smi not found" if gpus is None else "nvidia-smi lists none"
        checks.append(
            ("nvidia gpus", False, f"no NVIDIA GPU seen ({why}); this profile needs {need}")
        )
    else:
        names = ", ".join(sorted({g["name"] for g in gpus}))
        checks.append(
            (
                "nvidia gpus",
                len(gpus) >= need,
                f"{len(gpus)} x {names}, driver {gpus[0]['driver']}; needs {need}",
            )
        )
    model_check, size = _files_check(profile, "model", profile.model.path)
    checks.append(model_check)
    if profile.model.draft_path and profile.sglang.speculative_algorithm:
        draft_check, draft_size = _files_check(profile, "draft", profile.model.draft_path)
        checks.append(draft_check)
        size += draft_size
    if gpus:
        checks.append(_memory_check(profile, gpus, size))
    checks.append(_nccl_check(profile))
    checks.append(_sglang_check(profile))
    return checks
