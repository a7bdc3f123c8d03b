"""Baselines and fixtures for `bench engine`: the device's copy bandwidth, a random-weight
Llama checkpoint with a tokenizer that covers every id, and transformers' own `generate`
timed per token."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

__all__ = [
    "Row",
    "bench_config",
    "build_bench_model",
    "copy_bandwidth",
    "hf_generate",
    "word_tokenizer",
]


@dataclass
class Row:
    name: str
    tpot_ms: float | None
    ttft_ms: float | None = None
    same_tokens: str = ""
    note: str = ""
    runs_ms: list[float] = field(default_factory=list)
    ttft_cold_ms: float | None = None
    """Time to first token of a cold prompt (`ttft.TTFTPrompts.cold`)."""
    ttft_cached_ms: float | None = None
    """Time to first token of a keystroke's new tokens after a cached prefix."""


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def copy_bandwidth(device: torch.device, gigabytes: float = 2.0) -> float:
    """Device-to-device copy, bytes read + written per second."""
    n = int(gigabytes * 2**30) // 2
    a = torch.empty(n, dtype=torch.bfloat16, device=device).uniform_()
    b = torch.empty_like(a)
    for _ in range(3):
        b.copy_(a)
    _sync(device)
    t0 = time.perf_counter()
    reps = 10
    for _ in range(reps):
        b.copy_(a)
    _sync(device)
    seconds = (time.perf_counter() - t0) / reps
    del a, b
    return 2 * n * 2 / seconds


def word_tokenizer(vocab: int):
    """A word-level tokenizer covering every id (random models emit any id)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = {f"t{i}": i for i in range(vocab)}
    tok = Tokenizer(models.WordLevel(words, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="t2", unk_token="t0", pad_token="t0", bos_token="t1"
    )


def bench_config(shape: dict, **overrides: Any):
    """The LlamaConfig of a benchmark shape (`engine.LLAMA_1B`'s keys); `overrides` are
    LlamaConfig fields (e.g. fewer layers, a head_dim)."""
    from transformers import LlamaConfig

    fields: dict[str, Any] = dict(
        vocab_size=shape["vocab_size"],
        hidden_size=shape["hidden_size"],
        intermediate_size=shape["intermediate_size"],
        num_hidden_layers=shape["num_layers"],
        num_attention_heads=shape["num_heads"],
        num_key_value_heads=shape["num_kv_heads"],
        max_position_embeddings=4096,
        tie_word_embeddings=shape["tie_word_embeddings"],
        rope_theta=500000.0,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )
    return LlamaConfig(**{**fields, **overrides})


def build_bench_model(path: Path, device: torch.device, shape: dict) -> Path:
    from transformers import LlamaForCausalLM

    if (path / "config.json").is_file():
        return path
    config = bench_config(shape)
    torch.manual_seed(0)
    with torch.device(device):
        model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(path)
    word_tokenizer(shape["vocab_size"]).save_pretrained(path)
    del model
    return path


class _Stamps:
    """A transformers streamer that only records when each new token arrives."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self._prompt_seen = False

    def put(self, value: torch.Tensor) -> None:
        if not self._prompt_seen:  # generate() hands the prompt over first
            self._prompt_seen = True
            return
        self.times.append(time.perf_counter())

    def end(self) -> None:
        pass


def hf_generate(
    model: Any, prompt: list[int], new_tokens: int, repeats: int, static: bool = False
) -> tuple[Row, list[int]]:
    """transformers' own generate loop; token times from a streamer (generate syncs every
    step anyway to check its stopping criteria)."""
    ids = torch.tensor([prompt], device=model.device)
    kw: dict[str, Any] = dict(
        do_sample=False, max_new_tokens=new_tokens, min_new_tokens=new_tokens, pad_token_id=0
    )
    if static:
        kw["cache_implementation"] = "static"

    def run() -> tuple[float, float, torch.Tensor]:
        stamps = _Stamps()
        _sync(model.device)
        t0 = time.perf_counter()
        out = model.generate(ids, streamer=stamps, **kw)
        times = stamps.times
        return (times[0] - t0, (times[-1] - times[0]) / (len(times) - 1), out)

    t_warm = time.perf_counter()
    run()  # warm-up (compiles the static-cache path)
    warm = time.perf_counter() - t_warm
    runs = [run() for _ in range(repeats)]
    tpots = [r[1] * 1e3 for r in runs]
    name = "transformers generate, static cache" if static else "transformers generate, eager"
    row = Row(
        name,
        statistics.median(tpots),
        statistics.median(r[0] for r in runs) * 1e3,
        note=f"warm-up {warm:.0f}s",
        runs_ms=tpots,
    )
    return row, runs[-1][2][0, len(prompt) :].tolist()
