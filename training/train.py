"""Reproduce the embedded models: ``python -m training.train --out DIR``.

Steps: collect the stdlib's Python files and hold ~3 % out; train the tokenizer; draw the
eval set from the held-out files; train the target, then the draft; evaluate both against the
baselines; measure the draft's acceptance length; write the loss curve and ``train_log.json``.

DIR gets ``tiny/`` and ``tiny-draft/`` (Hugging Face checkpoints, bf16, shards <= 15 MB),
``eval_set.jsonl.gz``, ``data_files.txt``, ``loss_curve.png`` and ``train_log.json``.
``--export DIR2`` also copies them, as they become ready, into a layout made for a narrow
transfer: the weight files under ``DIR2/tiny/`` and ``DIR2/tiny-draft/``, all else in
``DIR2/bundle.tar``. ``--smoke`` runs the same steps at toy scale on a CPU in seconds.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import shutil
import signal
import sys
import tarfile
import threading
import time
import traceback
from datetime import UTC, datetime
from pathlib import Path

import torch
import transformers

from ling_local.bench import fim_eval as ev
from training.data import (
    SourceFile,
    collect_files,
    file_list_digest,
    split_files,
    stdlib_root,
)
from training.evalset import build_eval_set, save_eval_set
from training.loop import EpochStream, LoopSettings, heldout_loss, train
from training.model import count_params, make_config, make_model
from training.pack import epoch_rows
from training.tokenizer import VOCAB_SIZE, save_hf_tokenizer, train_tokenizer

SEED = 20261129


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m training.train", description=__doc__)
    p.add_argument("--out", required=True, type=Path, help="output folder")
    p.add_argument("--export", type=Path, help="also write the transfer layout here")
    p.add_argument("--smoke", action="store_true", help="toy scale, for a CPU, in seconds")
    p.add_argument(
        "--stdlib",
        type=Path,
        help="a CPython Lib/ folder to train on (default: this interpreter's stdlib)",
    )
    p.add_argument("--minutes", type=float, default=4.0, help="target training budget")
    p.add_argument("--draft-minutes", type=float, default=1.5, help="draft training budget")
    p.add_argument("--target-steps", type=int, help="fixed step count (overrides --minutes)")
    p.add_argument("--draft-steps", type=int, help="fixed step count (overrides --draft-minutes)")
    p.add_argument("--batch-rows", type=int, default=32, help="rows of --seq-len per step")
    p.add_argument("--seq-len", type=int, default=2048)
    p.add_argument("--lr", type=float, default=2e-3, help="target peak learning rate")
    p.add_argument("--max-epochs", type=float, default=10.0, help="cap on passes over the data")
    p.add_argument(
        "--cut-every",
        type=int,
        default=400,
        help="tokenize plain documents in pieces, one cut per N characters (0: never)",
    )
    p.add_argument("--draft-lr", type=float, default=3e-3)
    p.add_argument("--eval-single", type=int, default=300, help="single-line eval examples")
    p.add_argument("--eval-multi", type=int, default=300, help="multi-line eval examples")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--seed", type=int, default=SEED)
    return p.parse_args(argv)


def _settings(args: argparse.Namespace) -> dict:
    """Everything that shapes the run; --smoke swaps in toy sizes."""
    if args.smoke:
        return {
            "vocab": 512, "seq_len": 256, "batch_rows": 4, "shapes": ("smoke-target", "smoke-draft"),
            "target": LoopSettings(lr=3e-3, batch_rows=4, seq_len=256, budget_s=0, steps=6,
                                   warmup=2, eval_every=3),
            "draft": LoopSettings(lr=3e-3, batch_rows=4, seq_len=256, budget_s=0, steps=4,
                                  warmup=2, eval_every=2),
            "eval": (3, 3), "val_rows": 4, "gen_batch": 8, "cut_every": 300,
        }  # fmt: skip
    common = {"batch_rows": args.batch_rows, "seq_len": args.seq_len}
    return {
        "vocab": VOCAB_SIZE,
        **common,
        "shapes": ("target", "draft"),
        "target": LoopSettings(
            lr=args.lr, budget_s=args.minutes * 60, steps=args.target_steps,
            max_epochs=args.max_epochs, **common,
        ),
        "draft": LoopSettings(
            lr=args.draft_lr, budget_s=args.draft_minutes * 60, steps=args.draft_steps,
            max_epochs=args.max_epochs, warmup=60, eval_every=150, **common,
        ),
        "eval": (args.eval_single, args.eval_multi),
        "val_rows": 64,
        "gen_batch": 128 if str(args.device).startswith("cuda") else 16,
        "cut_every": args.cut_every,
    }  # fmt: skip


def _select_files(root: Path | None, smoke: bool) -> tuple[list[SourceFile], list[SourceFile]]:
    train_files, heldout = split_files(collect_files(root))
    if smoke:
        stride = max(1, len(train_files) // 30)
        small = [f for f in train_files[::stride] if len(f.text) < 40_000][:30]
        return small, [f for f in heldout if len(f.text) < 40_000][:3]
    return train_files, heldout


def _save_model(model: torch.nn.Module, tok_dir: Path, out_dir: Path) -> list[str]:
    """bf16 weights in shards of at most 15 MB, with the tokenizer files beside them."""
    model.to("cpu", dtype=torch.bfloat16).save_pretrained(out_dir, max_shard_size="15MB")
    model.to(dtype=torch.float32)
    for f in tok_dir.iterdir():
        shutil.copy(f, out_dir / f.name)
    return sorted(p.name for p in out_dir.iterdir())


def export(out: Path, dest: Path) -> None:
    """Weights as separate files, everything else in one tar (written atomically)."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in ("tiny", "tiny-draft"):
        for f in sorted((out / name).glob("*.safetensors")) if (out / name).exists() else []:
            (dest / name).mkdir(exist_ok=True)
            shutil.copy(f, dest / name / f.name)
    tmp = dest / "bundle.tar.tmp"
    with tarfile.open(tmp, "w") as tar:
        for f in sorted(out.rglob("*")):
            if f.is_file() and f.suffix != ".safetensors":
                tar.add(f, arcname=f.relative_to(out).as_posix())
    tmp.rename(dest / "bundle.tar")


def plot(histories: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(histories), figsize=(4.2 * len(histories), 3.2), dpi=80)
    for ax, h in zip(axes if len(histories) > 1 else [axes], histories, strict=True):
        steps, loss = h["step"], h["loss"]
        w = max(1, len(loss) // 100)
        smooth = [sum(loss[max(0, i - w) : i + 1]) / len(loss[max(0, i - w) : i + 1])
                  for i in range(len(loss))]  # fmt: skip
        ax.plot(steps, smooth, lw=1, label="train")
        if h["val"]:
            ax.plot(*zip(*h["val"], strict=True), "o-", ms=3, lw=1, label="held-out")
        ax.set_title(f"{h['name']} ({h['params']['total'] / 1e6:.1f}M params)")
        ax.set_xlabel("step")
        ax.set_ylabel("loss (nats/token)")
        ax.set_ylim(top=min(max([*loss[:1], 4.0]), 9.5))
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def run_eval(
    target: torch.nn.Module,
    draft: torch.nn.Module,
    tok,
    examples: list[dict],
    device: str,
    gen_batch: int,
    seed: int,
) -> dict:
    """Every system on the eval set, and the draft's acceptance length against the target."""
    target.to(device).eval()
    draft.to(device).eval()
    record: dict = {}
    systems = {
        "target_psm": ev.model_predictor(target, tok, device, "psm", gen_batch, record),
        "target_spm": ev.model_predictor(target, tok, device, "spm", gen_batch),
        "draft_psm": ev.model_predictor(draft, tok, device, "psm", gen_batch),
    }
    random_model = make_model(target.config, seed=seed + 7).to(device).eval()
    systems["random_init_psm"] = ev.model_predictor(random_model, tok, device, "psm", gen_batch)
    systems["repeat_prev_line"] = lambda exs: [ev.repeat_previous_line(e) for e in exs]
    results = {}
    for name, predict in systems.items():
        results[name] = ev.evaluate_system(predict, examples)
        print(f"[eval] {name}: {json.dumps(results[name])}", flush=True)
    accept = {}
    for kind, (prompts, gens) in record.items():
        accept[kind] = ev.acceptance_lengths(target, draft, prompts, gens, device)
    prompts = [p for kind in record for p in record[kind][0]]
    gens = [g for kind in record for g in record[kind][1]]
    accept["all"] = ev.acceptance_lengths(target, draft, prompts, gens, device)
    print(f"[eval] acceptance: {json.dumps(accept)}", flush=True)
    return {"quality": results, "acceptance": accept}


def contamination(examples: list[dict], train_files: list[SourceFile]) -> dict:
    """How many multi-line middles also appear verbatim in some training file."""
    corpus = "\n".join(f.text for f in train_files)
    multi = [e for e in examples if e["kind"] == "multi"]
    hits = sum(e["middle"].strip() in corpus for e in multi)
    return {"multi_in_train_verbatim": hits, "multi_total": len(multi)}


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _interrupt)  # a `timeout` still leaves the log and export
    cfg = _settings(args)
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
            "device": torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu",
        },
        "timings_s": {},
    }
    t0 = time.perf_counter()

    def mark(name: str) -> None:
        log["timings_s"][name] = round(time.perf_counter() - t0, 1)
        print(f"[time] {name}: {log['timings_s'][name]} s", flush=True)
        (out / "train_log.json").write_text(json.dumps(log, indent=1, default=str) + "\n")

    try:
        _run(args, cfg, out, log, mark)
        log["status"] = "ok"
    except BaseException as exc:
        log["status"] = f"failed: {exc!r}"
        log["traceback"] = traceback.format_exc()
        traceback.print_exc()
    finally:
        mark("total")
        if args.export:
            export(out, args.export)
    return 0 if log["status"] == "ok" else 1


def _run(args: argparse.Namespace, cfg: dict, out: Path, log: dict, mark) -> None:
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    if args.device.startswith("cuda"):
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    train_files, heldout = _select_files(args.stdlib, args.smoke)
    held = {f.path for f in heldout}
    (out / "data_files.txt").write_text(
        "".join(
            f"{f.sha256}  {'heldout' if f.path in held else 'train'}  {f.path}\n"
            for f in sorted(train_files + heldout, key=lambda f: f.path)
        )
    )
    log["data"] = {
        "stdlib": str(args.stdlib or stdlib_root()),
        "train_files": len(train_files),
        "train_chars": sum(len(f.text) for f in train_files),
        "heldout_files": len(heldout),
        "heldout_chars": sum(len(f.text) for f in heldout),
        "train_list_sha256": file_list_digest(train_files),
        "heldout_list_sha256": file_list_digest(heldout),
        "heldout": [[f.path, f.sha256] for f in heldout],
    }
    mark("collect")

    tok = train_tokenizer((f.text for f in train_files), cfg["vocab"])
    tok_dir = out / "tokenizer"
    save_hf_tokenizer(tok, tok_dir, model_max_length=cfg["seq_len"] if args.smoke else 2048)
    tok.save(str(tok_dir / "tokenizer.json"), pretty=False)
    mark("tokenizer")

    examples = build_eval_set(tok, heldout, *cfg["eval"], seed=args.seed)
    save_eval_set(examples, out / "eval_set.jsonl.gz")
    log["eval_set"] = {
        "examples": len(examples),
        "contamination": contamination(examples, train_files),
    }
    cut_every = cfg["cut_every"]
    val_rows = epoch_rows(tok, heldout, args.seed + 1, 0, cfg["seq_len"], cut_every)
    val_rows = val_rows[: cfg["val_rows"]]
    log["data"]["heldout_val_tokens"] = val_rows.numel()
    mark("eval_set")

    histories = []
    models = {}
    vocab = tok.get_vocab_size()
    for role, shape in zip(("target", "draft"), cfg["shapes"], strict=True):
        model = make_model(make_config(shape, vocab), seed=args.seed)
        params = count_params(model)
        print(f"[{role}] {shape}: {params}", flush=True)
        stream = EpochStream(tok, train_files, args.seed, cfg["seq_len"], cut_every)
        try:
            hist = train(role, model, stream, val_rows, cfg[role], args.device, args.seed)
        finally:
            stream.close()
        hist["params"] = params
        hist["shape"] = shape
        hist["tokens_per_epoch"] = stream.tokens_seen_epochs[0]
        hist["heldout_loss_kept"] = heldout_loss(model, val_rows, cfg["batch_rows"], args.device)
        name = "tiny" if role == "target" else "tiny-draft"
        hist["files"] = _save_model(model, tok_dir, out / name)
        histories.append(hist)
        models[role] = model
        log[role] = {k: v for k, v in hist.items() if k not in ("step", "loss")}
        log[role]["loss_every_10"] = hist["loss"][9::10]
        plot(histories, out / "loss_curve.png")
        mark(role)
        if args.export:
            export(out, args.export)

    log["eval"] = run_eval(
        models["target"], models["draft"], tok, examples, args.device, cfg["gen_batch"], args.seed
    )
    mark("eval")


if __name__ == "__main__":
    raise SystemExit(main())
