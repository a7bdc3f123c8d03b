"""The numbers of `bench overhead` (see overhead.py for how they are measured): one
`ConfigResult` per path (transport, endpoint, client) and the in-process floor, and the
limits from the issue they are checked against."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ling_local.bench.consumers import Trace
from ling_local.bench.stats import Spread, Summary
from ling_local.bench.token_source import Cadence

__all__ = ["INPROCESS", "ConfigResult", "OverheadResult"]

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
