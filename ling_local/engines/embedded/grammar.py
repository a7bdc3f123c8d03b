"""Structured output on the embedded engine: `response_format` as a token grammar.

A JSON schema (``json_object`` is the schema ``{"type": "object"}``) is compiled by
llguidance into a matcher over this model's vocabulary. Before each token is chosen the
matcher writes the set of tokens the grammar allows next as a bitmask, the disallowed logits
become -inf, and the chosen token advances the matcher; once the JSON value is complete the
generation ends. Why llguidance (and not xgrammar or outlines-core), with the measurements:
docs/structured-output.md.
"""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from ling_local.errors import RequestError

__all__ = ["Constraint", "Grammars"]

#: Compiled schemas kept per engine (an agent sends the same schema with every request).
CACHE_SIZE = 32
#: Compact JSON: no free whitespace, so a model cannot pad the answer with newlines forever.
_JSON_OPTIONS = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


class Grammars:
    """The model's vocabulary as llguidance sees it, and the schemas compiled against it."""

    def __init__(self, hf_tokenizer: Any, vocab_size: int, stop_ids: Sequence[int]) -> None:
        import llguidance
        import llguidance.hf

        self._ll = llguidance
        self.vocab_size = vocab_size
        """Width of the model's logits (may exceed the tokenizer's own size)."""
        self.tokenizer = llguidance.hf.from_tokenizer(
            hf_tokenizer, n_vocab=vocab_size, eos_token=list(stop_ids)
        )
        self._compiled: OrderedDict[str, Any] = OrderedDict()
        self._lock = threading.Lock()  # compiled on the event loop, copied on the worker

    def compile(self, schema: dict[str, Any]) -> Any:
        """A fresh matcher for `schema`'s start state; raises RequestError (a 400) when
        llguidance cannot compile it."""
        key = json.dumps(schema, sort_keys=True, separators=(",", ":"))
        with self._lock:
            start = self._compiled.get(key)
            if start is not None:
                self._compiled.move_to_end(key)
                return start.deep_copy()
        try:
            grammar = self._ll.LLMatcher.grammar_from_json_schema(schema, defaults=_JSON_OPTIONS)
        except ValueError as err:
            raise _invalid(str(err)) from None
        error = self._ll.LLMatcher.validate_grammar(grammar, self.tokenizer)
        if error:
            raise _invalid(error)
        start = self._ll.LLMatcher(self.tokenizer, grammar, log_level=0)
        if start.is_error():
            raise _invalid(start.get_error())
        with self._lock:
            self._compiled[key] = start
            while len(self._compiled) > CACHE_SIZE:
                self._compiled.popitem(last=False)
        return start.deep_copy()

    def constraint(self, schema: dict[str, Any], device: torch.device) -> Constraint:
        return Constraint(self.compile(schema), self.vocab_size, device)


def _invalid(detail: str) -> RequestError:
    first = detail.strip().splitlines()[0] if detail.strip() else "unsupported schema"
    return RequestError(
        f"response_format: this JSON schema cannot be used for constrained decoding: {first}",
        param="response_format",
    )


class Constraint:
    """One generation's matcher: `mask(logits)` before a token is chosen, `accept(token)`
    after. Runs on the engine's worker thread."""

    __slots__ = ("_bits", "_device_bits", "_shifts", "_vocab", "finished", "matcher", "seconds")

    def __init__(self, matcher: Any, vocab_size: int, device: torch.device) -> None:
        self.matcher = matcher
        self._vocab = vocab_size
        words = (vocab_size + 31) // 32
        on_device = device.type != "cpu"
        self._bits = torch.zeros(words, dtype=torch.int32, pin_memory=device.type == "cuda")
        self._device_bits = (
            torch.empty(words, dtype=torch.int32, device=device) if on_device else None
        )
        self._shifts = torch.arange(32, dtype=torch.int32, device=device)
        self.finished = False
        """The value is complete: nothing but the end of the generation may follow."""
        self.seconds = 0.0
        """Time spent here (masks and advances): what the grammar costs the generation."""

    def mask(self, logits: torch.Tensor) -> torch.Tensor:
        """Set the logits of tokens the grammar does not allow next to -inf (in place);
        logits is [vocab] or [1, vocab]."""
        t0 = time.perf_counter()
        bits = self._bits
        self.matcher.unsafe_compute_mask_ptr(bits.data_ptr(), bits.numel() * 4)
        flat = logits.view(-1)[: self._vocab]
        if self._device_bits is None:  # CPU: numpy's unpack and copyto are the cheapest ops
            banned = np.unpackbits(
                ~bits.numpy().view(np.uint8), count=self._vocab, bitorder="little"
            )
            np.copyto(flat.numpy(), -np.inf, where=banned.view(np.bool_))
        else:  # a GPU: the words go over, the bits are unpacked there
            self._device_bits.copy_(bits, non_blocking=True)
            allowed = (self._device_bits.view(-1, 1) >> self._shifts) & 1
            flat.masked_fill_(allowed.view(-1)[: self._vocab] == 0, float("-inf"))
        self.seconds += time.perf_counter() - t0
        return logits

    def accept(self, token: int) -> None:
        """Advance past the chosen token (one the mask allowed)."""
        t0 = time.perf_counter()
        if not self.matcher.consume_token(token):
            raise RuntimeError(f"the grammar refused token {token}: {self.matcher.get_error()}")
        self.finished = self.matcher.is_stopped()
        self.seconds += time.perf_counter() - t0
