"""`ling-local`: serve | lsp | tui | bench | chain | doctor | profiles.

Heavy modules are imported inside the commands so `ling-local --help` stays instant.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
import typer.core

from ling_local.agents.cli import chain_app
from ling_local.bench.commands import bench_overhead, bench_serve
from ling_local.errors import LingLocalError

_option_type = typer.core.TyperOption.display_type_rich


def _flag_without_type(self: typer.core.TyperOption, ctx: typer.Context) -> str | None:
    """typer 0.29's rich help labels every flag `<bool>` (`--help <bool>`), as if it took a
    value; click's plain help shows flags bare, and so does this."""
    if self.is_flag and not self.count:
        return None
    return _option_type(self, ctx)


typer.core.TyperOption.display_type_rich = _flag_without_type  # type: ignore[method-assign]

app = typer.Typer(
    name="ling-local",
    help="A local code-completion and chat daemon: one big model, instant for one person.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        typer.echo(f"ling-local {version('ling-local')}")
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """A local code-completion and chat daemon: one big model, instant for one person."""


bench_app = typer.Typer(help="Benchmarks that print numbers.", no_args_is_help=True)
app.add_typer(bench_app, name="bench")
app.add_typer(chain_app, name="chain")

ProfileOpt = Annotated[
    str, typer.Option("--profile", "-p", help="Profile name (see `profiles`) or TOML path.")
]


def _fail(err: LingLocalError) -> None:
    typer.secho(f"error: {err.message}", fg=typer.colors.RED, err=True)
    raise typer.Exit(2)


@app.command()
def serve(
    profile: ProfileOpt = "tiny",
    host: Annotated[
        str, typer.Option(help="Address to listen on (loopback only unless --allow-remote).")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port (0 = any free port).")] = 8741,
    uds: Annotated[str | None, typer.Option(help="Listen on this unix socket instead.")] = None,
    allow_remote: Annotated[
        bool,
        typer.Option("--allow-remote", help="Allow a non-loopback --host (exposes the model)."),
    ] = False,
    allow_origin: Annotated[
        list[str] | None,
        typer.Option(help="Allow this browser Origin (repeatable; none by default)."),
    ] = None,
    allow_host: Annotated[
        list[str] | None,
        typer.Option(help="Accept this Host header besides loopback names (repeatable)."),
    ] = None,
    log_level: Annotated[str, typer.Option(help="debug | info | warning")] = "info",
) -> None:
    """Run the daemon in the foreground (default: the embedded tiny model on the CPU)."""
    from ling_local.config import load_profile
    from ling_local.logs import setup_logging
    from ling_local.server.serve import run_daemon

    log_file = setup_logging("daemon", log_level)
    try:
        prof = load_profile(profile)
        typer.echo(
            f"ling-local: profile {prof.name} ({prof.engine.kind}: "
            f"{prof.served_model_name}); log {log_file}",
            err=True,
        )
        run_daemon(
            prof,
            host=host,
            port=port,
            uds=uds,
            allow_remote=allow_remote,
            allowed_origins=allow_origin or (),
            allowed_hosts=allow_host or (),
            log_level=log_level,
        )
    except LingLocalError as err:
        _fail(err)


@app.command()
def profiles() -> None:
    """List the profiles --profile accepts."""
    from ling_local import paths
    from ling_local.config import list_profiles, load_profile
    from ling_local.tables import Col, print_table

    user_dir = paths.config_dir() / "profiles"
    shipped: set[str] = set()
    rows = []
    for name, file in list_profiles().items():
        if file.parent == user_dir:
            where = _home_relative(file)
        else:  # the shipped ones share one directory: said once, under the table
            where = file.name
            shipped.add(_home_relative(file.parent))
        try:
            p = load_profile(str(file))
            rows.append([name, p.engine.kind, p.model.path, p.description, where])
        except LingLocalError as err:
            rows.append([name, "[red]invalid[/]", "", err.message, where])
    columns = [Col("name", identifier=True), Col("engine"), Col("model"), Col("description")]
    caption = f"shipped profiles: {', '.join(sorted(shipped))}" if shipped else None
    print_table([*columns, Col("file")], rows, caption=caption)


def _home_relative(path: Path) -> str:
    try:
        return "~/" + str(path.relative_to(Path.home()))
    except ValueError:
        return str(path)


@app.command()
def doctor(profile: ProfileOpt = "tiny") -> None:
    """Check this machine, the profile's model files, GPUs and the daemon."""
    from ling_local.doctor import run_doctor

    raise typer.Exit(run_doctor(profile))


@app.command()
def lsp(
    profile: ProfileOpt = "tiny",
    start_daemon: Annotated[
        bool, typer.Option(help="Start `ling-local serve` when no daemon answers.")
    ] = True,
) -> None:
    """The language server for editors, on stdio."""
    from lsp.server import main as lsp_main

    lsp_main(profile=profile, start_daemon=start_daemon)


@app.command()
def tui(
    chain: Annotated[
        str | None,
        typer.Option(help="Open the agent-chain view with this chain file (defines `chain`)."),
    ] = None,
) -> None:
    """The chat TUI: conversations with the local model, and agent chains step by step."""
    from tui.app import main as tui_main

    tui_main(chain_file=chain)


@bench_app.command("quality")
def bench_quality(
    limit: Annotated[int, typer.Option(help="held-out examples of each kind")] = 100,
    device: str = "cpu",
    profile: Annotated[
        str, typer.Option(help="profile whose prompt format the daemon-path row uses ('' to skip)")
    ] = "tiny",
    mode: Annotated[str, typer.Option(help="psm | spm for the raw-model rows")] = "spm",
    token_healing: Annotated[bool, typer.Option(help="heal in the raw-model rows")] = False,
    model_dir: str | None = None,
    draft_dir: str | None = None,
    accept_limit: int = 20,
    chat_limit: Annotated[
        int, typer.Option(help="chat requests on the daemon path (0: none)")
    ] = 50,
    json_out: str | None = None,
) -> None:
    """Quality of the tiny model on held-out packages: FIM against two baselines, chat that
    writes a function, the examples of issue 25."""
    from ling_local.bench.quality import run_quality

    run_quality(
        model_dir,
        limit,
        device,
        json_out,
        draft_dir,
        mode,
        16,
        None,
        accept_limit,
        token_healing,
        profile=profile or None,
        chat_limit=chat_limit,
    )


@bench_app.command("keystroke")
def bench_keystroke(
    profile: ProfileOpt = "tiny",
    prefix_tokens: Annotated[int, typer.Option(help="tokens of the file already cached")] = 1500,
    new_prompt_tokens: Annotated[int, typer.Option(help="tokens a keystroke adds")] = 8,
    cold_tokens: Annotated[
        int | None, typer.Option(help="cold prompts' tokens (default: prefix + new)")
    ] = None,
    decode_tokens: Annotated[int, typer.Option(help="tokens per TPOT run")] = 128,
    repeats: Annotated[int, typer.Option(help="cold and cached runs (median)")] = 7,
    out: Annotated[str | None, typer.Option(help="JSON file, rewritten after each phase")] = None,
) -> None:
    """The editor's case through a fresh daemon on a profile as shipped: time to the first
    token of the first request after /health said ready, of a cold prompt, and of a
    keystroke on a cached file (at the client and in the engine, with the engine's
    per-phase trace); plus decode TPOT."""
    import json
    from pathlib import Path

    from ling_local.bench.keystroke import keystroke_latency

    def save(result: dict) -> None:
        if out:
            Path(out).write_text(json.dumps(result, indent=1))

    result = keystroke_latency(
        profile,
        prefix_tokens,
        new_prompt_tokens,
        cold_tokens,
        decode_tokens,
        repeats,
        save=save,
    )
    typer.echo(json.dumps(result, indent=1))


@bench_app.command("structured")
def bench_structured(
    profile: ProfileOpt = "tiny",
    rounds: Annotated[int, typer.Option(help="constrained + free generations")] = 8,
    max_tokens: Annotated[int, typer.Option(help="tokens per generation at most")] = 160,
    temperature: Annotated[float, typer.Option(help="sampling temperature")] = 0.8,
    check: Annotated[
        bool, typer.Option("--check", help="Exit 1 unless the grammar stays under 10 %.")
    ] = False,
) -> None:
    """response_format on the embedded engine: the grammar's time per token (masks and
    advances) against the decode step, in the same run (target: under 10 %)."""
    import json

    from ling_local.bench.structured import structured_cost

    result = structured_cost(profile, rounds, max_tokens, temperature)
    typer.echo(json.dumps(result, indent=1))
    share = result["share_of_step"]
    if check and (share is None or share >= result["target"]):
        raise typer.Exit(1)


@bench_app.command("cpu")
def bench_cpu(
    profile: ProfileOpt = "tiny",
    prefix_tokens: Annotated[int, typer.Option(help="tokens of the file already cached")] = 1500,
    new_prompt_tokens: Annotated[int, typer.Option(help="tokens a keystroke adds")] = 8,
    rounds: Annotated[int, typer.Option(min=1, help="rounds, engines interleaved")] = 7,
    baseline: Annotated[
        str | None,
        typer.Option(help="llama.cpp (needs the llamacpp extra), or none: our engine alone"),
    ] = "llama.cpp",
    llama_threads: Annotated[
        str, typer.Option(help="llama.cpp thread counts, comma-separated")
    ] = "1,2",
    json_out: Annotated[str | None, typer.Option("--json", help="also write JSON here")] = None,
) -> None:
    """The embedded engine on the CPU against llama.cpp on the same model and token ids:
    time to first token with nothing cached and on a cached file, decode TPOT; the profile's
    model as GGUF q8_0, llama.cpp at each thread count, engines interleaved per round."""
    import json
    from pathlib import Path

    from ling_local.bench.cpu import cpu_comparison, cpu_markdown

    if baseline not in (None, "", "none", "llama.cpp"):
        raise typer.BadParameter("the only baseline is llama.cpp", param_hint="--baseline")
    try:
        threads = tuple(int(t) for t in llama_threads.split(","))
    except ValueError:
        raise typer.BadParameter("comma-separated integers", param_hint="--llama-threads") from None
    try:
        result = cpu_comparison(
            profile,
            prefix_tokens,
            new_prompt_tokens,
            rounds=rounds,
            baseline="llama.cpp" if baseline == "llama.cpp" else None,
            llama_threads=threads,
        )
    except LingLocalError as err:  # e.g. llama-cpp-python not installed
        _fail(err)
    typer.echo(cpu_markdown(result))
    if json_out:
        Path(json_out).write_text(json.dumps(result.as_dict(), indent=1))


@bench_app.command("edit")
def bench_edit(
    profile: ProfileOpt = "tiny",
    new_tokens: Annotated[int, typer.Option(help="tokens to generate")] = 200,
    repeats: Annotated[int, typer.Option(help="runs per mode (median)")] = 3,
) -> None:
    """Code editing (a file, then the same file with an identifier renamed): ms per output
    token plain, with prompt lookup and with the draft model; acceptance; same output."""
    import json

    from ling_local.bench.edit import edit_speedup

    typer.echo(json.dumps(edit_speedup(profile, new_tokens, repeats), indent=1))


@bench_app.command("engine")
def bench_engine(
    device: Annotated[str, typer.Option(help="cuda or cpu")] = "cuda",
    model: Annotated[
        str | None, typer.Option(help="HF model dir (default: a random Llama-3.2-1B-shaped model)")
    ] = None,
    out: Annotated[str, typer.Option(help="Where to write JSON and Markdown")] = "bench-out",
    prompt_tokens: int = 512,
    new_tokens: int = 256,
    repeats: int = 3,
    baselines: Annotated[
        str, typer.Option(help="comma list: hf-static,gptfast,sglang (needs --sglang-profile)")
    ] = "hf-static,gptfast",
    variants: Annotated[
        str,
        typer.Option(
            help="comma list: eager,graphs,compiled,triton,prompt-lookup,prompt-lookup-triton"
        ),
    ] = "graphs,compiled,prompt-lookup",
    workload: Annotated[
        str, typer.Option(help="random (random prompt ids) or edit (the code-editing prompt)")
    ] = "random",
    ttft_cold_tokens: Annotated[
        int, typer.Option(help="TTFT columns: cold prompt tokens (0: no TTFT columns)")
    ] = 2000,
    ttft_prefix_tokens: Annotated[
        int, typer.Option(help="TTFT columns: cached prefix tokens")
    ] = 1500,
    ttft_new_tokens: Annotated[
        int, typer.Option(help="TTFT columns: a keystroke's new tokens")
    ] = 16,
    tpot: Annotated[bool, typer.Option(help="measure TPOT (--no-tpot: TTFT only)")] = True,
    sglang_profile: Annotated[
        str | None, typer.Option(help="SGLang profile (flags, env) of the sglang baseline")
    ] = None,
) -> None:
    """Batch-1 decode and time to first token of the embedded engine vs transformers, a
    gpt-fast-style loop and (with --sglang-profile) SGLang, on the same model.
    --model copy-1b: the shipped tiny model inside the Llama-3.2-1B shape (copies its
    prompt, unlike random weights)."""

    from ling_local.bench.engine import run_engine_bench

    def split(value: str) -> tuple[str, ...]:
        return tuple(v for v in value.split(",") if v)

    result = run_engine_bench(
        device=device,
        model=model,
        out_dir=out,
        prompt_tokens=prompt_tokens,
        new_tokens=new_tokens,
        repeats=repeats,
        baselines=split(baselines),
        variants=split(variants),
        workload=workload,
        ttft=(ttft_cold_tokens, ttft_prefix_tokens, ttft_new_tokens) if ttft_cold_tokens else None,
        tpot=tpot,
        sglang_profile=sglang_profile,
    )
    typer.echo(result.markdown())


@bench_app.command("complete")
def bench_complete(
    profile: ProfileOpt = "tiny",
    session: Annotated[
        str | None, typer.Option(help="Session JSON (default: the one shipped in bench/data)")
    ] = None,
    url: Annotated[
        str | None, typer.Option(help="Use this running daemon (default: start a private one)")
    ] = None,
    speed: Annotated[float, typer.Option(help="Replay speed (1 = as recorded)")] = 1.0,
    seconds: Annotated[
        float | None, typer.Option(help="Replay only this many seconds of the session")
    ] = None,
    accept: Annotated[bool, typer.Option(help="Accept ghost text that matches")] = True,
    settings: Annotated[
        str | None,
        typer.Option(help="Language-server settings as JSON, e.g. '{\"maxTokens\": 32}'"),
    ] = None,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print JSON instead of Markdown")
    ] = False,
) -> None:
    """Replay a recorded editing session through `ling-local lsp`: ghost-text latency,
    requests sent/cancelled/cached, tokens generated but never shown."""
    import json

    from ling_local.bench.complete import render_markdown, run_complete_bench
    from ling_local.discovery import read_token

    result = run_complete_bench(
        profile=profile, session_file=session, url=url, token=read_token() if url else None,
        speed=speed, accept=accept, limit_s=seconds,
        settings=json.loads(settings) if settings else None,
    )  # fmt: skip
    typer.echo(json.dumps(result, indent=2) if json_out else render_markdown(result))


@bench_app.command("tui")
def bench_tui(
    profile: ProfileOpt = "tiny",
    url: Annotated[
        str | None, typer.Option(help="Use this running daemon (default: start a private one)")
    ] = None,
    rounds: Annotated[int, typer.Option(min=1, help="Measured rounds (one of each side).")] = 10,
    max_tokens: Annotated[int, typer.Option(min=1, help="Tokens per reply at most.")] = 32,
    columns: Annotated[int, typer.Option(min=40, help="The TUI's terminal width.")] = 100,
    lines: Annotated[int, typer.Option(min=12, help="The TUI's terminal height.")] = 32,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print JSON instead of the table.")
    ] = False,
) -> None:
    """Time to first token in the chat TUI (Enter pressed to the reply's first text on the
    screen) against the SDK's stream_chat, on the same daemon, round by round."""
    import json

    from ling_local.bench.tui_ttft import print_result, run_tui_bench
    from ling_local.discovery import read_token

    try:
        result = run_tui_bench(
            profile,
            url,
            read_token() if url else None,
            rounds=rounds,
            max_tokens=max_tokens,
            size=(columns, lines),
        )
    except LingLocalError as err:
        _fail(err)
    if json_out:
        typer.echo(json.dumps(result, indent=1))
    else:
        print_result(result)


bench_app.command("serve")(bench_serve)
bench_app.command("overhead")(bench_overhead)


def _one_line_summaries(*apps: typer.Typer) -> None:
    """In rich mode typer 0.29 keeps a docstring's line breaks in its command lists, which
    then break mid-sentence at any width but the source's; each command's entry there is its
    docstring's first paragraph on one line, which the terminal wraps."""
    import inspect

    for typer_app in apps:
        for command in typer_app.registered_commands:
            if command.short_help is None:
                doc = command.help or inspect.getdoc(command.callback) or ""
                command.short_help = " ".join(doc.split("\n\n")[0].split())


_one_line_summaries(app, bench_app, chain_app)


def main() -> None:
    try:
        app()
    except LingLocalError as err:  # anything a command did not handle itself
        typer.secho(f"error: {err.message}", fg=typer.colors.RED, err=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
