"""The VS Code extension's settings are the language server's (lsp/settings.py): same names,
same defaults, and the extension sends every one of them."""

from __future__ import annotations

import json
import re

from pydantic import BaseModel

from lsp.settings import LspSettings
from tests.support import REPO

EXTENSION = REPO / "editors" / "vscode"
OWN = ("server.", "daemon.")
"""The extension's own settings: how to start the server, where the daemon is."""


def _server_defaults(model: type[BaseModel] = LspSettings, prefix: str = "") -> dict:
    out = {}
    for name, field in model.model_fields.items():
        key = prefix + (field.alias or name)
        default = field.get_default(call_default_factory=True)
        if isinstance(default, BaseModel):
            out.update(_server_defaults(type(default), key + "."))
        else:
            out[key] = default
    return out


def test_package_json_mirrors_the_server_settings() -> None:
    manifest = json.loads((EXTENSION / "package.json").read_text())
    props = manifest["contributes"]["configuration"]["properties"]
    contributed = {
        key.removeprefix("ling-local."): spec["default"]
        for key, spec in props.items()
        if not key.removeprefix("ling-local.").startswith(OWN)
    }
    assert contributed == _server_defaults()


def test_the_extension_sends_every_server_setting() -> None:
    source = (EXTENSION / "src" / "server.ts").read_text()
    listed = re.search(r"SERVER_SETTINGS = \[(.*?)\]", source, re.S).group(1)
    sent = set(re.findall(r'"(\w+)"', listed))
    assert sent == {key.split(".")[0] for key in _server_defaults()}
