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

import numpy as np

from ling_local.bench.consumers import Trace, inprocess_stream, raw_stream, sdk_stream
from ling_local.bench.daemon_proc import BenchDaemon
from ling_local.bench.rawhttp import SSEConnection
from ling_local.bench.stats import Spread, Summary, machine
from ling_local.bench.token_source import Cadence, TokenSource

__all__ = ["ConfigResult", "OverheadResult", "run_overhead"]

INPROCESS = "in-process"
TPOT_LIMIT_PCT = 2.0
TTFT_LIMIT_MS = 1.0
GROWTH_LIMIT_MS = 1.0
"""'Keeps up': relay latency of the last 10 % of chunks exceeds the first 10 % by less."""


def _ms(values: list[float]) -> Summary:
    summary = Summary.of(values, 1e3)
    if summary is None:
        raise ValueError("no samples")
    return summary


@dataclass
class ConfigResult:
    name: str
    traces: list[Trace]
    """The long streams, one per round."""
    n_tokens: int
    probes: list[list[Trace]] = field(default_factory=list)
    """Per round: the short TTFT probe streams."""
    paired: list[Trace] = field(default_factory=list)
    """Per round: the in-process long stream (empty for the baseline)."""
    paired_probes: list[list[Trace]] = field(default_factory=list)
    """Per round: the in-process probes run alternately with this path's."""

    def _probe_values(self, get: Callable[[Trace], float | None]) -> list[float]:
        return [v for r in self.probes for t in r if (v := get(t)) is not None]

    @property
    def ttft_ms(self) -> Summary:
        """As the consumer saw it, the source's wait for the first token included."""
        return _ms(self._probe_values(lambda t: t.ttft_s))

    @property
    def added_ttft_ms(self) -> Summary:
        return _ms(self._probe_values(lambda t: t.added_ttft_s))

    @property
    def request_path_ms(self) -> Summary:
        """Request sent -> the engine has it."""
        return _ms(
            self._probe_values(lambda t: None if t.source_start is None else t.source_start - t.t0)
        )

    @property
    def tpot_ms(self) -> Summary:
        return _ms([t.tpot_s for t in self.traces])

    @property
    def e2e_ms(self) -> Summary:
        return _ms([t.end_s for t in self.traces])

    @property
    def relay_ms(self) -> Summary:
        return _ms([x for t in self.traces for x in t.relay_s()])

    @property
    def growth_ms(self) -> Summary:
        return _ms([t.growth_s() for t in self.traces])

    @property
    def arrived_all(self) -> bool:
        return all(t.tokens == self.n_tokens for t in self.traces)

    @property
    def chunks(self) -> float:
        return sum(len(t.arrivals) for t in self.traces) / len(self.traces)

    def _per_token_us(self, seconds: float) -> float:
        return seconds / sum(t.tokens for t in self.traces) * 1e6

    @property
    def daemon_cpu_us_per_token(self) -> float:
        return self._per_token_us(sum(t.daemon_cpu_s for t in self.traces))

    @property
    def consumer_cpu_us_per_token(self) -> float:
        return self._per_token_us(sum(t.cpu_s for t in self.traces))

    # against in-process, round by round
    @property
    def ttft_delta_ms(self) -> Spread:
        """Per round: median added TTFT of this path's probes minus the in-process ones'."""

        def median_added(probes: list[Trace]) -> float:
            return float(np.median([t.added_ttft_s for t in probes if t.added_ttft_s is not None]))

        return Spread.of(
            [
                (median_added(mine) - median_added(base)) * 1e3
                for mine, base in zip(self.probes, self.paired_probes, strict=True)
            ]
        )

    @property
    def tpot_delta_pct(self) -> Spread:
        return Spread.of(
            [(d.tpot_s / b.tpot_s - 1) * 100 for d, b in zip(self.traces, self.paired, strict=True)]
        )

    @property
    def e2e_delta_ms(self) -> Spread:
        return Spread.of(
            [(d.end_s - b.end_s) * 1e3 for d, b in zip(self.traces, self.paired, strict=True)]
        )

    def verdict(self) -> dict[str, bool]:
        return {
            "tpot": self.tpot_delta_pct.median < TPOT_LIMIT_PCT,
            "ttft": self.ttft_delta_ms.median < TTFT_LIMIT_MS,
            "keeps_up": self.growth_ms.median < GROWTH_LIMIT_MS,
            "all_tokens_arrived": self.arrived_all,
        }

    def as_dict(self) -> dict:
        out = {
            "name": self.name,
            "streams": len(self.traces),
            "tokens_per_stream": self.n_tokens,
            "chunks_per_stream": self.chunks,
            "all_tokens_arrived": self.arrived_all,
            "ttft_probes": sum(len(r) for r in self.probes),
            "ttft_ms": self.ttft_ms.as_dict(),
            "added_ttft_ms": self.added_ttft_ms.as_dict(),
            "request_path_ms": self.request_path_ms.as_dict(),
            "tpot_ms": self.tpot_ms.as_dict(),
            "e2e_ms": self.e2e_ms.as_dict(),
            "relay_ms": self.relay_ms.as_dict(),
            "relay_growth_ms": self.growth_ms.as_dict(),
            "consumer_cpu_us_per_token": self.consumer_cpu_us_per_token,
        }
        if self.paired:
            out |= {
                "daemon_cpu_us_per_token": self.daemon_cpu_us_per_token,
                "ttft_delta_ms": self.ttft_delta_ms.as_dict(),
                "tpot_delta_pct": self.tpot_delta_pct.as_dict(),
                "e2e_delta_ms": self.e2e_delta_ms.as_dict(),
                "verdict": self.verdict(),
            }
        return out


@dataclass
class OverheadResult:
    cadence: Cadence
    n_tokens: int
    rounds: int
    probes: int
    baseline: ConfigResult
    configs: list[ConfigResult]
    machine_before: dict
    machine_after: dict
    wall_s: float

    @property
    def passed(self) -> bool:
        return all(all(c.verdict().values()) for c in self.configs)

    def as_dict(self) -> dict:
        return {
            "benchmark": "overhead",
            "cadence": {
                "period_ms": self.cadence.period_s * 1e3,
                "burst": self.cadence.burst,
                "first_token_ms": self.cadence.first_s * 1e3,
            },
            "tokens_per_stream": self.n_tokens,
            "rounds": self.rounds,
            "ttft_probes_per_round": self.probes,
            "limits": {
                "tpot_delta_pct": TPOT_LIMIT_PCT,
                "ttft_delta_ms": TTFT_LIMIT_MS,
                "relay_growth_ms": GROWTH_LIMIT_MS,
            },
            "passed": self.passed,
            "baseline": self.baseline.as_dict(),
            "configs": [c.as_dict() for c in self.configs],
            "machine": {"before": self.machine_before, "after": self.machine_after},
            "wall_s": self.wall_s,
        }


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
    from rich.progress import Progress

    cadence = Cadence(period_ms / 1e3, burst)
    args = ["--period-ms", str(period_ms), "--burst", str(burst)]
    before = machine()
    t0 = time.perf_counter()
    daemons: dict[str, BenchDaemon] = {}
    try:
        for t in transports:
            daemons[t] = BenchDaemon(t, args)
        total = (rounds + 1) * (1 + len(transports) * len(endpoints) * len(clients))
        with Progress(disable=not progress, transient=True) as bar:
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
