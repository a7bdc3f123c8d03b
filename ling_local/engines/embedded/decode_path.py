"""Which decode step the embedded engine runs, and why: the hand-written Triton step
(`triton/`) or the PyTorch one. `engine.kernels = "auto"` (the default) takes the Triton
step wherever it can run, the torch step elsewhere; "triton" insists (a profile that cannot
run it fails at load, with the reason); "torch" never takes it.

Decided from the profile, the device and the model's config alone, so `ling-local doctor`
can say what a daemon would run before it loads anything; the engine decides again from the
loaded weights and reports the answer in `/health`. Imports no triton."""

from __future__ import annotations

import importlib.metadata
import importlib.util
from dataclasses import dataclass
from typing import Any, Literal

import torch

from ling_local.config import EngineSettings
from ling_local.engines.embedded.llama_runner import supports
from ling_local.engines.embedded.triton.setup import ModelShape, unsupported_reason
from ling_local.errors import ConfigError

__all__ = ["DecodePath", "decode_path"]


@dataclass(frozen=True, slots=True)
class DecodePath:
    kernels: Literal["torch", "triton"]
    """The decode step's kernels."""
    why: str
    """The reason, in words a user can act on."""

    def as_dict(self) -> dict[str, str]:
        return {"kernels": self.kernels, "why": self.why}


def _blocker(
    engine: EngineSettings, device: torch.device, config: Any, shape: ModelShape
) -> str | None:
    """Why the Triton step cannot run here, or None when it can."""
    if device.type != "cuda":
        return f"the Triton step needs a CUDA GPU; the model runs on the {device.type}"
    if not supports(config):
        kind = getattr(config, "model_type", "this")
        return f"the Triton step runs Llama/Mistral/Qwen2-style models, not {kind} ones"
    if not engine.cuda_graphs:
        return "the Triton step runs inside CUDA graphs and engine.cuda_graphs is off"
    if engine.compile:
        return "engine.compile asks for the compiled torch step"
    if importlib.util.find_spec("triton") is None:
        return "the triton package is not installed"
    return unsupported_reason(shape)


def decode_path(
    engine: EngineSettings,
    device: torch.device,
    dtype: torch.dtype,
    config: Any,
    shape: ModelShape | None = None,
) -> DecodePath:
    """The decode step for a model with Hugging Face `config` loaded in `dtype` on `device`
    (`shape`: the loaded weights' shape, else the config's). Raises ConfigError when the
    profile asks for the Triton step and it cannot run."""
    if engine.kernels == "torch":
        return DecodePath("torch", "the profile sets engine.kernels = 'torch'")
    blocker = _blocker(engine, device, config, shape or ModelShape.of_config(config, dtype))
    if engine.kernels == "triton":
        if blocker is not None:
            raise ConfigError(f"engine.kernels = 'triton': {blocker}")
        return DecodePath("triton", "the profile sets engine.kernels = 'triton'")
    if blocker is not None:
        return DecodePath("torch", blocker)
    version = importlib.metadata.version("triton")
    name = torch.cuda.get_device_name(device)
    return DecodePath(
        "triton",
        f"engine.kernels = 'auto': {name}, a {config.model_type} model in bfloat16, "
        f"CUDA graphs on, triton {version}",
    )
