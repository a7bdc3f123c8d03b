"""KV slots keyed by the token ids they hold: a new request takes the free slot sharing the
longest prefix with its prompt, so consecutive keystrokes reuse almost all of their KV and a
chat and a completion do not evict each other."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["PrefixCache", "Slot", "common_prefix_len"]


def common_prefix_len(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the common prefix of two id lists (block compares run in C)."""
    n = min(len(a), len(b))
    i = 0
    block = 64
    while i + block <= n and a[i : i + block] == b[i : i + block]:
        i += block
    while i < n and a[i] == b[i]:
        i += 1
    return i


@dataclass(slots=True)
class Slot:
    cache: Any
    ids: list[int] = field(default_factory=list)
    """Token ids whose keys and values the cache holds, in order."""
    busy: bool = False
    last_used: float = 0.0


class PrefixCache:
    def __init__(
        self,
        n_slots: int,
        new_cache: Callable[[], Any],
        crop: Callable[[Any, int], None],
    ) -> None:
        self._new_cache = new_cache
        self._crop = crop
        self.slots = [Slot(new_cache()) for _ in range(n_slots)]

    def acquire(self, prompt_ids: Sequence[int]) -> tuple[Slot, int]:
        """Take the free slot with the longest shared prefix; return it and the reusable length.

        At least the last prompt token is always recomputed, since its logits start decoding.
        """
        free = [s for s in self.slots if not s.busy]
        if not free:  # more live generations than slots: grow rather than evict live KV
            slot = Slot(self._new_cache())
            self.slots.append(slot)
            free = [slot]
        best, best_len = None, -1
        for slot in free:
            n = common_prefix_len(slot.ids, prompt_ids)
            # Prefer the longest match; among equals the least recently used, to keep others.
            if n > best_len or (
                n == best_len and best is not None and slot.last_used < best.last_used
            ):
                best, best_len = slot, n
        assert best is not None
        reuse = min(best_len, len(prompt_ids) - 1)
        if reuse < len(best.ids):
            self._crop(best.cache, reuse)
            del best.ids[reuse:]
        best.busy = True
        return best, reuse

    def release(self, slot: Slot) -> None:
        slot.busy = False
        slot.last_used = time.monotonic()

    def clear(self) -> None:
        for slot in self.slots:
            if not slot.busy:
                self._crop(slot.cache, 0)
                slot.ids.clear()
