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

The step runs as TorchScript (`torch.jit.script`, no C++ compiler involved, ~20 ms at
load): the interpreter dispatches the same ATen calls without Python in between, and the
GIL is handed over once per step instead of at every op (each ATen call from Python
releases and retakes it, and the engine's event loop, woken for every streamed token, took
it in between). On the tiny model (256-token context, runner alone, min of 500 steps) a
step went from 2.36 to 1.87 ms on 1 thread and from 1.61 to 1.16 ms on 2; through the
streaming API from 3.4 to 2.5 ms a token. `torch.jit.script` is deprecated in favour of
torch.compile, which took ~40 s of C++ compilation at load here (and needs a compiler on
the user's machine); its warning is silenced where the step is built.

Every op computes what `forward_tokens` computes, in the same order and dtypes (the head's
rescored rows go through mv where `quant.linear` has an einsum: the same dot products), so
the logits and the cache contents are bit-identical (tests/test_cpu_decode.py checks it)."""

from __future__ import annotations

import warnings
from typing import Any

import torch
import torch.nn.functional as F

from ling_local.engines.embedded.quant import Int8Weight, RescoredHead

__all__ = ["LeanDecode", "lean_supported"]


def lean_supported(w: Any, device: torch.device) -> bool:
    """Whether `LeanDecode` computes exactly what `forward_tokens` does for these weights."""
    return (
        device.type == "cpu"
        and w.embed.dtype == torch.float32
        and w.head_dim % 2 == 0
        and w.n_heads % w.n_kv_heads == 0
        and all(layer.q_norm is None for layer in w.layers)
    )


def _parts(weight: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """(matrix, per-row scales) of an int8 weight; (matrix, empty) of a float one."""
    if isinstance(weight, Int8Weight):
        return weight.q, weight.scales
    return weight, torch.empty(0)


class _Step(torch.nn.Module):
    """The step's arithmetic, in TorchScript's subset of Python (see the module docstring)."""

    __constants__ = ("gqa", "inter", "k", "quantized", "rescored")

    def __init__(self, w: Any) -> None:
        super().__init__()
        layers = w.layers
        self.quantized = quantized = isinstance(layers[0].wqkv, Int8Weight)
        hidden, hd, half = w.embed.shape[1], w.head_dim, w.head_dim // 2
        nq, nk = w.n_heads * hd, w.n_kv_heads * hd
        self.inter = _parts(layers[0].w13)[0].shape[0] // 2
        self.gqa = w.n_heads != w.n_kv_heads
        self.embed = w.embed
        self.norm = w.norm
        # rotate_half(x) * sin == (x with its halves swapped) * [-sin_lo, sin_hi]: the sign
        # goes into the table, so RoPE is flip, mul_, mul_, add_ (bit-identical to `rotate`).
        self.cos = w.cos.view(-1, 2, half)
        self.sin = torch.cat((-w.sin[:, :half], w.sin[:, half:]), dim=-1).view(-1, 2, half)
        self.eps = torch.tensor(w.eps, dtype=torch.float32)
        self.width = torch.tensor(float(hidden), dtype=torch.float32)
        self.ln_in = [layer.ln_in for layer in layers]
        self.ln_post = [layer.ln_post for layer in layers]
        self.bqkv = [layer.bqkv if layer.bqkv is not None else torch.empty(0) for layer in layers]
        self.wqkv = [_parts(layer.wqkv)[0] for layer in layers]
        self.sqkv = [_parts(layer.wqkv)[1] for layer in layers]
        self.wo = [_parts(layer.wo)[0] for layer in layers]
        self.so = [_parts(layer.wo)[1] for layer in layers]
        self.w13 = [_parts(layer.w13)[0] for layer in layers]
        self.s13 = [_parts(layer.w13)[1] for layer in layers]
        self.w2 = [_parts(layer.w2)[0] for layer in layers]
        self.s2 = [_parts(layer.w2)[1] for layer in layers]
        head = w.lm_head
        self.rescored = isinstance(head, RescoredHead)
        self.k = head.k if self.rescored else 0
        self.head, self.head_scales = _parts(head.approx if self.rescored else head)
        self.head_exact = head.exact if self.rescored else torch.empty(0)
        # Scratch, with every view the step needs made here.
        act = torch.bfloat16 if quantized else torch.float32
        self.qkv = torch.empty(1, nq + 2 * nk)
        self.qk = self.qkv[0, : nq + nk].view(w.n_heads + w.n_kv_heads, 2, half)
        self.q = self.qkv[0, :nq].view(1, w.n_heads, 1, hd)
        self.new_kv = self.qkv[0, nq:].view(2, w.n_kv_heads, hd)
        self.normed = torch.empty(1, hidden, dtype=act)
        self.attn = torch.empty(1, nq, dtype=act)
        self.attn4 = self.attn.view(1, w.n_heads, 1, hd)
        self.gate = torch.empty(1, self.inter)
        self.act = torch.empty(1, self.inter, dtype=act)

    def _rstd(self, x: torch.Tensor) -> torch.Tensor:
        """1 / sqrt(mean(x^2) + eps) of [1, hidden], rounded as F.rms_norm rounds it: the
        sum, the division by the width, the addition of eps, the rsqrt. (addcdiv does the
        middle two in one op; tensor operands spare the wrapping of scalars.)"""
        return torch.addcdiv(self.eps, torch.sum(x * x, -1, keepdim=True), self.width).rsqrt_()

    def _norm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """RMSNorm into the matmul's input dtype: bit-identical to F.rms_norm followed by
        the cast `quant.linear` does."""
        return torch.mul(x * self._rstd(x), weight, out=self.normed)

    def _mm(self, h: torch.Tensor, weight: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
        if self.quantized:
            return torch.ops.aten._weight_int8pack_mm(h, weight, scales)
        return F.linear(h, weight)

    def forward(self, kv: torch.Tensor, pos: int, token: int) -> torch.Tensor:
        """Feed `token` at `pos`; kv is the slot's [layers, 2, kv_heads, max_len, hd]."""
        qkv, qk = self.qkv, self.qk
        end = pos + 1
        cos, sin = self.cos[pos], self.sin[pos]
        x = self.embed[token : token + 1].clone()  # the residual stream, float32
        for i in range(len(self.ln_in)):
            block = kv[i]
            # attention (as quant.linear: the bfloat16 result to float32, then the bias)
            h = self._norm(x, self.ln_in[i])
            bias = self.bqkv[i]
            if self.quantized:
                qkv.copy_(torch.ops.aten._weight_int8pack_mm(h, self.wqkv[i], self.sqkv[i]))
                if bias.numel() > 0:
                    qkv.add_(bias)
            elif bias.numel() > 0:
                qkv.copy_(F.linear(h, self.wqkv[i], bias))
            else:
                qkv.copy_(F.linear(h, self.wqkv[i]))
            rot = qk.flip(1)
            qk.mul_(cos)
            qk.add_(rot.mul_(sin))
            block.select(2, pos).copy_(self.new_kv)
            out = F.scaled_dot_product_attention(
                self.q,
                block[0].narrow(1, 0, end)[None],
                block[1].narrow(1, 0, end)[None],
                enable_gqa=self.gqa,
            )
            if self.quantized:
                self.attn4.copy_(out)
                x.add_(torch.ops.aten._weight_int8pack_mm(self.attn, self.wo[i], self.so[i]))
            else:
                x.add_(F.linear(out.view(1, -1), self.wo[i]))
            # MLP
            y = self._mm(self._norm(x, self.ln_post[i]), self.w13[i], self.s13[i])
            gate = y.narrow(1, 0, self.inter)
            if self.quantized:  # silu and the product in float32, as mlp_block computes them
                gate = self.gate.copy_(gate)
            F.silu(gate, inplace=True)
            up = y.narrow(1, self.inter, self.inter)
            x.add_(self._mm(torch.mul(gate, up, out=self.act), self.w2[i], self.s2[i]))
        return self._head(x)[0]

    def _head(self, x: torch.Tensor) -> torch.Tensor:
        h = x * self._rstd(x) * self.norm
        if not self.rescored:
            return F.linear(h, self.head)
        # As quant.linear does for a RescoredHead (same ops, so the same logits).
        logits = torch.ops.aten._weight_int8pack_mm(
            h.to(torch.bfloat16), self.head, self.head_scales
        ).float()
        top = logits.topk(self.k, dim=-1).indices
        exact = torch.mv(self.head_exact.index_select(0, top[0]), h[0])
        return logits.scatter_(-1, top, exact[None])


class LeanDecode:
    """`step(slot, token)` feeds one token at position slot.length and returns the logits
    [vocab] (float32, a fresh tensor). The caller checks room and advances slot.length.
    Not thread-safe (shared scratch buffers): one runner serves one worker thread."""

    def __init__(self, w: Any) -> None:
        with warnings.catch_warnings():  # deprecated, and the right tool here: see above
            warnings.simplefilter("ignore", DeprecationWarning)
            self._step = torch.jit.script(_Step(w))

    def step(self, slot: Any, token: int) -> torch.Tensor:
        return self._step(slot.kv, slot.length, token)
