"""Everything the GPU run needs, made on the CPU from the corpus build:

    python -m training.prepare --corpus /work/corpus/build --out BUNDLE

BUNDLE gets ``tokenizer/`` (trained here on the training files), ``train.jsonl.xz`` (the
corpus, copied), ``val.jsonl.xz`` (a few held-out files for the held-out loss),
``fim_eval_set.jsonl.gz`` and ``chat_eval_set.jsonl.gz`` (from the held-out packages).
``--smoke`` makes a toy bundle from a few hundred files in seconds.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import lzma
import random
import shutil
import time
from pathlib import Path

from training.data import SourceFile, load_bundle
from training.evalset import build_chat_set, build_eval_set, save_eval_set
from training.tokenizer import VOCAB_SIZE, load_tokenizer, save_hf_tokenizer, train_tokenizer

SEED = 20261203
TOKENIZER_SAMPLE_CHARS = 60_000_000
"""BPE merges are learned from about this many characters, spread over every package."""


def _sample(files: list[SourceFile], chars: int) -> list[str]:
    total = sum(len(f.text) for f in files)
    if total <= chars:
        return [f.text for f in files]
    keep = chars / total
    return [
        f.text
        for f in files
        if int(hashlib.sha1(f"{f.package}/{f.path}".encode()).hexdigest()[:8], 16) / 2**32 < keep
    ]


def write_jsonl_xz(rows: list[dict], path: Path) -> None:
    with lzma.open(path, "wt", encoding="utf-8", preset=6) as fh:
        for r in rows:
            fh.write(json.dumps(r) + "\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m training.prepare", description=__doc__)
    p.add_argument("--corpus", type=Path, required=True, help="output of training.corpus build")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--smoke", action="store_true")
    p.add_argument("--tokenizer-only", action="store_true", help="stop after the tokenizer")
    p.add_argument("--fim-eval", type=int, default=300, help="examples of each kind")
    p.add_argument("--chat-eval", type=int, default=100)
    args = p.parse_args(argv)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    limit = 300 if args.smoke else None
    train = load_bundle(args.corpus / "train.jsonl.xz", limit)
    held = (
        []
        if args.tokenizer_only
        else load_bundle(args.corpus / "heldout.jsonl.xz", 60 if args.smoke else None)
    )
    print(f"[prepare] {len(train)} training files, {len(held)} held-out files "
          f"({time.perf_counter() - t0:.0f} s)", flush=True)  # fmt: skip

    vocab = 512 if args.smoke else VOCAB_SIZE
    if (out / "tokenizer" / "tokenizer.json").exists() and not args.smoke:
        tok = load_tokenizer(out / "tokenizer")  # made by an earlier call
    else:
        tok = train_tokenizer(_sample(train, TOKENIZER_SAMPLE_CHARS), vocab)
        save_hf_tokenizer(tok, out / "tokenizer", model_max_length=2048)
    if args.tokenizer_only:
        return 0
    print(f"[prepare] tokenizer ({time.perf_counter() - t0:.0f} s)", flush=True)

    rng = random.Random(SEED)
    rng.shuffle(held_copy := list(held))
    val = sorted(held_copy[: 8 if args.smoke else 120], key=lambda f: (f.package, f.path))
    write_jsonl_xz([{"package": f.package, "path": f.path, "text": f.text} for f in val],
                   out / "val.jsonl.xz")  # fmt: skip
    n = 5 if args.smoke else args.fim_eval
    save_eval_set(build_eval_set(tok, held, n, n, seed=SEED), out / "fim_eval_set.jsonl.gz")
    chat_set = build_chat_set(held, 5 if args.smoke else args.chat_eval, seed=SEED)
    save_eval_set(chat_set, out / "chat_eval_set.jsonl.gz")
    if args.smoke:
        write_jsonl_xz([{"package": f.package, "path": f.path, "text": f.text} for f in train],
                       out / "train.jsonl.xz")  # fmt: skip
    else:
        shutil.copy(args.corpus / "train.jsonl.xz", out / "train.jsonl.xz")
    info = {
        "train_files": len(train),
        "train_chars": sum(len(f.text) for f in train),
        "heldout_files": len(held),
        "chat_eval": len(chat_set),
        "seconds": round(time.perf_counter() - t0, 1),
    }
    (out / "prepare.json").write_text(json.dumps(info, indent=1) + "\n")
    print(json.dumps(info), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
