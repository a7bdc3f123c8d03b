"""Random-weight Hugging Face checkpoints for benchmarks and tests: a real Llama-shaped model
and a byte-level BPE tokenizer with the same special tokens as the shipped tiny model."""

from __future__ import annotations

from pathlib import Path

__all__ = ["SPECIAL_TOKENS", "build_random_llama", "build_tokenizer"]

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
