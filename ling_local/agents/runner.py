"""Runs a chain's steps one after the other and reports what happens through `emit`.

This is the only place that talks to the daemon: every request carries ``priority="agent"``
so the scheduler puts it behind keystrokes and chat. A request is retried only while that
is safe — the daemon refused it or could not be reached before a single token streamed
(connection refused, 429, 503) — never once text has reached the user.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

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
from ling_local.agents.runlog import RunLog, StepRecord
from ling_local.agents.steps import Function, Prompt, Step
from ling_local.agents.structured import Invalid
from ling_local.client import AsyncClient
from ling_local.errors import (
    DaemonUnavailable,
    EngineNotReady,
    LingLocalError,
    Overloaded,
    StepFailed,
    StepTimeout,
    StructuredOutputError,
)

__all__ = ["RetryPolicy", "RunContext", "execute"]

log = logging.getLogger(__name__)

_RETRYABLE = (DaemonUnavailable, Overloaded, EngineNotReady)
Emit = Callable[[Event], None]


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Retries of a request that failed before anything streamed."""

    attempts: int = 4
    """Tries in all (1 = never retry)."""
    backoff_s: float = 0.5
    max_backoff_s: float = 8.0

    def delay(self, failed_attempts: int) -> float:
        return min(self.max_backoff_s, self.backoff_s * 2 ** (failed_attempts - 1))


@dataclass(slots=True)
class RunContext:
    run_id: str
    chain_name: str
    steps: list[Step]
    inputs: dict[str, Any]
    client: AsyncClient
    log: RunLog
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    source: str | None = None
    restored: dict[int, StepRecord] | None = None
    """Finished steps of an earlier attempt at this run (resume); None for a new run."""
    index: int = -1
    """The step running now."""


@dataclass(slots=True)
class _Tally:
    text: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0


async def execute(ctx: RunContext, emit: Emit) -> ChainFinished:
    """Run every step not finished yet; raise the error that stopped the run (after
    emitting ChainError and recording it in the run log)."""
    started = time.perf_counter()
    names = [s.name for s in ctx.steps]
    if ctx.restored is None:
        ctx.log.create(ctx.run_id, ctx.chain_name, names, ctx.inputs, ctx.source)
    else:
        ctx.log.set_status(ctx.run_id, "running")
    emit(RunStarted(ctx.run_id, ctx.chain_name, names, ctx.restored is not None))
    outputs: dict[str, Any] = {}
    skipped: list[str] = []
    try:
        for index, step in enumerate(ctx.steps):
            ctx.index = index
            saved = (ctx.restored or {}).get(index)
            if saved is not None:
                outputs[step.name] = step.restore(saved.output)
                skipped.append(step.name)
                emit(StepSkipped(index, step.name, outputs[step.name]))
                continue
            outputs[step.name] = await _run_step(ctx, index, step, {**ctx.inputs, **outputs}, emit)
    except asyncio.CancelledError:
        ctx.log.set_status(ctx.run_id, "cancelled", "cancelled")
        emit(ChainError(ctx.index, "the run was cancelled", "cancelled"))
        raise
    except LingLocalError as err:
        ctx.log.set_status(ctx.run_id, "failed", err.message)
        emit(ChainError(ctx.index, err.message, err.error_type))
        raise
    except Exception as err:  # a bug, or a template filter that raised: fail this run only
        log.exception("chain run %s failed", ctx.run_id)
        failure = StepFailed(f"{type(err).__name__}: {err}", index=ctx.index)
        ctx.log.set_status(ctx.run_id, "failed", failure.message)
        emit(ChainError(ctx.index, failure.message, failure.error_type))
        raise failure from err
    ctx.log.set_status(ctx.run_id, "finished")
    done = ChainFinished(ctx.run_id, outputs, time.perf_counter() - started, skipped)
    emit(done)
    return done


async def _run_step(
    ctx: RunContext, index: int, step: Step, context: Mapping[str, Any], emit: Emit
) -> Any:
    wall_start, t0 = time.time(), time.perf_counter()
    tally = _Tally()
    attempts = 1
    try:
        async with asyncio.timeout(step.timeout) as deadline:
            if isinstance(step, Function):
                emit(StepStarted(index, step.name, "", "function"))
                output = await _call_function(step, context)
            else:
                output, attempts = await _prompt_step(ctx, index, step, context, emit, tally)
    except TimeoutError:
        if not deadline.expired():
            raise
        raise StepTimeout(
            f"step {step.name!r} ran past its timeout of {step.timeout:g}s and was stopped",
            step=step.name,
            index=index,
        ) from None
    seconds = time.perf_counter() - t0
    record = StepRecord(
        index,
        step.name,
        step.dump(output),
        wall_start,
        time.time(),
        seconds,
        tally.prompt_tokens,
        tally.completion_tokens,
        attempts,
    )
    ctx.log.step_finished(ctx.run_id, record)  # committed before the next step starts
    emit(
        StepFinished(
            index,
            step.name,
            output,
            seconds,
            tally.prompt_tokens,
            tally.completion_tokens,
            attempts,
        )
    )
    return output


async def _call_function(step: Function, context: Mapping[str, Any]) -> Any:
    try:
        return await step.call(context)
    except (LingLocalError, asyncio.CancelledError):
        raise
    except Exception as err:
        log.exception("chain step %s failed", step.name)
        raise StepFailed(
            f"step {step.name!r} raised {type(err).__name__}: {err}", step=step.name
        ) from err


async def _prompt_step(
    ctx: RunContext,
    index: int,
    step: Prompt,
    context: Mapping[str, Any],
    emit: Emit,
    tally: _Tally,
) -> tuple[Any, int]:
    text, system = step.render(context)
    emit(StepStarted(index, step.name, text, "prompt"))
    schema = step.structured
    options: dict[str, Any] = {
        **step.options,
        "max_tokens": step.max_tokens,
        "priority": "agent",
    }
    if step.temperature is not None:
        options["temperature"] = step.temperature
    if step.stop:
        options["stop"] = list(step.stop)
    if schema is not None:
        options["response_format"] = schema.response_format()
    if step.mode == "chat":
        user = f"{text}\n\n{schema.instruction()}" if schema is not None else text
        base: list[dict[str, str]] = [{"role": "system", "content": system}] if system else []
        payload: Any = [*base, {"role": "user", "content": user}]
    else:
        payload = text + step.prefill
    errors: list[str] = []
    for attempt in range(1, step.max_reasks + 2):
        answer = await _generate(ctx, index, step, payload, options, emit, tally)
        if schema is None:
            return answer, attempt
        try:
            return schema.check(answer), attempt
        except Invalid as err:
            errors.append(str(err))
        if attempt > step.max_reasks:
            break
        emit(StepRetry(index, step.name, attempt + 1, f"invalid answer: {errors[-1]}"))
        reask = step.render_reask(text, answer, errors[-1])
        if step.mode == "chat":  # the question, the rejected answer, what was wrong
            payload = [
                *payload[: len(base) + 1],
                {"role": "assistant", "content": answer},
                {"role": "user", "content": reask},
            ]
        else:
            payload = reask + step.prefill
    raise StructuredOutputError(
        f"step {step.name!r}: no valid answer after {len(errors)} attempts; last error: "
        f"{errors[-1]}",
        step=step.name,
        index=index,
        attempts=len(errors),
        errors=errors,
        output=answer,
    )


async def _generate(
    ctx: RunContext,
    index: int,
    step: Prompt,
    payload: Any,
    options: dict[str, Any],
    emit: Emit,
    tally: _Tally,
) -> str:
    """Stream one answer, emitting its tokens; retry only while nothing has streamed."""
    client, policy = ctx.client, ctx.retry
    attempt = 1
    while True:
        streamed = False
        try:
            if step.mode == "chat":
                stream = await client.stream_chat(payload, **options)
            else:
                stream = await client.stream_complete(payload, **options)
            async with stream:  # leaving early (cancel, timeout) cancels it in the daemon
                async for chunk in stream:
                    if chunk.text:
                        streamed = True
                        emit(Token(index, chunk.text))
            tally.prompt_tokens += stream.usage.prompt_tokens
            tally.completion_tokens += stream.usage.completion_tokens
            return stream.text
        except _RETRYABLE as err:
            if streamed or attempt >= policy.attempts:
                raise StepFailed(
                    f"step {step.name!r}: {err.message}", step=step.name, index=index
                ) from err
            delay = policy.delay(attempt)
            attempt += 1
            emit(StepRetry(index, step.name, attempt, f"{err.message} (retry in {delay:.1f}s)"))
            await asyncio.sleep(delay)
