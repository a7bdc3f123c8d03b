"""Speculative decoding for the embedded engine, greedy only, so the output is unchanged:
a proposer guesses the next k tokens, the target model scores them all in one forward pass,
and the longest prefix that matches the target's own argmax is kept, plus one bonus token.

Proposers: prompt lookup (n-gram copy from the prompt and the output so far — code edits
copy a lot) and a draft model (a smaller checkpoint with the same tokenizer)."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["NgramIndex", "accept_prefix"]


class NgramIndex:
    """Where each recent n-gram of a token sequence was last followed by something.

    An n-gram is indexed only once the token after it exists, so looking up the sequence's
    own last n-gram finds an earlier occurrence, never itself."""

    __slots__ = ("_maps", "_sizes", "tokens")

    def __init__(self, tokens: Sequence[int] = (), sizes: tuple[int, ...] = (4, 3, 2)) -> None:
        self._sizes = sizes
        self._maps: dict[int, dict[tuple[int, ...], int]] = {n: {} for n in sizes}
        self.tokens: list[int] = []
        self.extend(tokens)

    def extend(self, tokens: Sequence[int]) -> None:
        for token in tokens:
            self.append(token)

    def append(self, token: int) -> None:
        seq = self.tokens
        end = len(seq)  # the n-gram ending at end-1 now gets a continuation at `end`
        for n in self._sizes:
            if end >= n:
                self._maps[n][tuple(seq[end - n : end])] = end
        seq.append(token)

    def propose(self, k: int) -> list[int]:
        """Up to k tokens that followed the latest earlier occurrence of the longest
        matching suffix (largest n first); empty when nothing matches."""
        seq = self.tokens
        for n in self._sizes:
            if len(seq) < n:
                continue
            start = self._maps[n].get(tuple(seq[-n:]))
            if start is not None:
                return seq[start : start + k]
        return []


def accept_prefix(proposed: Sequence[int], target: Sequence[int]) -> int:
    """How many proposed tokens the target agrees with, in order.

    target[i] is the target's choice after seeing everything before proposed[i]."""
    n = 0
    limit = min(len(proposed), len(target))
    while n < limit and proposed[n] == target[n]:
        n += 1
    return n
