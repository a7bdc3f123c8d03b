"""The Ling-3.0 deployment rehearsed at small scale on one H200 with SGLang 0.5.17 (issue 37).

SGLang 0.5.17 (the last release for the lent machine's torch 2.11) has no BailingMoeV3
(Ling-3.0); it has the previous generation of the family, ``BailingMoeV2_5ForCausalLM``
(``model_type = "bailing_hybrid"``): linear-attention layers, MLA full-attention layers and
a routed MoE with a shared expert. This script writes a random-weight checkpoint of that
structure (4 layers: linear, MLA, linear, MLA; 8 routed experts top-2 + 1 shared; a dense
first layer; one MTP layer) and a random DSpark draft (``DSparkDraftModel``) for it, then
serves it through the daemon with a profile made from ``configs/ling-3.0-flash-dspark.toml``
minus what one GPU and the kit cannot do (no ``--tp-size 4``, ``trtllm_mla`` and FlashInfer
-> the kit's Triton/PyTorch backends), ``--mamba-radix-cache-strategy extra_buffer`` kept.
Each variant that SGLang refuses is recorded with its exact error, and the next, one change
smaller, is tried: DSPARK as profiled -> the published NEXTN variant (the model's own MTP
layer) -> NEXTN without the ReplaySSM flags -> no speculation.

The weights make the target a bigram model (every layer's output projection is zero, so the
residual stream is the token's embedding) and its MTP layer a perfect draft of it
(``eh_proj`` passes the next token's embedding through): every layer kind still runs, and
speculation accepts every drafted token, so multi-token events are certain.

Checks through the daemon (results in $OUT/ling_rehearsal.json): completion, FIM, chat,
streaming, cancellation, speculation stats in ``ling``, multi-token events relayed exactly
(the streamed text equals SGLang's own answer for the same ids), prefix reuse on a second
keystroke, and the relay's overhead as in gpu_sglang_check.py.

    python3 scripts/gpu_ling_rehearsal.py --kit-site /tmp/site --kit-stubs .sglang-kit/stubs \
        --daemon-site /tmp/dsite [--lock /tmp/gpu-measure.lock]
On a CPU machine against the stand-in (the checks' plumbing; tests/sglang/test_gpu_script.py):
    python scripts/gpu_ling_rehearsal.py --standin
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_sglang_check import KIT_FLAGS, Daemon, leftovers  # noqa: E402  (beside this file)
from sglang_overhead import corpus_texts, measure  # noqa: E402

RESULT: dict = {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "attempts": [], "checks": {}}
HIDDEN, HEADS, HEAD_DIM, LAYERS, EXPERTS, VOCAB = 1024, 8, 128, 4, 8, 32000
MLA = {"kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128}
MASK_TOKEN_ID = 4  # <|fim_pad|> of the tokenizer: DSpark's mask token


def out_dir() -> Path:
    return Path(os.environ.get("OUT") or tempfile.gettempdir())


def record(key: str, value) -> None:
    RESULT[key] = value
    (out_dir() / "ling_rehearsal.json").write_text(json.dumps(RESULT, indent=1, default=str))


def check(name: str, ok: bool, detail: str = "") -> bool:
    RESULT["checks"][name] = {"ok": bool(ok), "detail": detail}
    record("checks", RESULT["checks"])
    print(f"[{'ok' if ok else 'FAIL'}] {name}: {detail}", flush=True)
    return ok


# ----------------------------------------------------------------------------- checkpoints
def target_config() -> dict:
    return {
        "architectures": ["BailingMoeV2_5ForCausalLM"],
        "model_type": "bailing_hybrid",
        "vocab_size": VOCAB,
        "hidden_size": HIDDEN,
        "intermediate_size": 2048,
        "num_hidden_layers": LAYERS,
        "layer_group_size": 2,  # (i + 1) % 2 == 0 -> MLA full attention: layers 1 and 3
        "num_attention_heads": HEADS,
        "num_key_value_heads": HEADS,
        "head_dim": HEAD_DIM,
        "use_qk_norm": True,
        "group_norm_size": 1,
        "linear_silu": False,
        "full_attention_type": "mla",
        "q_lora_rank": None,
        **MLA,
        "num_experts": EXPERTS,
        "num_experts_per_tok": 2,
        "num_shared_experts": 1,
        "moe_intermediate_size": 512,
        "first_k_dense_replace": 1,
        "n_group": 0,
        "topk_group": 0,
        "score_function": "sigmoid",
        "moe_router_enable_expert_bias": True,
        "norm_topk_prob": True,
        "routed_scaling_factor": 1.0,
        "num_nextn_predict_layers": 1,
        "rms_norm_eps": 1e-6,
        "max_position_embeddings": 8192,
        "rope_theta": 600000.0,
        "rope_scaling": None,
        "tie_word_embeddings": False,
        "pad_token_id": 0,
        "eos_token_id": 0,
        "torch_dtype": "bfloat16",
    }


def _mla(prefix: str, t: dict, rand, zeros, ones) -> None:
    nope, rope, v = MLA["qk_nope_head_dim"], MLA["qk_rope_head_dim"], MLA["v_head_dim"]
    rank = MLA["kv_lora_rank"]
    t[f"{prefix}.q_proj.weight"] = rand(HEADS * (nope + rope), HIDDEN)
    t[f"{prefix}.kv_a_proj_with_mqa.weight"] = rand(rank + rope, HIDDEN)
    t[f"{prefix}.kv_a_layernorm.weight"] = ones(rank)
    t[f"{prefix}.kv_b_proj.weight"] = rand(HEADS * (nope + v), rank)
    t[f"{prefix}.o_proj.weight"] = zeros(HIDDEN, HEADS * v)


def _moe(prefix: str, t: dict, rand, zeros, ones) -> None:
    import torch

    t[f"{prefix}.gate.weight"] = rand(EXPERTS, HIDDEN).float()
    t[f"{prefix}.gate.expert_bias"] = torch.zeros(EXPERTS, dtype=torch.float32)
    for e in range(EXPERTS):
        t[f"{prefix}.experts.{e}.gate_proj.weight"] = rand(512, HIDDEN)
        t[f"{prefix}.experts.{e}.up_proj.weight"] = rand(512, HIDDEN)
        t[f"{prefix}.experts.{e}.down_proj.weight"] = zeros(HIDDEN, 512)
    t[f"{prefix}.shared_experts.gate_proj.weight"] = rand(512, HIDDEN)
    t[f"{prefix}.shared_experts.up_proj.weight"] = rand(512, HIDDEN)
    t[f"{prefix}.shared_experts.down_proj.weight"] = zeros(HIDDEN, 512)


def write_target(path: Path, device: str) -> None:
    """The bailing_hybrid checkpoint, with the names SGLang 0.5.17's
    BailingMoELinearForCausalLM.load_weights reads (its modules' attribute names)."""
    import torch
    from safetensors.torch import save_file

    g = torch.Generator(device=device).manual_seed(0)

    def rand(*shape):
        return (torch.randn(*shape, generator=g, device=device) * 0.02).to(torch.bfloat16)

    def zeros(*shape):
        return torch.zeros(*shape, dtype=torch.bfloat16, device=device)

    def ones(*shape):
        return torch.ones(*shape, dtype=torch.bfloat16, device=device)

    t: dict = {
        "model.word_embeddings.weight": rand(VOCAB, HIDDEN) * 50,  # unit-size embeddings
        "model.norm.weight": ones(HIDDEN),
        "lm_head.weight": rand(VOCAB, HIDDEN),
    }
    for i in range(LAYERS + 1):  # the last one is the MTP layer (model.layers.{LAYERS})
        p = f"model.layers.{i}"
        t[f"{p}.input_layernorm.weight"] = ones(HIDDEN)
        t[f"{p}.post_attention_layernorm.weight"] = ones(HIDDEN)
        if i < LAYERS and (i + 1) % 2 != 0:  # linear attention (lightning, seg_la)
            a = f"{p}.attention"
            t[f"{a}.query_key_value.weight"] = rand(3 * HEADS * HEAD_DIM, HIDDEN)
            t[f"{a}.query_layernorm.weight"] = ones(HEAD_DIM)
            t[f"{a}.key_layernorm.weight"] = ones(HEAD_DIM)
            t[f"{a}.g_proj.weight"] = rand(HEADS * HEAD_DIM, HIDDEN)
            t[f"{a}.g_norm.weight"] = ones(HEADS * HEAD_DIM)
            t[f"{a}.dense.weight"] = zeros(HIDDEN, HEADS * HEAD_DIM)
        else:  # MLA full attention (the MTP layer is one too)
            _mla(f"{p}.attention", t, rand, zeros, ones)
        if i == 0:  # first_k_dense_replace = 1: a dense MLP
            t[f"{p}.mlp.gate_proj.weight"] = rand(2048, HIDDEN)
            t[f"{p}.mlp.up_proj.weight"] = rand(2048, HIDDEN)
            t[f"{p}.mlp.down_proj.weight"] = zeros(HIDDEN, 2048)
        else:
            _moe(f"{p}.mlp", t, rand, zeros, ones)
    mtp = f"model.layers.{LAYERS}"
    # eh_proj(cat(enorm(embed(next token)), hnorm(hidden))): the next token's embedding
    # through, so the MTP layer predicts what the bigram target will say next.
    eye = torch.eye(HIDDEN, dtype=torch.bfloat16, device=device)
    t[f"{mtp}.eh_proj.weight"] = torch.cat([eye, zeros(HIDDEN, HIDDEN)], dim=1)
    t[f"{mtp}.enorm.weight"] = ones(HIDDEN)
    t[f"{mtp}.hnorm.weight"] = ones(HIDDEN)
    t[f"{mtp}.final_layernorm.weight"] = ones(HIDDEN)
    save_file({k: v.contiguous().cpu() for k, v in t.items()}, str(path / "model.safetensors"))
    (path / "config.json").write_text(json.dumps(target_config(), indent=1))


def write_draft(path: Path, device: str) -> None:
    """A random DSpark draft (DFlash layers + a vanilla Markov head) for the target."""
    import torch
    from safetensors.torch import save_file

    g = torch.Generator(device=device).manual_seed(1)

    def rand(*shape):
        return (torch.randn(*shape, generator=g, device=device) * 0.02).to(torch.bfloat16)

    def ones(n):
        return torch.ones(n, dtype=torch.bfloat16, device=device)

    targets = [1, 3]
    t = {
        "fc.weight": rand(HIDDEN, len(targets) * HIDDEN),
        "hidden_norm.weight": ones(HIDDEN),
        "norm.weight": ones(HIDDEN),
        "markov_w1.weight": rand(VOCAB, 16),
        "markov_w2.weight": rand(VOCAB, 16),
        "layers.0.input_layernorm.weight": ones(HIDDEN),
        "layers.0.post_attention_layernorm.weight": ones(HIDDEN),
        "layers.0.self_attn.q_proj.weight": rand(HEADS * HEAD_DIM, HIDDEN),
        "layers.0.self_attn.k_proj.weight": rand(HEADS * HEAD_DIM, HIDDEN),
        "layers.0.self_attn.v_proj.weight": rand(HEADS * HEAD_DIM, HIDDEN),
        "layers.0.self_attn.o_proj.weight": rand(HIDDEN, HEADS * HEAD_DIM),
        "layers.0.self_attn.q_norm.weight": ones(HEAD_DIM),
        "layers.0.self_attn.k_norm.weight": ones(HEAD_DIM),
        "layers.0.mlp.gate_proj.weight": rand(2048, HIDDEN),
        "layers.0.mlp.up_proj.weight": rand(2048, HIDDEN),
        "layers.0.mlp.down_proj.weight": rand(HIDDEN, 2048),
    }
    save_file({k: v.contiguous().cpu() for k, v in t.items()}, str(path / "model.safetensors"))
    config = {
        "architectures": ["DSparkDraftModel"],
        "model_type": "qwen3",
        "vocab_size": VOCAB,
        "hidden_size": HIDDEN,
        "intermediate_size": 2048,
        "num_hidden_layers": 1,
        "num_attention_heads": HEADS,
        "num_key_value_heads": HEADS,
        "head_dim": HEAD_DIM,
        "rms_norm_eps": 1e-6,
        "max_position_embeddings": 8192,
        "rope_theta": 1000000.0,
        "tie_word_embeddings": False,
        "block_size": 8,  # Ling-3.0-flash-dspark's: verify window 9
        "num_target_layers": LAYERS,
        "dflash_config": {"target_layer_ids": targets, "mask_token_id": MASK_TOKEN_ID},
        "markov_rank": 16,
        "markov_head_type": "vanilla",
        "mask_token_id": MASK_TOKEN_ID,
        "enable_confidence_head": False,
        "torch_dtype": "bfloat16",
    }
    (path / "config.json").write_text(json.dumps(config, indent=1))


def build_models(root: Path, device: str, standin: bool) -> tuple[Path, Path]:
    from ling_local.bench.random_model import build_tokenizer

    target, draft = root / "bailing-hybrid", root / "bailing-hybrid-dspark"
    if (target / "config.json").is_file() and (draft / "config.json").is_file():
        return target, draft
    for d in (target, draft):
        d.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    tokenizer = build_tokenizer(1024 if standin else VOCAB, corpus_texts(2_000_000))
    for d in (target, draft):
        tokenizer.save_pretrained(d)
    if standin:  # the stand-in reads only the tokenizer; a config says what it stands for
        (target / "config.json").write_text(json.dumps(target_config()))
        (draft / "config.json").write_text(json.dumps({"architectures": ["DSparkDraftModel"]}))
    else:
        write_target(target, device)
        write_draft(draft, device)
    record("models", {"target": str(target), "draft": str(draft), "s": round(time.time() - t0)})
    return target, draft


# ----------------------------------------------------------------------------- variants
#: The ling-3.0-flash-dspark profile's flags minus --tp-size 4 and
#: --flashinfer-allreduce-fusion-backend auto (TP only; FlashInfer is not in the kit), with
#: trtllm_mla replaced by the kit's backends (KIT_FLAGS).
REPLAYSSM = ["--enable-linear-replayssm-spec", "--linear-replayssm-cache-len", "32"]
PREFIX_CACHE = ["--mamba-radix-cache-strategy", "extra_buffer"]
NEXTN = [
    "--speculative-num-steps",
    "5",
    "--speculative-eagle-topk",
    "1",
    "--speculative-num-draft-tokens",
    "6",
]
VARIANTS = [
    ("dspark as profiled", "DSPARK", True, [*REPLAYSSM, *PREFIX_CACHE]),
    (
        "nextn (the ling-3.0-flash-nextn variant)",
        "NEXTN",
        False,
        [*NEXTN, *REPLAYSSM, *PREFIX_CACHE],
    ),
    ("nextn without replayssm", "NEXTN", False, [*NEXTN, *PREFIX_CACHE]),
    ("no speculation", None, False, PREFIX_CACHE),
]
ENV = {"SGLANG_RAGGED_VERIFY_MODE": "static", "SGLANG_OPT_FUSED_KDA_VERIFY": "1"}


def write_profile(path: Path, target: Path, draft: Path, variant, args) -> Path:
    _, algorithm, with_draft, flags = variant
    env = dict(ENV)
    if args.standin:
        env |= {
            "PYTHONPATH": f"{REPO / 'tests' / 'sglang_shim'}{os.pathsep}{REPO}",
            "STANDIN_TOKEN_S": "0.002",
        }
        kit: list[str] = [
            "--attention-backend",
            "triton",
            "--sampling-backend",
            "pytorch",
            "--grammar-backend",
            "none",
            "--disable-piecewise-cuda-graph",
        ]
    else:
        env |= {
            "PYTHONPATH": os.pathsep.join(filter(None, [args.kit_site, args.kit_stubs])),
            "SGLANG_IS_FLASHINFER_AVAILABLE": "false",
        }
        kit = KIT_FLAGS
    sglang = {
        "python": sys.executable,
        "mem_fraction_static": args.mem_fraction,
        "args": [*flags, *kit],
        "env": env,
        "startup_timeout_s": args.startup_timeout,
        "max_restarts": 0,
    }
    if algorithm:
        sglang["speculative_algorithm"] = algorithm
    model = {
        "path": str(target),
        "name": "ling-rehearsal",
        "context_length": 8192,
        "trust_remote_code": True,
    }
    if with_draft:
        model["draft_path"] = str(draft)
    lines = ['name = "ling-rehearsal"', "[engine]", 'kind = "sglang"', "warmup = true", "[model]"]
    lines += [f"{k} = {json.dumps(v)}" for k, v in model.items()]
    lines += ["[prompt]", 'chat_template = "plain"', "[limits]", "max_tokens = 4096"]
    lines += ["[scheduler]", "max_running = 1", "preempt = true", "[sglang]"]
    for k, v in sglang.items():
        if isinstance(v, dict):
            lines.append(
                f"{k} = {{ " + ", ".join(f"{a} = {json.dumps(b)}" for a, b in v.items()) + " }"
            )
        else:
            lines.append(f"{k} = {json.dumps(v)}")
    path.write_text("\n".join(lines) + "\n")
    return path


def start_variant(variant, target: Path, draft: Path, args, work: Path) -> Daemon | None:
    name = variant[0]
    slug = name.split(" ")[0] + str(VARIANTS.index(variant))
    profile = write_profile(work / f"{slug}.toml", target, draft, variant, args)
    daemon = Daemon(profile, work / f"home-{slug}", args.daemon_site, work / f"daemon-{slug}.log")
    t0 = time.time()
    entry = {"variant": name, "flags": variant[3], "algorithm": variant[1]}
    try:
        daemon.wait_ready(args.startup_timeout + 30)
    except Exception as err:  # SGLang refused it: keep its exact words, then stop it all
        entry |= {"ok": False, "seconds": round(time.time() - t0), "error": str(err)[-3000:]}
        log = work / f"home-{slug}" / "state" / "logs" / "sglang-ling-rehearsal.log"
        if log.is_file():
            text = log.read_text()
            (work / f"sglang-{slug}.log").write_text(text[-400_000:])
            entry["sglang_tail"] = [ln for ln in text.splitlines() if ln.strip()][-25:]
        daemon.stop()
        RESULT["attempts"].append(entry)
        record("attempts", RESULT["attempts"])
        print(f"[refused] {name}: {entry['error'][-600:]}", flush=True)
        return None
    entry |= {"ok": True, "seconds": round(time.time() - t0)}
    RESULT["attempts"].append(entry)
    record("attempts", RESULT["attempts"])
    print(f"[up] {name} after {entry['seconds']}s", flush=True)
    daemon.slug = slug  # type: ignore[attr-defined]
    return daemon


# ----------------------------------------------------------------------------- checks
def sse(http: httpx.Client, url: str, body: dict, headers: dict) -> list[dict]:
    events = []
    with http.stream("POST", url, json=body, headers=headers) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if line.startswith("data:") and line[5:].strip() != "[DONE]":
                events.append(json.loads(line[5:]))
    return events


def checks(daemon: Daemon, speculative: bool) -> None:
    from ling_local.client import Client

    child = daemon.child()
    d_headers = {"Authorization": f"Bearer {daemon.token}"}
    s_headers = {"Authorization": f"Bearer {child['api_key']}"}
    code = "\n".join(corpus_texts(400_000))
    with (
        Client(daemon.url, daemon.token) as client,
        httpx.Client(timeout=120, trust_env=False) as http,
    ):
        out = client.complete("def fibonacci(n):\n", max_tokens=24)
        check(
            "completion",
            out.finish_reason in ("stop", "length"),
            f"{out.usage.completion_tokens} tokens, {out.finish_reason}",
        )
        fim = client.complete(
            "def add(a, b):\n    ", suffix="\n\nprint(add(1, 2))\n", max_tokens=16
        )
        check(
            "fim",
            fim.finish_reason in ("stop", "length") and fim.usage.prompt_tokens > 5,
            f"{fim.usage.prompt_tokens} prompt tokens, {fim.finish_reason}",
        )
        chat = client.chat([{"role": "user", "content": "Write a sort function."}], max_tokens=16)
        check(
            "chat",
            chat.finish_reason in ("stop", "length"),
            f"{chat.usage.completion_tokens} tokens",
        )

        # Streaming, exactly: the daemon's streamed text for these ids equals SGLang's own
        # answer to the same ids (greedy), however many tokens each event carried.
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(Path(daemon.model_dir) / "tokenizer.json"))
        prompt = tok.encode(code[:1500], add_special_tokens=False).ids
        body = {
            "prompt": prompt,
            "max_tokens": 200,
            "temperature": 0,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        }
        events = sse(http, daemon.url + "/v1/completions", body, d_headers)
        chunks = [e for e in events if e.get("choices")]
        streamed = "".join(c["choices"][0]["text"] for c in chunks)
        counts = [c["usage"]["completion_tokens"] for c in chunks if c.get("usage")]
        per_event = [b - a for a, b in zip([0, *counts], counts, strict=False)]
        last = chunks[-1]
        ling = last.get("ling") or {}
        direct = http.post(
            child["url"] + "/generate",
            headers=s_headers,
            json={
                "input_ids": prompt,
                "sampling_params": {"max_new_tokens": 200, "temperature": 0, "ignore_eos": True},
            },
        ).json()
        direct = direct[0] if isinstance(direct, list) else direct
        check(
            "streaming",
            len(chunks) > 1 and counts[-1] == 200,
            f"{len(chunks)} chunks for {counts[-1] if counts else 0} tokens",
        )
        check(
            "multi-token events relayed exactly",
            streamed == direct.get("text") and (max(per_event or [0]) > 1 or not speculative),
            f"tokens per event: max {max(per_event or [0])}, mean {sum(per_event) / max(1, len(per_event)):.2f}; "
            f"streamed == SGLang's own text: {streamed == direct.get('text')} ({len(streamed)} chars)",
        )
        if speculative:
            check(
                "speculation stats in ling",
                bool(ling.get("accept_length")) and bool(ling.get("verify_steps")),
                f"accept_length {ling.get('accept_length')}, verify_steps {ling.get('verify_steps')}",
            )

        # Prefix reuse: a second keystroke on the same file. The prompt is the file's stable
        # part, cut at a 64-token boundary, then the volatile window at the cursor.
        file_ids = tok.encode(code[:8000], add_special_tokens=False).ids
        stable = file_ids[: (len(file_ids) - 40) // 64 * 64][:1024]
        first = (
            stable + tok.encode("\ndef handler(request):\n    ret", add_special_tokens=False).ids
        )
        second = (
            stable + tok.encode("\ndef handler(request):\n    retu", add_special_tokens=False).ids
        )
        cached = []
        for prompt_ids in (first, second):
            r = http.post(
                daemon.url + "/v1/completions",
                headers=d_headers,
                json={"prompt": prompt_ids, "max_tokens": 8, "temperature": 0},
            ).json()
            cached.append(
                (r["usage"]["prompt_tokens"], r["usage"]["prompt_tokens_details"]["cached_tokens"])
            )
        check(
            "prefix reuse on the hybrid model",
            cached[1][1] >= len(stable) // 64 * 64 > 0,
            f"stable part {len(stable)} tokens (64-aligned); (prompt, cached) first {cached[0]}, second {cached[1]}",
        )

        # Cancellation: SGLang is idle again at once after the client hangs up.
        with client.stream_complete("while True:\n", max_tokens=3000, ignore_eos=True) as s:
            for i, _ in enumerate(s):
                if i == 4:
                    break
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < 10:
            load = http.get(child["url"] + "/get_load", headers=s_headers).json()
            if sum(x.get("num_reqs", 0) for x in load) == 0:
                break
            time.sleep(0.01)
        idle = time.perf_counter() - t0
        check("cancellation", idle < 1.5, f"SGLang idle {idle * 1e3:.0f} ms after the close")


#: SGLang 0.5.17's Triton attention backend reads the value head size from layer 0's KV
#: buffer unless it recognises a hybrid linear model; it does not recognise bailing_hybrid
#: (lightning attention), whose layer 0 is always a linear layer, so it fails at start:
#: "ValueError: layer_id=0 not in full attention layers" (first H200 call, 2026-12-04).
#: The kit has no other MLA backend for Hopper (FA3, FlashMLA and FlashInfer are stripped
#: from it), so for this test setup only the installed copy is patched to ask the pool,
#: as SGLang already does for its other hybrid models.
TRITON_PATCH = [
    (
        "    hybrid_gdn_config,\n    kimi_linear_config,",
        "    hybrid_gdn_config,\n    hybrid_lightning_config,\n    kimi_linear_config,",
    ),
    (
        "            hybrid_gdn_config(model_runner.model_config) is not None\n",
        "            hybrid_gdn_config(model_runner.model_config) is not None\n            or hybrid_lightning_config(model_runner.model_config) is not None\n",
    ),
]


def patch_kit_triton(site: str) -> str:
    path = Path(site) / "sglang" / "srt" / "layers" / "attention" / "triton_backend.py"
    text = path.read_text()
    for old, new in TRITON_PATCH:
        if new in text:
            continue
        if text.count(old) != 1:
            return f"not patched: {old!r} not found once in {path}"
        text = text.replace(old, new)
    path.write_text(text)
    return f"patched {path}: Triton backend asks the pool for the value head size on bailing_hybrid"


@contextlib.contextmanager
def gpu_turn(lock: str | None):
    """Hold the shared lock of the GPU-heavy phases (gpu_sglang_check.py's timing takes it
    too), so that neither run's numbers include the other's kernels."""
    if not lock:
        yield
        return
    with open(lock, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def main() -> int:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--standin", action="store_true", help="use the test stand-in (CPU)")
    cli.add_argument(
        "--root", type=Path, default=Path(tempfile.gettempdir()) / "ling-rehearsal-models"
    )
    cli.add_argument("--kit-site")
    cli.add_argument("--kit-stubs")
    cli.add_argument("--daemon-site")
    cli.add_argument("--mem-fraction", type=float, default=0.35)
    cli.add_argument("--startup-timeout", type=float, default=300)
    cli.add_argument("--deadline-s", type=float, default=540, help="give up on new work after this")
    cli.add_argument("--lock", help="flock file shared with gpu_sglang_check.py (--lock)")
    cli.add_argument("--wait-for", type=Path, help="start SGLang only once this file exists")
    cli.add_argument("--runs", type=int, default=10, help="pairs of the overhead measurement")
    cli.add_argument("--patch-triton-hybrid", action="store_true", help="see TRITON_PATCH")
    cli.add_argument("--from-variant", type=int, default=0, help="skip the first N variants")
    args = cli.parse_args()
    t_start = time.time()
    if args.daemon_site:
        sys.path.insert(1, args.daemon_site)
    record("args", vars(args))
    if args.patch_triton_hybrid and args.kit_site:
        record("patch", patch_kit_triton(args.kit_site))
        print(RESULT["patch"], flush=True)
    target, draft = build_models(args.root, "cpu" if args.standin else "cuda", args.standin)
    if args.wait_for is not None:
        while not args.wait_for.exists() and time.time() - t_start < 120:
            time.sleep(0.5)
    work = Path(tempfile.mkdtemp(prefix="ling-rehearsal-"))
    ok = True
    daemon = None
    speculative = False
    for variant in VARIANTS[args.from_variant :]:
        if time.time() - t_start > args.deadline_s - 60:
            record("stopped", f"deadline before trying {variant[0]!r}")
            break
        daemon = start_variant(variant, target, draft, args, work)
        if daemon is not None:
            speculative = variant[1] is not None
            record("served", variant[0])
            break
    pgid = None
    try:
        if daemon is None:
            return 1
        daemon.model_dir = target  # type: ignore[attr-defined]
        pgid = daemon.child()["pid"]
        with gpu_turn(args.lock):
            checks(daemon, speculative)
            if time.time() - t_start < args.deadline_s - 40:
                margs = argparse.Namespace(
                    runs=args.runs, prompt_tokens=512, new_tokens=[256], warmup=2
                )
                results = measure(
                    daemon, margs, 1024 if args.standin else VOCAB, lambda r: record("overhead", r)
                )
                record("overhead", results)
                for mode, rows in results.items():
                    r = rows["256"]
                    print(
                        f"overhead {mode}: TTFT {r['ttft_overhead_ms']:+.2f} ms, TPOT {r['tpot_overhead_pct']:+.2f} %, "
                        f"daemon CPU {r['daemon_cpu_us_per_token']} us/token",
                        flush=True,
                    )
        ok = all(c["ok"] for c in RESULT["checks"].values())
    except Exception as err:
        check("run", False, f"{type(err).__name__}: {err}")
        ok = False
    finally:
        if daemon is not None:
            rc = daemon.stop()
            log = work / f"home-{daemon.slug}" / "state" / "logs" / "sglang-ling-rehearsal.log"  # type: ignore[attr-defined]
            if log.is_file():
                (work / f"sglang-{daemon.slug}.log").write_text(log.read_text()[-400_000:])  # type: ignore[attr-defined]
            time.sleep(1)
            left = leftovers(pgid, (str(work),))
            for line in left:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(line.split()[0]), signal.SIGKILL)
            ok &= check("no orphans", not left, f"daemon exit {rc}; left: {left}")
        # One file back for all the logs (a device call returns at most 8 files).
        with open(out_dir() / "rehearsal_logs.txt", "w") as combined:
            for log_file in sorted(work.glob("*.log")):
                combined.write(f"===== {log_file.name}\n{log_file.read_text()[-300_000:]}\n")
        shutil.rmtree(work, ignore_errors=True)
    record("ok", ok)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
