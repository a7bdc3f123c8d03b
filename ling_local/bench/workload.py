"""The random workload of `sglang.bench_serving --dataset-name random` (as vLLM's
`sample_random_requests` draws it): prompt i is the token-id ramp
``(offset_i + i + j) % vocab`` for j < input_len_i, lengths drawn uniformly from
``[len × range_ratio, len]``. Prompts are sent as token ids, so the input length is exact
and no tokenizer is needed on the client. Unlike SGLang's default, `range_ratio` defaults
to 1.0 here: every prompt has exactly `input_len` tokens and asks for exactly `output_len`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Prompt", "random_prompts"]


@dataclass(frozen=True, slots=True)
class Prompt:
    ids: list[int]
    output_len: int


def random_prompts(
    n: int,
    input_len: int,
    output_len: int,
    vocab_size: int,
    *,
    range_ratio: float = 1.0,
    seed: int = 1,
) -> list[Prompt]:
    if n < 1 or input_len < 1 or output_len < 1 or vocab_size < 2:
        raise ValueError("need at least one prompt, one input and one output token, two ids")
    rng = np.random.RandomState(seed)  # the legacy generator sglang seeds with np.random.seed
    input_lens = rng.randint(max(int(input_len * range_ratio), 1), input_len + 1, size=n)
    output_lens = rng.randint(max(int(output_len * range_ratio), 1), output_len + 1, size=n)
    offsets = rng.randint(0, vocab_size, size=n)
    return [
        Prompt(
            ((offsets[i] + i + np.arange(input_lens[i])) % vocab_size).tolist(),
            int(output_lens[i]),
        )
        for i in range(n)
    ]
