"""The GPU decode step in hand-written Triton kernels (`engine.kernels`, `decode_path`).

Two modules are its surface: `setup` (block sizes, what a model needs, the norm folding and
the head's int8 screen; imports no triton) and `kernels` (the launchers and `triton_step`,
what a CUDA graph captures; imports triton: import it only when the Triton step runs). The
device code lives in `jit`, `paired`, `attn`, `screen` and `common`, the launch options in
`launch`; they import each other's public names only (tests/test_exported_members.py)."""

__all__: list[str] = []
