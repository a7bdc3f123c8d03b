"""`ling-local bench overhead`: what our host path adds to a token stream.

The benchmark token source (`token_source.py`) emits tokens on a known schedule. We consume
it twice: in-process (its `stream()` iterated directly: the floor) and through a real daemon
(`overhead_daemon`: same app factory, scheduler, relay and uvicorn as `ling-local serve`)
with the SDK every editor and TUI request goes through (`ling_local.client.AsyncClient`),
over TCP and over a unix socket, for streaming completions and chat. Both are timed by the
same code. Rounds interleave every configuration, and each daemon stream is compared with
the in-process stream of its own round, so a change in machine load between rounds cancels.

Per stream: TTFT, TPOT (sglang's definition), each chunk's lag behind the token source's
schedule, and whether that lag grows from the first to the last 10 % of chunks. Per
daemon: CPU time per token (from /proc), against the source's own cost in-process.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial

from ling_local.bench.consumers import Trace, inprocess_stream, raw_stream, sdk_stream
from ling_local.bench.daemon_proc import BenchDaemon
from ling_local.bench.rawhttp import SSEConnection
from ling_local.bench.stats import Spread, Summary, machine
from ling_local.bench.token_source import Cadence, TokenSource

__all__ = ["ConfigResult", "OverheadResult", "Trace", "run_overhead"]

INPROCESS = "in-process"
TPOT_LIMIT_PCT = 2.0
TTFT_LIMIT_MS = 1.0
GROWTH_LIMIT_MS = 1.0
"""'Keeps up': the lag of the last 10 % of chunks exceeds the first 10 % by less than this."""


# --------------------------------------------------------------------------- results
@dataclass
class ConfigResult:
    name: str
    traces: list[Trace]
    cadence: Cadence
    n_tokens: int
    paired: list[Trace] = field(default_factory=list)
    """The in-process trace of the same round, one per trace (empty for the baseline)."""

    def _ms(self, values: list[float]) -> Summary:
        summary = Summary.of(values, 1e3)
        assert summary is not None
        return summary

    @property
    def ttft_ms(self) -> Summary:
        return self._ms([t.ttft_s for t in self.traces])

    @property
    def tpot_ms(self) -> Summary:
        return self._ms([t.tpot_s for t in self.traces])

    @property
    def e2e_ms(self) -> Summary:
        return self._ms([t.end_s for t in self.traces])

    @property
    def lag_ms(self) -> Summary:
        return self._ms([lag for t in self.traces for lag in t.lags(self.cadence)])

    @property
    def growth_ms(self) -> Summary:
        return self._ms([t.growth_s(self.cadence) for t in self.traces])

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

    # each daemon stream against the in-process stream of its own round
    def _paired(self, diff: Callable[[Trace, Trace], float]) -> Spread:
        return Spread.of([diff(d, b) for d, b in zip(self.traces, self.paired, strict=True)])

    @property
    def ttft_delta_ms(self) -> Spread:
        return self._paired(lambda d, b: (d.ttft_s - b.ttft_s) * 1e3)

    @property
    def tpot_delta_pct(self) -> Spread:
        return self._paired(lambda d, b: (d.tpot_s / b.tpot_s - 1) * 100)

    @property
    def e2e_delta_ms(self) -> Spread:
        return self._paired(lambda d, b: (d.end_s - b.end_s) * 1e3)

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
            "ttft_ms": self.ttft_ms.as_dict(),
            "tpot_ms": self.tpot_ms.as_dict(),
            "e2e_ms": self.e2e_ms.as_dict(),
            "chunk_lag_ms": self.lag_ms.as_dict(),
            "lag_growth_ms": self.growth_ms.as_dict(),
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
            "limits": {
                "tpot_delta_pct": TPOT_LIMIT_PCT,
                "ttft_delta_ms": TTFT_LIMIT_MS,
                "lag_growth_ms": GROWTH_LIMIT_MS,
            },
            "passed": self.passed,
            "baseline": self.baseline.as_dict(),
            "configs": [c.as_dict() for c in self.configs],
            "machine": {"before": self.machine_before, "after": self.machine_after},
            "wall_s": self.wall_s,
        }


# --------------------------------------------------------------------------- driver
async def _measure(
    cadence: Cadence,
    n_tokens: int,
    rounds: int,
    daemons: dict[str, BenchDaemon],
    endpoints: tuple[str, ...],
    clients: tuple[str, ...],
    tick: Callable[[str], None],
) -> tuple[ConfigResult, list[ConfigResult]]:
    from ling_local.client import AsyncClient

    source = TokenSource(cadence)
    await source.start()
    runs: dict[str, Callable[[], Awaitable[Trace]]] = {
        INPROCESS: lambda: inprocess_stream(source, n_tokens)
    }
    closers = []
    for t, d in daemons.items():
        sdk = AsyncClient(d.url, d.token)
        raw = SSEConnection(d.url, d.token)
        closers += [sdk.aclose, raw.aclose]
        for e in endpoints:
            if "raw" in clients:
                runs[f"{t} {e} raw"] = partial(raw_stream, raw, e, n_tokens, d.pid)
            if "sdk" in clients:
                runs[f"{t} {e} sdk"] = partial(sdk_stream, sdk, e, n_tokens, d.pid)
    order = list(runs)
    traces: dict[str, list[Trace]] = {name: [] for name in order}
    try:
        for r in range(rounds + 1):  # round 0 warms every path up and is dropped
            shift = r % len(order)  # rotate, so no configuration always runs first
            for name in order[shift:] + order[:shift]:
                trace = await runs[name]()
                if r > 0:
                    traces[name].append(trace)
                tick(name)
    finally:
        for close in closers:
            await close()
    base = ConfigResult(INPROCESS, traces[INPROCESS], cadence, n_tokens)
    configs = [
        ConfigResult(name, traces[name], cadence, n_tokens, paired=traces[INPROCESS])
        for name in order[1:]
    ]
    return base, configs


def run_overhead(
    *,
    period_ms: float = 0.78,
    burst: int = 10,
    n_tokens: int = 2000,
    rounds: int = 5,
    transports: tuple[str, ...] = ("tcp", "uds"),
    endpoints: tuple[str, ...] = ("completions", "chat"),
    clients: tuple[str, ...] = ("raw", "sdk"),
    progress: bool = True,
) -> OverheadResult:
    """Start one benchmark daemon per transport, measure, stop them."""
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

            base, configs = asyncio.run(
                _measure(cadence, n_tokens, rounds, daemons, endpoints, clients, tick)
            )
    finally:
        for d in daemons.values():
            d.stop()
    return OverheadResult(
        cadence, n_tokens, rounds, base, configs, before, machine(), time.perf_counter() - t0
    )
