"""The model and profiles of scripts/gpu_ttft.sh: a random-weight checkpoint of the
Qwen2.5-0.5B shape (24 layers, hidden 896, 14 query / 2 kv heads, intermediate 4864,
vocab 151,936, tied: the model of issue 29's measurements), written as a Llama checkpoint
(no q/k/v bias: transformers 5 loads a qwen2 checkpoint's tokenizer as Qwen2's own BPE,
whatever tokenizer.json holds), with a word-level tokenizer that covers every id (a random model emits any id, and every id must decode to
text for the first SSE chunk to carry it), and three profiles for it: the embedded engine
on the GPU with the Triton decode step and with the PyTorch one, and SGLang from the GPU
kit (scripts/gpu_sglang_check.py's flags and environment).

    python3 scripts/gpu_ttft_setup.py --out /tmp/ttft              # on the GPU machine
    python3 scripts/gpu_ttft_setup.py --out /tmp/ttft --shape tiny --device cpu   # a CPU try
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

SHAPES = {
    "qwen-0.5b": dict(
        hidden_size=896,
        intermediate_size=4864,
        num_hidden_layers=24,
        num_attention_heads=14,
        num_key_value_heads=2,
        vocab_size=151936,
    ),
    "tiny": dict(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=4096,
    ),
}
KIT_FLAGS = [  # what the SGLang GPU kit needs (its README; scripts/gpu_sglang_check.py)
    "--attention-backend",
    "triton",
    "--sampling-backend",
    "pytorch",
    "--grammar-backend",
    "none",
    "--disable-piecewise-cuda-graph",
    "--cuda-graph-max-bs",
    "4",
]


def build_model(path: Path, shape: str, device: str) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from ling_local.bench.baselines import word_tokenizer

    if (path / "config.json").is_file():
        return
    config = LlamaConfig(
        **SHAPES[shape],
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        rope_theta=1000000.0,
        rms_norm_eps=1e-6,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )
    torch.manual_seed(0)
    with torch.device(device):
        model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(path)
    word_tokenizer(config.vocab_size).save_pretrained(path)


def write_profiles(out: Path, model: Path, device: str, kit: Path | None) -> None:
    for kernels in ("triton", "torch"):
        (out / f"ttft-{kernels}.toml").write_text(
            f'name = "ttft-{kernels}"\n'
            '[engine]\nkind = "torch"\ncache_slots = 3\n'
            f'kernels = "{kernels}"\n'
            f'[model]\npath = {json.dumps(str(model))}\nname = "ttft"\n'
            f'device = "{device}"\ncontext_length = 4096\n'
            '[prompt]\nchat_template = "plain"\n'
        )
    env = {"SGLANG_IS_FLASHINFER_AVAILABLE": "false"}
    if kit is not None:
        env["PYTHONPATH"] = f"/tmp/site:{kit / 'stubs'}"
    env_toml = ", ".join(f"{k} = {json.dumps(v)}" for k, v in env.items())
    (out / "ttft-sglang.toml").write_text(
        'name = "ttft-sglang"\n[engine]\nkind = "sglang"\n'
        f'[model]\npath = {json.dumps(str(model))}\nname = "ttft"\n'
        '[prompt]\nchat_template = "plain"\n'
        f"[sglang]\npython = {json.dumps(sys.executable)}\nmem_fraction_static = 0.5\n"
        f"args = {json.dumps(KIT_FLAGS)}\nenv = {{ {env_toml} }}\nstartup_timeout_s = 300\n"
    )


def main() -> None:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--out", type=Path, required=True)
    cli.add_argument("--shape", choices=sorted(SHAPES), default="qwen-0.5b")
    cli.add_argument("--device", default="cuda")
    cli.add_argument("--kit", type=Path, help="the SGLang kit folder (.sglang-kit)")
    args = cli.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    model = args.out / f"model-{args.shape}"
    t0 = time.time()
    build_model(model, args.shape, args.device)
    write_profiles(args.out, model, args.device, args.kit.resolve() if args.kit else None)
    print(f"model {model} and profiles in {args.out} after {time.time() - t0:.1f}s", flush=True)


if __name__ == "__main__":
    main()
