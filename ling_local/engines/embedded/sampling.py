"""Next-token choice from logits: greedy, or temperature + top-p with a seeded generator."""

from __future__ import annotations

import torch

__all__ = ["make_generator", "sample"]


def make_generator(seed: int | None, device: torch.device) -> torch.Generator | None:
    if seed is None:
        return None
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    return gen


def sample(
    logits: torch.Tensor,
    temperature: float,
    top_p: float,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """logits: [vocab] or [n, vocab] -> token ids of shape [] or [n] (stays on device)."""
    if temperature <= 0.0:
        return logits.argmax(dim=-1)
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    if top_p < 1.0:
        sorted_probs, order = torch.sort(probs, dim=-1, descending=True)
        cumulative = sorted_probs.cumsum(dim=-1)
        # Keep the smallest set whose mass reaches top_p (the top token always stays).
        sorted_probs[(cumulative - sorted_probs) > top_p] = 0.0
        probs = torch.zeros_like(probs).scatter_(-1, order, sorted_probs)
    flat = probs.reshape(-1, probs.shape[-1])
    picked = torch.multinomial(flat, 1, generator=generator).squeeze(-1)
    return picked.reshape(probs.shape[:-1])
