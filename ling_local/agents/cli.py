"""``ling-local chain``: run, resume and inspect chains defined in Python files."""

from __future__ import annotations

import sys
from datetime import datetime
from pathlib import Path
from typing import Annotated

import typer

from ling_local.errors import ChainCancelled, LingLocalError

__all__ = ["chain_app"]

chain_app = typer.Typer(
    help="Serial agent chains: run a chain file, resume a run, show a run (docs/scripting.md).",
    no_args_is_help=True,
)

InputOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--input", "-i", help="NAME=VALUE for the chain's inputs (NAME=@FILE reads a file)."
    ),
]
JsonlOpt = Annotated[
    bool, typer.Option("--jsonl", help="Print every event as a JSON line instead of the display.")
]
UrlOpt = Annotated[
    str | None, typer.Option("--url", help="Daemon URL (default: the running daemon).")
]


def _fail(message: str, code: int = 2) -> None:
    typer.secho(f"error: {message}", fg=typer.colors.RED, err=True)
    raise typer.Exit(code)


def _parse_inputs(items: list[str]) -> dict[str, str]:
    values: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.isidentifier():
            _fail(f"--input takes NAME=VALUE (got {item!r})")
        if value.startswith("@"):
            path = Path(value[1:]).expanduser()
            try:
                value = path.read_text()
            except OSError as err:
                _fail(f"--input {name}: cannot read {path}: {err.strerror}")
        values[name] = value
    return values


def _drive(run, jsonl: bool) -> None:
    """Show a run's events until it ends; exit 1 on failure, 130 when cancelled."""
    from rich.console import Console

    from ling_local.agents.display import ChainDisplay, format_output
    from ling_local.agents.events import ChainError, ChainFinished, event_to_json

    console = Console(stderr=not jsonl)
    last = None
    try:
        if jsonl:
            for event in run.events():
                sys.stdout.write(event_to_json(event) + "\n")
                sys.stdout.flush()
                last = event
        else:
            with ChainDisplay(console) as display:
                for event in run.events():
                    display.handle(event)
                    last = event
    except KeyboardInterrupt:  # the run has already stopped its generation and logged itself
        if jsonl and not isinstance(last, ChainError):
            index = getattr(last, "index", -1)
            cancelled = ChainError(index, "cancelled by Ctrl-C", "cancelled")
            sys.stdout.write(event_to_json(cancelled) + "\n")
        typer.secho(
            f"cancelled; resume with `ling-local chain resume {run.run_id}`",
            fg=typer.colors.YELLOW,
            err=True,
        )
        raise typer.Exit(130) from None
    error = run.error
    if isinstance(last, ChainFinished):
        if not jsonl:
            typer.echo(format_output(last.output, limit=None))
        return
    if isinstance(error, ChainCancelled):
        typer.secho(error.message, fg=typer.colors.YELLOW, err=True)
        raise typer.Exit(130)
    message = error.message if isinstance(error, LingLocalError) else str(error)
    typer.secho(f"error: {message}", fg=typer.colors.RED, err=True)
    typer.secho(
        f"fix the cause, then `ling-local chain resume {run.run_id}`", fg=typer.colors.RED, err=True
    )
    raise typer.Exit(1)


@chain_app.command("run")
def run_command(
    file: Annotated[Path, typer.Argument(help="A Python file that defines `chain = Chain(...)`.")],
    input: InputOpt = None,
    jsonl: JsonlOpt = False,
    url: UrlOpt = None,
) -> None:
    """Run a chain file from its first step (each finished step is saved as it finishes)."""
    from ling_local.agents.loader import load_chain
    from ling_local.logs import setup_logging

    setup_logging("chain", "warning")
    try:
        chain, defaults = load_chain(file)
        run = chain.start({**defaults, **_parse_inputs(input or [])}, client=url)
    except LingLocalError as err:
        _fail(err.message)
    if not jsonl:
        typer.secho(f"run {run.run_id}", err=True, dim=True)
    _drive(run, jsonl)


@chain_app.command("resume")
def resume_command(
    run_id: Annotated[str, typer.Argument(help="The run to continue (see `chain list`).")],
    jsonl: JsonlOpt = False,
    url: UrlOpt = None,
) -> None:
    """Continue a run after its last finished step; finished steps are not run again."""
    from ling_local.agents.loader import resume_run
    from ling_local.logs import setup_logging

    setup_logging("chain", "warning")
    try:
        run = resume_run(run_id, client=url)
    except LingLocalError as err:
        _fail(err.message)
    _drive(run, jsonl)


@chain_app.command("show")
def show_command(
    run_id: Annotated[str, typer.Argument(help="The run to show.")],
    full: Annotated[bool, typer.Option("--full", help="Show whole outputs.")] = False,
) -> None:
    """A run's steps: status, time, tokens and outputs."""
    from rich.console import Console
    from rich.panel import Panel
    from rich.table import Table

    from ling_local.agents.display import format_output
    from ling_local.agents.runlog import RunLog

    try:
        with RunLog() as log:
            record = log.get(run_id)
    except LingLocalError as err:
        _fail(err.message)
    console = Console()
    when = datetime.fromtimestamp(record.created).strftime("%Y-%m-%d %H:%M:%S")
    console.print(f"[bold]{record.chain}[/] run {record.run_id} · {record.status} · {when}")
    if record.source:
        console.print(f"[dim]{record.source}[/]")
    if record.error:
        console.print(f"[red]{record.error}[/]")
    table = Table("#", "step", "status", "time", "prompt tok", "output tok", "attempts")
    done = record.finished_steps()
    for i, name in enumerate(record.step_names):
        s = done.get(i)
        if s is None:
            table.add_row(str(i), name, "[dim]not finished[/]", "", "", "", "")
        else:
            table.add_row(
                str(i),
                name,
                "[green]finished[/]",
                f"{s.seconds:.1f}s",
                str(s.prompt_tokens),
                str(s.completion_tokens),
                str(s.attempts),
            )
    console.print(table)
    for s in record.steps:
        text = format_output(s.output, limit=None if full else 600)
        console.print(Panel(text, title=s.name, title_align="left", border_style="dim"))


@chain_app.command("list")
def list_command(
    limit: Annotated[int, typer.Option(help="How many recent runs.")] = 20,
) -> None:
    """Recent runs, newest first."""
    from ling_local.agents.runlog import RunLog
    from ling_local.tables import Col, print_table

    with RunLog() as log:
        runs = log.runs(limit)
    rows = []
    for r in runs:
        when = datetime.fromtimestamp(r.created).strftime("%Y-%m-%d %H:%M:%S")
        rows.append([r.run_id, r.chain, r.status, str(len(r.step_names)), when])
    columns = [Col("run", identifier=True), Col("chain"), Col("status"), Col("steps")]
    print_table([*columns, Col("started")], rows)
