"""The Triton decode kernels (`engine.kernels = "triton"`) against the PyTorch step.

On a GPU they run the kernels for real; without one, Triton's CPU interpreter runs them
(the test extra installs triton, so CI does); without triton they skip. The persistent
layers kernel has its own file (`test_triton_persistent`).

The interpreter is slow, so the shapes are small: hidden 128, 4 query / 2 kv heads of 32,
contexts under 100. bf16 throughout, as on the GPU.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from ling_local.engines.embedded.llama_runner import LlamaRunner, rms_norm, rotate
from tests.support import small_causal_lm
from tests.triton_support import BF16, DEV, NEEDS_TRITON, triton_kernels
from tests.triton_support import INTERPRET as _INTERPRET
from tests.triton_support import close as _close
from tests.triton_support import folded_runner as _runner
from tests.triton_support import randn as _randn

pytestmark = NEEDS_TRITON


def _rope_tables(max_len: int, hd: int) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin [max_len, hd] of random frequencies, in bf16: RoPE tables."""
    angles = torch.arange(max_len, device=DEV)[:, None] * torch.rand(hd // 2, device=DEV)
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos().to(BF16), angles.sin().to(BF16)


def _layer_inputs(nh: int, nkv: int, hd: int, max_len: int, pos: int) -> tuple:
    """One token's inputs for every T = 1 launch of a small layer (hidden 128, 100 output
    rows, 200 intermediate): x, a residual, O/down-like and gate/up weights, QKV weights,
    RoPE tables, the position and a KV cache."""
    x, res = _randn(1, 128), _randn(1, 100)
    w, w13 = _randn(100, 128, scale=0.05), _randn(2 * 200, 128, scale=0.05)
    wqkv = _randn((nh + 2 * nkv) * hd, 128, scale=0.1)
    cos, sin = _rope_tables(max_len, hd)
    p = torch.tensor([pos], device=DEV)
    return x, res, w, w13, wqkv, cos, sin, p, _randn(nkv, max_len, hd)


@pytest.fixture(scope="module")
def tk():
    return triton_kernels()


@pytest.mark.parametrize("t", [1, 3])
@pytest.mark.parametrize("split_k", [1, 2])
def test_gemv_residual(tk, monkeypatch, t: int, split_k: int) -> None:
    torch.manual_seed(0)
    monkeypatch.setitem(tk.CONFIGS, "o", tk.GemvConfig(block_n=16, block_k=64, split_k=split_k))
    x, w, res = _randn(t, 256), _randn(96, 256, scale=0.05), _randn(t, 96)
    want = res + F.linear(x, w)
    out = tk.gemv(x, w, "o", residual=res.clone())
    _close(out, want)


@pytest.mark.parametrize("t", [1, 2])
def test_gemv_with_norm(tk, monkeypatch, t: int) -> None:
    torch.manual_seed(1)
    monkeypatch.setitem(tk.CONFIGS, "o", tk.GemvConfig(block_n=32, block_k=64))
    x, w, g = _randn(t, 128), _randn(200, 128, scale=0.1), _randn(128)
    want = F.linear(rms_norm(x, g, 1e-5), w)
    out = tk.gemv(x, tk.fold_weight(w, g), "o", normed=True, eps=1e-5)
    assert out.shape == (t, 200)
    _close(out, want)


@pytest.mark.parametrize("t", [1, 3])
def test_gate_up_silu(tk, t: int) -> None:
    torch.manual_seed(2)
    x, w13, g = _randn(t, 128), _randn(512, 128, scale=0.1), _randn(128)
    gate, up = F.linear(rms_norm(x, g, 1e-6), w13).chunk(2, dim=-1)
    _close(tk.gate_up_silu(x, tk.fold_weight(w13, g), 1e-6), F.silu(gate) * up)


@pytest.mark.parametrize("t", [1, 3])
@pytest.mark.parametrize("bias", [False, True])
def test_qkv_rope_and_kv_write(tk, t: int, bias: bool) -> None:
    torch.manual_seed(3)
    nh, nkv, hd, max_len, pos = 4, 2, 32, 64, 37
    x, g = _randn(t, 128), _randn(128)
    wqkv = _randn((nh + 2 * nkv) * hd, 128, scale=0.1)
    b = _randn((nh + 2 * nkv) * hd) if bias else None
    cos, sin = _rope_tables(max_len, hd)
    kc, vc = _randn(nkv, max_len, hd), _randn(nkv, max_len, hd)
    kc_want, vc_want = kc.clone(), vc.clone()

    qkv = F.linear(rms_norm(x, g, 1e-5), wqkv, b)
    nq, nk = nh * hd, nkv * hd
    qk = rotate(
        qkv[:, : nq + nk].view(t, nh + nkv, hd),
        cos[pos : pos + t, None],
        sin[pos : pos + t, None],
    )
    kc_want[:, pos : pos + t] = qk[:, nh:].transpose(0, 1)
    vc_want[:, pos : pos + t] = qkv[:, nq + nk :].view(t, nkv, hd).transpose(0, 1)

    p = torch.tensor([pos], device=DEV)
    q = tk.qkv_rope_kv(x, tk.fold_weight(wqkv, g), b, kc, vc, cos, sin, p, nh, nkv, hd, 1e-5)
    _close(q, qk[:, :nh].reshape(t, nq))
    _close(kc, kc_want)
    _close(vc, vc_want)
    untouched = torch.ones(max_len, dtype=torch.bool)
    untouched[pos : pos + t] = False
    assert torch.equal(kc[:, untouched], kc_want[:, untouched])


@pytest.mark.parametrize(("t", "tensor_cores"), [(1, True), (1, False), (4, True)])
@pytest.mark.parametrize("pos", [0, 5, 90])
def test_decode_attention(tk, t: int, pos: int, tensor_cores: bool) -> None:
    """Against SDPA in fp32; at T = 1 both ways of multiplying the query group (the tensor
    cores with the rows padded to 16, the default, and broadcast-and-sum); a verify (T > 1)
    always takes the tensor cores."""
    torch.manual_seed(4)
    nh, nkv, hd, max_len = 4, 2, 32, 100
    q = _randn(t, nh * hd)
    kc, vc = _randn(nkv, max_len, hd), _randn(nkv, max_len, hd)
    positions = pos + torch.arange(t, device=DEV)
    mask = torch.arange(max_len, device=DEV)[None, :] <= positions[:, None]
    want = F.scaled_dot_product_attention(
        q.view(t, nh, hd).transpose(0, 1)[None].float(),
        kc[None].float(),
        vc[None].float(),
        attn_mask=mask[None, None],
        enable_gqa=True,
    )[0].transpose(0, 1)
    cfg = dataclasses.replace(tk.ATTN["attn"], tensor_cores=tensor_cores)
    out = tk.decode_attention(q, kc, vc, torch.tensor([pos], device=DEV), nh, nkv, hd, cfg=cfg)
    assert (out.float() - want.reshape(t, nh * hd)).abs().max().item() < 2e-2


# --------------------------------------------------------------------------- whole step
def test_folding_the_norms_keeps_the_function() -> None:
    """The prefill with folded norm weights gives the logits of the unfolded model."""
    from ling_local.engines.embedded.triton.kernels import fold_norms

    model = small_causal_lm("llama", tied=True, initializer_range=0.1).to(BF16).to(DEV)
    for layer in model.model.layers:  # norm weights other than ones, so folding matters
        with torch.no_grad():
            layer.input_layernorm.weight.uniform_(0.5, 1.5)
            layer.post_attention_layernorm.weight.uniform_(0.5, 1.5)
    plain = LlamaRunner(model, DEV, max_len=64, cuda_graphs=False)
    folded = LlamaRunner(model, DEV, max_len=64, cuda_graphs=False)
    fold_norms(folded.weights)
    assert folded.weights.norms_folded and torch.equal(plain.weights.embed, folded.weights.embed)
    ids = torch.randint(0, 512, (20,)).tolist()
    want = plain.forward(plain.new_cache(), ids)
    got = folded.forward(folded.new_cache(), ids)
    _close(got, want, rel=3e-2)
    assert int(got.argmax()) == int(want.argmax())


@pytest.mark.parametrize(
    ("kind", "t"), [(kind, t) for t in (1, 3) for kind in ("llama-tied", "llama", "qwen2")]
)
def test_step_matches_the_torch_step(kind: str, t: int) -> None:
    """Same prompt in two slots, then steps through both the torch and the Triton step,
    teacher-forced with the torch step's tokens: logits, argmax and caches agree."""
    from ling_local.engines.embedded.cuda_graphs import GraphStep

    runner = _runner(kind)
    torch.manual_seed(5)
    prompt = torch.randint(0, 512, (40,)).tolist()
    slots = []
    for _ in range(2):
        slot = runner.new_cache()
        runner.forward(slot, prompt)
        slots.append(slot)
    banned = torch.tensor([7, 11], device=DEV)
    with torch.inference_mode():
        ref = GraphStep(runner.weights, slots[0], t, runner.max_len, banned=banned)
        tri = GraphStep(
            runner.weights, slots[1], t, runner.max_len, banned=banned, kernels="triton"
        )
        pos = len(prompt)
        tokens = torch.randint(0, 512, (t,)).tolist()
        flips = 0
        for _ in range(4):
            for step in (ref, tri):
                step.load(tokens, pos)
                step.replay()
            finite = torch.ones(512, dtype=torch.bool, device=DEV)
            finite[banned] = False
            _close(tri.logits[:, finite], ref.logits[:, finite], rel=3e-2)
            assert torch.isinf(tri.logits[:, banned]).all()
            top2 = ref.logits.float().topk(2, dim=-1).values
            clear = (top2[:, 0] - top2[:, 1]) > 0.05  # a margin above the logits' error
            same = tri.argmax == ref.argmax
            assert same[clear].all()
            flips += int((~same).sum())
            pos += t
            tokens = ref.argmax.tolist()
        # Near-ties (a margin under the logits' error) may go either way: a few of the 4 * t.
        assert flips <= max(1, t)
        for layer in range(len(runner.weights.layers)):
            for a, b in ((slots[0].k, slots[1].k), (slots[0].v, slots[1].v)):
                # the norm scales after the sum here, before it in torch: ~1-2 bf16 ulps
                _close(b[layer][:, :pos], a[layer][:, :pos], rel=2e-2)
                assert torch.equal(b[layer][:, :40], a[layer][:, :40])  # the prompt's


def test_l2_prefetch_changes_nothing(tk, monkeypatch) -> None:
    """Every kernel with its L2 prefetch on (the whole slice; the last row block partial)
    gives what it gives without: the prefetch only asks the cache for the weights. On a GPU
    the bulk prefetches run (and must not fault past a partial block); in the interpreter
    their address arithmetic does."""
    torch.manual_seed(6)
    nh, nkv, hd = 4, 2, 32
    x, res, w, w13, wqkv, cos, sin, p, kc0 = _layer_inputs(nh, nkv, hd, 100, 70)

    def run(l2: bool) -> list[torch.Tensor]:
        kc, vc = kc0.clone(), kc0.flip(-1).contiguous()
        q = tk.qkv_rope_kv(x, wqkv, None, kc, vc, cos, sin, p, nh, nkv, hd, 1e-5)
        # splits of 48 positions: the older keys past the first tile of 16 are prefetched
        cfg = tk.AttnConfig(splits=2, block_l=16, l2_prefetch=l2)
        attn = tk.decode_attention(q, kc, vc, p, nh, nkv, hd, cfg=cfg)
        scratch = tk.Scratch(DEV, 100)
        return [
            q, kc, vc, attn,
            tk.gemv(x, w, "o", residual=res.clone()),
            tk.gate_up_silu(x, w13, 1e-6),
            *tk.lm_head_argmax(x, w, 1e-6, scratch),
        ]  # fmt: skip

    for name, cfg in (("o", (16, 64)), ("gate_up", (16, 64)), ("qkv", (8, 64)),
                      ("lm_head", (32, 64))):  # fmt: skip
        monkeypatch.setitem(tk.CONFIGS, name, tk.GemvConfig(block_n=cfg[0], block_k=cfg[1]))
    plain = run(l2=False)
    for name in ("o", "gate_up", "qkv", "lm_head"):
        monkeypatch.setitem(tk.CONFIGS, name, tk.GemvConfig(
            block_n=tk.CONFIGS[name].block_n, block_k=64, l2_prefetch=1.0))  # fmt: skip
    monkeypatch.setattr(tk.SETTINGS, "early_trigger", True)
    with_l2 = run(l2=True)
    for a, b in zip(plain, with_l2, strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("prefetch", [True, False])
def test_l2_keep_changes_nothing(tk, monkeypatch, prefetch: bool) -> None:
    """The GEMVs with part of their CTAs keeping their weight tiles in the L2 (`l2_keep`:
    evict_last loads, the others evict_first) give what they give streaming all of them,
    bit for bit: the kept CTAs run the same loop with another cache hint. Checked with
    and without the register prefetch of the next tile, for the plain GEMV (o, with a
    residual, and down-like without), the paired ones (QKV with RoPE and the KV write,
    gate/up) and a keep fraction that leaves a partial split of the CTAs."""
    torch.manual_seed(9)
    nh, nkv, hd = 4, 2, 32
    x, res, w, w13, wqkv, cos, sin, p, kc0 = _layer_inputs(nh, nkv, hd, 64, 30)

    def run(keep: float) -> list[torch.Tensor]:
        for name, n in (("o", 16), ("down", 16), ("gate_up", 16), ("qkv", 8)):
            monkeypatch.setitem(tk.CONFIGS, name, tk.GemvConfig(
                block_n=n, block_k=32, prefetch=prefetch, l2_keep=keep))  # fmt: skip
        kc, vc = kc0.clone(), kc0.flip(-1).contiguous()
        q = tk.qkv_rope_kv(x, wqkv, None, kc, vc, cos, sin, p, nh, nkv, hd, 1e-5)
        return [
            q, kc, vc,
            tk.gemv(x, w, "o", residual=res.clone()),
            tk.gemv(x, w, "down", normed=True, eps=1e-5),
            tk.gate_up_silu(x, w13, 1e-6),
        ]  # fmt: skip

    streamed = run(0.0)
    for keep in (0.3, 1.0):
        for a, b in zip(streamed, run(keep), strict=True):
            assert torch.equal(a, b)
    kw, _, _ = tk._prepare("gate_up", x, w13, paired=True)
    assert kw["KEEP"] and kw["keep_ctas"] == 13  # 1.0 of cdiv(200, 16)
    with pytest.raises(ValueError, match="l2_keep"):
        tk.GemvConfig(block_n=4, block_k=32, l2_keep=1.5)


@pytest.mark.parametrize("kernel", ["o", "gate_up", "qkv", "lm_head"])
def test_tma_weight_tiles(tk, monkeypatch, kernel: str) -> None:
    """T = 1 with the weights through TMA descriptors (a partial last row block, split-K
    for o) gives what the register loads give: bit for bit in the interpreter (same tiles,
    same sums), within rounding on a GPU (the reduction's order may differ there)."""
    torch.manual_seed(8)
    nh, nkv, hd, max_len, pos = 4, 2, 32, 64, 20
    x = _randn(1, 128)
    w = _randn(100 if kernel != "gate_up" else 400, 128, scale=0.05)
    wqkv = _randn((nh + 2 * nkv) * hd, 128, scale=0.1)
    cos, sin = _rope_tables(max_len, hd)
    kc = _randn(nkv, max_len, hd)

    def run(tma: bool) -> list[torch.Tensor]:
        cfg = tk.GemvConfig(block_n=8 if kernel == "qkv" else 16, block_k=32, tma=tma,
                            split_k=2 if kernel == "o" else 1)  # fmt: skip
        monkeypatch.setitem(tk.CONFIGS, kernel, cfg)
        if kernel == "o":
            return [tk.gemv(x, w, "o", residual=torch.ones(1, 100, dtype=BF16, device=DEV))]
        if kernel == "gate_up":
            return [tk.gate_up_silu(x, w, 1e-6)]
        if kernel == "lm_head":
            return list(tk.lm_head_argmax(x, w, 1e-6, tk.Scratch(DEV, 100)))
        k_cache, v_cache = kc.clone(), kc.clone()
        q = tk.qkv_rope_kv(x, wqkv, None, k_cache, v_cache, cos, sin,
                           torch.tensor([pos], device=DEV), nh, nkv, hd, 1e-5)  # fmt: skip
        return [q, k_cache, v_cache]

    plain, tma = run(False), run(True)
    for a, b in zip(plain, tma, strict=True):
        if _INTERPRET:
            assert torch.equal(a, b)
        else:
            _close(b, a)
