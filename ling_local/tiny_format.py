"""The shipped model's token format: its special tokens, their ids, and its prompts as ids.

This is a property of the model (``ling_local/models/tiny``), so it lives in the runtime
package: the daemon's prompt builder reads the same names from the profile, and
``training/`` (which made the model) and ``ling_local/bench`` (which scores it) import
them from here.

Special tokens, ids 0-7 in this order: ``<|endoftext|>`` (EOS, pad and the BOS id; no BOS
is ever added), ``<|fim_prefix|>``, ``<|fim_middle|>``, ``<|fim_suffix|>``,
``<|fim_pad|>``, ``<|fim_end|>`` (end of the middle), ``<|im_start|>``, ``<|im_end|>``.

Formats (prefix, suffix and middle tokenized separately, as the daemon does)::

    PSM:  <|fim_prefix|>{prefix}<|fim_suffix|>{suffix}<|fim_middle|>{middle}<|fim_end|>
    SPM:  <|fim_prefix|><|fim_suffix|>{suffix}<|fim_middle|>{prefix}{middle}<|fim_end|>
    chat: <|im_start|>user\\n{request}<|im_end|>\\n<|im_start|>assistant\\n{answer}<|im_end|>\\n
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from tokenizers import Tokenizer

__all__ = [
    "CHAT_TEMPLATE",
    "EOT",
    "EOT_ID",
    "FIM_END",
    "FIM_END_ID",
    "FIM_MIDDLE",
    "FIM_MIDDLE_ID",
    "FIM_PAD",
    "FIM_PAD_ID",
    "FIM_PREFIX",
    "FIM_PREFIX_ID",
    "FIM_SUFFIX",
    "FIM_SUFFIX_ID",
    "IM_END",
    "IM_END_ID",
    "IM_START",
    "IM_START_ID",
    "SPECIAL_TOKENS",
    "VOCAB_SIZE",
    "FimMode",
    "chat_prompt",
    "decode",
    "encode",
    "fim_prompt",
    "load_tokenizer",
]

EOT = "<|endoftext|>"
FIM_PREFIX = "<|fim_prefix|>"
FIM_MIDDLE = "<|fim_middle|>"
FIM_SUFFIX = "<|fim_suffix|>"
FIM_PAD = "<|fim_pad|>"
FIM_END = "<|fim_end|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIAL_TOKENS = [EOT, FIM_PREFIX, FIM_MIDDLE, FIM_SUFFIX, FIM_PAD, FIM_END, IM_START, IM_END]
(
    EOT_ID,
    FIM_PREFIX_ID,
    FIM_MIDDLE_ID,
    FIM_SUFFIX_ID,
    FIM_PAD_ID,
    FIM_END_ID,
    IM_START_ID,
    IM_END_ID,
) = range(8)
VOCAB_SIZE = 12288

CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
"""ChatML, the same text as ling_local.prompts builds for ``chat_template = "chatml"``."""

FimMode = Literal["psm", "spm"]


def load_tokenizer(model_dir: str | Path) -> Tokenizer:
    """The raw ``tokenizers`` object: fast, and free of transformers' decode clean-ups."""
    return Tokenizer.from_file(str(Path(model_dir) / "tokenizer.json"))


def encode(tok: Tokenizer, text: str) -> list[int]:
    return tok.encode(text, add_special_tokens=False).ids


def decode(tok: Tokenizer, ids: Sequence[int]) -> str:
    return tok.decode(list(ids), skip_special_tokens=False)


def fim_prompt(prefix_ids: list[int], suffix_ids: list[int], mode: FimMode = "psm") -> list[int]:
    """Token ids of a FIM prompt; the model continues with the middle, then ``<|fim_end|>``."""
    if mode == "psm":
        return [FIM_PREFIX_ID, *prefix_ids, FIM_SUFFIX_ID, *suffix_ids, FIM_MIDDLE_ID]
    if mode == "spm":
        return [FIM_PREFIX_ID, FIM_SUFFIX_ID, *suffix_ids, FIM_MIDDLE_ID, *prefix_ids]
    raise ValueError(f"unknown FIM mode {mode!r} (expected 'psm' or 'spm')")


def chat_prompt(tok: Tokenizer, user: str) -> list[int]:
    """The ids of a one-turn ChatML prompt, up to the assistant's first token."""
    return [
        IM_START_ID, *encode(tok, "user\n" + user), IM_END_ID, *encode(tok, "\n"),
        IM_START_ID, *encode(tok, "assistant\n"),
    ]  # fmt: skip
