"""The embedded engine: a Hugging Face checkpoint served in-process on the CPU or one GPU,
with prefix-cache slots, CUDA-graph (or Triton) decode steps and speculative decoding.

`TorchEngine` is the only name the rest of the package uses (through `make_engine`)."""

from __future__ import annotations

from ling_local.engines.embedded.torch_engine import TorchEngine

__all__ = ["TorchEngine"]
