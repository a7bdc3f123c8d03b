"""Model side of the embedded engine: load a Hugging Face checkpoint through transformers and
run forward passes over a per-slot KV cache. Works for any causal LM transformers knows."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import torch

from ling_local.errors import ConfigError

__all__ = ["HFRunner", "load_causal_lm", "resolve_device", "resolve_dtype"]

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"model.device is {device!r} but no CUDA GPU is available")
    return torch.device(device)


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    if dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return _DTYPES[dtype]


def load_causal_lm(
    path: str | Path, *, dtype: torch.dtype, device: torch.device, trust_remote_code: bool = False
) -> Any:
    from transformers import AutoModelForCausalLM

    path = Path(path)
    if not (path / "config.json").is_file():
        raise ConfigError(f"no Hugging Face model at {path} (config.json missing)")
    try:
        model = AutoModelForCausalLM.from_pretrained(
            str(path), dtype=dtype, local_files_only=True, trust_remote_code=trust_remote_code
        )
    except Exception as err:  # transformers raises many types for a bad checkpoint
        raise ConfigError(f"cannot load the model from {path}: {err}") from None
    return model.to(device).eval()


class HFRunner:
    """Forward passes through the transformers model with a DynamicCache per slot."""

    def __init__(self, model: Any, device: torch.device) -> None:
        self.model = model
        self.device = device
        self.vocab_size = model.config.vocab_size
        # transformers renamed `past_key_values` to `cache` in 5.2x; accept both.
        params = inspect.signature(model.forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"

    def new_cache(self) -> Any:
        from transformers import DynamicCache

        return DynamicCache(config=self.model.config)

    @staticmethod
    def crop(cache: Any, length: int) -> None:
        # A negative argument (tokens to drop) means the same in every transformers version.
        drop = cache.get_seq_length() - length
        if drop > 0:
            cache.crop(-drop)

    @torch.inference_mode()
    def forward(self, cache: Any, ids: list[int]) -> torch.Tensor:
        """Feed ids after what the cache holds; return the last position's logits [vocab]."""
        input_ids = torch.tensor([ids], dtype=torch.long, device=self.device)
        out = self.model(
            input_ids=input_ids, use_cache=True, logits_to_keep=1, **{self._cache_kw: cache}
        )
        return out.logits[0, -1].float()
