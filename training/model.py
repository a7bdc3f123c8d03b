"""Model shapes: a Llama-architecture target and a much smaller draft with the same tokenizer."""

from __future__ import annotations

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from training.tokenizer import EOT_ID, VOCAB_SIZE

MAX_POSITIONS = 2048

SHAPES: dict[str, dict[str, int]] = {
    # hidden, layers, heads (of 64), kv heads, MLP width; see MODEL_CARD.md for the choice
    # 31.5M parameters (23.6M outside the embedding); 2 KV heads keep the CPU's KV cache small
    "target": {"hidden": 640, "layers": 6, "heads": 10, "kv_heads": 2, "ffn": 1536},
    # 5.3M parameters (2.2M outside the embedding)
    "draft": {"hidden": 256, "layers": 3, "heads": 4, "kv_heads": 2, "ffn": 704},
    # for --smoke on a CPU
    "smoke-target": {"hidden": 64, "layers": 2, "heads": 2, "kv_heads": 2, "ffn": 128},
    "smoke-draft": {"hidden": 32, "layers": 1, "heads": 1, "kv_heads": 1, "ffn": 64},
}


def make_config(shape: str, vocab_size: int = VOCAB_SIZE) -> LlamaConfig:
    s = SHAPES[shape]
    return LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=s["hidden"],
        intermediate_size=s["ffn"],
        num_hidden_layers=s["layers"],
        num_attention_heads=s["heads"],
        num_key_value_heads=s["kv_heads"],
        head_dim=s["hidden"] // s["heads"],
        max_position_embeddings=MAX_POSITIONS,
        rope_theta=10000.0,
        rms_norm_eps=1e-5,
        hidden_act="silu",
        tie_word_embeddings=True,
        attention_bias=False,
        mlp_bias=False,
        initializer_range=0.02,
        bos_token_id=EOT_ID,
        eos_token_id=EOT_ID,
        pad_token_id=EOT_ID,
        use_cache=True,
    )


def make_model(config: LlamaConfig, seed: int) -> LlamaForCausalLM:
    """A freshly initialised model (float32), the same for the same seed."""
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    model.generation_config.do_sample = False
    model.generation_config.pad_token_id = EOT_ID
    model.generation_config.bos_token_id = EOT_ID
    model.generation_config.eos_token_id = EOT_ID
    return model


def count_params(model: torch.nn.Module) -> dict[str, int]:
    """Unique parameters (tied embeddings counted once), and those outside the embedding."""
    total = sum(p.numel() for p in model.parameters())
    embed = model.get_input_embeddings().weight.numel()
    return {"total": total, "non_embedding": total - embed}
