"""Test shim: makes ``python -m sglang.launch_server`` run tests/sglang_standin.py."""
