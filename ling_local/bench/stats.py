"""Summaries shared by the bench commands.

Percentiles are numpy's (linear interpolation), as `sglang.bench_serving` computes them, so
our numbers and SGLang's line up. `Spread` is how far repeated runs disagree: what a number
measured on a shared, noisy machine is worth.
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

__all__ = ["Spread", "Summary", "machine", "percentile"]


def percentile(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=float), q))


@dataclass(frozen=True, slots=True)
class Summary:
    """One distribution, in the unit it was given in."""

    n: int
    mean: float
    median: float
    std: float
    p90: float
    p99: float
    min: float
    max: float

    @classmethod
    def of(cls, values: Sequence[float], scale: float = 1.0) -> Summary | None:
        """Summarise `values` × `scale` (e.g. 1e3 for seconds → ms); None when empty."""
        if len(values) == 0:
            return None
        a = np.asarray(values, dtype=float) * scale
        p90, p99 = np.percentile(a, [90, 99])
        return cls(
            n=int(a.size),
            mean=float(a.mean()),
            median=float(np.median(a)),
            std=float(a.std()),
            p90=float(p90),
            p99=float(p99),
            min=float(a.min()),
            max=float(a.max()),
        )

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class Spread:
    """Repeated runs of one number: their median and how far apart they are."""

    values: tuple[float, ...]
    median: float
    min: float
    max: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        v = tuple(float(x) for x in values)
        return cls(v, float(np.median(v)), min(v), max(v))

    @property
    def relative(self) -> float:
        """(max − min) / median: 0.03 means the runs agree within 3 %."""
        return (self.max - self.min) / self.median if self.median else 0.0

    def as_dict(self) -> dict:
        return {**asdict(self), "relative": self.relative}


def machine() -> dict:
    """What the numbers were measured on, and how busy it was (load average at the time)."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            cpu = next(
                (ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu
            )
    except OSError:
        pass
    load = os.getloadavg() if hasattr(os, "getloadavg") else (0.0, 0.0, 0.0)
    return {
        "host": platform.node(),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "load_avg": [round(x, 2) for x in load],
        "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }
