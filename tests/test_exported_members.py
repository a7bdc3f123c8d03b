"""One small public surface, checked (as httpx does)."""

import ast
from pathlib import Path

import pytest

import ling_local


def test_public_names_resolve() -> None:
    for name in ling_local.__all__:
        assert getattr(ling_local, name) is not None, name


def test_exceptions_form_one_tree() -> None:
    for name in ling_local.__all__:
        obj = getattr(ling_local, name)
        if isinstance(obj, type) and issubclass(obj, Exception):
            assert issubclass(obj, ling_local.LingLocalError), name


def test_importing_the_package_stays_light() -> None:
    import subprocess
    import sys

    code = "import ling_local, sys; print('torch' in sys.modules, 'fastapi' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.split() == ["False", "False"]


# ------------------------------------------------------------------ the Triton decode step
# Read from the source (no import: the kernels must be decorated after the Triton tests
# switch the CPU interpreter on).
REPO = Path(__file__).resolve().parents[1]
TRITON = "ling_local.engines.embedded.triton"
TRITON_DIR = REPO / TRITON.replace(".", "/")
SURFACE = ("setup", "kernels")
"""The modules code outside the package may use."""


def _exports(module: str) -> list[str]:
    tree = ast.parse((TRITON_DIR / f"{module}.py").read_text())
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            return list(ast.literal_eval(node.value))
    raise AssertionError(f"{module}.py has no __all__")


def _defined(module: str) -> set[str]:
    """Top-level names a module defines or imports."""
    names = set()
    for node in ast.parse((TRITON_DIR / f"{module}.py").read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
                names.update(n.id for n in ast.walk(t) if isinstance(n, ast.Name))
        elif isinstance(node, ast.ImportFrom | ast.Import):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def _triton_imports(path: Path):
    """(line, module inside the package or None for the package, name) of every import
    from the Triton package in a file."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(TRITON):
            inner = node.module[len(TRITON) + 1 :] or None
            for alias in node.names:
                yield node.lineno, inner, alias.name
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(TRITON + "."):
                    yield node.lineno, alias.name[len(TRITON) + 1 :], None


MODULES = sorted(p.stem for p in TRITON_DIR.glob("*.py") if p.stem != "__init__")


def test_the_triton_modules_are_the_shipped_ones() -> None:
    assert MODULES == ["attn", "common", "jit", "kernels", "launch", "paired", "screen", "setup"]


@pytest.mark.parametrize("module", MODULES)
def test_every_triton_module_declares_public_names_it_defines(module: str) -> None:
    exported = _exports(module)
    assert not [n for n in exported if n.startswith("_")]
    assert set(exported) <= _defined(module), set(exported) - _defined(module)


def test_triton_modules_import_each_others_public_names_only() -> None:
    for module in MODULES:
        for line, inner, name in _triton_imports(TRITON_DIR / f"{module}.py"):
            where = f"{module}.py:{line}"
            assert name != "*", f"{where}: import *"
            if inner is None:  # `from package import module`
                assert name in MODULES, f"{where}: {name}"
            else:
                assert name in _exports(inner), f"{where}: {inner}.{name} is not public"


def test_the_rest_uses_the_triton_surface_only() -> None:
    """Outside the package (the engine, the bench, the scripts) only `setup` and `kernels`
    are used, by their public names; tests may reach the other modules' public names."""
    files = [
        *[p for p in (REPO / "ling_local").rglob("*.py") if TRITON_DIR not in p.parents],
        *(REPO / "scripts").glob("*.py"),
        *(REPO / "tests").rglob("*.py"),
    ]
    used = 0
    for path in files:
        surface = SURFACE if "tests" not in path.relative_to(REPO).parts else tuple(MODULES)
        for line, inner, name in _triton_imports(path):
            used += 1
            where = f"{path.relative_to(REPO)}:{line}"
            assert name != "*", f"{where}: import *"
            if inner is None:
                assert name in surface, f"{where}: {name} is not the package's surface"
            else:
                assert inner in surface, f"{where}: {inner} is not the package's surface"
                assert name is None or name in _exports(inner), f"{where}: {inner}.{name}"
    assert used  # the engine does use the package


# ------------------------------------------------------------------ the shipped model's format
def test_the_model_format_has_one_home_in_the_runtime_package() -> None:
    """Training, bench and the daemon take the tiny model's token format from
    ling_local.tiny_format; nothing else defines its special-token strings or ids."""
    from ling_local import tiny_format

    assert tiny_format.SPECIAL_TOKENS[tiny_format.FIM_END_ID] == tiny_format.FIM_END
    definers = []
    for path in [*REPO.glob("training/*.py"), *REPO.glob("ling_local/bench/*.py")]:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Assign)
                and isinstance(node.value, ast.Constant)
                and node.value.value in tiny_format.SPECIAL_TOKENS[1:]
            ):
                definers.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert definers == []
    import training.tokenizer

    assert training.tokenizer.fim_prompt is tiny_format.fim_prompt
