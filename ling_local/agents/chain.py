"""`Chain`: an ordered list of steps run one at a time, each seeing the earlier results."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ling_local.agents.events import ChainFinished
from ling_local.agents.run import AsyncRun, Run
from ling_local.agents.runlog import RunLog, new_run_id
from ling_local.agents.runner import RetryPolicy, RunContext
from ling_local.agents.steps import Function, Prompt, Step
from ling_local.client import AsyncClient, Client
from ling_local.errors import ChainDefinitionError

__all__ = ["Chain"]

ClientSpec = AsyncClient | Client | str | None
LogSpec = RunLog | str | Path | None


def _as_step(item: Step | Callable[..., Any]) -> Step:
    if isinstance(item, Prompt | Function):
        return item
    if callable(item):
        return Function(item.__name__, item)
    raise ChainDefinitionError(f"{item!r} is not a step (use Prompt(...), Function(...) or a def)")


class Chain:
    """Steps run in order against the daemon; prompts are filled from the inputs and the
    outputs of earlier steps (by step name); every finished step goes to the run log.

        chain = Chain("fix", [Prompt("plan", "Plan a fix for:\\n{{ code }}"),
                              Prompt("patch", "Apply this plan:\\n{{ plan }}\\n\\n{{ code }}")])
        result = chain.run(code=open("app.py").read())
        print(result["patch"])
    """

    def __init__(
        self,
        name: str,
        steps: Sequence[Step | Callable[..., Any]],
        *,
        description: str = "",
        retry: RetryPolicy | None = None,
    ) -> None:
        if not steps:
            raise ChainDefinitionError(f"chain {name!r} has no steps")
        self.name = name
        self.description = description
        self.steps: list[Step] = [_as_step(s) for s in steps]
        self.retry = retry or RetryPolicy()
        self.source: str | None = None
        """The file the chain was loaded from (recorded so `chain resume` can reload it)."""
        names = [s.name for s in self.steps]
        for i, step in enumerate(self.steps):
            if step.name in names[:i]:
                raise ChainDefinitionError(f"chain {name!r}: two steps are named {step.name!r}")
            later = sorted(set(names[i:]) & step.variables)
            if later:
                raise ChainDefinitionError(
                    f"step {step.name!r} uses {later[0]!r}, which is not an earlier step"
                )

    @property
    def inputs(self) -> set[str]:
        """Names the steps use that no step produces: the inputs a run needs."""
        produced = {s.name for s in self.steps}
        return {v for s in self.steps for v in s.variables} - produced

    def _check_inputs(self, inputs: Mapping[str, Any]) -> dict[str, Any]:
        missing = sorted(self.inputs - set(inputs))
        if missing:
            users = [s.name for s in self.steps if missing[0] in s.variables]
            raise ChainDefinitionError(
                f"chain {self.name!r} needs the input {missing[0]!r} (used by step "
                f"{users[0]!r}); missing inputs: {', '.join(missing)}"
            )
        clash = sorted(set(inputs) & {s.name for s in self.steps})
        if clash:
            raise ChainDefinitionError(f"input {clash[0]!r} has the name of a step")
        return dict(inputs)

    # ------------------------------------------------------------------ async API
    def astart(
        self,
        inputs: Mapping[str, Any] | None = None,
        /,
        *,
        client: ClientSpec = None,
        run_log: LogSpec = None,
        run_id: str | None = None,
        **kw_inputs: Any,
    ) -> AsyncRun:
        """A new run (started when you iterate `events()` or await `result()`)."""
        values = self._check_inputs({**(inputs or {}), **kw_inputs})
        return self._async_run(run_id or new_run_id(), values, client, run_log, None)

    def aresume(
        self, run_id: str, *, client: ClientSpec = None, run_log: LogSpec = None
    ) -> AsyncRun:
        """Continue a run after its last finished step (those are not run again)."""
        log = _open_log(run_log)
        try:
            record = log.get(run_id)
        finally:
            if log is not run_log:
                log.close()
        for index, step in record.finished_steps().items():
            if index >= len(self.steps) or self.steps[index].name != step.name:
                raise ChainDefinitionError(
                    f"run {run_id} was made by a chain with steps {record.step_names}; "
                    f"this chain has {[s.name for s in self.steps]}"
                )
        return self._async_run(run_id, record.inputs, client, run_log, record.finished_steps())

    async def arun(self, inputs: Mapping[str, Any] | None = None, /, **kw: Any) -> ChainFinished:
        """Run to the end; returns the outputs (raises what stopped the run)."""
        return await self.astart(inputs, **kw).result()

    def _async_run(self, run_id, inputs, client, run_log, restored) -> AsyncRun:
        owned: dict[str, Any] = {}

        async def open_context() -> RunContext:
            log = _open_log(run_log)
            if log is not run_log:
                owned["log"] = log
            http = _open_client(client)
            if http is not client:
                owned["client"] = http
            return RunContext(
                run_id,
                self.name,
                self.steps,
                inputs,
                http,
                log,
                self.retry,
                self.source,
                restored,
            )

        async def cleanup(_ctx: RunContext | None) -> None:
            if "client" in owned:
                await owned.pop("client").aclose()
            if "log" in owned:
                owned.pop("log").close()

        return AsyncRun(run_id, open_context, cleanup)

    # ------------------------------------------------------------------ sync API
    def start(
        self,
        inputs: Mapping[str, Any] | None = None,
        /,
        *,
        client: Client | str | None = None,
        run_log: LogSpec = None,
        run_id: str | None = None,
        **kw_inputs: Any,
    ) -> Run:
        values = self._check_inputs({**(inputs or {}), **kw_inputs})
        rid = run_id or new_run_id()
        return Run(rid, lambda: self._async_run(rid, values, client, run_log, None))

    def resume(
        self, run_id: str, *, client: Client | str | None = None, run_log: LogSpec = None
    ) -> Run:
        self.aresume(run_id, run_log=run_log)  # checks the run exists and fits this chain
        return Run(run_id, lambda: self.aresume(run_id, client=client, run_log=run_log))

    def run(self, inputs: Mapping[str, Any] | None = None, /, **kw: Any) -> ChainFinished:
        return self.start(inputs, **kw).result()


def _open_log(spec: LogSpec) -> RunLog:
    return spec if isinstance(spec, RunLog) else RunLog(spec)


def _open_client(spec: ClientSpec) -> AsyncClient:
    if isinstance(spec, AsyncClient):
        return spec
    if isinstance(spec, Client):
        return AsyncClient(spec.base_url, spec.token)
    return AsyncClient(spec)
