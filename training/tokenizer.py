"""Byte-level BPE tokenizer with fill-in-the-middle special tokens, saved in Hugging Face format.

Special tokens (ids 0-4, in this order): ``<|endoftext|>`` (EOS, pad and the BOS id; no BOS is
ever added), ``<|fim_prefix|>``, ``<|fim_middle|>``, ``<|fim_suffix|>``, ``<|fim_pad|>``.

Prompt formats, as the daemon builds them:

    PSM: <|fim_prefix|>{prefix}<|fim_suffix|>{suffix}<|fim_middle|>{middle}<|endoftext|>
    SPM: <|fim_prefix|><|fim_suffix|>{suffix}<|fim_middle|>{prefix}{middle}<|endoftext|>
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from ling_local.bench.fim_eval import (  # noqa: F401 (the format, re-exported for training)
    EOT,
    EOT_ID,
    FIM_MIDDLE_ID,
    FIM_PAD_ID,
    FIM_PREFIX_ID,
    FIM_SUFFIX_ID,
    SPECIAL_TOKENS,
    FimMode,
    decode,
    encode,
    fim_prompt,
    load_tokenizer,
)

VOCAB_SIZE = 8192


def train_tokenizer(texts: Iterable[str], vocab_size: int = VOCAB_SIZE) -> Tokenizer:
    """Train a byte-level BPE on ``texts``; the vocabulary size counts the special tokens."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    for i, name in enumerate(SPECIAL_TOKENS):
        if tok.token_to_id(name) != i:
            raise RuntimeError(f"special token {name!r} got id {tok.token_to_id(name)}, not {i}")
    return tok


def save_hf_tokenizer(tok: Tokenizer, out_dir: str | Path, model_max_length: int) -> None:
    """Write tokenizer.json plus the small config files that ``AutoTokenizer`` reads."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
    specials = {"eos_token": EOT, "pad_token": EOT, "unk_token": EOT, "bos_token": EOT}
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": model_max_length,
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "padding_side": "left",
        "additional_special_tokens": SPECIAL_TOKENS[1:],
        **specials,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    special_map = {**specials, "additional_special_tokens": SPECIAL_TOKENS[1:]}
    (out / "special_tokens_map.json").write_text(json.dumps(special_map, indent=2) + "\n")


def encode_batch(tok: Tokenizer, texts: Sequence[str]) -> list[list[int]]:
    return [e.ids for e in tok.encode_batch(list(texts), add_special_tokens=False)]


def fim_example(
    prefix_ids: list[int], middle_ids: list[int], suffix_ids: list[int], mode: FimMode
) -> list[int]:
    """A full training example: the prompt, the middle, and the end-of-text token."""
    return [*fim_prompt(prefix_ids, suffix_ids, mode), *middle_ids, EOT_ID]
