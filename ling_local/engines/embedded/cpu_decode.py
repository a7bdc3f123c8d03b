"""The single-token decode step of the Llama fast path on the CPU.

Batch-1 decode of a small model on a laptop CPU is bound by memory: every weight is read
once a token, and the tiny model's 31.5 MB of int8 weights do not fit in a 16 MB L3. The
step runs as one call into numba-compiled code (`cpu_kernels`): the matmuls read each int8
row once against float32 activations, with the rows split between the threads; norms,
RoPE, the cache write, attention and the output head's rescoring happen in the same call,
so no Python, ATen dispatch or GIL hand-over sits between the ops. On the tiny model
(2-core AMD EPYC VM, 256-token context, min of 300 steps) a step takes 2.5 ms on 1 thread
and 1.4 ms on 2, against 8.1 and 5.0 ms for the TorchScript step it replaced, whose
`_weight_int8pack_mm` streamed the weights from memory at ~5 GB/s a thread (12 GB/s when
they sat in cache). Prefill (`forward_tokens`, T > 1) still runs on torch's kernels.

The step computes what `forward_tokens` does, in float32 where the torch path rounds the
int8 matmuls' inputs and outputs to bfloat16, and in another summation order: logits differ
in the low bits (1e-3 relative on the tiny model) and greedy tokens agree
(tests/test_cpu_decode.py)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ling_local.engines.embedded.quant import Int8Weight, RescoredHead

__all__ = ["LeanDecode", "lean_supported"]


def lean_supported(w: Any, device: torch.device) -> bool:
    """Whether `LeanDecode` runs these weights (float32 Llama-family on the CPU)."""
    return (
        device.type == "cpu"
        and w.embed.dtype == torch.float32
        and w.head_dim % 2 == 0
        and w.n_heads % w.n_kv_heads == 0
        and all(layer.q_norm is None for layer in w.layers)
    )


def _stack(w: Any, name: str) -> tuple[np.ndarray, np.ndarray]:
    """One matmul of every layer as a stacked [layers, out, in] array and its per-row
    scales [layers, out] (ones for float weights). The layers' weights become views of the
    stacked one, so the prefill path reads the same memory and nothing is held twice."""
    weights = [getattr(layer, name) for layer in w.layers]
    if isinstance(weights[0], Int8Weight):
        stacked = torch.stack([m.q for m in weights])
        scales = torch.stack([m.scales.float() for m in weights])
        for i, (layer, m) in enumerate(zip(w.layers, weights, strict=True)):
            setattr(layer, name, Int8Weight(stacked[i], m.scales))
    else:
        stacked = torch.stack([m.float() for m in weights])
        scales = torch.ones(stacked.shape[:2])
        for i, layer in enumerate(w.layers):
            setattr(layer, name, stacked[i])
    return stacked.numpy(), scales.numpy()


def _head(head: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """(rows read, their scales, float rows to rescore the best k with, k)."""
    if isinstance(head, RescoredHead):
        approx = head.approx
        return approx.q.numpy(), approx.scales.float().numpy(), head.exact.numpy(), head.k
    if isinstance(head, Int8Weight):
        return head.q.numpy(), head.scales.float().numpy(), np.empty((0, 0), np.float32), 0
    rows = head.float().contiguous().numpy()
    return rows, np.ones(rows.shape[0], np.float32), np.empty((0, 0), np.float32), 0


class LeanDecode:
    """`step(slot, token)` feeds one token at position slot.length and returns the logits
    [vocab] (float32, a fresh tensor). The caller checks room and advances slot.length.
    Runs on as many threads as torch has on the calling thread. Building it stacks the
    layers' matrices (see `_stack`) and compiles or loads the kernels (a first step)."""

    def __init__(self, w: Any) -> None:
        from ling_local.engines.embedded import cpu_kernels

        self._kernels = cpu_kernels
        bias = [layer.bqkv for layer in w.layers]
        self._args = (
            w.embed.numpy(),
            torch.stack([layer.ln_in.float() for layer in w.layers]).numpy(),
            torch.stack([layer.ln_post.float() for layer in w.layers]).numpy(),
            w.norm.float().numpy(),
            *_stack(w, "wqkv"),
            torch.stack(bias).float().numpy()
            if bias[0] is not None
            else np.empty((0, 0), np.float32),
            *_stack(w, "wo"),
            *_stack(w, "w13"),
            *_stack(w, "w2"),
            *_head(w.lm_head),
            w.cos.float().numpy(),
            w.sin.float().numpy(),
            np.float32(w.eps),
            w.n_heads,
        )
        self._vocab = w.embed.shape[0]
        kv = np.zeros((len(w.layers), 2, w.n_kv_heads, 1, w.head_dim), np.float32)
        self._run(kv, 0, 0)  # compile, or load the compiled kernels, now

    def _run(self, kv: np.ndarray, pos: int, token: int) -> np.ndarray:
        self._kernels.set_threads(torch.get_num_threads())
        logits = np.empty(self._vocab, np.float32)
        self._kernels.decode_step(token, pos, *self._args, kv, logits)
        return logits

    def step(self, slot: Any, token: int) -> torch.Tensor:
        return torch.from_numpy(self._run(slot.kv.numpy(), slot.length, token))
