"""Parse every shipped SGLang profile's launch_server flags with SGLang's own parser
(`ServerArgs.add_cli_args`), in a process of its own.

Where SGLang is installed for real (the GPU machine) it is imported as is. On a CPU
machine SGLang's modules still import torch kernels, Triton and CUDA libraries that only
exist on a GPU box; the parser itself needs none of them, so with ``--stub-gpu-modules``
those third-party packages are replaced by empty modules. The argument definitions,
choices and aliases all come from SGLang's real code.

    python tests/sglang/flagcheck.py [--stub-gpu-modules] [PROFILE.toml ...]
Prints one JSON line per profile: {"profile", "ok", "error"}; exit code 1 if any failed.
"""

from __future__ import annotations

import argparse
import importlib.abc
import importlib.machinery
import json
import sys
import types
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# Third-party packages SGLang imports at module level that only matter on a GPU.
GPU_ONLY = {
    "triton",
    "torchvision",
    "sgl_kernel",
    "flashinfer",
    "xgrammar",
    "outlines",
    "llguidance",
    "IPython",
    "zstandard",
    "soundfile",
    "decord",
    "av",
    "torchcodec",
    "cuda",
    "tilelang",
    "deep_gemm",
    "quack",
    "nvidia",
    "openai_harmony",
    "compressed_tensors",
    "gguf",
    "blobfile",
    "tvm_ffi",
    "apache_tvm_ffi",
    "torch_memory_saver",
    "mooncake",
    "uvloop",
    "zmq",
    "setproctitle",
    "partial_json_parser",
    "interegular",
    "pybase64",
    "orjson",
    "psutil",
}


class _Anything:
    """Stands for any attribute of a stubbed module: callable, decorator, base class."""

    def __call__(self, *args, **kwargs):
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]  # used as a decorator
        return self

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return self

    def __getitem__(self, key):
        return self

    def __iter__(self):
        return iter(())

    def __bool__(self) -> bool:
        return False

    def __mro_entries__(self, bases):
        return (object,)

    def __or__(self, other):
        return self

    def __int__(self) -> int:
        return 0

    def __lt__(self, other) -> bool:
        return False

    __gt__ = __le__ = __ge__ = __lt__


_ANY = _Anything()


class _StubModule(types.ModuleType):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.__path__: list[str] = []  # a package, so submodules import too

    def __getattr__(self, name: str):
        if name == "__version__":
            return "0.0.0"
        if name.startswith("__"):
            raise AttributeError(name)
        return _ANY


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in GPU_ONLY:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        return _StubModule(spec.name)

    def exec_module(self, module) -> None:
        pass


def profile_argv(path: Path) -> list[str]:
    sys.path.insert(0, str(REPO))
    from ling_local.config import load_profile
    from ling_local.engines.sglang import build_command

    argv = build_command(load_profile(path), port=30000, api_key="0" * 64).argv
    assert argv[1:3] == ["-m", "sglang.launch_server"]
    return argv[3:]


def main() -> int:
    cli = argparse.ArgumentParser()
    cli.add_argument("--stub-gpu-modules", action="store_true")
    cli.add_argument("profiles", nargs="*", type=Path)
    args = cli.parse_args()
    profiles = args.profiles or sorted(
        p for p in (REPO / "configs").glob("*.toml") if 'kind = "sglang"' in p.read_text()
    )
    if args.stub_gpu_modules:
        sys.meta_path.insert(0, _StubFinder())
    from sglang.srt.server_args import ServerArgs

    try:
        from importlib.metadata import version

        sglang_version = version("sglang")
    except Exception:
        sglang_version = "unknown"
    failed = 0
    for path in profiles:
        parser = argparse.ArgumentParser(prog="sglang.launch_server", exit_on_error=False)
        ServerArgs.add_cli_args(parser)
        error = ""
        try:
            _, unknown = parser.parse_known_args(profile_argv(path))
            if unknown:
                error = f"unrecognized arguments: {' '.join(unknown)}"
        except (argparse.ArgumentError, SystemExit) as err:
            error = str(err)
        failed += bool(error)
        print(
            json.dumps(
                {"profile": path.stem, "ok": not error, "error": error, "sglang": sglang_version}
            ),
            flush=True,
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
