"""The GPU decode step in hand-written Triton kernels (`engine.kernels = "triton"`).

Imports triton: import it only when a profile asks for the Triton step."""
