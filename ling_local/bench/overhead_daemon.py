"""The daemon with the benchmark token source instead of a model. Private to
`ling-local bench overhead`, which starts it in a throw-away LING_LOCAL_HOME:

    python -m ling_local.bench.overhead_daemon --port 0 | --uds PATH [--period-ms 0.78]

It is built by the same `create_app` and `run_daemon` as `ling-local serve` (same
middleware, scheduler, relay, uvicorn settings), so what it costs is what the product costs.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from ling_local.bench.token_source import Cadence, TokenSource
from ling_local.config import Profile, profile_from_dict

__all__ = ["bench_profile", "main"]


def bench_profile() -> Profile:
    """A profile for the token source: no model files, long streams allowed."""
    return profile_from_dict(
        {
            "name": "bench-overhead",
            "description": "benchmark token source (ling-local bench overhead)",
            "model": {"path": "bench:token-source", "name": "token-source"},
            "engine": {"warmup": False},
            "limits": {"max_tokens": 1_000_000},
        }
    )


def main(argv: list[str] | None = None) -> None:
    from ling_local.logs import setup_logging
    from ling_local.server.serve import run_daemon

    parser = argparse.ArgumentParser(prog="python -m ling_local.bench.overhead_daemon")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--uds", default=None)
    parser.add_argument("--period-ms", type=float, default=0.78)
    parser.add_argument("--burst", type=int, default=10)
    parser.add_argument("--first-token-ms", type=float, default=None)
    parser.add_argument("--trace-file", default=None, help="write burst emission times here")
    parser.add_argument("--log-level", default="warning")
    args = parser.parse_args(argv)
    setup_logging("bench-overhead-daemon", args.log_level)
    cadence = Cadence(
        args.period_ms / 1e3,
        args.burst,
        None if args.first_token_ms is None else args.first_token_ms / 1e3,
    )
    logging.getLogger(__name__).info("token source: %s", cadence)
    run_daemon(
        bench_profile(),
        host=args.host,
        port=args.port,
        uds=args.uds,
        log_level=args.log_level,
        engine=TokenSource(cadence, trace_path=Path(args.trace_file) if args.trace_file else None),
    )


if __name__ == "__main__":
    main()
