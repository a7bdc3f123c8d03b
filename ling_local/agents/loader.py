"""Chain files for `ling-local chain run FILE`: a Python file that defines ``chain``.

    # review.py
    from ling_local.agents import Chain, Prompt

    inputs = {"path": "app.py"}          # optional defaults for the run's inputs

    def read(path: str) -> str:
        return open(path).read()

    chain = Chain("review", [read, Prompt("review", "Review this code:\\n{{ read }}")])

Python (not YAML) because function steps are Python anyway, and a chain file can import
whatever it needs. The file runs like a script, with its own directory importable.
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path
from typing import Any

from ling_local.agents.chain import Chain
from ling_local.agents.run import Run
from ling_local.agents.runlog import RunLog
from ling_local.client import Client
from ling_local.errors import ChainDefinitionError

__all__ = ["load_chain", "resume_run"]


def load_chain(path: str | Path) -> tuple[Chain, dict[str, Any]]:
    """(the file's ``chain``, its ``inputs`` defaults)."""
    file = Path(path).expanduser().resolve()
    if not file.is_file():
        raise ChainDefinitionError(f"chain file {path} does not exist")
    sys.path.insert(0, str(file.parent))
    try:
        namespace = runpy.run_path(str(file), run_name="__chain__")
    except ChainDefinitionError:
        raise
    except Exception as err:
        raise ChainDefinitionError(f"{file} failed to load: {type(err).__name__}: {err}") from err
    finally:
        sys.path.remove(str(file.parent))
    chain = namespace.get("chain")
    if not isinstance(chain, Chain):
        raise ChainDefinitionError(f"{file} must define `chain = Chain(...)`")
    defaults = namespace.get("inputs") or {}
    if not isinstance(defaults, dict):
        raise ChainDefinitionError(f"{file}: `inputs` must be a dict of default input values")
    chain.source = str(file)
    return chain, defaults


def resume_run(
    run_id: str, *, client: Client | str | None = None, run_log: RunLog | None = None
) -> Run:
    """Resume a run that was started from a chain file (the file is loaded again)."""
    log = run_log or RunLog()
    try:
        record = log.get(run_id)
    finally:
        if run_log is None:
            log.close()
    if not record.source:
        raise ChainDefinitionError(
            f"run {run_id} was not started from a chain file; resume it from your script "
            "with `chain.resume(run_id)`"
        )
    chain, _ = load_chain(record.source)
    return chain.resume(run_id, client=client, run_log=run_log)
