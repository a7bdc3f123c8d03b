"""Turn documents into fixed-length rows of token ids for training."""

from __future__ import annotations

import random

import torch
from tokenizers import Tokenizer

from training.data import Doc, SourceFile, make_docs
from training.tokenizer import EOT_ID, encode_batch, fim_example


def docs_to_ids(tok: Tokenizer, docs: list[Doc]) -> list[list[int]]:
    """Each document as ids ending in ``<|endoftext|>``; FIM pieces are encoded separately, as
    the daemon encodes a prefix and a suffix, so the cut never merges two pieces into one token."""
    texts: list[str] = []
    for d in docs:
        texts.extend(d.fim if d.fim is not None else d.pieces())
    ids = iter(encode_batch(tok, texts))
    out: list[list[int]] = []
    for d in docs:
        if d.fim is None:
            out.append([t for _ in range(len(d.cuts) + 1) for t in next(ids)] + [EOT_ID])
        else:
            prefix, middle, suffix = next(ids), next(ids), next(ids)
            out.append(fim_example(prefix, middle, suffix, d.mode))  # type: ignore[arg-type]
    return out


def pack(seqs: list[list[int]], seq_len: int) -> torch.Tensor:
    """Concatenate and cut into rows of ``seq_len`` (the last partial row is dropped)."""
    flat = torch.tensor([t for s in seqs for t in s], dtype=torch.int32)
    rows = flat.numel() // seq_len
    return flat[: rows * seq_len].view(rows, seq_len)


def epoch_rows(
    tok: Tokenizer,
    files: list[SourceFile],
    seed: int,
    epoch: int,
    seq_len: int,
    cut_every: int = 0,
) -> torch.Tensor:
    """One epoch's rows: a fresh FIM draw and document order for every (seed, epoch)."""
    rng = random.Random(f"{seed}:{epoch}")
    return pack(docs_to_ids(tok, make_docs(files, rng, cut_every=cut_every)), seq_len)
