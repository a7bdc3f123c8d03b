"""Random-weight Hugging Face checkpoints for benchmarks and tests: a real Llama-shaped model
and a byte-level BPE tokenizer with the same special tokens as the shipped tiny model."""

from __future__ import annotations

from pathlib import Path

__all__ = ["SPECIAL_TOKENS", "build_copying_llama", "build_random_llama", "build_tokenizer"]

SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|fim_prefix|>",
    "<|fim_middle|>",
    "<|fim_suffix|>",
    "<|fim_pad|>",
]

_CORPUS = '''
def fibonacci(n):
    """Return the n-th Fibonacci number."""
    if n < 2:
        return n
    return fibonacci(n - 1) + fibonacci(n - 2)


class Person:
    def __init__(self, name, age):
        self.name = name
        self.age = age

    def __repr__(self):
        return f"Person({self.name!r}, {self.age})"


for i in range(10):
    print(i, fibonacci(i))
'''


def build_tokenizer(vocab_size: int = 1024, corpus: list[str] | None = None):
    """A byte-level BPE PreTrainedTokenizerFast (special tokens at ids 0-4)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(corpus or [_CORPUS] * 20, trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>"
    )


def build_random_llama(
    path: str | Path,
    *,
    vocab_size: int = 1024,
    hidden_size: int = 64,
    intermediate_size: int = 172,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: int | None = None,
    max_position_embeddings: int = 4096,
    tie_word_embeddings: bool = True,
    dtype: str = "float32",
    seed: int = 0,
    device: str = "cpu",
) -> Path:
    """Write a random-weight LlamaForCausalLM + tokenizer to `path` and return it."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(min(vocab_size, 4096))
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads or num_heads,
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=tie_word_embeddings,
        bos_token_id=0,
        eos_token_id=0,
        pad_token_id=0,
        rope_theta=10000.0,
    )
    torch.manual_seed(seed)
    with torch.device(device):
        model = LlamaForCausalLM(config).to(getattr(torch, dtype))
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def build_copying_llama(
    path: str | Path,
    source: str | Path,
    *,
    vocab_size: int = 128256,
    hidden_size: int = 2048,
    intermediate_size: int = 8192,
    num_layers: int = 16,
    num_heads: int = 32,
    num_kv_heads: int = 8,
    noise: float = 1e-3,
    dtype: str = "bfloat16",
    seed: int = 0,
    device: str = "cpu",
) -> Path:
    """A checkpoint of a bigger Llama shape (default Llama-3.2-1B's) that computes what the
    trained `source` model computes: its weights sit in the first rows and columns of every
    matrix (its query head i as query head i * group, so GQA pairs it with kv head i), its
    layers first; everything else is Gaussian noise of std `noise`, so every byte a decode
    step reads is a real, non-zero weight. The RMSNorm weights are scaled by
    sqrt(source hidden / hidden) (and eps likewise) so each norm gives the source's values.

    What for: a model of the benchmark's exact shape and bytes that behaves like a trained
    code model, copying from its prompt on an editing workload and with clear argmax margins,
    where the random-weight model does neither (no model hub is reachable here)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

    path, source = Path(path), Path(source)
    small = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32)
    sc = small.config
    hd = getattr(sc, "head_dim", None) or sc.hidden_size // sc.num_attention_heads
    group = num_heads // num_kv_heads
    if (
        sc.num_attention_heads != sc.num_key_value_heads
        or sc.num_attention_heads > num_kv_heads
        or hidden_size // num_heads != hd
        or sc.num_hidden_layers > num_layers
        or sc.hidden_size > hidden_size
        or sc.intermediate_size > intermediate_size
        or sc.vocab_size > vocab_size
    ):
        raise ValueError(f"{source} does not fit in the requested shape")
    rope = getattr(sc, "rope_parameters", None) or {}
    scale = (sc.hidden_size / hidden_size) ** 0.5
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        max_position_embeddings=sc.max_position_embeddings,
        tie_word_embeddings=True,
        rms_norm_eps=sc.rms_norm_eps * sc.hidden_size / hidden_size,
        rope_theta=rope.get("rope_theta", getattr(sc, "rope_theta", 10000.0)),
        bos_token_id=sc.bos_token_id,
        eos_token_id=sc.eos_token_id,
        pad_token_id=sc.pad_token_id,
    )
    torch.manual_seed(seed)
    with torch.device(device):
        big = LlamaForCausalLM(config).to(torch.float32)
    h, i_s, v_s = sc.hidden_size, sc.intermediate_size, sc.vocab_size
    with torch.no_grad():
        for p in big.parameters():
            if p.dim() == 2:
                p.normal_(0.0, noise)
            else:
                p.fill_(1.0)
        big.model.embed_tokens.weight[:v_s, :h] = small.model.embed_tokens.weight
        big.model.norm.weight[:h] = small.model.norm.weight * scale
        for layer, src in zip(big.model.layers, small.model.layers, strict=False):
            a, s = layer.self_attn, src.self_attn
            layer.input_layernorm.weight[:h] = src.input_layernorm.weight * scale
            layer.post_attention_layernorm.weight[:h] = src.post_attention_layernorm.weight * scale
            for head in range(sc.num_attention_heads):
                rows = slice(head * hd, (head + 1) * hd)
                q_rows = slice(head * group * hd, (head * group + 1) * hd)
                a.q_proj.weight[q_rows, :h] = s.q_proj.weight[rows]
                a.k_proj.weight[rows, :h] = s.k_proj.weight[rows]
                a.v_proj.weight[rows, :h] = s.v_proj.weight[rows]
                a.o_proj.weight[:h, q_rows] = s.o_proj.weight[:, rows]
            m, sm = layer.mlp, src.mlp
            m.gate_proj.weight[:i_s, :h] = sm.gate_proj.weight
            m.up_proj.weight[:i_s, :h] = sm.up_proj.weight
            m.down_proj.weight[:h, :i_s] = sm.down_proj.weight
    big.to(getattr(torch, dtype)).save_pretrained(path)
    AutoTokenizer.from_pretrained(source).save_pretrained(path)
    return path
