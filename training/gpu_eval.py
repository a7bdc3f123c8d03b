"""The quick evaluation at the end of a training run (raw models, batched greedy decoding on
the GPU). The numbers a user sees come from ``ling-local bench quality`` on the CPU, through
the daemon's own prompt path; these are for the training log."""

from __future__ import annotations

import gzip
import json
import time
from pathlib import Path

import torch
from tokenizers import Tokenizer

from ling_local.bench import fim_eval as ev
from ling_local.bench.acceptance import acceptance_lengths
from training.tokenizer import (
    EOT_ID,
    FIM_END_ID,
    IM_END_ID,
    chat_prompt,
    decode,
    encode,
    fim_prompt,
)

__all__ = ["run_eval"]

MAX_NEW = {"single": 48, "multi": 128}


def _load(path: Path) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def fim_predict(model, tok: Tokenizer, examples: list[dict], mode: str, device, batch: int):
    """Predicted middles (raw model, no healing) and (prompts, generations) for acceptance."""
    newline_ids = ev.newline_token_ids(tok)
    kind = examples[0]["kind"]
    stop = {EOT_ID, FIM_END_ID} | (newline_ids if kind == "single" else set())
    prompts = [fim_prompt(encode(tok, e["prefix"]), encode(tok, e["suffix"]), mode)
               for e in examples]  # fmt: skip
    gens: list[list[int]] = [[] for _ in examples]
    order = sorted(range(len(examples)), key=lambda i: len(prompts[i]))
    for i in range(0, len(order), batch):
        idx = order[i : i + batch]
        outs = ev.greedy_batch(model, [prompts[j] for j in idx], MAX_NEW[kind], stop, device)
        for j, o in zip(idx, outs, strict=True):
            gens[j] = o
    texts = []
    for g in gens:
        text = decode(tok, [t for t in g if t not in (EOT_ID, FIM_END_ID)])
        texts.append(text.split("\n", 1)[0] if kind == "single" else text)
    return texts, prompts, gens


@torch.inference_mode()
def chat_answers(model, tok: Tokenizer, requests: list[str], device, max_new: int = 256):
    prompts = [chat_prompt(tok, r) for r in requests]
    outs = []
    for i in range(0, len(prompts), 32):
        outs += ev.greedy_batch(model, prompts[i : i + 32], max_new, {EOT_ID, IM_END_ID}, device)
    return [decode(tok, [t for t in o if t not in (EOT_ID, IM_END_ID)]) for o in outs]


def run_eval(
    target, draft, tok, bundle: Path, device, limit: int, deadline_s: float, chat_max_new: int = 256
) -> dict:
    """Each step is skipped once ``deadline_s`` seconds have passed since the call."""
    t0 = time.perf_counter()
    target.eval()
    draft.eval()
    examples = _load(bundle / "fim_eval_set.jsonl.gz")
    result: dict = {"fim": {}, "limit_per_kind": limit}
    batch = 64 if str(device).startswith("cuda") else 8
    record = {}
    for kind in ("single", "multi"):
        subset = [e for e in examples if e["kind"] == kind][:limit]
        result["fim"].setdefault("repeat_previous_lines", {})[kind] = ev.score(
            [ev.repeat_previous_line(e) for e in subset], subset
        )
        for name, model, mode in (("target_spm", target, "spm"), ("target_psm", target, "psm"),
                                  ("draft_spm", draft, "spm")):  # fmt: skip
            if time.perf_counter() - t0 > deadline_s:
                result["stopped_early"] = True
                return result
            preds, prompts, gens = fim_predict(model, tok, subset, mode, device, batch)
            result["fim"].setdefault(name, {})[kind] = ev.score(preds, subset)
            if name == "target_spm":
                record[kind] = (prompts, gens)
            print(f"[eval] {name} {kind}: {result['fim'][name][kind]}", flush=True)
    chats = _load(bundle / "chat_eval_set.jsonl.gz")[:50]
    if time.perf_counter() - t0 < deadline_s and chats:
        answers = chat_answers(target, tok, [c["request"] for c in chats], device, chat_max_new)
        result["chat"] = {
            **ev.chat_scores(answers),
            "samples": [{"request": c["request"], "answer": a}
                        for c, a in zip(chats[:5], answers[:5], strict=False)],
        }  # fmt: skip
        print(f"[eval] chat: fenced {result['chat']['fenced']:.2f}, parses "
              f"{result['chat']['fenced_parses']:.2f}", flush=True)  # fmt: skip
    if time.perf_counter() - t0 < deadline_s and record:
        prompts = [p for k in record for p in record[k][0]]
        gens = [g for k in record for g in record[k][1]]
        result["acceptance"] = acceptance_lengths(target, draft, prompts, gens, device)
        print(f"[eval] acceptance: {result['acceptance']}", flush=True)
    result["seconds"] = time.perf_counter() - t0
    return result
