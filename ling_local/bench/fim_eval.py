"""FIM quality and draft acceptance, with plain transformers models and a small greedy loop.

Metrics, per example, after stripping trailing whitespace from both strings:
- exact match: prediction == middle;
- edit similarity: 1 - Levenshtein(prediction, middle) / max(len), characters, exact distance.

Generation: greedy, batched with left padding and a KV cache; stops at ``<|endoftext|>``
(and, for single-line examples, at the first token holding a newline; the text is then cut at
that newline). At most 48 new tokens for single-line, 128 for multi-line examples.

Draft acceptance length: :mod:`ling_local.bench.acceptance`.
"""

from __future__ import annotations

import ast
import gzip
import inspect
import json
import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from tokenizers import Tokenizer

from ling_local.tiny_format import (
    EOT_ID,
    FIM_END,
    FimMode,
    decode,
    encode,
    fim_prompt,
)

EVAL_SET = Path(__file__).resolve().parent / "data" / "fim_eval_set.jsonl.gz"
"""Fixed FIM examples from the held-out packages (built by training/evalset.py)."""
CHAT_EVAL_SET = Path(__file__).resolve().parent / "data" / "chat_eval_set.jsonl.gz"
""""Write a Python function that ..." requests from the held-out packages' docstrings."""


def load_eval_set(path: str | Path = EVAL_SET, limit: int | None = None) -> list[dict]:
    """The examples, the first ``limit`` of each kind when a limit is given."""
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        examples = [json.loads(line) for line in fh if line.strip()]
    if limit is None:
        return examples
    out: list[dict] = []
    for kind in ("single", "multi"):
        out.extend([e for e in examples if e["kind"] == kind][:limit])
    return out


MAX_NEW = {"single": 48, "multi": 128}


def levenshtein(a: str, b: str) -> int:
    """Exact edit distance (Myers/Hyyrö bit-parallel algorithm on Python integers)."""
    if not a:
        return len(b)
    if not b:
        return len(a)
    peq: dict[str, int] = {}
    for i, c in enumerate(a):
        peq[c] = peq.get(c, 0) | (1 << i)
    mask = (1 << len(a)) - 1
    high = 1 << (len(a) - 1)
    pv, mv, score = mask, 0, len(a)
    for c in b:
        eq = peq.get(c, 0)
        xv = eq | mv
        xh = (((eq & pv) + pv) ^ pv) | eq
        ph = mv | ~(xh | pv)
        mh = pv & xh
        if ph & high:
            score += 1
        elif mh & high:
            score -= 1
        ph = ((ph << 1) | 1) & mask
        mh = (mh << 1) & mask
        pv = (mh | ~(xv | ph)) & mask
        mv = ph & xv
    return score


def edit_similarity(pred: str, ref: str) -> float:
    pred, ref = pred.rstrip(), ref.rstrip()
    if not pred and not ref:
        return 1.0
    return 1.0 - levenshtein(pred, ref) / max(len(pred), len(ref))


def exact_match(pred: str, ref: str) -> bool:
    return pred.rstrip() == ref.rstrip()


def newline_token_ids(tok: Tokenizer) -> set[int]:
    return {i for i in range(tok.get_vocab_size()) if "\n" in decode(tok, [i])}


def _cache_keyword(model: torch.nn.Module) -> str:
    """transformers renamed ``past_key_values`` to ``cache`` (in and out) in 5.2x."""
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


@torch.inference_mode()
def greedy_batch(
    model: torch.nn.Module,
    prompts: Sequence[list[int]],
    max_new: int,
    stop_ids: set[int],
    device: str | torch.device,
    first_allowed: Sequence[list[int] | None] | None = None,
) -> list[list[int]]:
    """Greedy continuations of ``prompts`` (left-padded into one batch), each ending at its
    first stop token (included) or after ``max_new`` tokens. ``first_allowed[i]``, when given,
    restricts row i's first token to those ids, and that token never counts as a stop."""
    n, width = len(prompts), max(len(p) for p in prompts)
    ids = torch.full((n, width), EOT_ID, dtype=torch.long)
    mask = torch.zeros((n, width), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, width - len(p) :] = torch.tensor(p)
        mask[i, width - len(p) :] = 1
    ids, mask = ids.to(device), mask.to(device)
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    cache_kw = _cache_keyword(model)
    out = model(
        input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True, logits_to_keep=1
    )
    stop = torch.tensor(sorted(stop_ids), device=device)
    done = torch.zeros(n, dtype=torch.bool, device=device)
    steps: list[torch.Tensor] = []
    for step in range(max_new):
        logits = out.logits[:, -1]
        healed = torch.zeros(n, dtype=torch.bool, device=device)
        if step == 0 and first_allowed is not None:
            logits, healed = _restrict(logits, first_allowed)
        nxt = logits.argmax(-1)
        nxt = torch.where(done, EOT_ID, nxt)
        steps.append(nxt)
        done |= torch.isin(nxt, stop) & ~healed
        if bool(done.all()):
            break
        mask = torch.cat([mask, torch.ones((n, 1), dtype=mask.dtype, device=device)], dim=1)
        pos = pos[:, -1:] + 1
        cache = {cache_kw: out[cache_kw]}
        out = model(
            input_ids=nxt[:, None], attention_mask=mask, position_ids=pos, use_cache=True, **cache
        )
    gen = torch.stack(steps, dim=1).tolist()
    results = []
    for i, row in enumerate(gen):
        skip = 1 if first_allowed is not None and first_allowed[i] is not None else 0
        cut = next((j + 1 for j, t in enumerate(row) if t in stop_ids and j >= skip), len(row))
        results.append(row[:cut])
    return results


def _restrict(
    logits: torch.Tensor, allowed: Sequence[list[int] | None]
) -> tuple[torch.Tensor, torch.Tensor]:
    keep = torch.ones_like(logits, dtype=torch.bool)
    healed = torch.zeros(logits.shape[0], dtype=torch.bool, device=logits.device)
    for i, ids in enumerate(allowed):
        if ids is not None:
            keep[i] = False
            keep[i, ids] = True
            healed[i] = True
    return logits.masked_fill(~keep, float("-inf")), healed


def heal_prefix(
    tok: Tokenizer, prefix_ids: list[int], token_texts: list[str]
) -> tuple[list[int], str, list[int] | None]:
    """Token healing: drop the prefix's last token and allow, as the first generated token,
    only tokens whose text starts with the dropped text. The cursor then no longer has to fall
    on a token boundary. Returns (prefix ids, dropped text, allowed first tokens)."""
    if not prefix_ids:
        return prefix_ids, "", None
    specials = set(tok.get_added_tokens_decoder())
    dropped = token_texts[prefix_ids[-1]]
    allowed = [i for i, t in enumerate(token_texts) if i not in specials and t.startswith(dropped)]
    return prefix_ids[:-1], dropped, allowed


def end_ids(tok: Tokenizer) -> set[int]:
    """The tokens that end a FIM answer: ``<|endoftext|>`` and, where the vocabulary has it,
    ``<|fim_end|>``."""
    fim_end = tok.token_to_id(FIM_END)
    return {EOT_ID} | ({fim_end} if fim_end is not None else set())


def _batches(order: list[int], size: int) -> list[list[int]]:
    return [order[i : i + size] for i in range(0, len(order), size)]


def model_predictor(
    model: torch.nn.Module,
    tok: Tokenizer,
    device: str | torch.device,
    mode: FimMode = "psm",
    batch_size: int = 16,
    record: dict | None = None,
    token_healing: bool = False,
) -> Callable[[list[dict]], list[str]]:
    """A function from examples of one kind to predicted middles; ``record[kind]`` receives
    the (prompt ids, generated ids) when given. ``token_healing``: see :func:`heal_prefix`
    (not part of the standard protocol; the daemon does not heal)."""
    newline_ids = newline_token_ids(tok)
    ends = end_ids(tok)
    texts_of = [decode(tok, [i]) for i in range(tok.get_vocab_size())] if token_healing else []

    def predict(examples: list[dict]) -> list[str]:
        kind = examples[0]["kind"]
        stop = ends | (newline_ids if kind == "single" else set())
        prompts, dropped, allowed = [], [], []
        for e in examples:
            prefix_ids = encode(tok, e["prefix"])
            drop, first = "", None
            if token_healing:
                prefix_ids, drop, first = heal_prefix(tok, prefix_ids, texts_of)
            prompts.append(fim_prompt(prefix_ids, encode(tok, e["suffix"]), mode))
            dropped.append(drop)
            allowed.append(first)
        gens: list[list[int]] = [[] for _ in examples]
        order = sorted(range(len(examples)), key=lambda i: len(prompts[i]))
        for batch in _batches(order, batch_size):
            outs = greedy_batch(
                model,
                [prompts[i] for i in batch],
                MAX_NEW[kind],
                stop,
                device,
                [allowed[i] for i in batch] if token_healing else None,
            )
            for i, o in zip(batch, outs, strict=True):
                gens[i] = o
        texts = []
        for g, drop in zip(gens, dropped, strict=True):
            text = decode(tok, [t for t in g if t not in ends])[len(drop) :]
            texts.append(text.split("\n", 1)[0] if kind == "single" else text)
        if record is not None:
            record[kind] = (prompts, gens)
        return texts

    return predict


def repeat_previous_line(example: dict) -> str:
    """Baseline: the previous non-blank line, from the cursor's column on (single-line); for a
    gap of n lines, the n lines before it again ("repeat the previous lines")."""
    head, _, current = example["prefix"].rpartition("\n")
    if example["kind"] == "single":
        prev = next((line for line in reversed(head.split("\n")) if line.strip()), "")
        return prev[len(current) :]
    n = example["middle"].rstrip("\n").count("\n") + 1
    return "\n".join(example["prefix"].rstrip("\n").split("\n")[-n:]) + "\n"


def runs_into_suffix(pred: str, example: dict) -> bool:
    """Whether an answer goes on into the suffix: it contains the suffix's first non-blank
    line (when that line is not also a line of the expected middle)."""
    first = next((ln.strip() for ln in example["suffix"].split("\n") if ln.strip()), "")
    if len(first) < 4 or first in {ln.strip() for ln in example["middle"].split("\n")}:
        return False
    return first in {ln.strip() for ln in pred.split("\n")}


def score(preds: list[str], examples: list[dict]) -> dict[str, float]:
    n = len(examples)
    pairs = list(zip(preds, examples, strict=True))
    em = sum(exact_match(p, e["middle"]) for p, e in pairs)
    em_line = sum(exact_match(p.split("\n")[0], e["middle"]) for p, e in pairs)
    es = sum(edit_similarity(p, e["middle"]) for p, e in pairs)
    runs_on = sum(runs_into_suffix(p, e) for p, e in pairs if e["kind"] == "multi")
    return {
        "n": n,
        "exact_match": em / n,
        "first_line_exact_match": em_line / n,
        "edit_similarity": es / n,
        "runs_into_suffix": runs_on / n,
    }


_FENCE = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)(?:\n```|$)", re.S)


def fenced_code(text: str) -> str | None:
    """The first fenced code block of a chat answer (an unclosed fence runs to the end)."""
    m = _FENCE.search(text)
    return m.group(1) if m else None


def parses(code: str | None) -> bool:
    if code is None or not code.strip():
        return False
    try:
        ast.parse(code)
    except (SyntaxError, ValueError):
        return False
    return True


def chat_scores(answers: list[str]) -> dict[str, float]:
    """Share of answers with a fenced code block, and with one that ``ast.parse``s."""
    blocks = [fenced_code(a) for a in answers]
    n = max(1, len(answers))
    return {
        "n": len(answers),
        "fenced": sum(b is not None for b in blocks) / n,
        "fenced_parses": sum(parses(b) for b in blocks) / n,
    }


def evaluate_system(
    predict: Callable[[list[dict]], list[str]], examples: list[dict]
) -> dict[str, dict[str, float]]:
    """Scores per kind ("single", "multi") and overall, with the seconds taken."""
    result: dict[str, dict[str, float]] = {}
    all_preds: list[str] = []
    all_examples: list[dict] = []
    for kind in ("single", "multi"):
        subset = [e for e in examples if e["kind"] == kind]
        if not subset:
            continue
        t0 = time.perf_counter()
        preds = predict(subset)
        result[kind] = {**score(preds, subset), "seconds": time.perf_counter() - t0}
        all_preds += preds
        all_examples += subset
    result["all"] = score(all_preds, all_examples)
    return result
