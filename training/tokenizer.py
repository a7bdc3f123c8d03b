"""Byte-level BPE tokenizer with fill-in-the-middle and chat special tokens, in Hugging Face
format.

Special tokens, ids 0-7 in this order: ``<|endoftext|>`` (EOS, pad and the BOS id; no BOS is
ever added), ``<|fim_prefix|>``, ``<|fim_middle|>``, ``<|fim_suffix|>``, ``<|fim_pad|>``,
``<|fim_end|>`` (end of the middle: a FIM answer stops where the suffix begins),
``<|im_start|>``, ``<|im_end|>`` (ChatML turns).

Formats, as the daemon builds them (prefix, suffix and middle tokenized separately):

    PSM:  <|fim_prefix|>{prefix}<|fim_suffix|>{suffix}<|fim_middle|>{middle}<|fim_end|>
    SPM:  <|fim_prefix|><|fim_suffix|>{suffix}<|fim_middle|>{prefix}{middle}<|fim_end|>
    chat: <|im_start|>user\\n{prompt}<|im_end|>\\n<|im_start|>assistant\\n{answer}<|im_end|>\\n

Training documents end in ``<|endoftext|>``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

# The model's format has one home in the runtime package (the daemon and bench use it too).
from ling_local.tiny_format import (  # noqa: F401 (re-exported for the training code)
    CHAT_TEMPLATE,
    EOT,
    EOT_ID,
    FIM_END,
    FIM_END_ID,
    FIM_MIDDLE,
    FIM_MIDDLE_ID,
    FIM_PAD,
    FIM_PAD_ID,
    FIM_PREFIX,
    FIM_PREFIX_ID,
    FIM_SUFFIX,
    FIM_SUFFIX_ID,
    IM_END,
    IM_END_ID,
    IM_START,
    IM_START_ID,
    SPECIAL_TOKENS,
    VOCAB_SIZE,
    FimMode,
    chat_prompt,
    decode,
    encode,
    fim_prompt,
    load_tokenizer,
)


def pre_tokenizer() -> pre_tokenizers.PreTokenizer:
    """GPT-2's byte-level split, with every newline a token of its own. A line break is then
    always a token boundary, whatever follows it: a FIM middle that ends at a line end (its
    last token ``\\n``, then ``<|fim_end|>``) is tokenized as the same text is inside a whole
    file, so the model can stop there in free generation. (With GPT-2's split alone, ``\\n``
    merges with the blank lines and indentation after it, and a model that has written the
    last line of a middle goes on with a merged ``\\n\\n    `` instead of stopping.)"""
    return pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex("\n"), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )


def train_tokenizer(texts: Iterable[str], vocab_size: int = VOCAB_SIZE) -> Tokenizer:
    """Train a byte-level BPE on ``texts``; the vocabulary size counts the special tokens."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizer()
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
    tok.save(str(out / "tokenizer.json"), pretty=False)
    specials = {"eos_token": EOT, "pad_token": EOT, "unk_token": EOT, "bos_token": EOT}
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": model_max_length,
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "padding_side": "left",
        "additional_special_tokens": SPECIAL_TOKENS[1:],
        "chat_template": CHAT_TEMPLATE,
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
    """A full training example: the prompt, the middle, ``<|fim_end|>``, ``<|endoftext|>``."""
    return [*fim_prompt(prefix_ids, suffix_ids, mode), *middle_ids, FIM_END_ID, EOT_ID]


def chat_example(tok_ids_user: list[int], tok_ids_answer: list[int], nl: list[int]) -> list[int]:
    """A full ChatML training example from pre-encoded pieces (``user\\n{prompt}`` and
    ``assistant\\n{answer}``), ending in ``<|endoftext|>``."""
    return [
        IM_START_ID, *tok_ids_user, IM_END_ID, *nl,
        IM_START_ID, *tok_ids_answer, IM_END_ID, *nl, EOT_ID,
    ]  # fmt: skip
