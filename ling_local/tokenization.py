"""The model's own tokenizer, as the daemon needs it: count, encode user text without ever
reading special tokens out of it, and look up the special tokens a prompt format uses."""

from __future__ import annotations

import bisect
from pathlib import Path
from typing import Any

from ling_local.errors import ConfigError

__all__ = ["TextTokenizer", "load_tokenizer"]


class TextTokenizer:
    """Thin wrapper over a Hugging Face fast tokenizer."""

    def __init__(self, hf_tokenizer: Any) -> None:
        self.hf = hf_tokenizer
        # The Rust tokenizer decodes ~3x faster than the Python wrapper; the token path
        # calls decode twice per token.
        self._raw = getattr(hf_tokenizer, "_tokenizer", None) or getattr(
            hf_tokenizer, "backend_tokenizer", None
        )
        self.eos_token_ids: tuple[int, ...] = self._eos_ids()
        self._by_text: tuple[list[str], list[int]] | None = None
        self._vocab_size = len(hf_tokenizer)  # len() rebuilds the vocabulary each call
        self._plain = self._plain_encoder()

    def _plain_encoder(self) -> Any:
        """A copy of the Rust tokenizer that reads special-token strings as plain text, when
        it encodes exactly as the wrapper does (checked on a probe). Encoding through it
        skips transformers' per-call wrapper on the token path of every request (a few
        percent of an encode: 2.23 vs 2.35 ms for 900 tokens on the H200 host)."""
        raw = self._raw
        if raw is None or not hasattr(raw, "encode_special_tokens"):
            return None
        try:
            from tokenizers import Tokenizer

            plain = Tokenizer.from_str(raw.to_str())
            plain.encode_special_tokens = True
            plain.no_truncation()
            plain.no_padding()
        except Exception:  # an exotic tokenizer: the wrapper stays the only path
            return None
        specials = "".join(self.hf.all_special_tokens or ())
        probe = f"def f(x):\n    return x  # é\t{specials}  \n\n ü€ {specials[:3]}"
        mine = plain.encode(probe, add_special_tokens=False).ids
        if mine != self._encode_wrapper(probe):
            return None
        return plain

    def _eos_ids(self) -> tuple[int, ...]:
        ids = []
        eos = getattr(self.hf, "eos_token_id", None)
        if isinstance(eos, int):
            ids.append(eos)
        elif isinstance(eos, list):
            ids.extend(eos)
        return tuple(ids)

    @property
    def vocab_size(self) -> int:
        return self._vocab_size

    @property
    def chat_template(self) -> str | None:
        return getattr(self.hf, "chat_template", None)

    def encode(self, text: str) -> list[int]:
        """Token ids of user text; special-token strings inside it stay plain text."""
        if not text:
            return []
        if self._plain is not None:
            return self._plain.encode(text, add_special_tokens=False).ids
        return self._encode_wrapper(text)

    def _encode_wrapper(self, text: str) -> list[int]:
        return self.hf(text, add_special_tokens=False, split_special_tokens=True)["input_ids"]

    def encode_with_specials(self, text: str) -> list[int]:
        """Token ids of trusted template text, where special-token strings are specials."""
        if not text:
            return []
        return self.hf(text, add_special_tokens=False)["input_ids"]

    def decode(self, ids: list[int], *, skip_special_tokens: bool = True) -> str:
        if self._raw is not None:
            return self._raw.decode(ids, skip_special_tokens=skip_special_tokens)
        return self.hf.decode(ids, skip_special_tokens=skip_special_tokens)

    def token_id(self, token: str) -> int | None:
        """Id of a special/added token given as a string, or None if the vocab lacks it."""
        added = self.hf.get_added_vocab()
        if token in added:
            return added[token]
        ids = self.encode_with_specials(token)
        return ids[0] if len(ids) == 1 else None

    def tokens_starting_with(self, text: str) -> list[int]:
        """Ordinary tokens whose text starts with `text` (token healing)."""
        if self._by_text is None:
            specials = set(self.hf.get_added_vocab().values())
            pairs = []
            for i in range(self.vocab_size):
                piece = self.decode([i], skip_special_tokens=False)
                if i not in specials and piece and "\ufffd" not in piece:
                    pairs.append((piece, i))
            pairs.sort()
            self._by_text = ([p for p, _ in pairs], [i for _, i in pairs])
        texts, ids = self._by_text
        lo = bisect.bisect_left(texts, text)
        hi = bisect.bisect_left(texts, text + "\U0010ffff")
        return ids[lo:hi]

    def apply_chat_template(self, messages: list[dict[str, str]]) -> str:
        return self.hf.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def load_tokenizer(path: str | Path, *, trust_remote_code: bool = False) -> TextTokenizer:
    """Load the tokenizer of a Hugging Face-format model directory."""
    from transformers import AutoTokenizer

    try:
        hf = AutoTokenizer.from_pretrained(
            str(path), trust_remote_code=trust_remote_code, local_files_only=True
        )
    except Exception as err:  # transformers raises many types for a bad directory
        raise ConfigError(f"cannot load the tokenizer from {path}: {err}") from None
    return TextTokenizer(hf)
