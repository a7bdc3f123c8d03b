"""The greedy head's exact int8 screen (`triton/screen.py`, every greedy Triton decode step)
against the full bf16 head (`lm_head_argmax`): the same argmax, ties and banned tokens
included, the next step chained alike, and bounds that hold. For real on a GPU; in Triton's
CPU interpreter without one, the subset not marked `gpu` (`triton_support`)."""

from __future__ import annotations

import pytest
import torch

from tests.triton_support import BF16, DEV, GPU_ONLY, NEEDS_TRITON
from tests.triton_support import folded_runner as _runner
from tests.triton_support import randn as _randn

pytestmark = NEEDS_TRITON

V, K = 700, 128  # 3 pick CTAs of 256 rows, the last one partial


@pytest.fixture(scope="module")
def tk():
    from ling_local.engines.embedded.triton import kernels

    return kernels


@pytest.fixture(scope="module")
def ts():
    from ling_local.engines.embedded.triton import setup

    return setup


@pytest.fixture(
    params=[pytest.param(False, marks=GPU_ONLY, id="registers"), pytest.param(True, id="tma")]
)
def small_tiles(ts, request, monkeypatch):
    """The screen's tiles at the test shapes: register loads or TMA (as shipped)."""
    cfg = ts.GemvConfig(block_n=16, block_k=64, tma=request.param)
    monkeypatch.setitem(ts.CONFIGS, "lm_screen", cfg)
    monkeypatch.setitem(ts.CONFIGS, "lm_head", ts.GemvConfig(block_n=32, block_k=64))


class _Head:
    """A bare output head: `screen_head` takes the weights object of a model."""

    def __init__(self, lm_head: torch.Tensor) -> None:
        self.lm_head = lm_head
        self.norms_folded = True
        self.head_screen = None


def _both(tk, ts, x, w, banned=None) -> list[int]:
    """[the full head's argmax, the screened head's] for x [1, K]."""
    screen = ts.screen_head(_Head(w))
    _, exact = tk.lm_head_argmax(x, w, 1e-6, tk.Scratch(DEV, w.shape[0], banned))
    logits, screened = tk.lm_head_screened(x, screen, w, 1e-6, tk.Scratch(DEV, w.shape[0], banned))
    assert logits is None
    return [int(exact), int(screened)]


@GPU_ONLY
@pytest.mark.parametrize("seed", range(4))
def test_screened_argmax_is_the_exact_heads(tk, ts, small_tiles, seed: int) -> None:
    torch.manual_seed(seed)
    x, w = _randn(1, K), _randn(V, K, scale=0.05)
    exact, screened = _both(tk, ts, x, w)
    assert screened == exact


def test_ties_go_to_the_first_index_and_banned_tokens_never_win(tk, ts, small_tiles) -> None:
    """Rows 600, 260 and 9 copy the best row of a random head: a three-way exact tie, which
    torch.argmax (and the full head) gives to the first index; with 9 banned it goes to
    260. Row 599 is the best row nudged by a fraction of a bf16 step of its logit: it
    rounds to the same bf16 logit and is a candidate too, but comes later."""
    torch.manual_seed(3)
    x, w = _randn(1, K), _randn(V, K, scale=0.05)
    best = int((x.float() @ w.float().T).argmax())
    for row in (600, 260, 9):
        w[row] = w[best]
    w[599] = w[best]
    w[599, 0] += torch.tensor(2e-3, dtype=BF16) * torch.sign(x[0, 0].float()).to(BF16)
    xn = x.float() * torch.rsqrt(x.float().pow(2).mean() + 1e-6)
    rounded = (xn @ w.float().T).to(BF16)[0]
    assert rounded[599] == rounded[best] and (xn @ w[599].float()) > (xn @ w[best].float())
    assert best not in (260, 599, 600)
    assert _both(tk, ts, x, w) == [min(9, best)] * 2
    banned = torch.tensor([9, 5], device=DEV)
    exact, screened = _both(tk, ts, x, w, banned=banned)
    assert screened == exact == (best if best not in (5, 9) and best < 260 else 260)


@GPU_ONLY
def test_the_chain_and_the_resets(tk, ts, small_tiles) -> None:
    """With tokens and pos (a decode graph) both heads write the token and pos + 1; the
    same scratch serves the next call (keys, counter and the lower bound reset)."""
    torch.manual_seed(4)
    w = _randn(V, K, scale=0.05)
    screen = ts.screen_head(_Head(w))
    scratch = tk.Scratch(DEV, V)
    tokens = torch.zeros(1, dtype=torch.long, device=DEV)
    pos = torch.tensor([7], device=DEV)
    for i in range(3):
        x = _randn(1, K)
        _, want = tk.lm_head_argmax(x, w, 1e-6, tk.Scratch(DEV, V))
        _, got = tk.lm_head_screened(x, screen, w, 1e-6, scratch, tokens, pos)
        assert int(got) == int(want) == int(tokens)
        assert int(pos) == 8 + i


@GPU_ONLY
def test_the_bounds_hold_and_screen_out_most_rows(tk, ts, small_tiles) -> None:
    """Every row's upper bound is at least its exact logit (fp64 here), the largest lower
    bound at most the largest logit; and for random weights few rows stay candidates."""
    torch.manual_seed(5)
    w = _randn(V, K, scale=0.05)
    screen = ts.screen_head(_Head(w))
    q = (screen.q.double() - 128) * screen.scale.double()[:, None]
    err = (w.double() - q).norm(dim=1)
    assert (screen.slack.double() >= err).all()
    assert screen.q.dtype == torch.uint8 and screen.q.min() >= 1  # int8 -127 .. 127
    for _ in range(3):
        x = _randn(1, K, scale=3.0)
        scratch = tk.Scratch(DEV, V)
        low = scratch.get("screen_low", (1,), torch.int32, fill=-(2**31))
        low_before = low.clone()
        tk.lm_head_screened(x, screen, w, 1e-6, scratch)
        xd = x.double()
        logits = (xd * torch.rsqrt(xd.pow(2).mean() + 1e-6)) @ w.double().T
        upper = scratch.buffers["screen_upper"].double()
        assert (upper >= logits).all()
        assert torch.equal(low, low_before)  # reset by the pick's last CTA
        margin = (upper - logits).max()
        candidates = int((upper >= logits.max() - 2 * margin).sum())
        assert candidates < V // 10, candidates


@GPU_ONLY
def test_screened_step_decodes_like_the_full_head() -> None:
    """A small model's T = 1 Triton step (`GraphStep`, eager on the CPU) with the screened
    head chains the same tokens as with the full head, 6 steps; its logits are None."""
    from ling_local.engines.embedded.cuda_graphs import GraphStep

    runner = _runner("llama-tied")
    torch.manual_seed(2)
    prompt = torch.randint(0, 512, (30,)).tolist()
    seqs = []
    for screen in (False, True):
        slot = runner.new_cache()
        runner.forward(slot, prompt)
        with torch.inference_mode():
            step = GraphStep(
                runner.weights, slot, 1, runner.max_len, kernels="triton", screen=screen
            )
            step.load(prompt[-1:], len(prompt))
            seq = []
            for _ in range(6):
                step.replay()
                seq.append(int(step.argmax))
                step.advance(step.argmax)
            assert (step.logits is None) == screen
        seqs.append(seq)
    assert seqs[0] == seqs[1]
    with pytest.raises(ValueError, match="T = 1"):
        GraphStep(runner.weights, runner.new_cache(), 2, runner.max_len, kernels="triton",
                  screen=True)  # fmt: skip
