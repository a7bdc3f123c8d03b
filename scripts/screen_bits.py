"""How many rows the greedy head's exact screen leaves at fewer bits (CPU, a few minutes).

The screen (`ling_local/engines/triton_screen.py`) reads an int8 copy of the output head and
recomputes in bf16 every row whose Cauchy-Schwarz upper bound, screened + ||x|| ||w_n -
w~_n||, reaches the largest lower bound. At 4 bits the head would read half the bytes again
(Llama-3.2-1B: 131 instead of 263 MB, ~31 us a token at 4.2 TB/s), if the bound still left
few rows. This script answers that on the bench's model shape (`bench engine`'s random
weights, HF's init, its 512-token random prompt, greedy steps), with the head quantised per
row (as the shipped screen is) or per group of columns at each bit width, and writes the
counts to --out:

    .venv/bin/python scripts/screen_bits.py --out docs/bench/screen_bits_cpu.json

The weights are drawn on the CPU, so they are not the GPU run's bytes, only its
distribution; the fp32 summation allowance of the shipped bound (~1e-9 relative) is left
out, as it moves nothing here.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

import torch
from rich.progress import track

from ling_local.bench.baselines import bench_config
from ling_local.bench.engine import LLAMA_1B

SCHEMES = [(8, 0), (6, 0), (5, 0), (4, 0), (4, 128), (4, 32)]
"""(bits, columns per scale; 0: one scale a row, as the shipped int8 screen)."""


def residual_norms(w: torch.Tensor, bits: int, group: int) -> torch.Tensor:
    """||w_n - w~_n|| per row for symmetric absmax quantisation to `bits`, in fp64."""
    qmax = 2 ** (bits - 1) - 1
    v, k = w.shape
    g = group or k
    out = torch.empty(v, dtype=torch.float64)
    for i in range(0, v, 8192):
        block = w[i : i + 8192].double().view(-1, k // g, g)
        s = block.abs().amax(dim=2, keepdim=True).clamp_min(1e-30) / qmax
        r = block - torch.round(block / s).clamp(-qmax, qmax) * s
        out[i : i + 8192] = r.reshape(-1, k).norm(dim=1)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=32, help="greedy steps after the prompt")
    parser.add_argument("--prompt-tokens", type=int, default=512)
    parser.add_argument("--out", type=Path, default=Path("screen_bits_cpu.json"))
    args = parser.parse_args()
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    start = time.time()
    model = LlamaForCausalLM(bench_config(LLAMA_1B)).to(torch.bfloat16).float().eval()
    prompt = torch.randint(
        3, 30000, (1, args.prompt_tokens), generator=torch.Generator().manual_seed(0)
    )
    xs: list[torch.Tensor] = []
    model.model.norm.register_forward_hook(lambda _m, _i, out: xs.append(out[0, -1].double()))
    with torch.inference_mode():
        out = model(prompt, use_cache=True)
        for _ in track(range(args.steps), description="greedy steps"):
            token = out.logits[0, -1].argmax().view(1, 1)
            out = model(token, past_key_values=out.past_key_values, use_cache=True)
    x = torch.stack(xs)  # the head inputs of the prompt's last token and of each step
    w = model.lm_head.weight.detach().double()
    logits = x @ w.T
    top2 = logits.topk(2, dim=1).values
    result: dict = {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "shape": LLAMA_1B,
        "tokens": x.shape[0],
        "top1_minus_top2_median": statistics.median((top2[:, 0] - top2[:, 1]).tolist()),
        "logit_std": logits.std().item(),
        "schemes": [],
    }
    xn = x.norm(dim=1, keepdim=True)
    for bits, group in track(SCHEMES, description="schemes"):
        slack = xn * residual_norms(w, bits, group)[None, :]
        low = (logits - slack).max(dim=1, keepdim=True).values
        counts = ((logits + slack) >= low).sum(dim=1).tolist()
        head_bytes = w.numel() * bits / 8 + w.shape[0] * 4 * (w.shape[1] // (group or w.shape[1]))
        result["schemes"].append(
            {
                "bits": bits,
                "columns_per_scale": group or w.shape[1],
                "head_mb": round(head_bytes / 1e6, 1),
                "candidates_median": statistics.median(counts),
                "candidates_max": max(counts),
                "of_rows": w.shape[0],
            }
        )
        print(result["schemes"][-1], flush=True)
    result["seconds"] = round(time.time() - start, 1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
