"""The README's install (`pip install -e '.[examples]'`) gives everything the examples and
the README's Python blocks import: each third-party module they import comes from a
distribution the package or its `examples` extra depends on."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions

from tests.support import REPO

OURS = {"ling_local", "lsp", "tui"}


def _name(requirement: str) -> str:
    return re.split(r"[\s\[<>=!~;]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _imports(code: str) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module.split(".")[0])
    return found


def test_examples_and_readme_import_only_what_the_install_gives() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    given = {_name(r) for r in project["dependencies"]}
    given |= {_name(r) for r in project["optional-dependencies"]["examples"]}
    sources = {p.name: p.read_text() for p in (REPO / "examples").glob("*.py")}
    readme = (REPO / "README.md").read_text()
    for i, block in enumerate(re.findall(r"^```python\n(.*?)^```", readme, re.M | re.S)):
        sources[f"README.md block {i + 1}"] = block
    distributions = packages_distributions()
    missing = []
    for where, code in sources.items():
        for module in sorted(_imports(code) - OURS - set(sys.stdlib_module_names)):
            dists = {d.lower().replace("_", "-") for d in distributions.get(module, [])}
            if not dists & given:
                missing.append(f"{where}: {module} ({', '.join(sorted(dists)) or 'not installed'})")
    assert not missing, "not in the dependencies or the examples extra:\n" + "\n".join(missing)
