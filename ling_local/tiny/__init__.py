"""The embedded default model: a ~9M-parameter Llama-architecture FIM code model and its
~1.7M-parameter draft, trained on the CPython standard library and shipped as package data.

Reproduce with ``python -m ling_local.tiny.train --out DIR`` (one GPU, about 7 minutes);
evaluate with ``ling-local bench quality``. MODEL_CARD.md beside this file has the details.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["EVAL_SET", "MODEL_CARD", "TINY_DIR", "TINY_DRAFT_DIR"]

_HERE = Path(__file__).resolve().parent
TINY_DIR = _HERE.parent / "models" / "tiny"
"""The target model: a Hugging Face checkpoint folder (config, safetensors, tokenizer)."""
TINY_DRAFT_DIR = _HERE.parent / "models" / "tiny-draft"
"""The draft model for speculative decoding, same tokenizer."""
EVAL_SET = _HERE / "eval_set.jsonl.gz"
"""Fixed FIM examples from held-out stdlib files (see ling_local.tiny.evalset)."""
MODEL_CARD = _HERE / "MODEL_CARD.md"
