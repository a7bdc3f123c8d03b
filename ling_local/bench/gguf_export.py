"""A Llama checkpoint as a GGUF file, for running the same model under llama.cpp (`bench cpu`).

Written with the `gguf` package (llama.cpp's own GGUF library, from PyPI), following what
llama.cpp's `convert_hf_to_gguf.py` writes for a Llama model: the same tensor names, the
same query/key row permutation (llama.cpp's RoPE rotates adjacent pairs, transformers'
rotates halves), the same hyperparameter keys, q8_0 for every matrix. That converter is not
used directly because it is not on PyPI (only inside llama.cpp's sources), the copy vendored
in llama-cpp-python 0.3.36 needs a newer `gguf` than PyPI has, and it refuses any BPE
tokenizer whose pre-tokenizer it does not know by hash, which ours is. The benchmark feeds
token ids, never text, so the vocabulary only has to load: it is written as llama.cpp's
"gpt2" BPE with the tokenizer's own tokens and merges.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["GGUF_TYPES", "export_gguf", "permute_rope_rows"]

GGUF_TYPES = ("q8_0", "f32")
"""What `export_gguf` writes matrices as: q8_0 (what users run) or f32 (exact, for checks)."""


def permute_rope_rows(weight: np.ndarray, n_heads: int) -> np.ndarray:
    """Reorder a query or key projection's rows from transformers' rotate-half RoPE layout
    (the first and second halves of each head are the pairs) to llama.cpp's adjacent pairs:
    `LlamaModel.permute` in convert_hf_to_gguf.py."""
    rows = weight.shape[0]
    return (
        weight.reshape(n_heads, 2, rows // n_heads // 2, *weight.shape[1:])
        .swapaxes(1, 2)
        .reshape(weight.shape)
    )


def _check(config: Any) -> None:
    rope = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    rope_type = rope.get("rope_type", rope.get("type", "default")) if rope else "default"
    problems = [
        what
        for what, bad in (
            (f"model_type {config.model_type!r}", config.model_type not in ("llama", "mistral")),
            ("attention biases", getattr(config, "attention_bias", False)),
            ("MLP biases", getattr(config, "mlp_bias", False)),
            (f"hidden_act {config.hidden_act!r}", config.hidden_act != "silu"),
            (f"rope_type {rope_type!r}", rope_type != "default"),
        )
        if bad
    ]
    if problems:
        raise ValueError(
            "GGUF export handles plain Llama checkpoints; this one has " + ", ".join(problems)
        )


def _vocab(model_dir: Path, vocab_size: int) -> tuple[list[str], list[int], list[str]]:
    """Tokens by id, their llama.cpp token types, and the BPE merges of tokenizer.json."""
    import gguf

    spec = json.loads((model_dir / "tokenizer.json").read_text(encoding="utf-8"))
    model = spec["model"]
    if model.get("type") != "BPE":
        raise ValueError(f"GGUF export needs a BPE tokenizer, not {model.get('type')!r}")
    tokens = [f"[PAD{i}]" for i in range(vocab_size)]
    types = [int(gguf.TokenType.UNUSED)] * vocab_size
    for text, i in model["vocab"].items():
        if i < vocab_size:
            tokens[i], types[i] = text, int(gguf.TokenType.NORMAL)
    for added in spec.get("added_tokens", []):
        i = added["id"]
        if i < vocab_size:
            tokens[i] = added["content"]
            types[i] = int(
                gguf.TokenType.CONTROL if added.get("special") else gguf.TokenType.USER_DEFINED
            )
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]
    return tokens, types, merges


def export_gguf(model_dir: str | Path, out_path: str | Path, outtype: str = "q8_0") -> Path:
    """Write the Llama checkpoint at model_dir as a GGUF file at out_path and return it."""
    import gguf
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    if outtype not in GGUF_TYPES:
        raise ValueError(f"outtype must be one of {GGUF_TYPES}, not {outtype!r}")
    model_dir, out_path = Path(model_dir), Path(out_path)
    config = AutoConfig.from_pretrained(model_dir, local_files_only=True)
    _check(config)
    model = AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=torch.float32, local_files_only=True
    )
    n_heads = config.num_attention_heads
    n_kv = getattr(config, "num_key_value_heads", None) or n_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // n_heads
    rope = getattr(config, "rope_parameters", None) or {}
    theta = rope.get("rope_theta", getattr(config, "rope_theta", 10000.0))
    q8 = outtype == "q8_0"

    writer = gguf.GGUFWriter(out_path, "llama")
    writer.add_name(model_dir.name)
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(n_heads)
    writer.add_head_count_kv(n_kv)
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(float(theta))
    writer.add_layer_norm_rms_eps(float(config.rms_norm_eps))
    writer.add_vocab_size(config.vocab_size)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0 if q8 else gguf.LlamaFileType.ALL_F32)
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)

    tokens, types, merges = _vocab(model_dir, config.vocab_size)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    for key, add in (
        ("bos_token_id", writer.add_bos_token_id),
        ("eos_token_id", writer.add_eos_token_id),
        ("pad_token_id", writer.add_pad_token_id),
    ):
        value = getattr(config, key, None)
        if isinstance(value, list):
            value = value[0] if value else None
        if value is not None:
            add(int(value))
    writer.add_add_bos_token(False)

    def add(name: str, tensor: Any) -> None:
        data = tensor.detach().float().numpy()
        if q8 and data.ndim == 2:
            packed = gguf.quants.quantize(data, gguf.GGMLQuantizationType.Q8_0)
            writer.add_tensor(name, packed, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            writer.add_tensor(name, np.ascontiguousarray(data, dtype=np.float32))

    inner = model.model
    add("token_embd.weight", inner.embed_tokens.weight)
    for i, layer in enumerate(inner.layers):
        att, mlp = layer.self_attn, layer.mlp
        add(f"blk.{i}.attn_norm.weight", layer.input_layernorm.weight)
        q = permute_rope_rows(att.q_proj.weight.detach().numpy(), n_heads)
        k = permute_rope_rows(att.k_proj.weight.detach().numpy(), n_kv)
        add(f"blk.{i}.attn_q.weight", torch.from_numpy(q))
        add(f"blk.{i}.attn_k.weight", torch.from_numpy(k))
        add(f"blk.{i}.attn_v.weight", att.v_proj.weight)
        add(f"blk.{i}.attn_output.weight", att.o_proj.weight)
        add(f"blk.{i}.ffn_norm.weight", layer.post_attention_layernorm.weight)
        add(f"blk.{i}.ffn_gate.weight", mlp.gate_proj.weight)
        add(f"blk.{i}.ffn_up.weight", mlp.up_proj.weight)
        add(f"blk.{i}.ffn_down.weight", mlp.down_proj.weight)
    add("output_norm.weight", inner.norm.weight)
    if not getattr(config, "tie_word_embeddings", False):
        add("output.weight", model.lm_head.weight)

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out_path
