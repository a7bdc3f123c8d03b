"""`ling-local bench overhead`: what our host path adds to a token stream.

The benchmark token source (`token_source.py`) emits tokens on a known schedule and records
when it started each stream and let each burst go. We consume it in-process (its `stream()`
iterated directly: the floor) and through real daemons (`overhead_daemon`: the same app
factory, scheduler, relay and uvicorn as `ling-local serve`) over TCP and a unix socket,
for streaming completions and chat, with a bare HTTP client (the daemon alone) and with the
SDK the editor and the TUI use. All consumers are timed by the same code.

- TTFT: many short probe streams per path and round, run alternately with in-process ones.
  What the path adds is (engine start − request sent) + (first chunk in − first token out),
  so the source's own wait and its timer jitter are not in it; Δ is that against in-process.
- TPOT: 2,000-token streams, sglang's definition, each against the in-process stream of its
  own round (rounds interleave every path, so a change in machine load hits all alike).
- Relay latency of every chunk (arrival − when its newest token left the source), and its
  growth from the first to the last 10 % of a stream: whether the daemon keeps up.
- CPU time per token of the daemon process (/proc), against the source's own in-process.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial

from ling_local.bench.consumers import Trace, inprocess_stream, raw_stream, sdk_stream
from ling_local.bench.daemon_proc import BenchDaemon
from ling_local.bench.overhead_results import INPROCESS, ConfigResult, OverheadResult
from ling_local.bench.rawhttp import SSEConnection
from ling_local.bench.stats import machine
from ling_local.bench.token_source import Cadence, TokenSource

__all__ = ["ConfigResult", "OverheadResult", "run_overhead"]


# --------------------------------------------------------------------------- driver
@dataclass
class _Collected:
    traces: list[Trace] = field(default_factory=list)
    probes: list[list[Trace]] = field(default_factory=list)
    base_probes: list[list[Trace]] = field(default_factory=list)


async def _measure(
    cadence: Cadence,
    n_tokens: int,
    rounds: int,
    probes: int,
    daemons: dict[str, BenchDaemon],
    endpoints: tuple[str, ...],
    clients: tuple[str, ...],
    tick: Callable[[str], None],
) -> dict[str, _Collected]:
    from ling_local.client import AsyncClient

    source = TokenSource(cadence)
    await source.start()
    probe_tokens = 1 + cadence.burst  # the prefill's token and one verify step
    runs: dict[str, Callable[[int], Awaitable[Trace]]] = {
        INPROCESS: partial(inprocess_stream, source)
    }
    closers = []
    for t, d in daemons.items():
        sdk = AsyncClient(d.url, d.token)
        raw = SSEConnection(d.url, d.token)
        closers += [sdk.aclose, raw.aclose]
        for e in endpoints:
            if "raw" in clients:
                runs[f"{t} {e} raw"] = partial(raw_stream, raw, e, daemon_pid=d.pid)
            if "sdk" in clients:
                runs[f"{t} {e} sdk"] = partial(sdk_stream, sdk, e, daemon_pid=d.pid)
    order = list(runs)
    got = {name: _Collected() for name in order}
    try:
        for r in range(rounds + 1):  # round 0 warms every path up and is dropped
            shift = r % len(order)  # rotate, so no path always runs first
            for name in order[shift:] + order[:shift]:
                trace = await runs[name](n_tokens=n_tokens)
                mine, base = [], []
                if name != INPROCESS:
                    for _ in range(probes):  # alternate, so load changes hit both alike
                        base.append(await runs[INPROCESS](n_tokens=probe_tokens))
                        mine.append(await runs[name](n_tokens=probe_tokens))
                if r > 0:
                    got[name].traces.append(trace)
                    got[name].probes.append(mine)
                    got[name].base_probes.append(base)
                tick(name)
    finally:
        for close in closers:
            await close()
    return got


def _results(
    got: dict[str, _Collected], daemons: dict[str, BenchDaemon], n_tokens: int, rounds: int
) -> tuple[ConfigResult, list[ConfigResult]]:
    """Join each daemon stream to its source's record (read once the daemons stopped)."""
    for name, c in got.items():
        if name != INPROCESS:
            emissions = daemons[name.split()[0]].emissions
            for trace in [*c.traces, *(t for r in c.probes for t in r)]:
                trace.join(emissions.get(trace.marker))
    base = got.pop(INPROCESS)
    all_base = [[t for c in got.values() for t in c.base_probes[r]] for r in range(rounds)]
    baseline = ConfigResult(INPROCESS, base.traces, n_tokens, probes=all_base)
    configs = [
        ConfigResult(name, c.traces, n_tokens, c.probes, base.traces, c.base_probes)
        for name, c in got.items()
    ]
    return baseline, configs


def run_overhead(
    *,
    period_ms: float = 0.78,
    burst: int = 10,
    n_tokens: int = 2000,
    rounds: int = 5,
    probes: int = 10,
    transports: tuple[str, ...] = ("tcp", "uds"),
    endpoints: tuple[str, ...] = ("completions", "chat"),
    clients: tuple[str, ...] = ("raw", "sdk"),
    progress: bool = True,
) -> OverheadResult:
    """Start one benchmark daemon per transport, measure, stop them, join the records."""
    from ling_local.bench.progress import progress as progress_bar

    cadence = Cadence(period_ms / 1e3, burst)
    args = ["--period-ms", str(period_ms), "--burst", str(burst)]
    before = machine()
    t0 = time.perf_counter()
    daemons: dict[str, BenchDaemon] = {}
    try:
        for t in transports:
            daemons[t] = BenchDaemon(t, args)
        total = (rounds + 1) * (1 + len(transports) * len(endpoints) * len(clients))
        with progress_bar(progress) as bar:
            task = bar.add_task("bench overhead", total=total)

            def tick(name: str) -> None:
                bar.update(task, advance=1, description=f"bench overhead: {name}")

            got = asyncio.run(
                _measure(cadence, n_tokens, rounds, probes, daemons, endpoints, clients, tick)
            )
    finally:
        for d in daemons.values():
            d.stop()
    baseline, configs = _results(got, daemons, n_tokens, rounds)
    wall = time.perf_counter() - t0
    return OverheadResult(
        cadence, n_tokens, rounds, probes, baseline, configs, before, machine(), wall
    )
