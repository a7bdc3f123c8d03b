"""The embedded engine's fast path for Llama-family checkpoints (Llama, Mistral, Qwen2,
Qwen3): the weights of the transformers model, run by plain functions over a preallocated
KV cache (gpt-fast style). Loading still goes through transformers, so any checkpoint it
reads works; what differs is the per-token host work: a handful of tensor ops per layer,
no per-step Python objects, and cropping a cache is setting an integer.

On a GPU the single-token decode step is captured in a CUDA graph per KV slot
(`ling_local.engines.embedded.cuda_graphs`); on the CPU it runs eagerly.

A prompt chunk runs as one forward over all its tokens, its attention one fused (flash)
call: causal from the top left when the chunk starts the sequence, from the bottom right
when it extends a cached prefix (its queries see every cached key). On a GPU a chunk is
padded up to a length bucket (`PREFILL_BUCKETS`), so the set of shapes a prompt can run
is small and the engine's warm-up runs each of them once: the GEMMs a request needs are
loaded and chosen before the first request."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from ling_local.engines.embedded.cpu_decode import LeanDecode, lean_supported
from ling_local.engines.embedded.quant import RescoredHead, int8_available, linear, quantize_int8

__all__ = [
    "PREFILL_BUCKETS",
    "Causal",
    "KVSlot",
    "LlamaRunner",
    "LlamaWeights",
    "causal_attention",
    "supports",
]

#: Prompt-chunk lengths on a GPU: a chunk is padded up to the first that holds it (the
#: padding's keys land past the sequence's end, where nothing reads them before they are
#: overwritten). Powers of two up to 256, then steps of 256: at most 25 % padding there.
PREFILL_BUCKETS = (16, 32, 64, 128, 256, 512, 768, 1024, 1280, 1536, 1792, 2048)

_SUPPORTED = {"llama", "mistral", "qwen2", "qwen3"}


def supports(config: Any) -> bool:
    """Whether the fast path can run this architecture exactly like transformers does."""
    rope = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    rope_type = (
        rope.get("rope_type", rope.get("type", "default")) if isinstance(rope, dict) else "default"
    )
    return (
        getattr(config, "model_type", None) in _SUPPORTED
        and getattr(config, "hidden_act", "silu") == "silu"
        and rope_type in ("default", "llama3", "linear", "yarn")
        and not getattr(config, "mlp_bias", False)
    )


@dataclass(slots=True)
class _Layer:
    ln_in: torch.Tensor
    wqkv: torch.Tensor
    bqkv: torch.Tensor | None
    wo: torch.Tensor
    ln_post: torch.Tensor
    w13: torch.Tensor
    w2: torch.Tensor
    q_norm: torch.Tensor | None
    k_norm: torch.Tensor | None


@dataclass(slots=True)
class LlamaWeights:
    embed: torch.Tensor
    layers: list[_Layer]
    norm: torch.Tensor
    lm_head: torch.Tensor
    cos: torch.Tensor
    """RoPE tables [max_positions, head_dim], in the model dtype (as transformers casts)."""
    sin: torch.Tensor
    n_heads: int
    n_kv_heads: int
    head_dim: int
    eps: float
    norms_folded: bool = False
    """The RMSNorm weights are folded into the next matrices (`triton.setup.fold_norms`)."""
    head_screen: Any = None
    """The output head's int8 screen for greedy steps (`triton.setup.screen_head`), built
    on first use."""

    @classmethod
    def from_hf(cls, model: Any, max_positions: int) -> LlamaWeights:
        cfg = model.config
        inner = model.model
        n_heads = cfg.num_attention_heads
        n_kv = getattr(cfg, "num_key_value_heads", None) or n_heads
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // n_heads
        layers = []
        for layer in inner.layers:
            att, mlp = layer.self_attn, layer.mlp
            bias = None
            if att.q_proj.bias is not None:
                bias = torch.cat([att.q_proj.bias, att.k_proj.bias, att.v_proj.bias]).detach()
            layers.append(
                _Layer(
                    ln_in=layer.input_layernorm.weight.detach(),
                    wqkv=torch.cat(
                        [att.q_proj.weight, att.k_proj.weight, att.v_proj.weight]
                    ).detach(),
                    bqkv=bias,
                    wo=att.o_proj.weight.detach(),
                    ln_post=layer.post_attention_layernorm.weight.detach(),
                    w13=torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]).detach(),
                    w2=mlp.down_proj.weight.detach(),
                    q_norm=att.q_norm.weight.detach() if hasattr(att, "q_norm") else None,
                    k_norm=att.k_norm.weight.detach() if hasattr(att, "k_norm") else None,
                )
            )
        embed = inner.embed_tokens.weight.detach()
        positions = torch.arange(max_positions, device=embed.device)[None]
        probe = torch.zeros(1, device=embed.device, dtype=embed.dtype)
        cos, sin = inner.rotary_emb(probe, positions)
        return cls(
            embed=embed,
            layers=layers,
            norm=inner.norm.weight.detach(),
            lm_head=model.lm_head.weight.detach(),
            cos=cos[0].contiguous(),
            sin=sin[0].contiguous(),
            n_heads=n_heads,
            n_kv_heads=n_kv,
            head_dim=head_dim,
            eps=cfg.rms_norm_eps,
        )


@dataclass(eq=False, slots=True)
class KVSlot:
    """Keys and values of one sequence: per layer a [kv_heads, max_len, head_dim] tensor of
    its own (a compiled step writes into its inputs in place; a view of one big tensor
    made inductor copy the whole cache back after each step, ~80 us on the 1B model)."""

    k: list[torch.Tensor]
    v: list[torch.Tensor]
    length: int = 0
    graphs: dict[int, Any] = field(default_factory=dict)
    """CUDA-graph steps captured for this slot, by tokens per step (GPU only)."""
    kv: torch.Tensor | None = None
    """On the CPU, k and v are views into this [layers, 2, kv_heads, max_len, head_dim]
    block, so the lean decode step writes a token's keys and values in one copy (only the
    CUDA path is compiled, which wants tensors of their own)."""


@dataclass(frozen=True, slots=True)
class Causal:
    """The mask of a prompt chunk that starts at position `start`: each query sees the keys
    up to its own position (`causal_attention` picks the fused kernel for it)."""

    start: int


# --------------------------------------------------------------------------- the math
def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    # transformers' LlamaRMSNorm: normalise in float32, cast back, then scale. In float32
    # that is exactly what the fused kernel computes (one op instead of seven per call).
    if x.dtype == torch.float32 and weight.dtype == torch.float32 and not x.is_cuda:
        return F.rms_norm(x, (x.shape[-1],), weight, eps)
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(x.dtype)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE as transformers applies it (rotate_half convention). x: [T, heads, head_dim]."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


def attention_block(
    w: LlamaWeights,
    layer: _Layer,
    x: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    write_kv,
    keys_values,
) -> torch.Tensor:
    """One layer's attention. `write_kv(k, v)` stores [T, kv, hd] keys/values;
    `keys_values()` returns (keys, values, mask) to attend over: the mask a boolean tensor,
    None (every key visible) or `Causal`."""
    t = x.shape[0]
    h = rms_norm(x, layer.ln_in, w.eps)
    qkv = linear(h, layer.wqkv, layer.bqkv)
    nq, nk = w.n_heads * w.head_dim, w.n_kv_heads * w.head_dim
    v = qkv[:, nq + nk :].view(t, w.n_kv_heads, w.head_dim)
    if layer.q_norm is not None:
        q = rotate(
            rms_norm(qkv[:, :nq].view(t, w.n_heads, w.head_dim), layer.q_norm, w.eps), cos, sin
        )
        k = rotate(
            rms_norm(qkv[:, nq : nq + nk].view(t, w.n_kv_heads, w.head_dim), layer.k_norm, w.eps),
            cos,
            sin,
        )
    else:  # q and k sit side by side in qkv: rotate both heads' worth in one go
        qk = rotate(qkv[:, : nq + nk].view(t, w.n_heads + w.n_kv_heads, w.head_dim), cos, sin)
        q, k = qk[:, : w.n_heads], qk[:, w.n_heads :]
    write_kv(k, v)
    keys, values, mask = keys_values()
    gqa = w.n_kv_heads != w.n_heads
    if not isinstance(mask, Causal):
        out = F.scaled_dot_product_attention(
            q.transpose(0, 1)[None], keys[None], values[None], attn_mask=mask, enable_gqa=gqa
        )
    else:
        out = causal_attention(q.transpose(0, 1)[None], keys[None], values[None], mask.start, gqa)
    return linear(out[0].transpose(0, 1).reshape(t, nq), layer.wo)


def causal_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, start: int, gqa: bool
) -> torch.Tensor:
    """Attention of a chunk's queries q [1, heads, T, hd] at positions start.. over the keys
    k, v [1, kv_heads, start + T, hd], each query seeing the keys up to its own position.

    One fused kernel where the device has it: at start 0 SDPA's own causal mode (flash
    attention on a GPU); past a cached prefix the bottom-right-aligned causal bias, which
    SDPA runs as flash attention on a GPU in half precision. Otherwise (the CPU, float32 on
    a GPU) an explicit mask."""
    t, s = q.shape[2], k.shape[2]
    if t == 1:  # one query at the end: every key is visible
        return F.scaled_dot_product_attention(q, k, v, enable_gqa=gqa)
    if start == 0 and s == t:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
    if q.is_cuda and q.dtype in (torch.float16, torch.bfloat16):
        from torch.nn.attention.bias import causal_lower_right

        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=causal_lower_right(t, s), enable_gqa=gqa
        )
    rows = torch.arange(s - t, s, device=q.device)[:, None]
    cols = torch.arange(s, device=q.device)[None, :]
    return F.scaled_dot_product_attention(
        q, k, v, attn_mask=(cols <= rows)[None, None], enable_gqa=gqa
    )


def mlp_block(w: LlamaWeights, layer: _Layer, x: torch.Tensor) -> torch.Tensor:
    h = rms_norm(x, layer.ln_post, w.eps)
    gate, up = linear(h, layer.w13).chunk(2, dim=-1)
    return linear(F.silu(gate) * up, layer.w2)


def forward_tokens(
    w: LlamaWeights,
    slot: KVSlot,
    ids: torch.Tensor,
    start: int,
    all_logits: bool,
    n_real: int | None = None,
) -> torch.Tensor:
    """Feed ids at positions start.. into the slot. Returns logits [T or 1, vocab]: of the
    first `n_real` positions only (the rest is padding), or of the last real one."""
    t = ids.shape[0]
    n = t if n_real is None else n_real
    end = start + t
    x = F.embedding(ids, w.embed)
    cos = w.cos[start:end, None, :]
    sin = w.sin[start:end, None, :]
    causal = Causal(start)
    for i, layer in enumerate(w.layers):
        k_cache, v_cache = slot.k[i], slot.v[i]

        def write(k: torch.Tensor, v: torch.Tensor, k_cache=k_cache, v_cache=v_cache) -> None:
            k_cache[:, start:end] = k.transpose(0, 1)
            v_cache[:, start:end] = v.transpose(0, 1)

        def read(k_cache=k_cache, v_cache=v_cache):
            return k_cache[:, :end], v_cache[:, :end], causal

        x = x + attention_block(w, layer, x, cos, sin, write, read)
        x = x + mlp_block(w, layer, x)
    x = x[:n] if all_logits else x[n - 1 : n]
    return linear(rms_norm(x, w.norm, w.eps), w.lm_head)


# --------------------------------------------------------------------------- the runner
def _quantize(w: LlamaWeights) -> None:
    """Every matmul weight to int8; the output head's top candidates are rescored in float
    (see RescoredHead), so greedy choices stay those of the float head."""
    for layer in w.layers:
        layer.wqkv = quantize_int8(layer.wqkv)
        layer.wo = quantize_int8(layer.wo)
        layer.w13 = quantize_int8(layer.w13)
        layer.w2 = quantize_int8(layer.w2)
    w.lm_head = RescoredHead(quantize_int8(w.lm_head), w.lm_head)


def _int8_fits(w: LlamaWeights) -> bool:
    """Whether every matmul's reduction length is a multiple of 8: torch's CPU int8 kernel
    (`_weight_int8pack_mm`, torch 2.13) crashes the process on any other (a segfault,
    not an error). Models that do not fit run in float."""
    mats = [m for layer in w.layers for m in (layer.wqkv, layer.wo, layer.w13, layer.w2)]
    return all(m.shape[1] % 8 == 0 for m in [*mats, w.lm_head])


class LlamaRunner:
    """Same interface as HFRunner (new_cache / crop / forward), plus `forward_all` for
    speculative verification and `decode_graph` on CUDA."""

    def __init__(
        self,
        model: Any,
        device: torch.device,
        max_len: int,
        cuda_graphs: bool = True,
        quantize: str = "none",
    ) -> None:
        self.device = device
        self.max_len = max_len
        self.weights = LlamaWeights.from_hf(model, max_len)
        self.quantized = (
            quantize == "int8"
            and device.type == "cpu"
            and int8_available()
            and _int8_fits(self.weights)
        )
        if self.quantized:
            _quantize(self.weights)
        self.dtype = self.weights.embed.dtype
        self.vocab_size = self.weights.embed.shape[0]
        self.use_graphs = cuda_graphs and device.type == "cuda"
        """Decode with graph steps (tests may set it on the CPU to run the same logic)."""
        self.prefill_buckets: tuple[int, ...] = PREFILL_BUCKETS if device.type == "cuda" else ()
        """Chunk lengths a prompt chunk is padded up to (GPU); () runs every length as it
        is (the CPU, where padding costs real compute and no kernel is loaded lazily).
        Tests may set it on the CPU to run the GPU's logic."""
        self.prefill_shapes: set[tuple[int, bool]] = set()
        """With buckets, (chunk length, whether it extends a cached prefix) of every
        multi-token forward run so far: the warm-up runs each bucket's, and a request's
        trace counts the ones it ran first (`new_shapes`: the first time a shape runs on a
        GPU loads and picks its kernels)."""
        self.lean = LeanDecode(self.weights) if lean_supported(self.weights, device) else None
        """The CPU's single-token step (`cpu_decode`); None runs decode through
        `forward_tokens` like any other chunk."""

    @property
    def prefill_chunk(self) -> int:
        """Prompt tokens fed per forward pass: the largest bucket on a GPU (a 2,048-token
        chunk of a 1B model is milliseconds there), 512 on the CPU, where a chunk bounds how
        long a higher-priority request waits."""
        return self.prefill_buckets[-1] if self.prefill_buckets else 512

    def bucket(self, n: int, start: int) -> int:
        """The length a chunk of n tokens at `start` runs as: the first bucket that holds it
        and fits in the cache, else n."""
        if n > 1:
            for size in self.prefill_buckets:
                if size >= n:
                    return size if start + size <= self.max_len else n
        return n

    def new_cache(self) -> KVSlot:
        w = self.weights
        if self.device.type == "cpu":  # per layer, K and V side by side (the lean step)
            kv = torch.zeros(
                (len(w.layers), 2, w.n_kv_heads, self.max_len, w.head_dim), dtype=self.dtype
            )
            return KVSlot([b[0] for b in kv], [b[1] for b in kv], kv=kv)
        shape = (w.n_kv_heads, self.max_len, w.head_dim)
        return KVSlot(
            [torch.zeros(shape, dtype=self.dtype, device=self.device) for _ in w.layers],
            [torch.zeros(shape, dtype=self.dtype, device=self.device) for _ in w.layers],
        )

    @staticmethod
    def crop(cache: KVSlot, length: int) -> None:
        cache.length = min(cache.length, length)

    def _ids(self, ids: list[int]) -> torch.Tensor:
        t = torch.tensor(ids, dtype=torch.long)
        return t.to(self.device, non_blocking=True) if self.device.type != "cpu" else t

    def forward(self, cache: KVSlot, ids: list[int]) -> torch.Tensor:
        """Feed ids after what the cache holds; return the last position's logits [vocab]."""
        if torch.is_inference_mode_enabled():  # the engine's worker: skip the 2 us guard
            return self._forward(cache, ids)
        with torch.inference_mode():
            return self._forward(cache, ids)

    def _forward(self, cache: KVSlot, ids: list[int]) -> torch.Tensor:
        start, n = cache.length, len(ids)
        if start + n > self.max_len:
            raise ValueError(f"sequence of {start + n} exceeds the cache ({self.max_len})")
        if n == 1 and self.lean is not None and cache.kv is not None:
            logits = self.lean.step(cache, ids[0])
            cache.length = start + 1
            return logits
        size = self.bucket(n, start)
        if n > 1 and self.prefill_buckets:
            self.prefill_shapes.add((size, start > 0))
        padded = ids + [ids[-1]] * (size - n)
        logits = forward_tokens(self.weights, cache, self._ids(padded), start, False, n)
        cache.length = start + n
        return logits[0].float()

    @torch.inference_mode()
    def forward_all(self, cache: KVSlot, ids: list[int]) -> torch.Tensor:
        """Like forward, but logits for every fed position [T, vocab] (speculative verify)."""
        start = cache.length
        if start + len(ids) > self.max_len:
            raise ValueError(f"sequence of {start + len(ids)} exceeds the cache ({self.max_len})")
        logits = forward_tokens(self.weights, cache, self._ids(ids), start, all_logits=True)
        cache.length = start + len(ids)
        return logits.float()
