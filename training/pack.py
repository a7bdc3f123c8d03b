"""Turn documents into fixed-length rows of token ids, one epoch at a time, in worker
processes (the FIM cuts are Python, the tokenizer is Rust: both scale with cores)."""

from __future__ import annotations

import multiprocessing as mp
import os
import random
from concurrent.futures import Future, ProcessPoolExecutor

import numpy as np
import torch
from tokenizers import Tokenizer

from training.chat import documented_functions
from training.data import Doc, SourceFile, make_docs
from training.tokenizer import EOT_ID, chat_example, encode, encode_batch, fim_example

__all__ = ["EpochBuilder", "docs_to_ids", "pack"]


def docs_to_ids(tok: Tokenizer, docs: list[Doc]) -> list[list[int]]:
    """Each document as ids ending in ``<|endoftext|>``; FIM pieces are encoded separately, as
    the daemon encodes a prefix and a suffix, so the cut never merges two pieces into one
    token."""
    texts: list[str] = []
    for d in docs:
        if d.fim is not None:
            texts.extend(d.fim)
        elif d.chat is not None:
            texts.extend(("user\n" + d.chat[0], "assistant\n" + d.chat[1]))
        else:
            texts.extend(d.pieces())
    ids = iter(encode_batch(tok, texts))
    nl = encode(tok, "\n")
    out: list[list[int]] = []
    for d in docs:
        if d.fim is not None:
            prefix, middle, suffix = next(ids), next(ids), next(ids)
            out.append(fim_example(prefix, middle, suffix, d.mode))  # type: ignore[arg-type]
        elif d.chat is not None:
            out.append(chat_example(next(ids), next(ids), nl))
        else:
            out.append([t for _ in range(len(d.cuts) + 1) for t in next(ids)] + [EOT_ID])
    return out


def pack(flat: np.ndarray, seq_len: int) -> torch.Tensor:
    """Cut a token stream into rows of ``seq_len`` (the last partial row is dropped)."""
    rows = flat.size // seq_len
    return torch.from_numpy(flat[: rows * seq_len].astype(np.int32)).view(rows, seq_len)


# Worker state, set before the pool forks (copy-on-write: the corpus is not pickled per task).
_STATE: dict = {}


def _shard_ids(epoch: int, shard: int, chats: list[tuple[str, str]]) -> np.ndarray:
    s = _STATE
    files = s["files"][shard :: s["shards"]]
    rng = random.Random(f"{s['seed']}:{epoch}:{shard}")
    docs = make_docs(files, rng, cut_every=s["cut_every"], chats=chats)
    seqs = docs_to_ids(s["tok"], docs)
    return np.fromiter((t for seq in seqs for t in seq), dtype=np.uint16)


def _shard_chats(shard: int) -> list[tuple[str, str]]:
    s = _STATE
    out = []
    for f in s["files"][shard :: s["shards"]]:
        rng = random.Random(f"{s['seed']}:{f.package}/{f.path}")
        out += [(e.request, e.answer) for e in documented_functions(f.text, rng)]
    return out


class EpochBuilder:
    """Rows of token ids for epoch after epoch, built by ``workers`` processes; the next epoch
    is prepared while the current one trains. Deterministic for a seed and shard count."""

    def __init__(
        self,
        tok_json: str,
        files: list[SourceFile],
        seed: int,
        seq_len: int,
        cut_every: int,
        chat_share: float,
        workers: int | None = None,
    ) -> None:
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        self.workers = workers or max(1, (os.cpu_count() or 2) - 1)
        self.shards = self.workers * 4
        _STATE.update(
            files=files, seed=seed, cut_every=cut_every, shards=self.shards,
            tok=Tokenizer.from_str(tok_json),
        )  # fmt: skip
        self.seq_len = seq_len
        self.seed = seed
        ctx = mp.get_context("fork")
        self._pool = ProcessPoolExecutor(self.workers, mp_context=ctx)
        self.chats = [c for part in self._pool.map(_shard_chats, range(self.shards)) for c in part]
        """Every chat example the training files give (documented functions)."""
        chat_chars = sum(len(a) + len(b) for a, b in self.chats) / max(1, len(self.chats))
        corpus_chars = sum(len(f.text) for f in files)
        self.chats_per_epoch = int(
            corpus_chars * chat_share / (1 - chat_share) / max(1, chat_chars)
        )
        """Each epoch takes the pool whole as many times as this allows, then a sample."""
        self._epoch = 0
        self._next = self._submit(0)
        self.tokens_per_epoch: list[int] = []

    def _submit(self, epoch: int) -> list[Future]:
        rng = random.Random(f"{self.seed}:{epoch}:chats")
        whole, rest = divmod(self.chats_per_epoch, max(1, len(self.chats)))
        picked = self.chats * whole + rng.sample(self.chats, min(rest, len(self.chats)))
        rng.shuffle(picked)
        return [
            self._pool.submit(_shard_ids, epoch, i, picked[i :: self.shards])
            for i in range(self.shards)
        ]

    def ready(self) -> bool:
        return all(f.done() for f in self._next)

    def next_epoch(self) -> torch.Tensor:
        parts = [f.result() for f in self._next]
        self._epoch += 1
        self._next = self._submit(self._epoch)
        order = list(range(len(parts)))
        random.Random(f"{self.seed}:{self._epoch}:order").shuffle(order)
        rows = pack(np.concatenate([parts[i] for i in order]), self.seq_len)
        self.tokens_per_epoch.append(rows.numel())
        return rows

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
