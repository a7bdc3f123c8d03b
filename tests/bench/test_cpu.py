"""`bench cpu`: the GGUF export llama.cpp reads (checked without llama.cpp), the
interleaved rounds and the table; llama.cpp itself only where llama-cpp-python is installed
(the `llamacpp` extra, not part of the test install)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch

from ling_local.bench.cpu import METRICS, cpu_comparison, cpu_markdown
from ling_local.bench.gguf_export import export_gguf, permute_rope_rows

gguf = pytest.importorskip("gguf")
needs_llama_cpp = pytest.mark.skipif(
    importlib.util.find_spec("llama_cpp") is None, reason="llama-cpp-python not installed"
)


def _hf(model_dir: Path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()


def _tensors(path: Path, names: set[str]) -> dict[str, np.ndarray | None]:
    """Every tensor name of a GGUF file; those in `names` as float32 in the torch layout."""
    reader = gguf.GGUFReader(path)
    out: dict[str, np.ndarray | None] = {}
    for t in reader.tensors:
        out[t.name] = None
        if t.name not in names:
            continue
        data = gguf.quants.dequantize(t.data, t.tensor_type)
        out[t.name] = np.asarray(data, dtype=np.float32).reshape(tuple(reversed(t.shape)))
    return out


def test_permute_rope_rows_pairs_each_heads_halves() -> None:
    n_heads, head_dim = 2, 4
    rows = np.arange(n_heads * head_dim)[:, None]
    out = permute_rope_rows(rows, n_heads)[:, 0]
    # head 0 rows (0 1 | 2 3) -> 0 2 1 3: element i pairs with i + head_dim / 2
    assert out.tolist() == [0, 2, 1, 3, 4, 6, 5, 7]


def test_gguf_export_holds_the_model(model_dir: Path, tmp_path: Path) -> None:
    model = _hf(model_dir)
    cfg = model.config
    n_layers = cfg.num_hidden_layers
    att = model.model.layers[0].self_attn
    n_kv = cfg.num_key_value_heads
    expect = {
        "token_embd.weight": model.model.embed_tokens.weight,
        "blk.0.attn_q.weight": permute_rope_rows(
            att.q_proj.weight.detach().numpy(), cfg.num_attention_heads
        ),
        "blk.0.attn_k.weight": permute_rope_rows(att.k_proj.weight.detach().numpy(), n_kv),
        f"blk.{n_layers - 1}.ffn_down.weight": model.model.layers[-1].mlp.down_proj.weight,
        "output_norm.weight": model.model.norm.weight,
    }
    f32 = _tensors(export_gguf(model_dir, tmp_path / "f32.gguf", "f32"), set(expect))
    q8 = _tensors(export_gguf(model_dir, tmp_path / "q8.gguf", "q8_0"), set(expect))
    assert len(f32) == len(q8) == 2 + 9 * n_layers + (0 if cfg.tie_word_embeddings else 1)
    for name, value in expect.items():
        want = value.detach().numpy() if isinstance(value, torch.Tensor) else value
        assert np.array_equal(f32[name], want), name
        # q8_0: blocks of 32 with a float16 scale amax / 127: within half a step (+ fp16)
        err = np.abs(q8[name] - want).max()
        assert err <= np.abs(want).max() / 127 * 0.51 + 1e-3, (name, err)
    meta = gguf.GGUFReader(tmp_path / "q8.gguf")
    arch = meta.fields["general.architecture"]
    assert bytes(arch.parts[arch.data[0]]).decode() == "llama"
    heads = meta.fields["llama.attention.head_count_kv"]
    assert int(heads.parts[heads.data[0]][0]) == n_kv


def test_gguf_export_refuses_what_it_would_get_wrong(tmp_path: Path) -> None:
    from tests.support import small_causal_lm

    model = small_causal_lm("qwen2", tied=False, num_key_value_heads=2)
    model.save_pretrained(tmp_path / "qwen2")
    with pytest.raises(ValueError, match="model_type 'qwen2'"):
        export_gguf(tmp_path / "qwen2", tmp_path / "out.gguf")
    with pytest.raises(ValueError, match="outtype"):
        export_gguf(tmp_path / "qwen2", tmp_path / "out.gguf", "q4_k")


def _small_run(**kw):
    return cpu_comparison(
        "tiny",
        prefix_tokens=64,
        new_prompt_tokens=8,
        decode_tokens=8,
        rounds=2,
        decode_context=32,
        **kw,
    )


def test_rounds_and_table_of_our_engine_alone() -> None:
    result = _small_run(baseline=None)
    assert list(result.sides) == ["ling-local"]
    for metric, _ in METRICS:
        values = result.sides["ling-local"][metric]
        assert len(values) == 2 and all(v > 0 for v in values)
    table = cpu_markdown(result)
    assert "| TTFT, 72 tokens, nothing cached |" in table
    assert "8 new tokens on a cached 64-token prefix" in table
    assert "load" in table and result.as_dict()["sides"]["ling-local"]["decode_tpot_ms"]["median"]


def test_an_unknown_baseline_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown baseline"):
        _small_run(baseline="ollama")


@needs_llama_cpp
def test_llama_cpp_reads_the_export_as_transformers_computes_it(
    model_dir: Path, tmp_path: Path
) -> None:
    import llama_cpp

    ids = list(range(5, 90))
    with torch.no_grad():
        want = _hf(model_dir)(torch.tensor([ids])).logits[0, -1].numpy()
    path = export_gguf(model_dir, tmp_path / "f32.gguf", "f32")
    llm = llama_cpp.Llama(model_path=str(path), n_ctx=256, n_threads=1, verbose=False)
    llm.eval(ids)
    got = np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(llm.n_vocab(),)).copy()
    llm.close()
    assert np.abs(got - want).max() < 1e-3 * max(1.0, np.abs(want).max())


@needs_llama_cpp
def test_side_by_side_with_llama_cpp() -> None:
    result = _small_run(llama_threads=(1,))
    assert list(result.sides) == ["ling-local", "llama.cpp, 1 thread"]
    assert all(len(v) == 2 for v in result.sides["llama.cpp, 1 thread"].values())
    assert len(result.agreement["llama.cpp, 1 thread"]) == 2
    assert "llama.cpp, 1 thread" in cpu_markdown(result)
