"""The lean single-token decode step of the Llama fast path on the CPU.

Batch-1 decode of a small model on a laptop CPU is bound by memory (the int8 weights, the
KV cache) and by per-op overhead: every ATen call costs ~1-3 us whatever its size, and the
general path (`forward_tokens`, written for any T and shared with the CUDA-graph step)
makes ~320 of them per token on the tiny model, plus closures and Python-scalar wrapping.
This step computes the same thing for T = 1 in ~230 cheaper calls:

- preallocated buffers with their views made once (the fused qkv row, the norm output, the
  MLP activation), so a layer makes few view ops of its own;
- each RMSNorm writes the matmul's input dtype (bfloat16 for the int8 kernel) directly,
  with eps and the width as tensors, and the residual adds take the matmul's bfloat16
  result in place;
- RoPE in place on the q/k rows, with the sign of rotate_half folded into the sin table;
- the token's keys and values go into the cache in one copy (on the CPU each layer's K and
  V sit side by side: `LlamaRunner.new_cache`).

Every op computes what `forward_tokens` computes, in the same order and dtypes (the head's
rescored rows go through mv where `quant.linear` has an einsum: the same dot products), so
the logits and the cache contents are bit-identical (tests/test_cpu_decode.py checks it)."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from ling_local.engines.embedded.quant import Int8Weight, RescoredHead

__all__ = ["LeanDecode", "lean_supported"]

_int8_mm = torch.ops.aten._weight_int8pack_mm


def lean_supported(w: Any, device: torch.device) -> bool:
    """Whether `LeanDecode` computes exactly what `forward_tokens` does for these weights."""
    return (
        device.type == "cpu"
        and w.embed.dtype == torch.float32
        and w.head_dim % 2 == 0
        and w.n_heads % w.n_kv_heads == 0
        and all(layer.q_norm is None for layer in w.layers)
    )


class LeanDecode:
    """`step(slot, token)` feeds one token at position slot.length and returns the logits
    [vocab] (float32, a fresh tensor). The caller checks room and advances slot.length.
    Not thread-safe (shared scratch buffers): one runner serves one worker thread."""

    def __init__(self, w: Any) -> None:
        self.w = w
        self.quantized = quantized = isinstance(w.layers[0].wqkv, Int8Weight)
        hidden, hd, half = w.embed.shape[1], w.head_dim, w.head_dim // 2
        nq, nk = w.n_heads * hd, w.n_kv_heads * hd
        w13 = w.layers[0].w13
        inter = (w13.q if quantized else w13).shape[0] // 2
        self.inter = inter
        self.gqa = w.n_heads != w.n_kv_heads
        # rotate_half(x) * sin == (x with its halves swapped) * [-sin_lo, sin_hi]: the sign
        # goes into the table, so RoPE is flip, mul_, mul_, add_ (bit-identical to `rotate`).
        self.cos = w.cos.view(-1, 2, half)
        self.sin = torch.cat((-w.sin[:, :half], w.sin[:, half:]), dim=-1).view(-1, 2, half)
        self._eps = torch.tensor(w.eps, dtype=torch.float32)
        self._width = torch.tensor(float(hidden), dtype=torch.float32)
        # Scratch, with every view the step needs made here.
        act = torch.bfloat16 if quantized else torch.float32
        self._qkv = torch.empty(1, nq + 2 * nk)
        self._qk = self._qkv[0, : nq + nk].view(w.n_heads + w.n_kv_heads, 2, half)
        self._q = self._qkv[0, :nq].view(1, w.n_heads, 1, hd)
        self._new_kv = self._qkv[0, nq:].view(2, w.n_kv_heads, hd)
        self._normed = torch.empty(1, hidden, dtype=act)
        self._attn = torch.empty(1, nq, dtype=act)
        self._attn4 = self._attn.view(1, w.n_heads, 1, hd)
        self._gate = torch.empty(1, inter)
        self._act = torch.empty(1, inter, dtype=act)
        self.layers = [
            (layer.ln_in, layer.wqkv, layer.bqkv, layer.wo, layer.ln_post, layer.w13, layer.w2)
            for layer in w.layers
        ]

    # ------------------------------------------------------------------ helpers
    def _rstd(self, x: torch.Tensor) -> torch.Tensor:
        """1 / sqrt(mean(x^2) + eps) of [1, hidden], rounded as F.rms_norm rounds it: the
        sum, the division by the width, the addition of eps, the rsqrt. (addcdiv does the
        middle two in one op; tensor operands spare the per-call wrapping of Python
        scalars, which costs as much as the arithmetic.)"""
        return torch.addcdiv(self._eps, torch.sum(x * x, -1, keepdim=True), self._width).rsqrt_()

    def _norm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """RMSNorm into the matmul's input dtype: bit-identical to F.rms_norm followed by
        the cast `quant.linear` does."""
        return torch.mul(x * self._rstd(x), weight, out=self._normed)

    def _mm(self, h: torch.Tensor, weight: Any) -> torch.Tensor:
        if self.quantized:
            return _int8_mm(h, weight.q, weight.scales)
        return F.linear(h, weight)

    @staticmethod
    def views(slot: Any) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        """Per layer: the slot's [2, kv, max_len, hd] K/V block, and its keys and values
        as [1, kv, max_len, hd]. Made once per slot."""
        if slot.lean is None:
            slot.lean = [(b, b[0][None], b[1][None]) for b in slot.kv]
        return slot.lean

    # ------------------------------------------------------------------ the step
    def step(self, slot: Any, token: int) -> torch.Tensor:
        w, quantized, inter = self.w, self.quantized, self.inter
        qkv, qk, q, new_kv = self._qkv, self._qk, self._q, self._new_kv
        pos = slot.length
        end = pos + 1
        cos, sin = self.cos[pos], self.sin[pos]
        x = w.embed[token : token + 1].clone()  # the residual stream, float32
        for (ln_in, wqkv, bqkv, wo, ln_post, w13, w2), (block, keys, values) in zip(
            self.layers, self.views(slot), strict=True
        ):
            # attention (as quant.linear: the bfloat16 result to float32, then the bias)
            h = self._norm(x, ln_in)
            if quantized:
                qkv.copy_(_int8_mm(h, wqkv.q, wqkv.scales))
                if bqkv is not None:
                    qkv.add_(bqkv)
            else:
                qkv.copy_(F.linear(h, wqkv, bqkv))
            rot = qk.flip(1)
            qk.mul_(cos)
            qk.add_(rot.mul_(sin))
            block.select(2, pos).copy_(new_kv)
            out = F.scaled_dot_product_attention(
                q, keys.narrow(2, 0, end), values.narrow(2, 0, end), enable_gqa=self.gqa
            )
            if quantized:
                self._attn4.copy_(out)
                x.add_(_int8_mm(self._attn, wo.q, wo.scales))
            else:
                x.add_(F.linear(out.view(1, -1), wo))
            # MLP
            y = self._mm(self._norm(x, ln_post), w13)
            gate = y.narrow(1, 0, inter)
            if quantized:  # silu and the product in float32, as mlp_block computes them
                gate = self._gate.copy_(gate)
            F.silu(gate, inplace=True)
            x.add_(self._mm(torch.mul(gate, y.narrow(1, inter, inter), out=self._act), w2))
        return self._head(x)[0]

    def _head(self, x: torch.Tensor) -> torch.Tensor:
        w = self.w
        h = x * self._rstd(x) * w.norm
        head = w.lm_head
        if not isinstance(head, RescoredHead):
            return F.linear(h, head)
        # As quant.linear does for a RescoredHead (same ops, so the same logits).
        logits = _int8_mm(h.to(torch.bfloat16), head.approx.q, head.approx.scales).float()
        top = logits.topk(head.k, dim=-1).indices
        exact = torch.mv(head.exact.index_select(0, top[0]), h[0])
        return logits.scatter_(-1, top, exact[None])
