"""Prometheus metrics of one daemon (own registry, so tests can run many daemons)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

__all__ = ["Metrics"]

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
_TPOT_BUCKETS = (0.0002, 0.0005, 0.00075, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25)


class Metrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.ttft = Histogram(
            "ling_ttft_seconds",
            "Time to first token (engine side)",
            ["priority"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.tpot = Histogram(
            "ling_tpot_seconds",
            "Mean time per output token of a request",
            ["priority"],
            buckets=_TPOT_BUCKETS,
            registry=r,
        )
        self.queue_wait = Histogram(
            "ling_queue_wait_seconds",
            "Time waiting for the engine",
            ["priority"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.accept_length = Histogram(
            "ling_spec_accept_length",
            "Tokens per verify step when speculating",
            buckets=(1, 1.5, 2, 3, 4, 5, 6, 8, 10, 12, 16),
            registry=r,
        )
        self.requests = Counter(
            "ling_requests", "Finished requests", ["priority", "outcome"], registry=r
        )
        self.prompt_tokens = Counter("ling_prompt_tokens", "Prompt tokens", registry=r)
        self.cached_tokens = Counter(
            "ling_cached_tokens", "Prompt tokens served from the prefix cache", registry=r
        )
        self.completion_tokens = Counter("ling_completion_tokens", "Generated tokens", registry=r)
        self.cancelled = Counter(
            "ling_cancelled_requests",
            "Requests cancelled before they finished",
            ["reason"],
            registry=r,
        )
        self.cancelled_tokens = Counter(
            "ling_cancelled_tokens",
            "Tokens generated for requests that were then cancelled (work nobody used)",
            registry=r,
        )
        self.running = Gauge("ling_running_requests", "Generations in the engine", registry=r)
        self.queued = Gauge("ling_queued_requests", "Requests waiting for the engine", registry=r)

    def render(self) -> bytes:
        return generate_latest(self.registry)
