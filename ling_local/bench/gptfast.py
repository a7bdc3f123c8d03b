"""A gpt-fast-style baseline, written for `bench engine`: static KV cache, the decode step
compiled with ``torch.compile(mode="reduce-overhead", fullgraph=True)`` (CUDA graphs through
inductor), greedy, new tokens kept on the device. Modelled on pytorch-labs/gpt-fast
`generate.py` and `model.py`; runs on the weights of a transformers Llama model."""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch
import torch.nn.functional as F

__all__ = ["gptfast_tpot"]


class _Model:
    def __init__(self, hf: Any, max_len: int) -> None:
        cfg = hf.config
        self.n_heads = cfg.num_attention_heads
        self.n_kv = cfg.num_key_value_heads
        self.head_dim = cfg.hidden_size // self.n_heads
        self.eps = cfg.rms_norm_eps
        inner = hf.model
        self.embed = inner.embed_tokens.weight
        self.layers = [
            (
                layer.input_layernorm.weight,
                torch.cat(
                    [
                        layer.self_attn.q_proj.weight,
                        layer.self_attn.k_proj.weight,
                        layer.self_attn.v_proj.weight,
                    ]
                ),
                layer.self_attn.o_proj.weight,
                layer.post_attention_layernorm.weight,
                torch.cat([layer.mlp.gate_proj.weight, layer.mlp.up_proj.weight]),
                layer.mlp.down_proj.weight,
            )
            for layer in inner.layers
        ]
        self.norm = inner.norm.weight
        self.lm_head = hf.lm_head.weight
        dev, dt = self.embed.device, self.embed.dtype
        cos, sin = inner.rotary_emb(
            torch.zeros(1, device=dev, dtype=dt), torch.arange(max_len, device=dev)[None]
        )
        self.cos, self.sin = cos[0], sin[0]
        shape = (1, self.n_kv, max_len, self.head_dim)
        self.k = [torch.zeros(shape, device=dev, dtype=dt) for _ in self.layers]
        self.v = [torch.zeros(shape, device=dev, dtype=dt) for _ in self.layers]
        self.causal = torch.tril(torch.ones(max_len, max_len, dtype=torch.bool, device=dev))

    def norm_(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        h = x.float()
        return w * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype)

    def rope(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        cos, sin = self.cos[pos][None, None], self.sin[pos][None, None]
        half = x.shape[-1] // 2
        return x * cos + torch.cat((-x[..., half:], x[..., :half]), -1) * sin

    def forward(self, idx: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        t = idx.shape[1]
        x = F.embedding(idx, self.embed)
        mask = self.causal[None, None, pos]
        nq, nk = self.n_heads * self.head_dim, self.n_kv * self.head_dim
        for i, (ln1, wqkv, wo, ln2, w13, w2) in enumerate(self.layers):
            h = self.norm_(x, ln1)
            qkv = F.linear(h, wqkv)
            q = qkv[..., :nq].view(1, t, self.n_heads, self.head_dim).transpose(1, 2)
            k = qkv[..., nq : nq + nk].view(1, t, self.n_kv, self.head_dim).transpose(1, 2)
            v = qkv[..., nq + nk :].view(1, t, self.n_kv, self.head_dim).transpose(1, 2)
            q, k = self.rope(q, pos), self.rope(k, pos)
            self.k[i].index_copy_(2, pos, k)
            self.v[i].index_copy_(2, pos, v)
            y = F.scaled_dot_product_attention(
                q, self.k[i], self.v[i], attn_mask=mask, enable_gqa=True
            )
            x = x + F.linear(y.transpose(1, 2).reshape(1, t, nq), wo)
            g, u = F.linear(self.norm_(x, ln2), w13).chunk(2, -1)
            x = x + F.linear(F.silu(g) * u, w2)
        return F.linear(self.norm_(x, self.norm), self.lm_head)


def gptfast_tpot(
    hf: Any, prompt: list[int], new_tokens: int, repeats: int
) -> tuple[dict, list[int]]:
    """Median TPOT of the compiled loop, and its greedy tokens."""
    max_len = len(prompt) + new_tokens + 8
    model = _Model(hf, max_len)
    dev = model.embed.device

    def decode_one(x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        return model.forward(x, pos)[:, -1].argmax(-1)

    decode = torch.compile(decode_one, mode="reduce-overhead", fullgraph=True)

    @torch.inference_mode()
    def generate() -> tuple[float, float, list[int]]:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        ids = torch.tensor([prompt], device=dev)
        token = model.forward(ids, torch.arange(len(prompt), device=dev))[:, -1].argmax(-1)
        torch.cuda.synchronize()
        t_first = time.perf_counter()
        pos = torch.tensor([len(prompt)], device=dev)
        out = [token.clone()]
        for _ in range(new_tokens - 1):
            token = decode(token.view(1, 1), pos)
            pos += 1
            out.append(token.clone())
        torch.cuda.synchronize()
        t_end = time.perf_counter()
        return t_first - t0, (t_end - t_first) / (new_tokens - 1), torch.cat(out).tolist()

    t0 = time.perf_counter()
    generate()
    generate()
    warm = time.perf_counter() - t0
    runs = [generate() for _ in range(repeats)]
    tokens = runs[-1][2]
    tpots = [r[1] * 1e3 for r in runs]
    row = dict(
        name="gpt-fast-style loop, compiled (reduce-overhead)",
        tpot_ms=statistics.median(tpots),
        ttft_ms=statistics.median(r[0] for r in runs) * 1e3,
        note=f"warm-up {warm:.0f}s",
        runs_ms=tpots,
    )
    return row, tokens
