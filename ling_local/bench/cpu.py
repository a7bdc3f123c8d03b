"""`bench cpu`: the embedded engine on the CPU against what a user would run instead,
llama.cpp, on the same model and the same token ids. The editor's case: the file so far is
cached and a keystroke adds a few tokens; time to the first new token against nothing
cached; decode TPOT. Our engine is timed in process through its streaming API (`bench
keystroke` times it through a fresh daemon); llama.cpp through llama-cpp-python on the
profile's model converted to GGUF (`gguf_export`). The engines take turns within each
round, the first one rotating, since a shared machine's load drifts."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ling_local.bench.engine import engine_stream
from ling_local.bench.stats import Spread, machine

__all__ = ["CpuResult", "cpu_comparison", "cpu_markdown"]

METRICS = (
    ("ttft_cold_ms", "TTFT, {prompt} tokens, nothing cached"),
    ("ttft_cached_prefix_ms", "TTFT, {new} new tokens on a cached {prefix}-token prefix"),
    ("decode_tpot_ms", "decode TPOT, {context}-token context"),
)


class EngineSide:
    """The embedded engine through its streaming API (what the daemon consumes)."""

    def __init__(self, engine: Any, name: str) -> None:
        self.engine = engine
        self.name = name

    async def ttft_cold(self, prompt: Sequence[int]) -> float:
        self.engine.decoder.cache.clear()
        _, _, stats = await engine_stream(self.engine, prompt, 1)
        return stats.ttft_s

    async def ttft_cached(self, prefix: Sequence[int], prompt: Sequence[int]) -> float:
        self.engine.decoder.cache.clear()
        await engine_stream(self.engine, prefix, 1)  # the file so far
        _, _, stats = await engine_stream(self.engine, prompt, 1)
        if stats.cached_tokens < len(prefix):
            raise RuntimeError(f"only {stats.cached_tokens} of {len(prefix)} tokens were reused")
        return stats.ttft_s

    async def decode(self, prompt: Sequence[int], new_tokens: int) -> tuple[float, list[int]]:
        """The engine's own TPOT (first to last token, stamped as each is sampled): text of
        a random-weight model's tokens can be held back for whole bursts by the
        detokenizer, which would make the client's stamps meaningless."""
        self.engine.decoder.cache.clear()
        _, ids, stats = await engine_stream(self.engine, prompt, new_tokens)
        return stats.tpot_s, ids


@dataclass
class CpuResult:
    profile: str
    prompt_tokens: int
    prefix_tokens: int
    new_prompt_tokens: int
    decode_context: int
    decode_tokens: int
    rounds: int
    machine_before: dict
    machine_after: dict = field(default_factory=dict)
    sides: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    """Per side, per metric (METRICS), one value in ms per round."""
    agreement: dict[str, list[int]] = field(default_factory=dict)
    """Per side but the first, per round: how many of its greedy decode tokens match the
    first side's before they differ (int8 and q8_0 round differently: informative only)."""
    notes: list[str] = field(default_factory=list)

    def spread(self, side: str, metric: str) -> Spread:
        return Spread.of(self.sides[side][metric])

    def as_dict(self) -> dict:
        out = {k: v for k, v in self.__dict__.items() if k != "sides"}
        out["sides"] = {
            side: {m: self.spread(side, m).as_dict() for m in metrics}
            for side, metrics in self.sides.items()
        }
        return out


def cpu_markdown(result: CpuResult) -> str:
    """The sides as columns, each cell the median (min–max) over the rounds."""
    sides = list(result.sides)
    load = (
        f"load {result.machine_before['load_avg'][0]:.1f} → "
        f"{result.machine_after.get('load_avg', [float('nan')])[0]:.1f}"
    )
    m = result.machine_after or result.machine_before
    lines = [
        f"`bench cpu`, profile {result.profile}: {m['date']}, {m['cpu']} "
        f"({m['cores']} cores, {load}); {result.rounds} rounds, engines interleaved; "
        "median (min–max) in ms.",
        "",
        "| | " + " | ".join(sides) + " |",
        "|---|" + "---|" * len(sides),
    ]
    labels = {
        "prompt": f"{result.prompt_tokens:,}",
        "new": result.new_prompt_tokens,
        "prefix": f"{result.prefix_tokens:,}",
        "context": result.decode_context,
    }
    for metric, label in METRICS:
        cells = []
        for side in sides:
            s = result.spread(side, metric)
            digits = 0 if s.median >= 100 else 1 if s.median >= 10 else 2
            cells.append(f"{s.median:.{digits}f} ({s.min:.{digits}f}–{s.max:.{digits}f})")
        lines.append(f"| {label.format(**labels)} | " + " | ".join(cells) + " |")
    if result.agreement:
        agree = "; ".join(f"{k}: {min(v)}–{max(v)}" for k, v in result.agreement.items())
        lines += [
            "",
            f"Greedy decode tokens equal to {sides[0]}'s before the first difference "
            f"(of {result.decode_tokens}): {agree}.",
        ]
    lines += [f"- {note}" for note in result.notes]
    return "\n".join(lines)


async def _measure(result: CpuResult, sides: list[Any], ids: list[int], rounds: int) -> None:
    prompt_len = result.prefix_tokens + result.new_prompt_tokens
    for r in range(rounds):
        prompt = ids[r : r + prompt_len]  # a new prompt each round: nothing carried over
        prefix = prompt[: result.prefix_tokens]
        decode_prompt = ids[r * 7 : r * 7 + result.decode_context]
        tokens: dict[str, list[int]] = {}
        # Rotate who goes first, so no side always runs right after the same other one.
        for side in sides[r % len(sides) :] + sides[: r % len(sides)]:
            row = result.sides.setdefault(side.name, {m: [] for m, _ in METRICS})
            row["ttft_cold_ms"].append(await side.ttft_cold(prompt) * 1e3)
            row["ttft_cached_prefix_ms"].append(await side.ttft_cached(prefix, prompt) * 1e3)
            tpot, tokens[side.name] = await side.decode(decode_prompt, result.decode_tokens)
            row["decode_tpot_ms"].append(tpot * 1e3)
        first = tokens[sides[0].name]
        for side in sides[1:]:
            other = tokens[side.name]
            agree = next(
                (i for i, (a, b) in enumerate(zip(first, other, strict=False)) if a != b),
                len(first),
            )
            result.agreement.setdefault(side.name, []).append(agree)
    # Put the table's columns in the order the sides were given.
    result.sides = {side.name: result.sides[side.name] for side in sides}


def cpu_comparison(
    profile_name: str = "tiny",
    prefix_tokens: int = 1500,
    new_prompt_tokens: int = 8,
    decode_tokens: int = 128,
    rounds: int = 7,
    *,
    decode_context: int = 256,
    baseline: str | None = "llama.cpp",
    llama_threads: Sequence[int] = (1, 2),
    gguf_type: str = "q8_0",
) -> CpuResult:
    """The editor's case on a profile as shipped: the file so far (`prefix_tokens`) is in
    the prefix cache and a keystroke adds `new_prompt_tokens`; how long until the first new
    token, against the same prompt with nothing cached; plus decode TPOT through the
    engine's streaming API. `baseline="llama.cpp"` adds llama.cpp at each of
    `llama_threads` on the same ids (the GGUF file lives in a private temporary directory,
    removed at the end)."""
    from ling_local.config import load_profile
    from ling_local.engines.embedded.torch_engine import TorchEngine

    if baseline not in (None, "llama.cpp"):
        raise ValueError(f"unknown baseline {baseline!r} (known: llama.cpp)")
    profile = load_profile(profile_name)
    result = CpuResult(
        profile=profile_name,
        prompt_tokens=prefix_tokens + new_prompt_tokens,
        prefix_tokens=prefix_tokens,
        new_prompt_tokens=new_prompt_tokens,
        decode_context=decode_context,
        decode_tokens=decode_tokens,
        rounds=rounds,
        machine_before=machine(),
    )
    workdir = None
    sides: list[Any] = []
    if baseline == "llama.cpp":
        from ling_local.bench.gguf_export import export_gguf
        from ling_local.bench.llamacpp import LlamaCppSide, llama_cpp_version

        version = llama_cpp_version()
        workdir = Path(tempfile.mkdtemp(prefix="ling-local-gguf-"))  # 0700, this user's
        gguf = export_gguf(
            profile.resolve_path(profile.model.path), workdir / "model.gguf", gguf_type
        )
        n_ctx = max(prefix_tokens + new_prompt_tokens, decode_context + decode_tokens) + 8
        sides += [LlamaCppSide(str(gguf), t, n_ctx) for t in llama_threads]
        result.notes.append(
            f"llama.cpp: llama-cpp-python {version}, the model as GGUF {gguf_type}; "
            f"ling-local: engine.threads = {profile.engine.threads}, "
            f"quantize = {profile.engine.quantize}."
        )

    async def main() -> None:
        engine = TorchEngine(profile)
        await engine.start()
        try:
            source = (Path(__file__).resolve().parents[1] / "scheduler.py").read_text() * 8
            ids = engine.tokenize(source)
            need = prefix_tokens + new_prompt_tokens + rounds
            if len(ids) < max(need, decode_context + 7 * rounds):
                raise ValueError(f"the benchmark text has {len(ids)} tokens; {need} needed")
            await _measure(result, [EngineSide(engine, "ling-local"), *sides], ids, rounds)
        finally:
            await engine.stop()

    try:
        asyncio.run(main())
    finally:
        for side in sides:
            side.close()
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)
    result.machine_after = machine()
    return result
