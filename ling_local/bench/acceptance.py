"""Acceptance length of a draft for a block size k (exact for greedy speculative decoding):
along the target's own greedy continuation c_0..c_{n-1} of a prompt (teacher forcing), let t_j
and d_j be the target's and the draft's argmax at position j, and m_j the number of
consecutive positions from j on where d == t. A block started at j accepts
``min(m_j + 1, k + 1, n - j)`` tokens (k drafted tokens at most, plus the target's own token;
never past the end). Reported: the mean over every position j of every continuation.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ling_local.tiny_format import EOT_ID

__all__ = ["acceptance_lengths", "argmax_tail"]


@torch.inference_mode()
def argmax_tail(
    model: torch.nn.Module,
    seqs: Sequence[list[int]],
    tail: Sequence[int],
    device: str | torch.device,
    batch: int = 16,
) -> list[list[int]]:
    """Teacher-forced argmax at the last ``tail[i]`` positions of each sequence (left-padded
    batches, so the logits of the prompts are never computed)."""
    out: list[list[int]] = []
    for i in range(0, len(seqs), batch):
        chunk, keep = seqs[i : i + batch], tail[i : i + batch]
        width = max(len(s) for s in chunk)
        ids = torch.full((len(chunk), width), EOT_ID, dtype=torch.long)
        mask = torch.zeros((len(chunk), width), dtype=torch.long)
        for r, s in enumerate(chunk):
            ids[r, width - len(s) :] = torch.tensor(s)
            mask[r, width - len(s) :] = 1
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        logits = model(
            input_ids=ids.to(device),
            attention_mask=mask.to(device),
            position_ids=pos.to(device),
            use_cache=False,
            logits_to_keep=max(keep),
        ).logits
        arg = logits.argmax(-1).tolist()
        out.extend(a[len(a) - k :] for a, k in zip(arg, keep, strict=True))
    return out


def acceptance_lengths(
    target: torch.nn.Module,
    draft: torch.nn.Module,
    prompts: Sequence[list[int]],
    continuations: Sequence[list[int]],
    device: str | torch.device,
    ks: Sequence[int] = (4, 8),
) -> dict[str, float]:
    """Mean accepted tokens per target step for each block size k (see the module docstring),
    plus the draft's top-1 agreement with the target on those positions.

    ``continuations`` must be the target's own greedy outputs for ``prompts``."""
    pairs = [(p, c) for p, c in zip(prompts, continuations, strict=True) if c]
    seqs = [p + c[:-1] for p, c in pairs]  # the last len(c) positions predict c_0..c_{n-1}
    tail = [len(c) for _, c in pairs]
    t_arg = argmax_tail(target, seqs, tail, device)
    d_arg = argmax_tail(draft, seqs, tail, device)
    totals = dict.fromkeys(ks, 0)
    positions = agree = consistent = 0
    for (_, c), ta, da in zip(pairs, t_arg, d_arg, strict=True):
        match = [ta[j] == da[j] for j in range(len(c))]
        consistent += sum(ta[j] == c[j] for j in range(len(c)))
        run = [0] * (len(c) + 1)
        for j in range(len(c) - 1, -1, -1):
            run[j] = run[j + 1] + 1 if match[j] else 0
        for j in range(len(c)):
            for k in ks:
                totals[k] += min(run[j] + 1, k + 1, len(c) - j)
        positions += len(c)
        agree += sum(match)
    result = {f"k{k}": totals[k] / max(positions, 1) for k in ks}
    result["top1_agreement"] = agree / max(positions, 1)
    result["positions"] = positions
    # sanity check: teacher forcing reproduces the target's own greedy tokens (~1.0)
    result["target_consistency"] = consistent / max(positions, 1)
    return result
