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

__all__ = ["gptfast_tpot", "gptfast_ttft"]


class _Model(torch.nn.Module):
    """Weights as parameters and the KV cache as buffers, as in gpt-fast's model.py: that
    is what lets inductor's CUDA graphs treat the in-place cache update as static."""

    def __init__(self, hf: Any, max_len: int) -> None:
        super().__init__()
        cfg = hf.config
        self.n_heads = cfg.num_attention_heads
        self.n_kv = cfg.num_key_value_heads
        self.head_dim = cfg.hidden_size // self.n_heads
        self.eps = cfg.rms_norm_eps
        inner = hf.model

        def param(t: torch.Tensor) -> torch.nn.Parameter:
            return torch.nn.Parameter(t.detach(), requires_grad=False)

        self.embed = param(inner.embed_tokens.weight)
        self.layers = torch.nn.ModuleList()
        dev, dt = self.embed.device, self.embed.dtype
        shape = (1, self.n_kv, max_len, self.head_dim)
        for layer in inner.layers:
            block = torch.nn.Module()
            att, mlp = layer.self_attn, layer.mlp
            block.ln1 = param(layer.input_layernorm.weight)
            block.wqkv = param(torch.cat([att.q_proj.weight, att.k_proj.weight, att.v_proj.weight]))
            block.bqkv = (
                param(torch.cat([att.q_proj.bias, att.k_proj.bias, att.v_proj.bias]))
                if att.q_proj.bias is not None  # Qwen2
                else None
            )
            block.wo = param(att.o_proj.weight)
            block.ln2 = param(layer.post_attention_layernorm.weight)
            block.w13 = param(torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]))
            block.w2 = param(mlp.down_proj.weight)
            block.register_buffer("k_cache", torch.zeros(shape, device=dev, dtype=dt))
            block.register_buffer("v_cache", torch.zeros(shape, device=dev, dtype=dt))
            self.layers.append(block)
        self.norm = param(inner.norm.weight)
        self.lm_head = param(hf.lm_head.weight)
        cos, sin = inner.rotary_emb(
            torch.zeros(1, device=dev, dtype=dt), torch.arange(max_len, device=dev)[None]
        )
        self.register_buffer("cos", cos[0])
        self.register_buffer("sin", sin[0])
        self.register_buffer(
            "causal", torch.tril(torch.ones(max_len, max_len, dtype=torch.bool, device=dev))
        )

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
        for b in self.layers:
            qkv = F.linear(self.norm_(x, b.ln1), b.wqkv, b.bqkv)
            q = qkv[..., :nq].view(1, t, self.n_heads, self.head_dim).transpose(1, 2)
            k = qkv[..., nq : nq + nk].view(1, t, self.n_kv, self.head_dim).transpose(1, 2)
            v = qkv[..., nq + nk :].view(1, t, self.n_kv, self.head_dim).transpose(1, 2)
            q, k = self.rope(q, pos), self.rope(k, pos)
            b.k_cache.index_copy_(2, pos, k)
            b.v_cache.index_copy_(2, pos, v)
            y = F.scaled_dot_product_attention(
                q, b.k_cache, b.v_cache, attn_mask=mask, enable_gqa=True
            )
            x = x + F.linear(y.transpose(1, 2).reshape(1, t, nq), b.wo)
            g, u = F.linear(self.norm_(x, b.ln2), b.w13).chunk(2, -1)
            x = x + F.linear(F.silu(g) * u, b.w2)
        return F.linear(self.norm_(x, self.norm), self.lm_head)


def gptfast_tpot(
    hf: Any, prompt: list[int], new_tokens: int, repeats: int
) -> tuple[dict, list[int]]:
    """Median TPOT of the compiled loop, and its greedy tokens."""
    import torch._inductor.config as inductor

    inductor.coordinate_descent_tuning = True  # gpt-fast's generate.py settings
    inductor.triton.unique_kernel_names = True
    inductor.fx_graph_cache = True
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
            token = decode(token.view(1, 1), pos).clone()  # graph outputs get overwritten
            pos += 1
            out.append(token)
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


def gptfast_ttft(hf: Any, prompts: Any) -> tuple[float, float]:
    """(cold, cached) median TTFT in ms of the model's prefill (eager, as `gptfast_tpot`'s
    and gpt-fast's own without --compile_prefill): a cold prompt from position 0, and a
    keystroke's tokens after the prefix (filled once; the same cache positions are
    rewritten each run). `prompts`: `ttft.TTFTPrompts`."""
    model = _Model(hf, prompts.longest + 8)
    dev = model.embed.device

    def feed(ids: list[int], start: int) -> float:
        t0 = time.perf_counter()
        x = torch.tensor([ids], device=dev)
        pos = torch.arange(start, start + len(ids), device=dev)
        int(model.forward(x, pos)[0, -1].argmax())
        return time.perf_counter() - t0

    start = len(prompts.prefix)
    with torch.inference_mode():
        feed(prompts.cold[0], 0)  # first-call costs
        cold = [feed(ids, 0) for ids in prompts.cold]
        feed(prompts.prefix, 0)
        feed(prompts.keystrokes[0], start)
        cached = [feed(new, start) for new in prompts.keystrokes]
    return (
        round(statistics.median(cold) * 1e3, 3),
        round(statistics.median(cached) * 1e3, 3),
    )
