"""Approximate token counts for the prompt budget, without loading the model.

The profile gives budgets in tokens (`prompt.prefix_tokens`, `suffix_tokens`); the daemon
clips nothing, so the prompt must stay within them. Exact counting on every keystroke would
cost a tokenizer pass on the hot path and make window edges jitter by a token or two (which
breaks the engine's prefix-cache reuse), while being off by 10 % costs nothing. So windows
are cut in characters, with a chars-per-token ratio calibrated to the served model:

1. from the model's own `tokenizer.json` (the `tokenizers` library, no weights) when the
   profile's model directory is on this machine, measured on the user's actual files;
2. from every answer of the daemon (`usage.prompt_tokens` for the characters we sent),
   which works for any engine, remote ones included;
3. a conservative 3.0 chars per token before either has spoken.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

from ling_local.config import Profile

__all__ = ["TokenCounter"]

log = logging.getLogger(__name__)

_SAFETY = 0.92
"""Budgets are filled to this share, so an under-estimate does not overflow them."""
_FIM_OVERHEAD_TOKENS = 4
"""FIM special tokens (+ BOS) the daemon adds around prefix and suffix."""


class TokenCounter:
    def __init__(self, chars_per_token: float = 3.0, tokenizer: Any | None = None) -> None:
        self.chars_per_token = chars_per_token
        self.tokenizer = tokenizer
        self.calibrated_by: str = "default"
        self._lock = threading.Lock()

    @classmethod
    def for_profile(cls, profile: Profile | None) -> TokenCounter:
        """A counter for `profile`'s model, with its tokenizer.json when it is local."""
        counter = cls()
        if profile is None:
            return counter
        source = profile.model.tokenizer_path or profile.model.path
        try:
            directory = profile.resolve_path(source)
        except Exception:  # a path that cannot be resolved here: the daemon will calibrate
            return counter
        file = Path(directory) / "tokenizer.json" if directory else None
        if file is not None and file.is_file():
            try:
                from tokenizers import Tokenizer

                counter.tokenizer = Tokenizer.from_file(str(file))
            except Exception as err:  # a tokenizer format this version cannot read
                log.info("cannot read %s (%s); counting by characters", file, err)
        return counter

    def calibrate(self, text: str) -> None:
        """Measure the ratio on real text with the model's tokenizer (call off the loop)."""
        if self.tokenizer is None or len(text) < 200:
            return
        sample = text[:20000]
        n = len(self.tokenizer.encode(sample, add_special_tokens=False).ids)
        if n:
            self._update(len(sample) / n, "tokenizer", weight=0.5)

    def observe(self, chars: int, prompt_tokens: int) -> None:
        """Learn from the daemon: `chars` of prompt text came to `prompt_tokens` tokens."""
        tokens = prompt_tokens - _FIM_OVERHEAD_TOKENS
        if chars >= 200 and tokens > 0:
            self._update(chars / tokens, "daemon", weight=0.3)

    def _update(self, ratio: float, source: str, weight: float) -> None:
        ratio = min(max(ratio, 1.0), 8.0)
        with self._lock:
            if self.calibrated_by == "default":
                self.chars_per_token = ratio
            else:
                self.chars_per_token += weight * (ratio - self.chars_per_token)
            self.calibrated_by = source

    def shrink(self) -> None:
        """The daemon said the prompt was too long: be more careful from now on."""
        with self._lock:
            self.chars_per_token = max(1.0, self.chars_per_token * 0.7)

    def chars_for(self, tokens: int) -> int:
        """How many characters of text fit in `tokens` tokens."""
        return max(0, int(tokens * self.chars_per_token * _SAFETY))

    def count(self, text: str) -> int:
        """Estimated tokens of `text`."""
        return int(len(text) / self.chars_per_token) + 1
