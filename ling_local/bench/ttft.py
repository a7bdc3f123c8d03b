"""Time to first token for `bench engine`'s TTFT columns: a cold prompt (nothing cached,
2,000 tokens by default) and a keystroke on a cached file (16 new tokens after 1,500
cached), for transformers with a static cache, the gpt-fast-style model (`gptfast.py`),
the engine (`engine.ours`) and SGLang on the same checkpoint (`sglang_row`: launched from
an SGLang profile, timed at its native /generate stream).

TTFT is from handing over the prompt to the first token on the host. Every cold prompt
starts with its own token and every keystroke prompt is the same prefix plus new tokens,
so a prefix cache (the engine's, SGLang's radix cache) serves exactly the prefix."""

from __future__ import annotations

import inspect
import json
import secrets
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ling_local.bench.baselines import Row

__all__ = ["TTFTPrompts", "hf_ttft", "sglang_row", "ttft_prompts"]


@dataclass(frozen=True)
class TTFTPrompts:
    cold: list[list[int]]
    """One cold prompt per repeat."""
    prefix: list[int]
    """The file so far."""
    keystrokes: list[list[int]]
    """Per repeat, the tokens a keystroke adds after `prefix`."""

    @property
    def longest(self) -> int:
        return max(len(self.prefix) + len(self.keystrokes[0]), *map(len, self.cold))


def ttft_prompts(
    vocab: int, cold_tokens: int, prefix_tokens: int, new_tokens: int, repeats: int
) -> TTFTPrompts:
    """Random ids (seeded) below min(vocab, 30000), each cold prompt from its own first id."""
    gen = torch.Generator().manual_seed(7)
    high = min(vocab, 30000)

    def ids(n: int) -> list[int]:
        return torch.randint(3, high, (n,), generator=gen).tolist()

    cold = [[3 + i, *ids(cold_tokens - 1)] for i in range(repeats)]
    prefix = [3 + repeats, *ids(prefix_tokens - 1)]
    return TTFTPrompts(cold, prefix, [ids(new_tokens) for _ in range(repeats)])


def _median_ms(values: list[float]) -> float:
    return round(statistics.median(values) * 1e3, 3)


# --------------------------------------------------------------------------- transformers
def _static_cache(model: Any, max_len: int) -> Any:
    from transformers import StaticCache

    try:
        return StaticCache(config=model.config, max_cache_len=max_len)
    except TypeError:  # releases that still take batch size, device and dtype
        return StaticCache(
            config=model.config,
            max_batch_size=1,
            max_cache_len=max_len,
            device=model.device,
            dtype=model.dtype,
        )


def hf_ttft(model: Any, prompts: TTFTPrompts) -> tuple[float, float]:
    """(cold, cached) median TTFT in ms of transformers' forward with a static cache (what
    `generate(cache_implementation="static")` runs for the prompt); each cached run fills a
    new cache with the prefix (not timed), then times the keystroke's tokens."""
    params = inspect.signature(model.forward).parameters
    cache_kw = "cache" if "cache" in params else "past_key_values"
    dev = model.device
    max_len = prompts.longest + 8

    def feed(cache: Any, ids: list[int], start: int) -> int:
        pos = torch.arange(start, start + len(ids), device=dev)
        kw: dict[str, Any] = {cache_kw: cache, "position_ids": pos[None]}
        if "cache_position" in params:
            kw["cache_position"] = pos
        x = torch.tensor([ids], device=dev)
        out = model(input_ids=x, use_cache=True, logits_to_keep=1, **kw)
        return int(out.logits[0, -1].argmax())  # the host has the token: the GPU is done

    def cold(ids: list[int]) -> float:
        cache = _static_cache(model, max_len)
        t0 = time.perf_counter()
        feed(cache, ids, 0)
        return time.perf_counter() - t0

    def cached(new: list[int]) -> float:
        cache = _static_cache(model, max_len)
        feed(cache, prompts.prefix, 0)
        t0 = time.perf_counter()
        feed(cache, new, len(prompts.prefix))
        return time.perf_counter() - t0

    with torch.inference_mode():
        cold(prompts.cold[0])  # first-call costs (kernel loading) are not TTFT
        cached(prompts.keystrokes[0])
        return (
            _median_ms([cold(ids) for ids in prompts.cold]),
            _median_ms([cached(new) for new in prompts.keystrokes]),
        )


# --------------------------------------------------------------------------- SGLang
def _stream(http: Any, url: str, body: dict) -> tuple[float, float, int, dict]:
    """Time to the first chunk and to the last of SGLang's /generate stream, the tokens
    generated and the last meta_info."""
    t0 = time.perf_counter()
    first = last = None
    meta: dict = {}
    with http.stream("POST", url, json=body) as response:
        if response.status_code != 200:
            raise RuntimeError(f"SGLang answered {response.status_code}: {response.read()[:300]}")
        for line in response.iter_lines():
            if not line.startswith("data:") or line[5:].strip() == "[DONE]":
                continue
            now = time.perf_counter()
            first = first or now
            last = now
            meta = json.loads(line[5:]).get("meta_info", meta)
    if first is None:
        raise RuntimeError("SGLang's stream ended without a token")
    return first - t0, last - t0, int(meta.get("completion_tokens", 0)), meta


def sglang_row(
    profile_path: str,
    model_dir: Path,
    prompt: list[int],
    new_tokens: int,
    repeats: int,
    prompts: TTFTPrompts | None,
) -> tuple[Row, list[int]]:
    """SGLang serving `model_dir`, launched as the daemon launches it from an SGLang profile
    (its flags and environment; the model path replaced), timed at its native /generate
    stream with token ids (no tokenizer on the path): TPOT of `new_tokens` after `prompt`
    (greedy, batch 1) and the TTFT columns. Returns the row and the greedy tokens."""
    import asyncio

    import httpx

    from ling_local.bench.fresh_daemon import sigterm_exits
    from ling_local.config import load_profile
    from ling_local.engines.sglang.command import build_command, reserve_port
    from ling_local.engines.sglang.process import ChildProcess

    profile = load_profile(profile_path)
    profile.model.path = str(model_dir)
    held = reserve_port()
    command = build_command(profile, port=held.getsockname()[1], api_key=secrets.token_hex(16))
    child = ChildProcess(
        command, Path(tempfile.mkdtemp(prefix="ling-bench-sglang-")) / "sglang.log"
    )
    headers = {"Authorization": f"Bearer {command.api_key}"}
    with sigterm_exits():
        t0 = time.perf_counter()
        child.start()
        try:
            with httpx.Client(
                base_url=command.url, headers=headers, timeout=120, trust_env=False
            ) as http:
                _wait_healthy(http, child, t0 + profile.sglang.startup_timeout_s)
                held.close()
                row, ids = _sglang_timings(http, prompt, new_tokens, repeats, prompts)
            row.note = f"start {time.perf_counter() - t0:.0f}s" + row.note
            return row, ids
        finally:
            held.close()
            asyncio.run(child.stop(grace_s=10.0))


def _wait_healthy(http: Any, child: Any, deadline: float) -> None:
    import httpx

    while True:
        if child.returncode is not None:
            raise RuntimeError("SGLang exited: " + " | ".join(child.tail(8)))
        if time.perf_counter() > deadline:
            raise RuntimeError("SGLang was not healthy in time: " + " | ".join(child.tail(3)))
        try:
            if http.get("/health", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.25)


def _sglang_timings(
    http: Any, prompt: list[int], new_tokens: int, repeats: int, prompts: TTFTPrompts | None
) -> tuple[Row, list[int]]:
    def gen(ids: list[int], n: int) -> tuple[float, float, int, dict]:
        sampling = {"max_new_tokens": n, "temperature": 0.0, "ignore_eos": True}
        return _stream(
            http, "/generate", {"input_ids": ids, "sampling_params": sampling, "stream": True}
        )

    gen(prompt, 8)  # first-call costs
    tpots = []
    for _ in range(repeats):
        first, last, n, _ = gen(prompt, new_tokens)
        tpots.append((last - first) / max(1, n - 1) * 1e3)
    sampling = {"max_new_tokens": new_tokens, "temperature": 0.0}
    answer = http.post("/generate", json={"input_ids": prompt, "sampling_params": sampling}).json()
    answer = answer[0] if isinstance(answer, list) else answer
    row = Row("SGLang (/generate, token ids)", statistics.median(tpots), note="", runs_ms=tpots)
    if prompts is not None:
        gen(prompts.cold[0][::-1], 1)  # the cold shape's first-call costs, not cached
        row.ttft_cold_ms = _median_ms([gen(c, 1)[0] for c in prompts.cold])
        cached, hits = [], []
        for new in prompts.keystrokes:
            gen(prompts.prefix, 1)
            first, _, _, meta = gen(prompts.prefix + new, 1)
            cached.append(first)
            hits.append(meta.get("cached_tokens", -1))
        row.ttft_cached_ms = _median_ms(cached)
        row.note = f", cached tokens {min(hits)}-{max(hits)}"
    return row, list(answer.get("output_ids") or [])
