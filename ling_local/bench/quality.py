"""`ling-local bench quality`: quality of the shipped tiny model on held-out packages.

FIM: compares the model with two baselines on the shipped eval set
(ling_local/bench/data/fim_eval_set.jsonl.gz): the same architecture with untrained random
weights, and "repeat the previous line(s)". Reports exact match, edit similarity and (multi-line)
answers that run on into the suffix (see ling_local.bench.fim_eval), and the draft's acceptance
length against the target for block sizes 4 and 8, measured along the target's own outputs.
With a profile, also through the daemon's own prompt path: FIM, chat ("Write a Python function
that ..." from held-out docstrings: a fenced block that parses?) and the examples of issue 25.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

from ling_local.bench import fim_eval as ev
from ling_local.bench import progress
from ling_local.bench.acceptance import acceptance_lengths
from ling_local.bench.fim_eval import CHAT_EVAL_SET, EVAL_SET, load_eval_set
from ling_local.config import builtin_model_dir
from ling_local.tiny_format import FimMode, load_tokenizer

__all__ = ["run_quality"]

RANDOM_SEED = 1234

TINY_DIR = builtin_model_dir("tiny")
TINY_DRAFT_DIR = builtin_model_dir("tiny-draft")


def _load(model_dir: str | Path, device: str) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).to(device).eval()


def _random_like(model: torch.nn.Module, device: str) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    torch.manual_seed(RANDOM_SEED)
    return AutoModelForCausalLM.from_config(model.config, dtype=torch.float32).to(device).eval()


def run_quality(
    model_dir: str | None = None,
    limit: int = 100,
    device: str = "cpu",
    json_out: str | None = None,
    draft_dir: str | None = None,
    mode: FimMode = "psm",
    batch_size: int = 16,
    eval_set: str | None = None,
    accept_limit: int = 20,
    token_healing: bool = False,
    console: Console | None = None,
    profile: str | None = "tiny",
    chat_limit: int = 50,
) -> dict:
    """Score the model and both baselines on ``limit`` examples of each kind; print a table.

    The draft's acceptance length is measured on the model's outputs for the first
    ``accept_limit`` examples of each kind (a full teacher-forced pass of both models).
    ``token_healing`` re-generates the prefix's last token (ling_local.bench.fim_eval.heal_prefix)
    for the model and the random baseline; the daemon does not do this.

    ``draft_dir`` defaults to the shipped draft when ``model_dir`` is the shipped model; pass
    one explicitly for another pair. Returns (and writes to ``json_out``) every number shown.
    """
    console = console or Console()
    model_dir = str(model_dir or TINY_DIR)
    if draft_dir is None and Path(model_dir).resolve() == TINY_DIR.resolve():
        draft_dir = str(TINY_DRAFT_DIR)
    examples = load_eval_set(eval_set or EVAL_SET, limit)
    tok = load_tokenizer(model_dir)
    model = _load(model_dir, device)
    record: dict = {}
    systems = {
        "model": ev.model_predictor(model, tok, device, mode, batch_size, record, token_healing),
        "random-init": ev.model_predictor(_random_like(model, device), tok, device, mode,
                                          batch_size, None, token_healing),
        "repeat-prev-line": lambda exs: [ev.repeat_previous_line(e) for e in exs],
    }  # fmt: skip
    if profile:  # the product path: the engine with the profile's prompt format
        from ling_local.bench.quality_daemon import daemon_examples, daemon_predictor
        from ling_local.config import load_profile

        prof = load_profile(profile)
        prof.model.path = model_dir
        prof.model.device = device
        prof.model.draft_path = None
        systems = {f"daemon path ({prof.name}: {prof.prompt.fim_format}"
                   f"{', healing' if prof.prompt.token_healing else ''})":
                   daemon_predictor(prof), **systems}  # fmt: skip
    t0 = time.perf_counter()
    result: dict = {
        "model_dir": model_dir,
        "mode": mode,
        "token_healing": token_healing,
        "device": device,
        "limit_per_kind": limit,
        "examples": len(examples),
        "systems": {},
    }
    with progress.status(console, "scoring...") as status:
        for name, predict in systems.items():
            status.update(f"scoring {name} on {len(examples)} examples...")
            result["systems"][name] = ev.evaluate_system(predict, examples)
        if draft_dir:
            status.update("measuring the draft's acceptance length...")
            draft = _load(draft_dir, device)
            prompts = [p for kind in record for p in record[kind][0][:accept_limit]]
            gens = [g for kind in record for g in record[kind][1][:accept_limit]]
            result["draft_dir"] = draft_dir
            result["acceptance"] = acceptance_lengths(model, draft, prompts, gens, device)
        if profile and chat_limit:
            status.update("chat through the daemon's prompt path...")
            result["chat"] = _chat(prof, chat_limit)
            result["issue_examples"] = daemon_examples(prof)
    result["seconds"] = time.perf_counter() - t0
    console.print(quality_table(result))
    if "chat" in result:
        c = result["chat"]
        console.print(
            f"chat ({c['n']} held-out 'Write a Python function that ...' requests, greedy): "
            f"fenced block {c['fenced']:.0%}, fenced block that parses {c['fenced_parses']:.0%}"
        )
        for ex in result["issue_examples"]:
            console.print(f"[bold]{ex['name']}[/bold]: {ex['output']!r}", markup=True)
    if "acceptance" in result:
        a = result["acceptance"]
        console.print(
            f"draft acceptance length (tokens per target step, greedy): k=4 {a['k4']:.2f}, "
            f"k=8 {a['k8']:.2f}; top-1 agreement {a['top1_agreement']:.1%} "
            f"over {a['positions']} positions"
        )
    if json_out:
        Path(json_out).write_text(json.dumps(result, indent=1) + "\n")
    return result


def _chat(profile, limit: int) -> dict:
    import gzip

    from ling_local.bench.quality_daemon import daemon_chat

    with gzip.open(CHAT_EVAL_SET, "rt", encoding="utf-8") as fh:
        requests = [json.loads(line)["request"] for line in fh if line.strip()][:limit]
    answers = daemon_chat(profile, requests)
    return {**ev.chat_scores(answers), "answers": answers, "requests": requests}


def quality_table(result: dict) -> Table:
    table = Table(
        title=f"FIM quality on held-out packages ({result['mode'].upper()}"
        f"{', token healing' if result.get('token_healing') else ''}, "
        f"{result['examples']} examples, {result['device']})"
    )
    table.add_column("system")
    for kind in ("single", "multi"):
        table.add_column(f"{kind} EM", justify="right")
        table.add_column(f"{kind} ES", justify="right")
    table.add_column("single EM, 1st line", justify="right")
    table.add_column("multi runs on", justify="right")
    table.add_column("seconds", justify="right")
    for name, scores in result["systems"].items():
        cells = []
        for kind in ("single", "multi"):
            s = scores.get(kind, {"exact_match": float("nan"), "edit_similarity": float("nan")})
            cells += [f"{s['exact_match']:.1%}", f"{s['edit_similarity']:.3f}"]
        line = scores.get("single", {}).get("first_line_exact_match", float("nan"))
        cells.append(f"{line:.1%}")
        cells.append(f"{scores.get('multi', {}).get('runs_into_suffix', float('nan')):.1%}")
        secs = sum(scores[k].get("seconds", 0.0) for k in ("single", "multi") if k in scores)
        table.add_row(name, *cells, f"{secs:.1f}")
    return table


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ling_local.bench.quality", description=__doc__)
    p.add_argument("--model-dir", help="a Hugging Face checkpoint folder (default: shipped tiny)")
    p.add_argument("--draft-dir", help="its draft model (default: the shipped draft)")
    p.add_argument("--limit", type=int, default=100, help="examples of each kind")
    p.add_argument("--device", default="cpu")
    p.add_argument("--mode", choices=["psm", "spm"], default="psm")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument(
        "--accept-limit",
        type=int,
        default=20,
        help="examples of each kind for the draft's acceptance length",
    )
    p.add_argument("--token-healing", action="store_true", help="re-generate the cursor's token")
    p.add_argument("--eval-set", help="another eval_set.jsonl.gz (default: the shipped one)")
    p.add_argument("--json-out", help="write all numbers here as JSON")
    p.add_argument("--chat-limit", type=int, default=50, help="chat requests (0: no chat)")
    p.add_argument(
        "--profile",
        default="tiny",
        help="also score the daemon's path with this profile's prompt format ('' to skip)",
    )
    a = p.parse_args(argv)
    run_quality(
        a.model_dir,
        a.limit,
        a.device,
        a.json_out,
        a.draft_dir,
        a.mode,
        a.batch_size,
        a.eval_set,
        a.accept_limit,
        a.token_healing,
        profile=a.profile or None,
        chat_limit=a.chat_limit,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
