"""How the bench commands show their results: a rich table on the terminal, and files in
the output directory: JSON (everything), a PNG plot (matplotlib) and a short Markdown
summary the README's performance section quotes."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ling_local.bench.stats import Summary

if TYPE_CHECKING:
    from ling_local.bench.overhead import OverheadResult
    from ling_local.bench.serve import ServeResult

__all__ = ["overhead_markdown", "print_overhead", "print_serve", "serve_markdown", "write_files"]


def _f(value: float | None, digits: int = 2, sign: bool = False) -> str:
    if value is None:
        return "–"
    return f"{value:+.{digits}f}" if sign else f"{value:.{digits}f}"


def _machine_line(before: dict, after: dict) -> str:
    load = f"load {before['load_avg'][0]:.1f} → {after['load_avg'][0]:.1f}"
    return f"{after['date']}, {after['cpu']} ({after['cores']} cores, {load})"


# --------------------------------------------------------------------------- serve
def _pooled(result: ServeResult) -> dict[str, Summary | None]:
    return {k: Summary.of([x for run in v for x in run]) for k, v in result.samples.items()}


def _serve_title(result: ServeResult) -> str:
    c, t = result.config, result.target
    what = ", ".join(f"{k} {t[k]}" for k in ("model", "engine", "profile") if t.get(k))
    runs = f" × {c.runs} runs" if c.runs > 1 else ""
    return (
        f"bench serve: {t['backend']} at {t['url']} ({what}); {c.input_len}-token prompts, "
        f"{c.output_len} output tokens, concurrency {c.max_concurrency}, "
        f"{c.num_prompts} requests{runs}"
    )


_SPREAD_LABELS = {
    "ttft_median_ms": "TTFT median ms",
    "tpot_mean_ms": "TPOT mean ms",
    "tpot_median_ms": "TPOT median ms",
    "itl_median_ms": "ITL median ms",
    "output_throughput": "output tok/s",
    "accept_length": "accept length",
}


def print_serve(result: ServeResult, console: Console | None = None) -> None:
    console = console or Console()
    pooled = _pooled(result)
    table = Table(
        "metric", "mean", "median", "p99", title="bench serve", caption=_serve_title(result)
    )
    names = {"ttft": "TTFT ms", "tpot": "TPOT ms", "itl": "ITL ms", "e2e": "E2E latency ms"}
    for key, label in names.items():
        s = pooled.get(key)
        table.add_row(label, _f(s and s.mean), _f(s and s.median, 3), _f(s and s.p99))
    runs = result.runs
    table.add_row("output tok/s", _f(sum(r.output_throughput for r in runs) / len(runs), 1))
    accepts = [r.accept_length for r in runs if r.accept_length is not None]
    table.add_row("accept length", _f(sum(accepts) / len(accepts)) if accepts else "–")
    ok, failed = sum(r.completed for r in runs), sum(r.failed for r in runs)
    table.add_row("requests ok / failed", f"{ok} / {failed}")
    console.print(table)
    if len(runs) > 1:
        spread = Table("number", *[f"run {i + 1}" for i in range(len(runs))], "median", "spread")
        for name, s in result.spread().items():
            spread.add_row(
                _SPREAD_LABELS[name],
                *[_f(v, 3) for v in s.values],
                _f(s.median, 3),
                f"{s.relative:.1%}",
            )
        console.print(spread)
    for err in {e for r in runs for e in r.errors}:
        console.print(f"[red]error:[/] {escape(err)}")


def serve_markdown(result: ServeResult, command: str = "") -> str:
    pooled = _pooled(result)
    lines = [
        f"**{_serve_title(result)}**; {_machine_line(result.machine_before, result.machine_after)}.",
        "",
        "| | mean | median | p99 |",
        "|---|---|---|---|",
    ]
    names = {"ttft": "TTFT ms", "tpot": "TPOT ms", "itl": "ITL ms", "e2e": "E2E ms"}
    for key, label in names.items():
        s = pooled.get(key)
        lines.append(
            f"| {label} | {_f(s and s.mean)} | {_f(s and s.median, 3)} | {_f(s and s.p99)} |"
        )
    spread = result.spread()
    out = spread.get("output_throughput")
    acc = spread.get("accept_length")
    lines += ["", f"Output throughput {_f(out and out.median, 1)} tok/s"]
    if acc:
        lines[-1] += f", accept length {acc.median:.2f}"
    lines[-1] += "."
    if len(result.runs) > 1:
        labels = {
            "ttft_median_ms": "TTFT median {:.1f} ms",
            "tpot_median_ms": "TPOT median {:.3f} ms",
            "tpot_mean_ms": "TPOT mean {:.3f} ms",
            "output_throughput": "{:.1f} tok/s",
        }
        parts = [
            labels[name].format(s.median) + f" (±{s.relative / 2:.1%})"
            for name, s in spread.items()
            if name in labels
        ]
        lines.append(
            f"Run to run ({len(result.runs)} runs, median and half the max−min spread): "
            + ", ".join(parts)
            + "."
        )
    if command:
        lines += ["", f"`{command}`"]
    return "\n".join(lines) + "\n"


def _ecdf(ax, values: list[float], label: str) -> None:
    xs = sorted(values)
    ax.step(xs, [(i + 1) / len(xs) for i in range(len(xs))], where="post", label=label)


def plot_serve(result: ServeResult, path: Path) -> None:
    """Cumulative distributions (one line per run): a tail shows as a late climb to 1."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = {"ttft": "TTFT (ms)", "tpot": "TPOT per request (ms)", "itl": "ITL (ms)"}
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    for ax, (key, label) in zip(axes, panels.items(), strict=True):
        for i, values in enumerate(result.samples[key]):
            if values:
                _ecdf(ax, values, f"run {i + 1}")
        ax.set_xlabel(label)
        ax.set_ylabel("fraction of samples ≤ x")
        ax.set_xscale("log")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
    fig.suptitle(textwrap.fill(_serve_title(result), 150), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --------------------------------------------------------------------------- overhead
def _overhead_title(result: OverheadResult) -> str:
    c = result.cadence
    return (
        f"bench overhead: token source at {c.period_s * 1e3:.2f} ms/token in bursts of "
        f"{c.burst} (one every {c.step_s * 1e3:.1f} ms), {result.n_tokens}-token streams, "
        f"{result.rounds} rounds, {result.probes} TTFT probes per path and round"
    )


_OVERHEAD_COLUMNS = (
    "path",
    "TTFT added ms",
    "Δ TTFT ms",
    "Δ TPOT %",
    "relay ms p50/p99",
    "growth ms",
    "CPU µs/tok",
    "verdict",
)
_OVERHEAD_NOTE = (
    "TTFT added: p50 over the short probe streams of (engine start − request sent) + "
    "(first chunk in − first token out); Δ TTFT: that against in-process probes run "
    "alternately, median of the rounds [min, max]; Δ TPOT: 2,000-token streams against the "
    "in-process stream of the same round; relay: each chunk's arrival minus when its newest "
    "token left the source; growth: relay of the last 10 % of chunks minus the first 10 %; "
    "CPU: the daemon process's (the client's in brackets) per token streamed, in-process: "
    "the source's own. raw = bare HTTP client (the daemon alone); sdk = ling_local.client."
)


def _overhead_rows(result: OverheadResult) -> list[list[str]]:
    b = result.baseline
    rows = [
        [
            "in-process (floor)",
            _f(b.added_ttft_ms.median, 3),
            "",
            f"(TPOT {b.tpot_ms.median:.4f} ms)",
            f"{_f(b.relay_ms.median, 3)} / {_f(b.relay_ms.p99, 3)}",
            _f(b.growth_ms.median, 3, sign=True),
            f"{b.consumer_cpu_us_per_token:.1f}",
            "",
        ]
    ]
    for c in result.configs:
        d = c.ttft_delta_ms
        failed = [k for k, ok in c.verdict().items() if not ok]
        rows.append(
            [
                c.name,
                _f(c.added_ttft_ms.median, 3),
                f"{d.median:+.3f} [{d.min:+.2f}, {d.max:+.2f}]",
                _f(c.tpot_delta_pct.median, sign=True),
                f"{_f(c.relay_ms.median, 3)} / {_f(c.relay_ms.p99)}",
                _f(c.growth_ms.median, 3, sign=True),
                f"{c.daemon_cpu_us_per_token:.1f} ({c.consumer_cpu_us_per_token:.1f})",
                "pass" if not failed else "FAIL " + ",".join(failed),
            ]
        )
    return rows


def print_overhead(result: OverheadResult, console: Console | None = None) -> None:
    console = console or Console()
    table = Table(*_OVERHEAD_COLUMNS, title="bench overhead", caption=_overhead_title(result))
    for row in _overhead_rows(result):
        table.add_row(*(escape(cell) for cell in row))
    console.print(table)
    console.print(escape(_OVERHEAD_NOTE), style="dim")
    console.print(_machine_line(result.machine_before, result.machine_after), style="dim")


def overhead_markdown(result: OverheadResult, command: str = "") -> str:
    lines = [
        f"**{_overhead_title(result)}**; "
        f"{_machine_line(result.machine_before, result.machine_after)}.",
        "",
        "| " + " | ".join(_OVERHEAD_COLUMNS) + " |",
        "|" + "---|" * len(_OVERHEAD_COLUMNS),
    ]
    lines += ["| " + " | ".join(row) + " |" for row in _overhead_rows(result)]
    lines += [
        "",
        "Limits: Δ TPOT < 2 %, Δ TTFT < 1 ms, growth < 1 ms. " + _OVERHEAD_NOTE,
    ]
    if command:
        lines += ["", f"`{command}`"]
    return "\n".join(lines) + "\n"


def plot_overhead(result: OverheadResult, path: Path) -> None:
    """Each chunk's relay latency over a stream (the median stream of each path): a flat
    line keeps up; a rising one falls behind."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 4.5))
    for c in [result.baseline, *result.configs]:
        trace = sorted(c.traces, key=lambda t: t.end_s)[len(c.traces) // 2]
        tokens = [n for _, n in trace.arrivals if n in trace.emits]
        ax.plot(tokens, [x * 1e3 for x in trace.relay_s()], lw=0.8, label=c.name)
    ax.set_xlabel("tokens streamed")
    ax.set_ylabel("relay latency: arrival − token out of the source (ms)")
    ax.set_yscale("log")
    ax.legend(fontsize=7, ncols=2)
    ax.set_title(textwrap.fill(_overhead_title(result), 110), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --------------------------------------------------------------------------- files
def write_files(
    out_dir: str | Path, name: str, data: dict, markdown: str, plot=None
) -> dict[str, Path]:
    """`name`.json, `name`.md and, given a plot function, `name`.png in `out_dir`."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = {"json": out / f"{name}.json", "markdown": out / f"{name}.md"}
    files["json"].write_text(json.dumps(data, indent=2, default=str) + "\n")
    files["markdown"].write_text(markdown)
    if plot is not None:
        files["png"] = out / f"{name}.png"
        plot(files["png"])
    return files
