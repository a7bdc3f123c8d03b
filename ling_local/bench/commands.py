"""The `ling-local bench serve` and `ling-local bench overhead` commands (registered on the
CLI's `bench` group in cli.py). Heavy imports stay inside the commands."""

from __future__ import annotations

import json
import math
import shlex
import sys
from typing import Annotated

import typer

__all__ = ["bench_overhead", "bench_serve"]

OutOpt = Annotated[str, typer.Option(help="Directory for the JSON, PNG and Markdown files.")]
JsonOpt = Annotated[
    bool, typer.Option("--json", help="Print the full result as JSON instead of the table.")
]
ProgressOpt = Annotated[bool, typer.Option(help="Show a progress bar.")]


def _command() -> str:
    return shlex.join(["ling-local", *sys.argv[1:]])


def _split(value: str) -> tuple[str, ...]:
    return tuple(v.strip() for v in value.split(",") if v.strip())


def bench_serve(
    backend: Annotated[
        str, typer.Option(help="daemon (ours), sglang (native /generate) or openai.")
    ] = "daemon",
    base_url: Annotated[
        str | None,
        typer.Option(help="Server URL (unix:/path for a socket); default: the running daemon."),
    ] = None,
    api_key: Annotated[
        str | None,
        typer.Option(help="Bearer token (default: the daemon's; OPENAI_API_KEY for others)."),
    ] = None,
    model: Annotated[str | None, typer.Option(help="Model id for openai servers.")] = None,
    input_len: Annotated[int, typer.Option(help="Prompt tokens per request.")] = 1024,
    output_len: Annotated[int, typer.Option(help="Output tokens per request.")] = 128,
    num_prompts: Annotated[int, typer.Option(help="Requests per run.")] = 10,
    warmup: Annotated[int, typer.Option(help="Warm-up requests (not measured).")] = 1,
    max_concurrency: Annotated[int, typer.Option(help="Requests in flight at once.")] = 1,
    request_rate: Annotated[
        float, typer.Option(help="Requests per second (Poisson); inf = all at once.")
    ] = math.inf,
    random_range_ratio: Annotated[
        float, typer.Option(help="Lengths drawn from [len × ratio, len]; 1 = fixed.")
    ] = 1.0,
    seed: int = 1,
    runs: Annotated[int, typer.Option(help="Repeat the run on fresh prompts; shows spread.")] = 1,
    vocab_size: Annotated[
        int | None, typer.Option(help="Token ids are drawn below this (default: from server).")
    ] = None,
    tokenizer: Annotated[
        str | None, typer.Option(help="Local tokenizer to take the vocabulary size from.")
    ] = None,
    out: OutOpt = "bench-out",
    as_json: JsonOpt = False,
    progress: ProgressOpt = True,
) -> None:
    """Serving latency like sglang.bench_serving: TTFT, TPOT, ITL, throughput, accept length."""
    from ling_local.bench.report import plot_serve, print_serve, serve_markdown, write_files
    from ling_local.bench.serve import ServeConfig, run_serve

    cfg = ServeConfig(
        backend=backend,
        base_url=base_url,
        api_key=api_key,
        model=model,
        input_len=input_len,
        output_len=output_len,
        num_prompts=num_prompts,
        warmup=warmup,
        max_concurrency=max_concurrency,
        request_rate=request_rate,
        range_ratio=random_range_ratio,
        seed=seed,
        runs=runs,
        vocab_size=vocab_size,
        tokenizer=tokenizer,
    )
    result = run_serve(cfg, progress=progress and not as_json)
    data = result.as_dict()
    files = write_files(
        out, "serve", data, serve_markdown(result, _command()), lambda p: plot_serve(result, p)
    )
    if as_json:
        typer.echo(json.dumps(data, default=str))
        return
    print_serve(result)
    typer.echo("wrote " + ", ".join(str(p) for p in files.values()))
    if not any(r.completed for r in result.runs):
        raise typer.Exit(1)


def bench_overhead(
    period_ms: Annotated[float, typer.Option(help="Token source: ms per token.")] = 0.78,
    burst: Annotated[int, typer.Option(help="Tokens per burst (one verify step).")] = 10,
    tokens: Annotated[int, typer.Option(help="Tokens per stream.")] = 2000,
    rounds: Annotated[int, typer.Option(help="Measured rounds (each runs every path).")] = 5,
    probes: Annotated[int, typer.Option(help="Short TTFT probe streams per path and round.")] = 10,
    transports: Annotated[str, typer.Option(help="Comma list: tcp,uds.")] = "tcp,uds",
    endpoints: Annotated[str, typer.Option(help="Comma list: completions,chat.")] = (
        "completions,chat"
    ),
    clients: Annotated[
        str, typer.Option(help="Comma list: raw (bare HTTP), sdk (ling_local.client).")
    ] = "raw,sdk",
    check: Annotated[
        bool, typer.Option("--check", help="Exit 1 unless every path meets the limits.")
    ] = False,
    out: OutOpt = "bench-out",
    as_json: JsonOpt = False,
    progress: ProgressOpt = True,
) -> None:
    """What the daemon's host path adds to a token stream of known cadence (TCP and UDS)."""
    from ling_local.bench.overhead import run_overhead
    from ling_local.bench.report import (
        overhead_markdown,
        plot_overhead,
        print_overhead,
        write_files,
    )

    def choose(value: str, allowed: tuple[str, ...], name: str) -> tuple[str, ...]:
        chosen = _split(value)
        if not chosen or set(chosen) - set(allowed):
            raise typer.BadParameter(f"choose from {', '.join(allowed)}", param_hint=name)
        return chosen

    if period_ms <= 0 or burst < 1 or tokens < 2 or rounds < 1 or probes < 1:
        raise typer.BadParameter(
            "--period-ms > 0, --burst ≥ 1, --tokens ≥ 2, --rounds ≥ 1, --probes ≥ 1"
        )
    result = run_overhead(
        period_ms=period_ms,
        burst=burst,
        n_tokens=tokens,
        rounds=rounds,
        probes=probes,
        transports=choose(transports, ("tcp", "uds"), "--transports"),
        endpoints=choose(endpoints, ("completions", "chat"), "--endpoints"),
        clients=choose(clients, ("raw", "sdk"), "--clients"),
        progress=progress and not as_json,
    )
    data = result.as_dict()
    files = write_files(
        out,
        "overhead",
        data,
        overhead_markdown(result, _command()),
        lambda p: plot_overhead(result, p),
    )
    if as_json:
        typer.echo(json.dumps(data, default=str))
    else:
        print_overhead(result)
        typer.echo("wrote " + ", ".join(str(p) for p in files.values()))
    if check and not result.passed:
        raise typer.Exit(1)
