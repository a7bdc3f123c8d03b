"""The model, activations and timing `gpu_kernel_sweep.py` measures the Triton kernels
with: the Llama-3.2-1B-shaped random model of `bench engine` on the GPU, each kernel
launched once per layer's weights, replays of CUDA graphs timed with events."""

from __future__ import annotations

import statistics

import torch

from ling_local.bench.baselines import bench_config, copy_bandwidth
from ling_local.bench.engine import LLAMA_1B

__all__ = ["CONTEXT", "MAX_LEN", "Fixture", "bandwidth", "graph_ms"]

CONTEXT = 512
MAX_LEN = 1024


# --------------------------------------------------------------------------- fixtures
class Fixture:
    """The model's weights and the activations each kernel reads, on the GPU."""

    def __init__(self, layers: int | None = None) -> None:
        from transformers import LlamaForCausalLM

        from ling_local.engines.embedded.llama_runner import LlamaRunner

        overrides: dict = {} if layers is None else {"num_hidden_layers": layers}
        config = bench_config(LLAMA_1B, **overrides)
        torch.manual_seed(0)
        with torch.device("cuda"):
            model = LlamaForCausalLM(config).to(torch.bfloat16).eval()
        self.model = model
        self.runner = LlamaRunner(model, torch.device("cuda"), MAX_LEN, cuda_graphs=False)
        self.w = self.runner.weights
        from ling_local.engines.embedded.triton.setup import fold_norms

        fold_norms(self.w)  # the Triton kernels' form (and the torch steps run it too)
        self.slot = self.runner.new_cache()
        gen = torch.Generator().manual_seed(1)
        self.prompt = torch.randint(3, config.vocab_size, (CONTEXT,), generator=gen).tolist()
        with torch.inference_mode():
            self.runner.forward(self.slot, self.prompt)
        dev, bf = "cuda", torch.bfloat16
        h, i = config.hidden_size, config.intermediate_size
        self.x = torch.randn(9, h, device=dev, dtype=bf)
        self.q = torch.randn(9, h, device=dev, dtype=bf)
        self.act = torch.randn(9, i, device=dev, dtype=bf) * 0.1
        self.pos = torch.tensor([CONTEXT], device=dev)

    def op(self, name: str):
        """A function launching kernel `name` once per layer (the lm_head: 4 times);
        "verify:<name>" at T = 9."""
        from ling_local.engines.embedded.triton import kernels as tk

        w, s = self.w, tk.Scratch(torch.device("cuda"), self.w.lm_head.shape[0])
        nh, nkv, hd, eps = w.n_heads, w.n_kv_heads, w.head_dim, w.eps
        ks, vs = self.slot.k, self.slot.v
        t = 9 if name.startswith("verify:") else 1
        name = name.split(":")[-1]
        x, q, act = self.x[:t], self.q[:t], self.act[:t]

        def run() -> None:
            for i, layer in enumerate(w.layers):
                if name == "qkv":
                    tk.qkv_rope_kv(
                        x, layer.wqkv, None, ks[i], vs[i], w.cos, w.sin, self.pos, nh, nkv,
                        hd, eps,
                    )  # fmt: skip
                elif name == "attn":
                    tk.decode_attention(q, ks[i], vs[i], self.pos, nh, nkv, hd, s)
                elif name == "o":
                    tk.gemv(q, layer.wo, "o", residual=x)
                elif name == "gate_up":
                    tk.gate_up_silu(x, layer.w13, eps)
                elif name == "down":
                    tk.gemv(act, layer.w2, "down", residual=x)
                elif name == "lm_head" and i < 4:
                    tk.lm_head_argmax(x, w.lm_head, eps, s)

        return run

    def op_bytes(self, name: str) -> int:
        name = name.split(":")[-1]
        w = self.w
        n = len(w.layers)
        layer = w.layers[0]
        per = {
            "qkv": layer.wqkv.numel() * 2 * n,
            "o": layer.wo.numel() * 2 * n,
            "gate_up": layer.w13.numel() * 2 * n,
            "down": layer.w2.numel() * 2 * n,
            "lm_head": w.lm_head.numel() * 2 * 4,
            "attn": 2 * self.slot.k[0][:, : CONTEXT + 1].numel() * 2 * n,
        }
        return per[name]


def graph_ms(fn, reps: int = 25) -> float:
    """Median replay time of `fn` captured in a CUDA graph."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream), torch.inference_mode():
        fn()
        fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph), torch.inference_mode():
        fn()
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        graph.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    del graph
    return statistics.median(times)


def bandwidth() -> dict:
    """The device's copy bandwidth (`bench engine`'s: bytes read + written), for the floor."""
    return {"copy_tb_s": round(copy_bandwidth(torch.device("cuda")) / 1e12, 3)}
