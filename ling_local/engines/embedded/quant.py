"""Weight-only int8 for the embedded engine on the CPU.

Batch-1 decode reads every weight once per token, and a laptop's memory bandwidth, not its
arithmetic, sets the pace: the tiny model's 36 MB of float32 weights take ~4 ms a token on a
2-core box with ~9 GB/s; as int8 (9 MB) with per-row scales they take ~1.2 ms. Activations
stay in floating point (bfloat16 inside the matmul), so the cost is a small, measured loss
of accuracy (see the tiny model card), never a change in the API."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import torch
import torch.nn.functional as F

__all__ = ["Int8Weight", "RescoredHead", "int8_available", "linear", "quantize_int8"]


@dataclass(frozen=True, slots=True)
class Int8Weight:
    q: torch.Tensor
    """int8 [out, in]"""
    scales: torch.Tensor
    """bfloat16 [out]: row i of the weight is q[i] * scales[i]"""


def quantize_int8(weight: torch.Tensor) -> Int8Weight:
    """Symmetric per-output-row int8."""
    w = weight.detach().float()
    scales = (w.abs().amax(dim=1) / 127.0).clamp(min=1e-12)
    q = (w / scales[:, None]).round().clamp(-128, 127).to(torch.int8)
    return Int8Weight(q.contiguous(), scales.to(torch.bfloat16))


@dataclass(frozen=True, slots=True)
class RescoredHead:
    """An output head read as int8, with its top candidates rescored in floating point.

    Greedy decoding only needs the largest logit; int8 gets the shortlist right and the
    float rows of the shortlist (a few hundred bytes each) make the winner exact, so the
    output matches the float model while the head costs a quarter of the bytes. (Plain int8
    in the head moved enough near-ties to send the tiny model into loops.)"""

    approx: Int8Weight
    exact: torch.Tensor
    """The float head [vocab, hidden] (for tied weights, the embedding table itself)."""
    k: int = 16


@cache
def int8_available() -> bool:
    """Whether this torch build has the CPU int8 weight-only matmul."""
    try:
        x = torch.zeros(1, 64, dtype=torch.bfloat16)
        w = torch.zeros(8, 64, dtype=torch.int8)
        torch.ops.aten._weight_int8pack_mm(x, w, torch.ones(8, dtype=torch.bfloat16))
    except (AttributeError, RuntimeError, NotImplementedError):
        return False
    return True


def linear(
    x: torch.Tensor,
    weight: torch.Tensor | Int8Weight | RescoredHead,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """F.linear for float weights, the int8 kernel for quantized ones. x: [T, in]."""
    if isinstance(weight, RescoredHead):
        logits = linear(x, weight.approx)
        top = logits.topk(weight.k, dim=-1).indices  # [T, k]
        exact = torch.einsum("th,tkh->tk", x, weight.exact[top].to(x.dtype))
        return logits.scatter_(-1, top, exact)
    if not isinstance(weight, Int8Weight):
        return F.linear(x, weight, bias)
    y = torch.ops.aten._weight_int8pack_mm(x.to(torch.bfloat16), weight.q, weight.scales)
    y = y.to(x.dtype)
    return y if bias is None else y + bias
