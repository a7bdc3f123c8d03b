"""The shipped tiny model: loads through the Hugging Face path, tokenizes Python exactly,
completes code, stops after a FIM middle, beats a trivial baseline; the trainer runs (smoke)."""

from __future__ import annotations

import json
import random
import tarfile
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast

from ling_local.bench import fim_eval as ev
from ling_local.bench.fim_eval import EVAL_SET, load_eval_set
from ling_local.config import builtin_model_dir
from training.tokenizer import (
    EOT_ID,
    SPECIAL_TOKENS,
    decode,
    encode,
    fim_prompt,
    load_tokenizer,
)

SOURCE = (
    "# -*- coding: utf-8 -*-\n"
    "def grüß(name: str) -> str:\n"
    '\t"""Tabs, unicode ✓, emoji 🐍 and CJK 日本語."""\n'
    "\treturn f'{name!r:>10}'  \r\n"
    "\n\n   x = [1 ,2 ] . y\\\n  # trailing spaces   \n"
)

TINY_DIR = builtin_model_dir("tiny")
TINY_DRAFT_DIR = builtin_model_dir("tiny-draft")


@pytest.fixture(scope="module")
def model() -> torch.nn.Module:
    return AutoModelForCausalLM.from_pretrained(TINY_DIR, dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer(TINY_DIR)


def _complete(model, tok, prompt_ids: list[int], max_new: int) -> list[int]:
    return ev.greedy_batch(model, [prompt_ids], max_new, {EOT_ID}, "cpu")[0]


def test_shipped_files_load_and_fit_the_budget(model) -> None:
    cfg = model.config
    assert cfg.model_type == "llama"
    assert cfg.tie_word_embeddings
    assert cfg.max_position_embeddings >= 2048
    assert (cfg.eos_token_id, cfg.pad_token_id, cfg.bos_token_id) == (0, 0, 0)
    assert next(model.parameters()).dtype == torch.float32
    draft = AutoModelForCausalLM.from_pretrained(TINY_DRAFT_DIR, dtype=torch.float32)
    assert draft.config.vocab_size == cfg.vocab_size
    n_target = sum(p.numel() for p in model.parameters())
    n_draft = sum(p.numel() for p in draft.parameters())
    assert 5e6 < n_target < 10.5e6
    assert n_draft * 4 < n_target
    files = [*TINY_DIR.iterdir(), *TINY_DRAFT_DIR.iterdir(), EVAL_SET]
    assert all(f.stat().st_size <= 16_000_000 for f in files)
    assert sum(f.stat().st_size for f in files) <= 25_000_000


@pytest.mark.parametrize("loader", ["auto", "fast"])
def test_tokenizer_round_trips_python_and_has_fim_tokens(loader: str) -> None:
    if loader == "auto":
        hf = AutoTokenizer.from_pretrained(TINY_DIR)
    else:
        hf = PreTrainedTokenizerFast(tokenizer_file=str(TINY_DIR / "tokenizer.json"))
    assert hf.convert_ids_to_tokens([0, 1, 2, 3, 4]) == SPECIAL_TOKENS
    assert len(hf) == 8192
    ids = hf.encode(SOURCE)
    assert 0 not in ids  # no BOS/EOS added
    assert hf.decode(ids) == SOURCE
    stdlib_text = Path(json.__file__).read_text(encoding="utf-8")
    assert hf.decode(hf.encode(stdlib_text)) == stdlib_text


KNOWN_WEAK = pytest.mark.xfail(
    strict=True,
    reason="the raw model without the daemon's prompt handling (SPM, token healing, no FIM "
    "control tokens) still fails this; see training/MODEL_CARD.md, 'Known problems'",
)


def _daemon_path(examples: list[dict]) -> list[str]:
    from ling_local.bench.quality_daemon import daemon_predictor
    from ling_local.config import load_profile

    return daemon_predictor(load_profile("tiny"))(examples)


@pytest.mark.parametrize(
    "prefix",
    [
        "def fibonacci(n):\n",
        "class Person:\n    def __init__(self, name, age):\n",
    ],
)
def test_daemon_path_completes_with_parseable_python(prefix: str) -> None:
    """What `ling-local serve` with the default profile answers to an editor at the end of a
    file: the completion, cut to whole lines, is Python that parses after the prefix."""
    import ast

    [text] = _daemon_path([{"kind": "multi", "prefix": prefix, "suffix": "", "middle": ""}])
    assert not any(s in text for s in SPECIAL_TOKENS)
    lines = text.split("\n")[:-1]  # drop the unfinished last line
    assert len(lines) >= 2, text
    body = "\n".join(lines)
    assert body.strip(), text
    for cut in range(len(lines), 0, -1):  # the longest prefix of whole lines that parses
        try:
            ast.parse(prefix + "\n".join(lines[:cut]) + "\n")
            break
        except SyntaxError:
            continue
    else:
        pytest.fail(f"no whole-line prefix of the completion parses:\n{text}")
    assert cut >= 2, text


@KNOWN_WEAK
def test_fim_prompt_ends_with_endoftext(model, tok) -> None:
    prefix = "class Person:\n    def __init__(self, name, age):\n        self.name = name\n"
    suffix = "\n    def __repr__(self):\n        return f'Person({self.name!r})'\n"
    for mode in ("psm", "spm"):
        out = _complete(model, tok, fim_prompt(encode(tok, prefix), encode(tok, suffix), mode), 64)
        assert out[-1] == EOT_ID, (mode, decode(tok, out))
        assert len(out) > 1


def _slice() -> list[dict]:
    # a fixed slice: the first 10 single-line examples, with the context shortened to keep
    # this test fast on a small CPU (the full comparison is `ling-local bench quality`)
    return [
        {**e, "prefix": e["prefix"][-800:], "suffix": e["suffix"][:200]}
        for e in load_eval_set(EVAL_SET, limit=10)
        if e["kind"] == "single"
    ]


def _edit_similarity(predict, examples: list[dict]) -> float:
    return ev.evaluate_system(predict, examples)["all"]["edit_similarity"]


def test_beats_repeat_previous_line_with_spm_and_token_healing(model, tok) -> None:
    examples = _slice()
    baseline = _edit_similarity(lambda xs: [ev.repeat_previous_line(e) for e in xs], examples)
    healed = ev.model_predictor(model, tok, "cpu", "spm", token_healing=True)
    assert _edit_similarity(healed, examples) > baseline + 0.1


def test_beats_repeat_previous_line_with_the_daemons_prompt() -> None:
    examples = _slice()
    baseline = _edit_similarity(lambda xs: [ev.repeat_previous_line(e) for e in xs], examples)
    assert _edit_similarity(_daemon_path, examples) > baseline + 0.1


def test_eval_set_is_shipped_with_both_kinds() -> None:
    examples = load_eval_set(EVAL_SET)
    kinds = {k: sum(e["kind"] == k for e in examples) for k in ("single", "multi")}
    assert kinds["single"] >= 100 and kinds["multi"] >= 100
    assert all({"kind", "file", "prefix", "suffix", "middle"} <= e.keys() for e in examples)


def _levenshtein_dp(a: str, b: str) -> int:
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


def test_levenshtein_is_exact() -> None:
    assert ev.levenshtein("kitten", "sitting") == 3
    assert ev.levenshtein("", "abc") == 3
    rng = random.Random(0)
    for _ in range(300):
        a, b = ("".join(rng.choices("ab \n", k=rng.randint(0, 90))) for _ in range(2))
        assert ev.levenshtein(a, b) == _levenshtein_dp(a, b)
    assert ev.edit_similarity("abc  \n", "abc") == 1.0


def test_train_smoke_runs_end_to_end(tmp_path: Path) -> None:
    from training.train import main

    out, export = tmp_path / "out", tmp_path / "export"
    assert main(["--out", str(out), "--export", str(export), "--smoke", "--device", "cpu"]) == 0
    log = json.loads((out / "train_log.json").read_text())
    assert log["status"] == "ok"
    assert log["target"]["steps"] == 6 and log["draft"]["steps"] == 4
    assert {"k4", "k8"} <= log["eval"]["acceptance"]["all"].keys()
    assert (out / "loss_curve.png").stat().st_size > 1000
    reloaded = AutoModelForCausalLM.from_pretrained(out / "tiny", dtype=torch.float32)
    assert reloaded.config.vocab_size == 512
    assert list((export / "tiny").glob("*.safetensors"))
    with tarfile.open(export / "bundle.tar") as tar:
        names = set(tar.getnames())
    assert {"tiny/config.json", "tiny-draft/tokenizer.json", "eval_set.jsonl.gz"} <= names
