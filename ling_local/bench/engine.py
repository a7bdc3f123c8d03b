"""`ling-local bench engine`: batch-1 decode speed of the embedded engine against baselines,
on the same random-weight model, in one run.

- floor: the model's weight bytes over the measured device copy bandwidth (every decode
  step reads every weight once);
- baselines: transformers `generate` eager and with a static cache, and a gpt-fast-style
  loop compiled with CUDA graphs (`gptfast.py`, written for this comparison);
- ours: the engine's streaming API (what the daemon consumes), with CUDA graphs (eager and
  compiled step), plus prompt-lookup speculation on a code-editing prompt;
- every greedy output is compared token for token with transformers' eager reference;
- time to first token (`ttft.py`): a cold prompt and a keystroke on a cached prefix, for
  transformers' static cache, the gpt-fast-style model, the engine and (with an SGLang
  profile) SGLang on the same checkpoint.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from ling_local import paths
from ling_local.bench.baselines import (
    Row,
    build_bench_model,
    copy_bandwidth,
    hf_generate,
)
from ling_local.bench.engine_stream import engine_stream
from ling_local.bench.ttft import TTFTPrompts, hf_ttft, ttft_prompts

__all__ = ["EngineBenchResult", "engine_stream", "run_engine_bench"]

LLAMA_1B = dict(
    vocab_size=128256,
    hidden_size=2048,
    intermediate_size=8192,
    num_layers=16,
    num_heads=32,
    num_kv_heads=8,
    tie_word_embeddings=True,
)


@dataclass
class EngineBenchResult:
    device: str
    model: str
    params_m: float
    weight_gb: float
    copy_tb_s: float | None
    floor_ms: float | None
    prompt_tokens: int
    new_tokens: int
    rows: list[Row]
    extra: dict = field(default_factory=dict)

    def markdown(self) -> str:
        floor = f"{self.floor_ms:.3f} ms" if self.floor_ms else "n/a"
        lines = [
            f"Engine benchmark on {self.device}: {self.model} ({self.params_m:.1f}M params, "
            f"{self.weight_gb:.2f} GB), batch 1, greedy, {self.prompt_tokens}-token prompt, "
            f"{self.new_tokens} new tokens; weight-read floor {floor}"
            + (f" at {self.copy_tb_s:.2f} TB/s" if self.copy_tb_s else "")
            + ".",
            "",
            "| engine | TPOT ms | × floor | TTFT ms | TTFT cold ms | TTFT cached ms "
            "| same tokens as HF eager | note |",
            "|---|---|---|---|---|---|---|---|",
        ]

        def ms(value: float | None, digits: int = 1) -> str:
            return "" if value is None else f"{value:.{digits}f}"

        for r in self.rows:
            x = f"{r.tpot_ms / self.floor_ms:.2f}" if r.tpot_ms and self.floor_ms else ""
            tpot = ms(r.tpot_ms, 3) if r.tpot_ms is not None or "failed" not in r.note else "failed"
            lines.append(
                f"| {r.name} | {tpot} | {x} | {ms(r.ttft_ms)} | {ms(r.ttft_cold_ms, 2)} "
                f"| {ms(r.ttft_cached_ms, 2)} | {r.same_tokens} | {r.note} |"
            )
        if self.extra.get("ttft"):
            t = self.extra["ttft"]
            lines += [
                "",
                f"TTFT cold: a {t['cold_tokens']}-token prompt, nothing cached; TTFT cached: "
                f"{t['new_tokens']} new tokens after a cached {t['prefix_tokens']}-token "
                "prefix; medians of the repeats, in process (SGLang: at the client of its "
                "/generate stream).",
            ]
        return "\n".join(lines)


# --------------------------------------------------------------------------- helpers
def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def _matching(reference: list[int] | None, tokens: list[int]) -> str:
    if reference is None:
        return ""
    n = 0
    while n < min(len(reference), len(tokens)) and reference[n] == tokens[n]:
        n += 1
    return f"{n}/{len(reference)}"


def ours(
    model_dir: Path,
    device: str,
    prompt: list[int],
    new_tokens: int,
    repeats: int,
    *,
    compile_step: bool = False,
    speculative: str = "none",
    cuda_graphs: bool = True,
    kernels: str = "torch",
    name: str = "ling-local engine",
    ttft: TTFTPrompts | None = None,
    tpot: bool = True,
) -> tuple[Row, list[int], dict]:
    """The engine as a profile runs it (warm-up included), through its streaming API:
    TPOT of `new_tokens` after `prompt` (cold each time, like the baselines) unless not
    `tpot`, and the TTFT columns with `ttft`."""
    from ling_local.config import profile_from_dict
    from ling_local.engines.embedded.torch_engine import TorchEngine

    longest = max(len(prompt) + new_tokens, ttft.longest if ttft else 0)
    profile = profile_from_dict(
        {
            "name": "bench",
            "model": {
                "path": str(model_dir),
                "device": device,
                "dtype": "bfloat16" if device != "cpu" else "float32",
                "context_length": min(4096, longest + 64),
            },
            "engine": {
                "cache_slots": 1,
                "warmup": True,
                "cuda_graphs": cuda_graphs,
                "compile": compile_step,
                "kernels": kernels,
                "speculative": speculative,
                "num_speculative_tokens": 8,
            },
        }
    )

    async def main() -> tuple[Row, list[int], dict]:
        engine = TorchEngine(profile)
        t0 = time.perf_counter()
        await engine.start()
        warm = time.perf_counter() - t0
        tpots, ttfts, ids, stats = [], [], [], None
        extra: dict = {}
        if tpot:
            await engine_stream(engine, prompt, min(new_tokens, 32))  # first-call costs
            for _ in range(repeats):
                engine.decoder.cache.clear()  # cold prompt each time, like the baselines
                stamps, ids, stats = await engine_stream(engine, prompt, new_tokens)
                ttfts.append(stamps[0] * 1e3)
                tpots.append((stamps[-1] - stamps[0]) / (len(stamps) - 1) * 1e3)
            extra = {"accept_length": stats.accept_length, "verify_steps": stats.verify_steps}
            if device == "cuda" and not compile_step:  # compiling more step sizes costs minutes
                extra["graph_step_ms"] = await asyncio.to_thread(
                    _time_graph_steps, engine, (1, 5, 9), len(prompt) + new_tokens // 2
                )
        row = Row(
            name,
            statistics.median(tpots) if tpots else None,
            statistics.median(ttfts) if ttfts else None,
            note=f"start+warm-up {warm:.0f}s",
            runs_ms=tpots,
        )
        if stats is not None and stats.accept_length:
            row.note += f", accept length {stats.accept_length:.2f}"
        if ttft is not None:
            row.ttft_cold_ms, row.ttft_cached_ms, extra["ttft_traces"] = await _ttft(engine, ttft)
        await engine.stop()
        return row, ids, extra

    return asyncio.run(main())


async def _ttft(engine: Any, prompts: TTFTPrompts) -> tuple[float, float, dict]:
    """The TTFT columns through the engine's streaming API (the cache emptied before each
    cold prompt and each prefix); with the engine's median trace of each kind."""
    from ling_local.bench.keystroke import median_trace

    async def first(ids: list[int]) -> tuple[float, dict]:
        stamps, _, stats = await engine_stream(engine, ids, 1)
        return stamps[0], stats.trace or {}

    cold, cached = [], []
    for ids in prompts.cold:
        engine.decoder.cache.clear()
        cold.append(await first(ids))
    for new in prompts.keystrokes:
        engine.decoder.cache.clear()
        await engine_stream(engine, prompts.prefix, 1)
        cached.append(await first(prompts.prefix + new))
    traces = {
        "cold": median_trace([t for _, t in cold]),
        "cached": median_trace([t for _, t in cached]),
    }
    return (
        round(statistics.median(s for s, _ in cold) * 1e3, 3),
        round(statistics.median(s for s, _ in cached) * 1e3, 3),
        traces,
    )


def _time_graph_steps(engine: Any, sizes: tuple[int, ...], at: int = 0) -> dict[Any, float]:
    """Replay time of the captured step for T tokens: what one decode (T=1, the full head,
    sampling's) or one speculative verify (T=k+1) costs on this model; "greedy": the
    greedy decode graph the engine's bursts replay (with the Triton kernels: the screened
    head and the token ring), back to back from position 0, and "greedy@<at>" from position
    `at` (the middle of the bench's decode: its attention reads as much context)."""
    decoder = engine.decoder
    slot = decoder.cache.slots[0]
    graphs = [(t, decoder._graph(slot, t), 0) for t in sizes]
    graphs.append(("greedy", decoder._graph(slot, 1, True), 0))
    if at:
        graphs.append((f"greedy@{at}", decoder._graph(slot, 1, True), at))
    out = {}
    with torch.inference_mode():
        for key, step, pos0 in graphs:
            for _ in range(5):
                step.load(list(range(3, 3 + step.t)), pos0)  # chaining graphs move on
                step.replay()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(50):
                step.replay()
            end.record()
            end.synchronize()
            out[key] = round(start.elapsed_time(end) / 50, 4)
    return out


def bench_model_dir(name: str) -> Path:
    """Where a generated benchmark model is kept between runs: this user's data dir (0700),
    not a shared temp dir, where anyone could have put a directory of that name first."""
    return paths.ensure_private_dir(paths.data_dir() / "bench") / name


def copying_model(path: Path, device: str) -> Path:
    """The shipped tiny code model inside the Llama-3.2-1B shape (`build_copying_llama`):
    the benchmark's bytes per token, a trained model's behaviour."""
    from ling_local.bench.random_model import build_copying_llama

    if not (path / "config.json").is_file():
        tiny = Path(__file__).resolve().parents[1] / "models" / "tiny"
        shape = {k: v for k, v in LLAMA_1B.items() if k != "tie_word_embeddings"}  # tied
        build_copying_llama(path, tiny, device=device, **shape)
    return path


def edit_prompt(model_dir: Path, max_tokens: int) -> list[int]:
    """`bench edit`'s code-editing prompt in the model's tokenizer, cut to fit."""
    from transformers import AutoTokenizer

    from ling_local.bench.edit import EDIT_SOURCE, edit_workload

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    text = EDIT_SOURCE.read_text()
    budget = len(text)
    while True:
        ids = tokenizer(edit_workload(text, budget)[0])["input_ids"]
        if len(ids) <= max_tokens:
            return ids
        budget = int(budget * 0.9)


# --------------------------------------------------------------------------- main
_VARIANTS: dict[str, dict[str, Any]] = {
    "eager": dict(cuda_graphs=False, name="ling-local engine, no graphs"),
    "graphs": dict(name="ling-local engine"),
    "compiled": dict(compile_step=True, name="ling-local engine, compiled graph step"),
    "triton": dict(kernels="triton", name="ling-local engine, Triton kernels"),
    "prompt-lookup-triton": dict(
        speculative="prompt_lookup",
        kernels="triton",
        name="ling-local engine, Triton kernels, prompt lookup",
    ),
    "prompt-lookup": dict(speculative="prompt_lookup", name="ling-local engine, prompt lookup"),
    "prompt-lookup-compiled": dict(
        speculative="prompt_lookup",
        compile_step=True,
        name="ling-local engine, compiled, prompt lookup",
    ),
}


def run_engine_bench(
    *,
    device: str = "cuda",
    model: str | None = None,
    out_dir: str | Path = ".",
    prompt_tokens: int = 512,
    new_tokens: int = 256,
    repeats: int = 3,
    baselines: tuple[str, ...] = ("hf-eager", "hf-static", "gptfast"),
    variants: tuple[str, ...] = ("graphs", "compiled", "prompt-lookup"),
    workload: str = "random",
    ttft: tuple[int, int, int] | None = (2000, 1500, 16),
    tpot: bool = True,
    sglang_profile: str | None = None,
) -> EngineBenchResult:
    """`model`: a checkpoint directory, "copy-1b" (`copying_model`) or None (random
    weights of the Llama-3.2-1B shape). `workload`: "random" (random prompt ids of
    `prompt_tokens`) or "edit" (the code-editing prompt of `bench edit`, as long as the
    model's context allows). `ttft`: (cold prompt tokens, cached prefix tokens, new tokens)
    of the TTFT columns, None for none; `tpot`: False measures only those. Baseline
    "sglang" launches SGLang from `sglang_profile` (an SGLang profile: flags, environment)
    on the same checkpoint. The JSON is rewritten after every row."""
    from transformers import AutoModelForCausalLM

    from ling_local.bench.progress import progress as progress_bar

    dev = torch.device(device)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if model == "copy-1b":
        model_dir = copying_model(bench_model_dir("copy-1b"), device)
    elif model:
        model_dir = Path(model)
    else:
        model_dir = build_bench_model(bench_model_dir("llama-1b"), dev, LLAMA_1B)
    torch.manual_seed(1)
    hf = (
        AutoModelForCausalLM.from_pretrained(
            model_dir, dtype=torch.bfloat16 if dev.type == "cuda" else torch.float32
        )
        .to(dev)
        .eval()
    )
    vocab = hf.config.vocab_size
    params = sum(p.numel() for p in hf.parameters())
    weight_bytes = sum(p.numel() * p.element_size() for p in hf.parameters())
    bandwidth = copy_bandwidth(dev) if dev.type == "cuda" else None
    floor = weight_bytes / bandwidth * 1e3 if bandwidth else None
    if workload == "edit":
        prompt = edit_prompt(model_dir, hf.config.max_position_embeddings - new_tokens - 64)
    else:
        prompt = torch.randint(
            3, min(vocab, 30000), (prompt_tokens,), generator=torch.Generator().manual_seed(0)
        ).tolist()
    prompts = ttft_prompts(vocab, *ttft, max(repeats, 3)) if ttft else None
    rows: list[Row] = []
    extra: dict = {}
    if ttft:
        extra["ttft"] = dict(zip(("cold_tokens", "prefix_tokens", "new_tokens"), ttft, strict=True))
    result = EngineBenchResult(
        device=torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
        model=str(model_dir),
        params_m=params / 1e6,
        weight_gb=weight_bytes / 1e9,
        copy_tb_s=bandwidth / 1e12 if bandwidth else None,
        floor_ms=floor,
        prompt_tokens=len(prompt),
        new_tokens=new_tokens,
        rows=rows,
        extra=extra,
    )

    def save() -> None:
        (out / "engine_bench.json").write_text(json.dumps(asdict(result), indent=1))
        (out / "engine_bench.md").write_text(result.markdown() + "\n")

    def failed(name: str, err: Exception) -> Row:  # a row that breaks is reported, not fatal
        return Row(name, None, note=f"failed: {type(err).__name__}: {err}"[:300])

    steps = len(baselines) + len(variants) + 1
    with progress_bar(transient=False) as progress:
        task = progress.add_task("engine bench", total=steps)
        reference = None
        if tpot:
            with torch.inference_mode():
                row, reference = hf_generate(hf, prompt, new_tokens, repeats)
            row.same_tokens = "reference"
            rows.append(row)
            save()
        progress.advance(task)
        for name in [b for b in baselines if b not in ("hf-eager", "sglang")]:
            progress.update(task, description=name)
            try:
                rows.append(_baseline(name, hf, prompt, new_tokens, repeats, prompts, reference))
            except Exception as err:
                rows.append(failed(name, err))
            save()
            progress.advance(task)
        del hf
        if dev.type == "cuda":
            torch.cuda.empty_cache()
        for variant in variants:
            progress.update(task, description=variant)
            kw = dict(_VARIANTS.get(variant, {"name": variant}))
            if variant == "graphs" and dev.type == "cuda":
                kw["name"] += ", CUDA graphs"
            try:
                if variant not in _VARIANTS:
                    raise ValueError(f"unknown variant; choose from {', '.join(_VARIANTS)}")
                row, toks, info = ours(
                    model_dir, device, prompt, new_tokens, repeats, ttft=prompts, tpot=tpot, **kw
                )
                row.same_tokens = _matching(reference, toks)
                rows.append(row)
                extra[variant] = info
            except Exception as err:
                rows.append(failed(kw["name"], err))
            save()
            progress.advance(task)
        if "sglang" in baselines:
            progress.update(task, description="sglang")
            try:
                from ling_local.bench.ttft import sglang_row

                if not sglang_profile:
                    raise ValueError("the sglang baseline needs --sglang-profile")
                row, toks = sglang_row(
                    sglang_profile, model_dir, prompt, new_tokens, repeats, prompts
                )
                row.same_tokens = _matching(reference, toks)
                rows.append(row)
            except Exception as err:
                rows.append(failed("SGLang", err))
            save()
            progress.advance(task)
    return result


def _baseline(
    name: str,
    hf: Any,
    prompt: list[int],
    new_tokens: int,
    repeats: int,
    prompts: TTFTPrompts | None,
    reference: list[int] | None,
) -> Row:
    """A transformers or gpt-fast-style row: TPOT unless there is no `reference` (TTFT
    only), TTFT columns with `prompts`."""
    cuda = hf.device.type == "cuda"
    if name == "hf-static":
        row = Row("transformers, static cache", None)
        if reference is not None:
            with torch.inference_mode():
                row, toks = hf_generate(hf, prompt, new_tokens, repeats, static=True)
            row.same_tokens = _matching(reference, toks)
        if prompts is not None:
            row.ttft_cold_ms, row.ttft_cached_ms = hf_ttft(hf, prompts)
        return row
    if name == "gptfast":
        from ling_local.bench.gptfast import gptfast_tpot, gptfast_ttft

        row = Row("gpt-fast-style model", None, note="prefill eager")
        if reference is not None and cuda:
            row_dict, toks = gptfast_tpot(hf, prompt, new_tokens, repeats)
            row = Row(**row_dict, same_tokens=_matching(reference, toks))
        if prompts is not None:
            row.ttft_cold_ms, row.ttft_cached_ms = gptfast_ttft(hf, prompts)
        return row
    raise ValueError(f"unknown baseline {name!r}")
