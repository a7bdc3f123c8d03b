"""The timing half of `gpu_sglang_check.py`: the same kind of requests through the daemon
and straight to the SGLang child's `/generate`, interleaved, timed at the client as
`sglang.bench_serving` defines TTFT and TPOT, with the daemon's CPU per request and token."""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sysconfig
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import httpx

from ling_local.bench.daemon_proc import cpu_seconds

__all__ = ["corpus_texts", "measure", "print_table", "timed_stream"]


def corpus_texts(limit_bytes: int) -> list[str]:
    """Python's own standard library: real code to train a real BPE vocabulary on."""
    texts, size = [], 0
    for path in sorted(Path(sysconfig.get_paths()["stdlib"]).rglob("*.py")):
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        texts.append(text)
        size += len(text)
        if size > limit_bytes:
            break
    return texts


def timed_stream(http: httpx.Client, url: str, body: dict, headers: dict) -> dict:
    """Client-side timing of one SSE stream: TTFT = first token event, TPOT = (last - first)
    / (n - 1) as sglang.bench_serving defines them."""
    stamps: list[float] = []
    n = 0
    t0 = time.perf_counter()
    with http.stream("POST", url, json=body, headers=headers) as response:
        if response.status_code != 200:
            raise RuntimeError(f"{url}: HTTP {response.status_code}: {response.read()[:500]!r}")
        buffer = b""
        for chunk in response.iter_raw():
            now = time.perf_counter()
            buffer += chunk
            while (end := buffer.find(b"\n\n")) != -1:
                event, buffer = buffer[:end], buffer[end + 2 :]
                data = event[5:].strip()
                if not event.startswith(b"data:") or data == b"[DONE]":
                    continue
                out = json.loads(data)
                if "meta_info" in out:  # SGLang's /generate
                    n = out["meta_info"]["completion_tokens"]
                    stamps.append(now)
                elif out.get("choices"):  # the daemon's OpenAI stream
                    stamps.append(now)
                elif out.get("usage"):
                    n = out["usage"]["completion_tokens"]
    return {"ttft": stamps[0] - t0, "tpot": (stamps[-1] - stamps[0]) / max(1, n - 1), "n": n}


def measure(daemon, args: argparse.Namespace, vocab: int, save: Callable[[dict], None]) -> dict:
    """Both paths per prompt kind (token ids, text) and answer length (`args.new_tokens`, a
    list), interleaved; `save` gets the results so far after each case (a run cut short
    keeps what it measured). Returns results[mode][str(new_tokens)]."""
    child = daemon.child()
    rng = random.Random(0)
    d_headers = {"Authorization": f"Bearer {daemon.token}"}
    s_headers = {"Authorization": f"Bearer {child['api_key']}"}
    results: dict = {}
    words = " ".join(corpus_texts(200_000)).split()
    warmup = getattr(args, "warmup", 2)
    with httpx.Client(timeout=120, trust_env=False) as http:
        for new_tokens in args.new_tokens:
            for mode in ("ids", "text"):
                rows: dict[str, list[dict]] = {"daemon": [], "sglang": []}
                cpu0 = 0.0
                for i in range(args.runs + warmup):
                    if i == warmup:
                        cpu0 = cpu_seconds(daemon.proc.pid)
                    if mode == "ids":
                        prompts = [
                            [rng.randrange(5, vocab) for _ in range(args.prompt_tokens)]
                            for _ in range(2)
                        ]
                    else:
                        start = rng.randrange(0, len(words) - args.prompt_tokens)
                        prompts = [
                            f"# {i} {side}\n"
                            + " ".join(words[start : start + args.prompt_tokens // 2])
                            for side in (0, 1)
                        ]
                    d_body = {
                        "prompt": prompts[0],
                        "max_tokens": new_tokens,
                        "temperature": 0,
                        "ignore_eos": True,
                        "stream": True,
                        "stream_options": {"include_usage": True},
                    }
                    key = "input_ids" if mode == "ids" else "text"
                    s_body = {
                        key: prompts[1],
                        "stream": True,
                        "rid": uuid.uuid4().hex,
                        "sampling_params": {
                            "max_new_tokens": new_tokens,
                            "temperature": 0,
                            "ignore_eos": True,
                        },
                    }
                    order = [
                        ("daemon", daemon.url + "/v1/completions", d_body, d_headers),
                        ("sglang", child["url"] + "/generate", s_body, s_headers),
                    ]
                    for side, url, body, headers in order if i % 2 else order[::-1]:
                        row = timed_stream(http, url, body, headers)
                        if i >= warmup:  # the first rounds warm both paths up
                            rows[side].append(row)
                cpu = cpu_seconds(daemon.proc.pid) - cpu0
                summary: dict = {}
                for side, values in rows.items():
                    summary[side] = {
                        "ttft_ms": round(statistics.median(r["ttft"] for r in values) * 1e3, 3),
                        "tpot_ms": round(statistics.median(r["tpot"] for r in values) * 1e3, 4),
                        "tokens": values[0]["n"],
                    }
                d, s = summary["daemon"], summary["sglang"]
                summary["ttft_overhead_ms"] = round(d["ttft_ms"] - s["ttft_ms"], 3)
                summary["tpot_overhead_pct"] = round(100 * (d["tpot_ms"] / s["tpot_ms"] - 1), 2)
                # All the CPU the daemon spent over the measured rounds (it idles during
                # the direct runs), per request it served and per token it relayed.
                summary["daemon_cpu_ms_per_request"] = round(cpu * 1e3 / args.runs, 2)
                summary["daemon_cpu_us_per_token"] = round(cpu * 1e6 / (args.runs * new_tokens), 1)
                summary["pairs"] = args.runs
                results.setdefault(mode, {})[str(new_tokens)] = summary
                save(results)
    return results


def print_table(results: dict, args: argparse.Namespace) -> None:
    print(
        f"\nbatch 1, {args.prompt_tokens}-token prompt, greedy, median of {args.runs} interleaved pairs"
    )
    print(f"{'prompt':6} {'new':>5} {'path':7} {'TTFT ms':>9} {'TPOT ms':>9}")
    for mode, by_length in results.items():
        for n, r in by_length.items():
            for side in ("sglang", "daemon"):
                print(
                    f"{mode:6} {n:>5} {side:7} {r[side]['ttft_ms']:9.2f} {r[side]['tpot_ms']:9.3f}"
                )
            print(
                f"{mode:6} {n:>5} {'added':7} {r['ttft_overhead_ms']:9.2f} "
                f"{r['tpot_overhead_pct']:8.2f}%   daemon CPU {r['daemon_cpu_ms_per_request']} "
                f"ms/request, {r['daemon_cpu_us_per_token']} us/token"
            )
