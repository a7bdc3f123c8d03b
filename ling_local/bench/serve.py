"""`ling-local bench serve`: serving latency the way `sglang.bench_serving` measures it.

N random prompts of fixed input/output length (`workload.py`), sent at `--max-concurrency`
(1 by default: the product's shape) after a warm-up, against our daemon or straight at an
SGLang or OpenAI-compatible server (`backends.py`), so the two can be run side by side.
Metrics follow sglang's definitions (TTFT, TPOT = (latency − TTFT) / (output_len − 1), ITL
spread over each chunk's tokens, output throughput, accept length where the engine
speculates). `--runs` repeats the whole measurement on fresh prompts and reports the spread.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import numpy as np

from ling_local.bench.backends import RequestOutput, Target
from ling_local.bench.stats import Spread, Summary, machine
from ling_local.bench.workload import Prompt, random_prompts
from ling_local.errors import ConfigError, LingLocalError

__all__ = ["RunMetrics", "ServeConfig", "ServeResult", "run_serve"]

FALLBACK_VOCAB = 32000
"""Ids below this are valid in every current vocabulary; used when nothing better is known."""


@dataclass
class ServeConfig:
    backend: str = "daemon"
    base_url: str | None = None
    api_key: str | None = None
    model: str | None = None
    input_len: int = 1024
    output_len: int = 128
    num_prompts: int = 10
    warmup: int = 1
    max_concurrency: int = 1
    request_rate: float = math.inf
    range_ratio: float = 1.0
    seed: int = 1
    runs: int = 1
    vocab_size: int | None = None
    tokenizer: str | None = None
    timeout_s: float = 600.0

    def __post_init__(self) -> None:
        for name in ("input_len", "output_len", "num_prompts", "max_concurrency", "runs"):
            if getattr(self, name) < 1:
                raise ConfigError(f"--{name.replace('_', '-')} must be at least 1")
        if self.warmup < 0 or not 0.0 <= self.range_ratio <= 1.0 or self.request_rate <= 0:
            raise ConfigError("--warmup ≥ 0, 0 ≤ --random-range-ratio ≤ 1, --request-rate > 0")


@dataclass
class RunMetrics:
    """One run, in sglang.bench_serving's terms (times in ms)."""

    completed: int
    failed: int
    duration_s: float
    total_input: int
    total_output: int
    request_throughput: float
    output_throughput: float
    total_throughput: float
    concurrency: float
    ttft_ms: Summary | None
    tpot_ms: Summary | None
    itl_ms: Summary | None
    e2e_ms: Summary | None
    accept_length: float | None
    errors: list[str] = field(default_factory=list)
    requests: list[dict] = field(default_factory=list)

    @classmethod
    def of(cls, outputs: list[RequestOutput], duration_s: float) -> RunMetrics:
        ok = [o for o in outputs if o.ok]
        total_out = sum(o.output_len for o in ok)
        total_in = sum(o.prompt_len for o in ok)
        accepts = [o.accept_length for o in ok if o.accept_length is not None]
        return cls(
            completed=len(ok),
            failed=len(outputs) - len(ok),
            duration_s=duration_s,
            total_input=total_in,
            total_output=total_out,
            request_throughput=len(ok) / duration_s,
            output_throughput=total_out / duration_s,
            total_throughput=(total_in + total_out) / duration_s,
            concurrency=sum(o.latency_s for o in ok) / duration_s,
            ttft_ms=Summary.of([o.ttft_s for o in ok], 1e3),
            tpot_ms=Summary.of([t for o in ok if (t := o.tpot_s) is not None], 1e3),
            itl_ms=Summary.of([x for o in ok for x in o.itl_s], 1e3),
            e2e_ms=Summary.of([o.latency_s for o in ok], 1e3),
            accept_length=float(np.mean(accepts)) if accepts else None,
            errors=sorted({o.error for o in outputs if o.error})[:5],
            requests=[
                {
                    "prompt_len": o.prompt_len,
                    "output_len": o.output_len,
                    "ttft_ms": o.ttft_s * 1e3,
                    "tpot_ms": None if o.tpot_s is None else o.tpot_s * 1e3,
                    "latency_ms": o.latency_s * 1e3,
                    "chunks": o.chunks,
                    "accept_length": o.accept_length,
                    "error": o.error or None,
                }
                for o in outputs
            ],
        )

    def as_dict(self) -> dict:
        d = asdict(self)
        for key in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
            value = getattr(self, key)
            d[key] = value.as_dict() if value else None
        return d


HEADLINE = {
    "ttft_median_ms": lambda r: r.ttft_ms.median if r.ttft_ms else None,
    "tpot_mean_ms": lambda r: r.tpot_ms.mean if r.tpot_ms else None,
    "tpot_median_ms": lambda r: r.tpot_ms.median if r.tpot_ms else None,
    "itl_median_ms": lambda r: r.itl_ms.median if r.itl_ms else None,
    "output_throughput": lambda r: r.output_throughput,
    "accept_length": lambda r: r.accept_length,
}
"""The numbers whose run-to-run spread the summary reports."""


@dataclass
class ServeResult:
    config: ServeConfig
    target: dict
    runs: list[RunMetrics]
    samples: dict[str, list[list[float]]]
    """Per run: every request's TTFT, TPOT and latency, and every ITL (ms)."""
    machine_before: dict
    machine_after: dict

    def spread(self) -> dict[str, Spread]:
        out = {}
        for name, get in HEADLINE.items():
            values = [v for r in self.runs if (v := get(r)) is not None]
            if values:
                out[name] = Spread.of(values)
        return out

    def as_dict(self) -> dict:
        cfg = asdict(self.config)
        cfg["api_key"] = "***" if cfg["api_key"] else None
        if math.isinf(cfg["request_rate"]):
            cfg["request_rate"] = "inf"
        return {
            "benchmark": "serve",
            "config": cfg,
            "target": self.target,
            "runs": [r.as_dict() for r in self.runs],
            "spread": {k: v.as_dict() for k, v in self.spread().items()},
            "machine": {"before": self.machine_before, "after": self.machine_after},
        }


# --------------------------------------------------------------------------- driver
def _vocab(cfg: ServeConfig, info: dict) -> tuple[int, str]:
    if cfg.vocab_size:
        return cfg.vocab_size, "--vocab-size"
    tokenizer = cfg.tokenizer or info.get("tokenizer")
    if tokenizer:
        try:
            from transformers import AutoTokenizer

            tok = AutoTokenizer.from_pretrained(tokenizer, local_files_only=True)
            return len(tok), f"tokenizer {tokenizer}"
        except Exception:  # a remote path we cannot read here: fall through
            if cfg.tokenizer:
                raise ConfigError(f"cannot load the tokenizer {cfg.tokenizer}") from None
    if info.get("vocab_size"):
        return int(info["vocab_size"]), "the server's /v1/models"
    return FALLBACK_VOCAB, f"default {FALLBACK_VOCAB} (pass --vocab-size or --tokenizer)"


async def _run(
    target: Target,
    client,
    prompts: list[Prompt],
    cfg: ServeConfig,
    rng: np.random.RandomState,
    tick: Callable[[], None],
) -> tuple[RunMetrics, list[RequestOutput]]:
    limit = asyncio.Semaphore(cfg.max_concurrency)

    async def one(p: Prompt) -> RequestOutput:
        async with limit:
            out = await target.send(client, p.ids, p.output_len)
        tick()
        return out

    start = time.perf_counter()
    tasks = []
    for p in prompts:
        tasks.append(asyncio.create_task(one(p)))
        if not math.isinf(cfg.request_rate):  # Poisson arrivals, as sglang
            await asyncio.sleep(rng.exponential(1.0 / cfg.request_rate))
    outputs = await asyncio.gather(*tasks)
    return RunMetrics.of(outputs, time.perf_counter() - start), outputs


async def _serve(
    cfg: ServeConfig, progress: Callable[[str, int], Callable[[], None]]
) -> ServeResult:
    target = Target.resolve(cfg.backend, cfg.base_url, cfg.api_key, cfg.model)
    before = machine()
    async with target.client(cfg.timeout_s) as client:
        info = await target.info(client)
        if target.backend == "openai" and not target.model:
            target.model = info.get("model")
        vocab, vocab_from = _vocab(cfg, info)
        context = info.get("context_length")
        if context and cfg.input_len + cfg.output_len > context:
            raise ConfigError(
                f"--input-len + --output-len = {cfg.input_len + cfg.output_len} does not fit "
                f"the model's context of {context} tokens"
            )
        target_info = {
            "backend": target.backend,
            "url": target.base_url,
            **{k: v for k, v in info.items() if v is not None},
            "vocab_size_used": vocab,
            "vocab_from": vocab_from,
        }
        # Warm-up on prompts of its own, so no measured prompt is a prefix-cache hit.
        warm = random_prompts(
            max(cfg.warmup, 1), cfg.input_len, min(cfg.output_len, 32), vocab, seed=cfg.seed + 999
        )
        tick = progress("warm-up", cfg.warmup)
        for p in warm[: cfg.warmup]:
            out = await target.send(client, p.ids, p.output_len)
            tick()
            if not out.ok:
                raise LingLocalError(f"the warm-up request failed: {out.error or 'no output'}")
        runs, samples = [], {"ttft": [], "tpot": [], "itl": [], "e2e": []}
        rng = np.random.RandomState(cfg.seed)
        for r in range(cfg.runs):
            prompts = random_prompts(
                cfg.num_prompts,
                cfg.input_len,
                cfg.output_len,
                vocab,
                range_ratio=cfg.range_ratio,
                seed=cfg.seed + r,
            )
            tick = progress(f"run {r + 1}/{cfg.runs}", cfg.num_prompts)
            metrics, outputs = await _run(target, client, prompts, cfg, rng, tick)
            runs.append(metrics)
            ok = [o for o in outputs if o.ok]
            samples["ttft"].append([o.ttft_s * 1e3 for o in ok])
            samples["tpot"].append([t * 1e3 for o in ok if (t := o.tpot_s) is not None])
            samples["itl"].append([x * 1e3 for o in ok for x in o.itl_s])
            samples["e2e"].append([o.latency_s * 1e3 for o in ok])
    return ServeResult(cfg, target_info, runs, samples, before, machine())


def run_serve(cfg: ServeConfig, *, progress: bool = True) -> ServeResult:
    from ling_local.bench.progress import progress as progress_bar

    with progress_bar(progress) as bar:

        def stage(name: str, total: int) -> Callable[[], None]:
            task = bar.add_task(f"bench serve: {name}", total=total)
            return lambda: bar.update(task, advance=1)

        return asyncio.run(_serve(cfg, stage))
