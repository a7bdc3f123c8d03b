"""CUDA-graph forward steps for the Llama fast path.

A `GraphStep` replays a captured forward of T tokens (T = 1 for decode, k + 1 for a
speculative verify) at a position held in a device tensor, so consecutive replays need no
host input: a decode graph (T = 1) ends by writing its argmax where the next replay reads
its input and bumping the position (`chains`). Attention runs over the whole static cache
with a mask, which keeps every shape fixed. One step function is (optionally) compiled per
T and captured per KV slot. With the Triton kernels the step is
`triton.kernels.triton_step` instead: the same inputs and outputs, its own kernels
(attention over the live context only, the chaining done by the output head's kernel),
captured alike.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from ling_local.engines.embedded.llama_runner import (
    KVSlot,
    LlamaWeights,
    attention_block,
    mlp_block,
    rms_norm,
)

__all__ = ["GraphStep", "step_function"]

_compiled: dict[tuple[int, int], Any] = {}


def _step(
    w: LlamaWeights,
    k_cache: list[torch.Tensor],
    v_cache: list[torch.Tensor],
    tokens: torch.Tensor,
    pos: torch.Tensor,
    rows: torch.Tensor,
    cols: torch.Tensor,
    banned: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    positions = pos + rows  # [T]
    x = F.embedding(tokens, w.embed)
    cos = w.cos.index_select(0, positions)[:, None, :]
    sin = w.sin.index_select(0, positions)[:, None, :]
    mask = (cols[None, :] <= positions[:, None])[None, None]
    for i, layer in enumerate(w.layers):
        kc, vc = k_cache[i], v_cache[i]

        def write(k: torch.Tensor, v: torch.Tensor, kc=kc, vc=vc) -> None:
            kc.index_copy_(1, positions, k.transpose(0, 1))
            vc.index_copy_(1, positions, v.transpose(0, 1))

        def read(kc=kc, vc=vc):
            return kc, vc, mask

        x = x + attention_block(w, layer, x, cos, sin, write, read)
        x = x + mlp_block(w, layer, x)
    logits = F.linear(rms_norm(x, w.norm, w.eps), w.lm_head)
    logits = logits.index_fill(-1, banned, float("-inf"))
    return logits, logits.argmax(dim=-1)


def _triton_step(*args: Any, **kw: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """`_step` through hand-written Triton kernels (`triton.kernels`; imports triton)."""
    from ling_local.engines.embedded.triton.kernels import triton_step

    return triton_step(*args, **kw)


def step_function(t: int, compile_step: bool, kernels: str = "torch") -> Any:
    """The step for T tokens, compiled once per T and shared by every slot. With
    kernels="triton" the step is the hand-written kernels, never torch.compile'd."""
    if kernels == "triton":
        return _triton_step
    if not compile_step:
        return _step
    key = (t, 1)
    if key not in _compiled:
        import torch._inductor.config as inductor

        # As gpt-fast does: with coordinate-descent tuning inductor turns batch-1 matmuls
        # into Triton reductions that reach the memory bandwidth cuBLAS GEMV does not.
        inductor.coordinate_descent_tuning = True
        inductor.triton.unique_kernel_names = True
        inductor.fx_graph_cache = True
        # The weights are inputs of the step, not module parameters: unless told they are
        # 16-byte aligned (they are: whole allocations), inductor's kernels load them
        # without vector hints, and the down projection ran at half of gpt-fast's speed.
        if hasattr(inductor, "assume_aligned_inputs"):
            inductor.assume_aligned_inputs = True
        _compiled[key] = torch.compile(_step, fullgraph=True, dynamic=False)
    return _compiled[key]


class GraphStep:
    def __init__(
        self,
        weights: LlamaWeights,
        slot: KVSlot,
        t: int,
        max_len: int,
        compile_step: bool = False,
        banned: torch.Tensor | None = None,
        kernels: str = "torch",
        screen: bool = False,
        ring: torch.Tensor | None = None,
    ) -> None:
        """`screen` (Triton kernels, T = 1): the head is the exact int8 screen, which
        gives the argmax and no logits (`self.logits` None): for greedy decoding only.
        `ring` (with `screen`: `kernels.lm_head_screened`): each token goes to
        ring[position % len(ring)], in mapped pinned host memory on a GPU, so the host
        reads it with no copy between replays (`self.argmax` is the ring)."""
        if screen and (kernels != "triton" or t != 1):
            raise ValueError("the screened head is the Triton kernels' T = 1 step")
        if ring is not None and not screen:
            raise ValueError("the token ring is written by the Triton kernels' screened head")
        dev = weights.embed.device
        self.banned = torch.zeros(0, dtype=torch.long, device=dev) if banned is None else banned
        self.t = t
        self.ring = ring
        self.weights = weights
        self.slot = slot
        self.tokens = torch.zeros(t, dtype=torch.long, device=dev)
        # Warm-up and capture write at the cache's tail, which real positions reach last.
        tail = max_len - t
        self.pos = torch.full((1,), tail, dtype=torch.long, device=dev)
        self.rows = torch.arange(t, device=dev)
        self.cols = torch.arange(max_len, device=dev)
        fn = step_function(t, compile_step, kernels)
        self.chains = t == 1
        """Each replay feeds the next: tokens = argmax, pos += 1 (greedy decode chains on
        the device; a sampled token is copied over it by `advance`)."""
        extra: dict[str, Any] = {}
        self.scratch = None
        """The Triton kernels' scratch buffers (None for the torch step)."""
        if kernels == "triton":
            from ling_local.engines.embedded.triton.kernels import Scratch
            from ling_local.engines.embedded.triton.setup import screen_head

            extra = {
                "scratch": Scratch(dev, weights.lm_head.shape[0], self.banned),
                "chain": self.chains,
                "screen": screen_head(weights) if screen else None,
                "ring": ring,
            }
            self.scratch = extra["scratch"]

        def run() -> tuple[torch.Tensor, torch.Tensor]:
            logits, argmax = fn(
                weights, slot.k, slot.v, self.tokens, self.pos, self.rows, self.cols,
                self.banned, **extra,
            )  # fmt: skip
            if self.chains and kernels != "triton":
                self.tokens.copy_(argmax)
                self.pos.add_(t)
            return logits, argmax

        self._run = run
        self.graph = None
        if not weights.embed.is_cuda:  # CPU: same step, run eagerly at replay (tests the logic)
            self.logits, self.argmax = None, ring
            return
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream), torch.inference_mode():
            for _ in range(3):
                self.pos.fill_(tail)  # a chaining step moved it past the cache
                run()
            self.pos.fill_(tail)
        torch.cuda.current_stream().wait_stream(stream)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph), torch.inference_mode():
            self.logits, self.argmax = run()

    def load(self, tokens: list[int] | torch.Tensor, position: int) -> None:
        """Set the step's input tokens and the position of the first one."""
        if isinstance(tokens, torch.Tensor):
            self.tokens.copy_(tokens, non_blocking=True)
        else:
            self.tokens.copy_(torch.tensor(tokens, dtype=torch.long), non_blocking=True)
        self.pos.fill_(position)

    def replay(self) -> None:
        if self.graph is None:
            self.logits, self.argmax = self._run()
        else:
            self.graph.replay()

    def advance(self, next_input: torch.Tensor) -> None:
        """Chain the next decode step on the device: its input is `next_input` (this step's
        argmax, or a token sampled from its logits), one position further. A chaining step
        did that itself for the argmax: only a sampled token is copied in."""
        if self.chains:
            if next_input is not self.argmax:
                self.tokens.copy_(next_input)
            return
        self.tokens.copy_(next_input)
        self.pos.add_(self.t)
