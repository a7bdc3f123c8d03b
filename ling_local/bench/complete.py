"""`ling-local bench complete`: a recorded editing session replayed through the real
language server (`ling-local lsp` in a subprocess, over stdio) against a real daemon.

Reports what the user feels and what the machine wasted: keystroke-to-ghost-text latency
(p50/p95), requests sent / cancelled / answered from the cache, and tokens the engine
generated that never reached the screen.
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from ling_local.bench.session import Session, load_session
from ling_local.errors import DaemonUnavailable

__all__ = ["render_markdown", "run_complete_bench"]

_COUNTERS = ("ling_completion_tokens_total", "ling_cancelled_tokens_total")


def _percentiles(values: list[float]) -> dict[str, float | int | None]:
    if not values:
        return {"n": 0, "p50": None, "p95": None}
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return {"n": len(values), "p50": round(statistics.median(ordered), 1), "p95": round(p95, 1)}


def _metrics(url: str, token: str) -> dict[str, float]:
    try:
        text = httpx.get(f"{url}/metrics", headers={"Authorization": f"Bearer {token}"},
                         timeout=10, trust_env=False).text  # fmt: skip
    except httpx.HTTPError as err:
        raise DaemonUnavailable(f"the daemon at {url} stopped answering ({err}); "
                                "the run is void") from None  # fmt: skip
    out: dict[str, float] = {}
    for name, labels, value in re.findall(r"^(ling_\w+?)(\{[^}]*\})? (\S+)$", text, re.M):
        key = name + (labels or "")
        out[key] = out.get(key, 0.0) + float(value)
    return out


def _start_daemon(profile: str, home: Path, env: dict[str, str]) -> tuple[subprocess.Popen, str]:
    log = open(home / "daemon.log", "wb")  # noqa: SIM115 - closed with the process
    proc = subprocess.Popen(
        [sys.executable, "-m", "ling_local", "serve", "--profile", profile, "--port", "0"],
        env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    runtime = home / "run" / "daemon.json"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the daemon exited: see {home / 'daemon.log'}")
        try:
            info = json.loads(runtime.read_text())
            if info["pid"] == proc.pid:
                health = httpx.get(info["url"] + "/health", timeout=5, trust_env=False)
                if health.status_code == 200:
                    return proc, info["url"]
        except (OSError, ValueError, KeyError, httpx.HTTPError):
            pass
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError("the daemon did not become ready in 300 s")


async def _drive(
    session: Session, profile: str, env: dict[str, str], workspace: Path,
    settings: dict[str, Any], speed: float, accept: bool, limit_s: float | None, progress: Any,
) -> tuple[Any, dict[str, Any]]:  # fmt: skip
    from lsprotocol import types
    from pygls.lsp.client import LanguageClient

    from ling_local.bench.replay import replay

    client = LanguageClient("ling-bench", "1")
    messages: list[str] = []
    client.feature(types.WINDOW_WORK_DONE_PROGRESS_CREATE)(lambda *_: None)
    client.feature(types.PROGRESS)(lambda *_: None)
    client.feature(types.WINDOW_LOG_MESSAGE)(lambda *_: None)
    client.feature(types.WINDOW_SHOW_MESSAGE)(lambda params: messages.append(params.message))
    await client.start_io(sys.executable, "-m", "ling_local", "lsp", "--profile", profile,
                          "--no-start-daemon", env=env)  # fmt: skip
    caps = types.ClientCapabilities(
        text_document=types.TextDocumentClientCapabilities(
            inline_completion=types.InlineCompletionClientCapabilities()
        ),
        window=types.WindowClientCapabilities(work_done_progress=True),
    )
    await client.initialize_async(types.InitializeParams(
        capabilities=caps, root_uri=workspace.as_uri(), initialization_options=settings,
        workspace_folders=[types.WorkspaceFolder(workspace.as_uri(), workspace.name)],
    ))  # fmt: skip
    client.initialized(types.InitializedParams())
    uri = (workspace / session.path).as_uri()
    client.text_document_did_open(types.DidOpenTextDocumentParams(
        types.TextDocumentItem(uri, session.language, 1, session.initial)))  # fmt: skip
    await asyncio.sleep(2.0)  # the editor opens the file a moment before typing starts
    try:
        result = await replay(client, uri, session, speed=speed, accept=accept,
                              limit_s=limit_s, on_event=progress)  # fmt: skip
        result.messages = messages
        stats = await client.workspace_execute_command_async(
            types.ExecuteCommandParams("ling-local.stats"))  # fmt: skip
        await client.shutdown_async(None)
        client.exit(None)
    finally:
        await client.stop()
    return result, stats


def run_complete_bench(
    *,
    profile: str = "tiny",
    session_file: str | None = None,
    url: str | None = None,
    token: str | None = None,
    speed: float = 1.0,
    accept: bool = True,
    limit_s: float | None = None,
    settings: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Run the benchmark; starts (and stops) its own daemon unless `url` is given."""
    from ling_local.bench.progress import progress

    session = load_session(session_file)
    with tempfile.TemporaryDirectory(prefix="ling-bench-") as tmp:
        home, workspace = Path(tmp) / "home", Path(tmp) / "project"
        home.mkdir()
        workspace.mkdir()
        for rel, text in session.workspace.items():
            (workspace / rel).parent.mkdir(parents=True, exist_ok=True)
            (workspace / rel).write_text(text)
        env = {k: v for k, v in os.environ.items() if not k.startswith("LING_LOCAL_")}
        env.update(LING_LOCAL_HOME=str(home), PYTHONUNBUFFERED="1",
                   PYTHONPATH=os.pathsep.join(filter(None, [str(Path(__file__).parents[2]),
                                                            env.get("PYTHONPATH")])))  # fmt: skip
        daemon = None
        if url is None:
            daemon, url = _start_daemon(profile, home, env)
            token = (home / "config" / "token").read_text().strip()
        env.update(LING_LOCAL_URL=url, LING_LOCAL_TOKEN=token or "")
        try:
            health = httpx.get(url + "/health", timeout=10, trust_env=False).json()
            before = _metrics(url, token or "")
            total = len(session.events)
            with progress() as bar:
                task = bar.add_task(f"replaying {session.path}", total=total)
                result, stats = asyncio.run(_drive(
                    session, profile, env, workspace, settings or {}, speed, accept, limit_s,
                    lambda n: bar.advance(task, n)))  # fmt: skip
            after = _metrics(url, token or "")
            telemetry = _read_telemetry(home / "state" / "lsp" / "telemetry.jsonl")
        finally:
            if daemon is not None:
                daemon.terminate()
                daemon.wait(30)
    return _report(session, health, result, stats, before, after, telemetry, speed, daemon is None)


def _read_telemetry(path: Path) -> list[dict[str, Any]]:
    try:
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except OSError:
        return []


def _report(session, health, result, stats, before, after, telemetry, speed, shared) -> dict:
    delta = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
    cancelled_by_reason = {
        re.search(r'reason="([^"]+)"', k).group(1): int(v)
        for k, v in delta.items() if k.startswith("ling_cancelled_requests_total{") and v
    }  # fmt: skip
    generated = int(delta.get("ling_completion_tokens_total", 0))
    by_source: dict[str, list[float]] = {}
    parts: dict[str, list[float]] = {"debounce_ms": [], "context_ms": [], "ttft_ms": []}
    for event in telemetry:
        if event.get("event") == "shown":
            by_source.setdefault(event["source"], []).append(event["latency_ms"])
            for name, values in parts.items():
                if name in event:
                    values.append(event[name])
    return {
        "session": {"file": session.path, "events": len(session.events),
                    "recorded_s": round(session.duration_s, 1), "speed": speed,
                    "replayed_s": round(result.wall_s, 1)},
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                    "load_avg": [round(x, 2) for x in os.getloadavg()],
                    "date": time.strftime("%Y-%m-%d %H:%M")},
        "daemon": {"engine": health.get("engine"), "model": health.get("model"),
                   "profile": health.get("profile"), "shared_with_others": shared},
        "latency_ms": _percentiles(result.latencies_ms),
        "server_latency_ms_by_source": {k: _percentiles(v) for k, v in sorted(by_source.items())},
        "model_path_ms": {k: _percentiles(v) for k, v in parts.items()},
        "requests": {
            "keystrokes": result.keystrokes, "sent": result.requests,
            "cancelled_by_editor": result.cancelled_by_editor, "answered": result.answered,
            "answered_empty": result.answered_empty, "shown": len(result.latencies_ms),
            "answered_from_cache": stats["cache_hits"], "joined_in_flight": stats["joined"],
            "accepted": result.accepted, "accepted_chars": result.accepted_chars,
        },
        "generations": {
            "sent_to_daemon": stats["generations"], "speculative": stats["speculative"],
            "cancelled": stats["cancelled"], "stopped_early": stats["stopped_early"],
            "failed": stats["failed"], "empty_after_postprocessing": stats["empty"],
            "daemon_cancelled_by_reason": cancelled_by_reason,
        },
        "tokens": {
            "generated": generated,
            "cancelled_in_engine": int(delta.get("ling_cancelled_tokens_total", 0)),
            "shown": stats["tokens_shown"],
            "never_shown": max(0, generated - stats["tokens_shown"]),
        },
        "messages": result.messages,
    }  # fmt: skip


def render_markdown(r: dict[str, Any]) -> str:
    lat, req, gen, tok = r["latency_ms"], r["requests"], r["generations"], r["tokens"]
    lines = [
        f"## bench complete — {r['session']['file']} ({r['session']['events']} edits, "
        f"{r['session']['replayed_s']} s at speed {r['session']['speed']})",
        "",
        f"daemon: {r['daemon']['engine']} / {r['daemon']['model']} (profile "
        f"{r['daemon']['profile']}); machine: {r['machine']['cpus']} CPUs, load "
        f"{r['machine']['load_avg']}, {r['machine']['date']}",
        "",
        "| keystroke → ghost text | p50 | p95 | n |",
        "|---|---|---|---|",
        f"| all shown suggestions | {lat['p50']} ms | {lat['p95']} ms | {lat['n']} |",
    ]
    for source, p in r["server_latency_ms_by_source"].items():
        lines.append(f"| server side, from {source} | {p['p50']} ms | {p['p95']} ms | {p['n']} |")
    for part, p in r["model_path_ms"].items():
        lines.append(
            f"| of which {part[:-3]} (model answers) | {p['p50']} ms | {p['p95']} ms | {p['n']} |"
        )
    lines += [
        "",
        "| requests | |",
        "|---|---|",
        f"| keystrokes | {req['keystrokes']} |",
        f"| inline requests sent by the editor | {req['sent']} |",
        f"| cancelled by the editor (next keystroke) | {req['cancelled_by_editor']} |",
        f"| answered / empty / shown | {req['answered']} / {req['answered_empty']} / "
        f"{req['shown']} |",
        f"| answered from the cache (typing-through) | {req['answered_from_cache']} |",
        f"| joined a generation in flight | {req['joined_in_flight']} |",
        f"| accepted (chars) | {req['accepted']} ({req['accepted_chars']}) |",
        f"| generations sent to the daemon (speculative) | {gen['sent_to_daemon']} "
        f"({gen['speculative']}) |",
        f"| generations cancelled / stopped early / failed | {gen['cancelled']} / "
        f"{gen['stopped_early']} / {gen['failed']} |",
        f"| daemon-side cancellations by reason | {gen['daemon_cancelled_by_reason']} |",
        "",
        f"tokens generated {tok['generated']}, shown {tok['shown']}, **never shown "
        f"{tok['never_shown']}** (cancelled in the engine: {tok['cancelled_in_engine']})",
    ]
    if r["messages"]:
        lines += ["", "messages from the server: " + " | ".join(r["messages"])]
    return "\n".join(lines) + "\n"
