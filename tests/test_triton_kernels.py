"""The Triton decode kernels (the GPU decode step) against the PyTorch step.

On a GPU they run the kernels for real; without one, Triton's CPU interpreter runs a subset
(`triton_support`: each kernel once at a tiny shape, the whole step once; every case
marked `gpu` runs on a GPU only); without triton they skip.

The interpreter is slow, so the shapes are small: hidden 128, 4 query / 2 kv heads of 32,
contexts under 100. bf16 throughout, as on the GPU.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from ling_local.engines.embedded.llama_runner import LlamaRunner, rms_norm, rotate
from ling_local.engines.embedded.triton.setup import fold_norms
from tests.support import small_causal_lm
from tests.triton_support import (
    BF16,
    DEV,
    GPU_ONLY,
    NEEDS_TRITON,
    few_ctas,  # noqa: F401 (a fixture)
)
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
    from ling_local.engines.embedded.triton import kernels

    return kernels


@pytest.fixture(scope="module")
def ts():
    from ling_local.engines.embedded.triton import setup

    return setup


@pytest.mark.parametrize("t", [pytest.param(1, marks=GPU_ONLY), 3])
def test_gemv_residual(tk, ts, monkeypatch, t: int) -> None:
    torch.manual_seed(0)
    monkeypatch.setitem(ts.CONFIGS, "o", ts.GemvConfig(block_n=16, block_k=64))
    x, w, res = _randn(t, 256), _randn(96, 256, scale=0.05), _randn(t, 96)
    want = res + F.linear(x, w)
    out = tk.gemv(x, w, "o", residual=res.clone())
    _close(out, want)


@GPU_ONLY
@pytest.mark.parametrize("t", [1, 2])
def test_gemv_with_norm(tk, ts, monkeypatch, t: int) -> None:
    torch.manual_seed(1)
    monkeypatch.setitem(ts.CONFIGS, "o", ts.GemvConfig(block_n=32, block_k=64))
    x, w, g = _randn(t, 128), _randn(200, 128, scale=0.1), _randn(128)
    want = F.linear(rms_norm(x, g, 1e-5), w)
    out = tk.gemv(x, ts.fold_weight(w, g), "o", normed=True, eps=1e-5)
    assert out.shape == (t, 200)
    _close(out, want)


@pytest.mark.parametrize("t", [pytest.param(1, marks=GPU_ONLY), 3])
def test_gate_up_silu(tk, ts, t: int) -> None:
    torch.manual_seed(2)
    x, w13, g = _randn(t, 128), _randn(512, 128, scale=0.1), _randn(128)
    gate, up = F.linear(rms_norm(x, g, 1e-6), w13).chunk(2, dim=-1)
    _close(tk.gate_up_silu(x, ts.fold_weight(w13, g), 1e-6), F.silu(gate) * up)


@pytest.mark.parametrize(
    ("t", "bias"),
    [
        pytest.param(1, False, marks=GPU_ONLY),
        pytest.param(1, True, marks=GPU_ONLY),
        pytest.param(3, False, marks=GPU_ONLY),
        (3, True),
    ],
)
def test_qkv_rope_and_kv_write(tk, ts, t: int, bias: bool) -> None:
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
    q = tk.qkv_rope_kv(x, ts.fold_weight(wqkv, g), b, kc, vc, cos, sin, p, nh, nkv, hd, 1e-5)
    _close(q, qk[:, :nh].reshape(t, nq))
    _close(kc, kc_want)
    _close(vc, vc_want)
    untouched = torch.ones(max_len, dtype=torch.bool)
    untouched[pos : pos + t] = False
    assert torch.equal(kc[:, untouched], kc_want[:, untouched])


@pytest.mark.parametrize(
    ("t", "pos"),
    [
        pytest.param(1, 0, marks=GPU_ONLY),
        pytest.param(1, 5, marks=GPU_ONLY),
        pytest.param(1, 90, marks=GPU_ONLY),
        pytest.param(4, 0, marks=GPU_ONLY),
        (4, 5),
        pytest.param(4, 90, marks=GPU_ONLY),
    ],
)
def test_decode_attention(tk, ts, t: int, pos: int) -> None:
    """Against SDPA in fp32: T = 1 (the last CTA of each kv head combines the splits) and a
    verify (T > 1, a second launch combines them); 2 splits of 16-position tiles, so a split
    spans several tiles at a long context and is empty at a short one."""
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
    cfg = dataclasses.replace(ts.ATTN["attn"], splits=2, block_l=16)
    out = tk.decode_attention(q, kc, vc, torch.tensor([pos], device=DEV), nh, nkv, hd, cfg=cfg)
    assert (out.float() - want.reshape(t, nh * hd)).abs().max().item() < 2e-2


def test_attention_config_is_checked(ts) -> None:
    with pytest.raises(ValueError, match="block_l"):
        ts.AttnConfig(block_l=8)
    with pytest.raises(ValueError, match="l2_keep"):
        ts.GemvConfig(block_n=4, block_k=32, l2_keep=1.5)


# --------------------------------------------------------------------------- whole step
def test_folding_the_norms_keeps_the_function() -> None:
    """The prefill with folded norm weights gives the logits of the unfolded model."""
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
    ("kind", "t"),
    [
        ("llama-tied", 1),
        *(
            pytest.param(kind, t, marks=GPU_ONLY)
            for kind, t in (
                ("llama", 1),
                ("qwen2", 1),
                ("llama-tied", 3),
                ("llama", 3),
                ("qwen2", 3),
            )
        ),
    ],
)
@pytest.mark.usefixtures("few_ctas")
def test_step_matches_the_torch_step(kind: str, t: int) -> None:
    """Same prompt in two slots, then steps through both the torch and the Triton step,
    teacher-forced with the torch step's tokens: logits, argmax and caches agree (4 steps;
    2 under the interpreter)."""
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
    steps = 2 if _INTERPRET else 4
    with torch.inference_mode():
        ref = GraphStep(runner.weights, slots[0], t, runner.max_len, banned=banned)
        tri = GraphStep(
            runner.weights, slots[1], t, runner.max_len, banned=banned, kernels="triton"
        )
        pos = len(prompt)
        tokens = torch.randint(0, 512, (t,)).tolist()
        flips = 0
        for _ in range(steps):
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
        # Near-ties (a margin under the logits' error) may go either way: a few of them.
        assert flips <= max(1, t)
        for layer in range(len(runner.weights.layers)):
            for a, b in ((slots[0].k, slots[1].k), (slots[0].v, slots[1].v)):
                # the norm scales after the sum here, before it in torch: ~1-2 bf16 ulps
                _close(b[layer][:, :pos], a[layer][:, :pos], rel=2e-2)
                assert torch.equal(b[layer][:, :40], a[layer][:, :40])  # the prompt's


@GPU_ONLY
def test_l2_prefetch_changes_nothing(tk, ts, monkeypatch) -> None:
    """The paired GEMVs with their L2 prefetch on (the whole slice; gate/up's last row
    block partial) give what they give without, and the attention (which always asks the
    L2 for its split's older keys and values) gives SDPA's output at a context where that
    prefetch spans partial tiles: the prefetch only asks the cache for bytes, and must not
    fault past the end of a block."""
    torch.manual_seed(6)
    nh, nkv, hd = 4, 2, 32
    x, res, w, w13, wqkv, cos, sin, p, kc0 = _layer_inputs(nh, nkv, hd, 100, 70)

    def run(l2: float) -> list[torch.Tensor]:
        for name, n in (("gate_up", 16), ("qkv", 8)):
            monkeypatch.setitem(
                ts.CONFIGS, name, ts.GemvConfig(block_n=n, block_k=64, l2_prefetch=l2)
            )
        kc, vc = kc0.clone(), kc0.flip(-1).contiguous()
        q = tk.qkv_rope_kv(x, wqkv, None, kc, vc, cos, sin, p, nh, nkv, hd, 1e-5)
        return [q, kc, vc, tk.gate_up_silu(x, w13, 1e-6)]

    plain = run(0.0)
    for a, b in zip(plain, run(1.0), strict=True):
        assert torch.equal(a, b)
    q, kc, vc = plain[0], plain[1], plain[2]
    cfg = ts.AttnConfig(splits=2, block_l=16)  # splits of 48: past the first tile of 16
    attn = tk.decode_attention(q, kc, vc, p, nh, nkv, hd, cfg=cfg)
    mask = torch.arange(100, device=DEV)[None, :] <= 70
    want = F.scaled_dot_product_attention(
        q.view(1, nh, hd).transpose(0, 1)[None].float(), kc[None].float(), vc[None].float(),
        attn_mask=mask[None, None], enable_gqa=True,
    )[0].transpose(0, 1)  # fmt: skip
    assert (attn.float() - want.reshape(1, nh * hd)).abs().max().item() < 2e-2
    with pytest.raises(ValueError, match="paired kernels"):
        monkeypatch.setitem(ts.CONFIGS, "o", ts.GemvConfig(block_n=16, block_k=64, l2_prefetch=1))
        tk.gemv(x, w, "o", residual=res.clone())


@GPU_ONLY
@pytest.mark.parametrize("prefetch", [True, False])
def test_l2_keep_changes_nothing(tk, ts, monkeypatch, prefetch: bool) -> None:
    """The GEMVs with part of their CTAs keeping their weight tiles in the L2 (`l2_keep`:
    evict_last loads, the others evict_first) give what they give streaming all of them,
    bit for bit: the kept CTAs run the same loop with another cache hint. Checked with
    and without the register prefetch of the next tile, for the plain GEMV (o, with a
    residual, and down-like without), the paired ones (QKV with RoPE and the KV write,
    gate/up) and a keep fraction that leaves a partial split of the CTAs."""
    from ling_local.engines.embedded.triton.launch import prepare

    torch.manual_seed(9)
    nh, nkv, hd = 4, 2, 32
    x, res, w, w13, wqkv, cos, sin, p, kc0 = _layer_inputs(nh, nkv, hd, 64, 30)

    def run(keep: float) -> list[torch.Tensor]:
        for name, n in (("o", 16), ("down", 16), ("gate_up", 16), ("qkv", 8)):
            monkeypatch.setitem(ts.CONFIGS, name, ts.GemvConfig(
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
    kw, _ = prepare("gate_up", x, w13, paired=True)
    assert kw["KEEP"] and kw["keep_ctas"] == 13  # 1.0 of cdiv(200, 16)


@GPU_ONLY
def test_tma_head_tiles(tk, ts, monkeypatch) -> None:
    """The full output head at T = 1 with its weights through TMA descriptors (a partial
    last row block) gives what register loads give: bit for bit in the interpreter (same
    tiles, same sums), within rounding on a GPU (the reduction's order may differ there)."""
    torch.manual_seed(8)
    x, w = _randn(1, 128), _randn(100, 128, scale=0.05)

    def run(tma: bool) -> list[torch.Tensor]:
        monkeypatch.setitem(ts.CONFIGS, "lm_head", ts.GemvConfig(block_n=16, block_k=32, tma=tma))
        return list(tk.lm_head_argmax(x, w, 1e-6, tk.Scratch(DEV, 100)))

    plain, tma = run(False), run(True)
    for a, b in zip(plain, tma, strict=True):
        if _INTERPRET:
            assert torch.equal(a, b)
        else:
            _close(b, a)
    with pytest.raises(ValueError, match="TMA"):
        monkeypatch.setitem(ts.CONFIGS, "gate_up", ts.GemvConfig(block_n=8, block_k=32, tma=True))
        tk.gate_up_silu(x, _randn(64, 128), 1e-6)
