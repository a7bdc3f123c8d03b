"""Serial agent chains on the daemon: plan → write → review → fix, one step at a time.

    from ling_local.agents import Chain, Prompt

    chain = Chain("fix", [
        Prompt("plan", "List the bugs in this code:\\n{{ code }}", max_tokens=200),
        Prompt("fix", "Fix these bugs:\\n{{ plan }}\\n\\nin:\\n{{ code }}", max_tokens=400),
    ])
    for event in chain.start(code=source).events():      # or: chain.run(code=source)
        ...

A step is a `Prompt` (a Jinja2 template filled from the inputs and earlier outputs; with an
optional pydantic/JSON schema its answer is parsed, validated and re-asked when wrong) or a
plain Python function (a local tool). Runs are sync (`start`, `run`) or async (`astart`,
`arun`), stream typed events, can be cancelled (the daemon stops generating at once), and are
durable: each finished step is committed to the run log, and `resume(run_id)` continues
after the last finished step. Requests go out with ``priority="agent"``, so the editor's
keystrokes and chat always come first. See docs/scripting.md.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ling_local.agents.chain import Chain
    from ling_local.agents.events import (
        ChainError,
        ChainFinished,
        Event,
        RunStarted,
        StepFinished,
        StepRetry,
        StepSkipped,
        StepStarted,
        Token,
    )
    from ling_local.agents.loader import load_chain, resume_run
    from ling_local.agents.run import AsyncRun, Run
    from ling_local.agents.runlog import RunLog, RunRecord, StepRecord
    from ling_local.agents.runner import RetryPolicy
    from ling_local.agents.steps import Function, Prompt, Step, step

    ChainResult = ChainFinished

# Imported on first use, so `ling-local --help` (which registers the `chain` commands) stays
# instant; `from ling_local.agents import Chain` works as usual.
_LAZY = {
    "Chain": "ling_local.agents.chain",
    "ChainError": "ling_local.agents.events",
    "ChainFinished": "ling_local.agents.events",
    "Event": "ling_local.agents.events",
    "RunStarted": "ling_local.agents.events",
    "StepFinished": "ling_local.agents.events",
    "StepRetry": "ling_local.agents.events",
    "StepSkipped": "ling_local.agents.events",
    "StepStarted": "ling_local.agents.events",
    "Token": "ling_local.agents.events",
    "load_chain": "ling_local.agents.loader",
    "resume_run": "ling_local.agents.loader",
    "AsyncRun": "ling_local.agents.run",
    "Run": "ling_local.agents.run",
    "RunLog": "ling_local.agents.runlog",
    "RunRecord": "ling_local.agents.runlog",
    "StepRecord": "ling_local.agents.runlog",
    "RetryPolicy": "ling_local.agents.runner",
    "Function": "ling_local.agents.steps",
    "Prompt": "ling_local.agents.steps",
    "Step": "ling_local.agents.steps",
    "step": "ling_local.agents.steps",
    "ChainResult": "ling_local.agents.events",
}


__all__ = [
    "AsyncRun",
    "Chain",
    "ChainError",
    "ChainFinished",
    "ChainResult",
    "Event",
    "Function",
    "Prompt",
    "RetryPolicy",
    "Run",
    "RunLog",
    "RunRecord",
    "RunStarted",
    "Step",
    "StepFinished",
    "StepRecord",
    "StepRetry",
    "StepSkipped",
    "StepStarted",
    "Token",
    "load_chain",
    "resume_run",
    "step",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'ling_local.agents' has no attribute {name!r}")
    value = getattr(
        importlib.import_module(module), "ChainFinished" if name == "ChainResult" else name
    )
    globals()[name] = value
    return value
