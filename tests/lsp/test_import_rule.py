"""The language server never loads a model: no engine, no torch, no transformers."""

from __future__ import annotations

import subprocess
import sys

from tests.support import REPO


def test_the_language_server_imports_no_engine() -> None:
    code = (
        "import sys, lsp.server, lsp.handlers, lsp.retrieval\n"
        "lsp.server.create_server('tiny', start_daemon=False)\n"
        "bad = [m for m in ('torch', 'transformers', 'ling_local.engines', 'ling_local.scheduler',"
        " 'ling_local.server') if m in sys.modules]\n"
        "print(bad)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                         timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
