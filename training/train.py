"""Train the embedded models from a bundle made by ``python -m training.prepare``:

    python -m training.train --bundle BUNDLE --out DIR [--export DIR2] [--deadline-s 560]

The target and the draft train side by side on the same batches until the deadline (seconds
from the start of this process, less what saving and the quick evaluation need); then both are
saved (bf16 Hugging Face folders ``DIR/tiny`` and ``DIR/tiny-draft``), and evaluated on the
GPU: held-out loss, FIM exact match and edit similarity (PSM and SPM), answers that run on
into the suffix, chat answers with a fenced block that parses, the draft's acceptance length.

``--export DIR2`` writes, as each becomes ready, what a narrow transfer can carry: the weights
losslessly packed into parts of at most 15 MB (:mod:`training.transfer`) and everything else in
``DIR2/bundle.tar.gz``. ``--smoke`` runs the same steps at toy scale on a CPU in seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import signal
import sys
import tarfile
import threading
import time
import traceback
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import torch
import transformers

from training.data import load_bundle, make_docs
from training.gpu_eval import run_eval
from training.loop import LoopSettings, train
from training.model import count_params, make_config, make_model
from training.pack import EpochBuilder, docs_to_ids, pack
from training.tokenizer import load_tokenizer
from training.transfer import pack_weights

T_START = time.perf_counter()
"""The deadline counts from here (after the imports, ~10 s on the GPU machine)."""

SEED = 20261203
NAMES = ("tiny", "tiny-draft")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m training.train", description=__doc__)
    p.add_argument("--bundle", required=True, type=Path, help="made by training.prepare")
    p.add_argument("--out", required=True, type=Path, help="output folder")
    p.add_argument("--export", type=Path, help="also write the transfer layout here")
    p.add_argument("--smoke", action="store_true", help="toy scale, for a CPU, in seconds")
    p.add_argument("--deadline-s", type=float, default=560.0, help="end of the whole job")
    p.add_argument("--reserve-s", type=float, default=90.0, help="kept for saving and eval")
    p.add_argument("--steps", type=int, help="fixed step count (instead of the deadline)")
    p.add_argument("--batch-rows", type=int, default=32, help="rows of --seq-len per step")
    p.add_argument("--seq-len", type=int, default=2048)
    p.add_argument("--lr", type=float, default=1.5e-3, help="target peak learning rate")
    p.add_argument("--draft-lr", type=float, default=3e-3)
    p.add_argument("--cut-every", type=int, default=400, help="cut plain documents every N chars")
    p.add_argument("--chat-share", type=float, default=0.07, help="share of chat characters")
    p.add_argument("--eval-limit", type=int, default=150, help="FIM eval examples of each kind")
    p.add_argument("--workers", type=int, help="data processes (default: cores - 1)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--seed", type=int, default=SEED)
    return p.parse_args(argv)


def _shapes(smoke: bool) -> tuple[str, str]:
    return ("smoke-target", "smoke-draft") if smoke else ("target", "draft")


def _save(model: torch.nn.Module, tok_dir: Path, out_dir: Path) -> None:
    """bf16 weights (one file) with the tokenizer files beside them."""
    model.to("cpu", dtype=torch.bfloat16).save_pretrained(out_dir, max_shard_size="200MB")
    for f in tok_dir.iterdir():
        (out_dir / f.name).write_bytes(f.read_bytes())


def _packed_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    state = model.state_dict()
    if model.config.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    return state


def export_rest(out: Path, dest: Path) -> None:
    """Everything but the weights, in one tar.gz (written atomically)."""
    dest.mkdir(parents=True, exist_ok=True)
    tmp = dest / "bundle.tar.gz.tmp"
    with tarfile.open(tmp, "w:gz") as tar:
        for f in sorted(out.rglob("*")):
            if f.is_file() and f.suffix != ".safetensors":
                tar.add(f, arcname=f.relative_to(out).as_posix())
    tmp.rename(dest / "bundle.tar.gz")


def plot(hist: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(hist["models"])
    fig, axes = plt.subplots(1, len(names), figsize=(4.2 * len(names), 3.2), dpi=80)
    for ax, name in zip(axes, names, strict=True):
        h = hist["models"][name]
        loss = h["loss"]
        w = max(1, len(loss) // 100)
        smooth = [sum(loss[max(0, i - w) : i + 1]) / len(loss[max(0, i - w) : i + 1])
                  for i in range(len(loss))]  # fmt: skip
        ax.plot(h["step"], smooth, lw=1, label="train")
        if h["val"]:
            ax.plot(*zip(*h["val"], strict=True), "o-", ms=3, lw=1, label="held-out")
        ax.set_title(f"{name} ({h['params']['total'] / 1e6:.1f}M params)")
        ax.set_xlabel("step")
        ax.set_ylabel("loss (nats/token)")
        ax.set_ylim(top=min(max([*loss[:1], 4.0]), 9.5))
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def elapsed() -> float:
    return time.perf_counter() - T_START


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _interrupt)  # a `timeout` still leaves the log and export
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    log: dict = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "argv": sys.argv[1:] if argv is None else argv,
        "seed": args.seed,
        "env": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "device": args.device,  # named after the data workers fork (CUDA not yet touched)
            "cpus": os.cpu_count(),
        },
        "timings_s": {},
    }

    def mark(name: str) -> None:
        log["timings_s"][name] = round(elapsed(), 1)
        print(f"[time] {name}: {log['timings_s'][name]} s", flush=True)
        (out / "train_log.json").write_text(json.dumps(log, indent=1, default=str) + "\n")

    try:
        _run(args, out, log, mark)
        log["status"] = "ok"
    except BaseException as exc:
        log["status"] = f"failed: {exc!r}"
        log["traceback"] = traceback.format_exc()
        traceback.print_exc()
    finally:
        mark("total")
        if args.export:
            export_rest(out, args.export)
    return 0 if log["status"] == "ok" else 1


def _run(args: argparse.Namespace, out: Path, log: dict, mark) -> None:
    torch.manual_seed(args.seed)
    if args.device.startswith("cuda"):
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    b: Path = args.bundle
    tok_dir = b / "tokenizer"
    tok = load_tokenizer(tok_dir)
    files = load_bundle(b / "train.jsonl.xz")
    val_files = load_bundle(b / "val.jsonl.xz")
    seq_len = 256 if args.smoke else args.seq_len
    batch_rows = 4 if args.smoke else args.batch_rows
    log["data"] = {
        "train_files": len(files),
        "train_chars": sum(len(f.text) for f in files),
        "val_files": len(val_files),
    }
    mark("load")
    # the pool forks here, before CUDA is initialised
    data = EpochBuilder(
        (tok_dir / "tokenizer.json").read_text(), files, args.seed, seq_len,
        args.cut_every, args.chat_share, 2 if args.smoke else args.workers,
    )  # fmt: skip
    if args.device.startswith("cuda"):
        log["env"]["device"] = torch.cuda.get_device_name()
    log["data"]["chat_pool"] = len(data.chats)
    log["data"]["chats_per_epoch"] = data.chats_per_epoch
    val_docs = make_docs(val_files, random.Random(args.seed + 1), cut_every=args.cut_every)
    val_seqs = docs_to_ids(tok, val_docs)
    val_rows = pack(np.fromiter((t for s in val_seqs for t in s), dtype=np.uint16), seq_len)
    val_rows = val_rows[: 8 if args.smoke else 64]
    log["data"]["val_tokens"] = val_rows.numel()

    vocab = tok.get_vocab_size()
    models = []
    for name, shape in zip(NAMES, _shapes(args.smoke), strict=True):
        model = make_model(make_config(shape, vocab), seed=args.seed)
        log[name] = {"shape": shape, "params": count_params(model)}
        print(f"[{name}] {shape}: {log[name]['params']}", flush=True)
        models.append(model)
    mark("setup")

    budget = args.deadline_s - args.reserve_s - elapsed()
    settings = LoopSettings(
        lr=(args.lr, args.draft_lr), batch_rows=batch_rows, seq_len=seq_len, budget_s=budget,
        steps=6 if args.smoke else args.steps, warmup=2 if args.smoke else 150,
        eval_every=3 if args.smoke else 250, compile=args.device.startswith("cuda"),
    )  # fmt: skip
    try:
        hist = train(list(NAMES), models, data, val_rows, settings, args.device, args.seed)
    finally:
        data.close()
    for name in NAMES:
        h = hist["models"][name]
        h["params"] = log[name]["params"]
        log[name].update({k: v for k, v in h.items() if k not in ("step", "loss")})
        log[name]["loss_every_20"] = h["loss"][19::20]
    log["train"] = {k: v for k, v in hist.items() if k != "models"}
    try:
        plot(hist, out / "loss_curve.png")
    except ImportError as exc:  # matplotlib is optional on the GPU machine
        log["plot"] = repr(exc)
    mark("train")

    for name, model in zip(NAMES, models, strict=True):
        if args.export:
            pack_weights(_packed_state(model), args.export, name)
        _save(model, tok_dir, out / name)
        model.to(args.device, dtype=torch.float32)
    if args.export:
        export_rest(out, args.export)
    mark("save")

    log["eval"] = run_eval(
        models[0], models[1], tok, b, args.device, args.eval_limit if not args.smoke else 3,
        deadline_s=args.deadline_s - elapsed() - 10, chat_max_new=16 if args.smoke else 256,
    )  # fmt: skip
    mark("eval")


if __name__ == "__main__":
    raise SystemExit(main())
