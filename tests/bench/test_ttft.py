"""The time-to-first-token benchmarks on the CPU, at toy scale: `bench keystroke` through a
fresh daemon (first request after ready, cold, cached prefix, with the engine's trace),
`bench engine`'s TTFT columns for transformers, the gpt-fast-style model and the engine,
and its SGLang row against the protocol-level stand-in. Speed is the GPU run's business;
these check that every number is measured where it says."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ling_local.bench.engine import run_engine_bench
from ling_local.bench.keystroke import keystroke_latency
from ling_local.bench.ttft import sglang_row, ttft_prompts
from tests.sglang.conftest import write_standin_profile
from tests.support import write_profile

PHASES = ("prep", "queue", "wait", "lookup", "launch", "sync", "emit")


@pytest.fixture(scope="module")
def word_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small Llama whose word-level tokenizer decodes every id (as the GPU run's)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from ling_local.bench.baselines import word_tokenizer

    path = tmp_path_factory.mktemp("word-model")
    config = LlamaConfig(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(path)
    word_tokenizer(512).save_pretrained(path)
    return path


def test_keystroke_through_a_fresh_daemon(word_model: Path, tmp_path: Path) -> None:
    profile = write_profile(
        tmp_path / "ks.toml", str(word_model), engine={"warmup": True, "cache_slots": 2}
    )
    saved: list[dict] = []
    result = keystroke_latency(
        str(profile), prefix_tokens=120, new_prompt_tokens=8, decode_tokens=8, repeats=2,
        save=lambda r: saved.append(json.loads(json.dumps(r))),
    )  # fmt: skip
    assert result["ready_s"] > 0 and saved[0]["ready_s"] == result["ready_s"]
    first = result["first_after_ready"]
    assert first["cached_tokens"] == 0 and first["prompt_tokens"] == 128
    assert first["client_ttft_ms"] >= first["ttft_ms"] > 0
    cold, cached = result["cold"], result["cached_prefix"]
    assert cold["cached_tokens_median"] == 0
    assert cached["cached_tokens_median"] == 120 and cached["prompt_tokens_median"] == 128
    for summary in (cold, cached):
        trace = summary["trace_median"]
        assert all(trace[p] >= 0 for p in PHASES) and trace["prefill"] == "eager"
        assert len(summary["client_ttft_ms_runs"]) == 2
    assert result["first_vs_steady"] > 0 and result["decode_tpot_ms_median"] > 0


def test_engine_bench_ttft_columns(word_model: Path, tmp_path: Path) -> None:
    result = run_engine_bench(
        device="cpu", model=str(word_model), out_dir=tmp_path, repeats=1,
        baselines=("hf-static", "gptfast"), variants=("graphs",), ttft=(100, 60, 9), tpot=False,
    )  # fmt: skip
    assert [r.name for r in result.rows] == [
        "transformers, static cache",
        "gpt-fast-style model",
        "ling-local engine",
    ]
    for row in result.rows:
        assert row.ttft_cold_ms > 0 and row.ttft_cached_ms > 0, row
        assert row.tpot_ms is None
    traces = result.extra["graphs"]["ttft_traces"]
    assert traces["cached"]["chunks"] == 1 and traces["cold"]["prefill"] == "eager"
    saved = json.loads((tmp_path / "engine_bench.json").read_text())
    assert saved["rows"][2]["ttft_cached_ms"] == result.rows[2].ttft_cached_ms
    assert "TTFT cached ms" in (tmp_path / "engine_bench.md").read_text()


def test_sglang_row_against_the_standin(word_model: Path, tmp_path: Path) -> None:
    profile = write_standin_profile(tmp_path / "sglang.toml", Path("/nonexistent"))
    prompts = ttft_prompts(512, 40, 30, 5, 2)
    row, tokens = sglang_row(str(profile), word_model, list(range(3, 30)), 12, 2, prompts)
    assert row.tpot_ms > 0 and len(row.runs_ms) == 2 and len(tokens) == 12
    assert row.ttft_cold_ms > 0 and row.ttft_cached_ms > 0
    assert "cached tokens 30-30" in row.note  # the radix cache served the whole prefix
