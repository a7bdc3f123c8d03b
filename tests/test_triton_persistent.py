"""The persistent layers kernel (`triton_persistent`, `PERSISTENT.enabled`) against the
per-layer Triton kernels: one launch for every layer (grid barriers on a GPU, a launch a
stage in Triton's CPU interpreter), and its config. Shapes as in `test_triton_kernels`."""

from __future__ import annotations

import pytest
import torch

from ling_local.engines.llama_runner import LlamaRunner
from tests.triton_support import INTERPRET as _INTERPRET
from tests.triton_support import NEEDS_TRITON, triton_kernels
from tests.triton_support import close as _close
from tests.triton_support import folded_runner as _runner

pytestmark = NEEDS_TRITON


@pytest.fixture(scope="module")
def tk():
    return triton_kernels()


def _step_pair(runner: LlamaRunner, tk, monkeypatch, prompt_len: int, steps: int):
    """Greedy T = 1 steps from the same prompt in two slots: the persistent kernel's step
    and the per-layer kernels' step, each fed its own argmax."""
    from ling_local.engines.cuda_graphs import GraphStep

    torch.manual_seed(9)
    prompt = torch.randint(0, 512, (prompt_len,)).tolist()
    out = []
    for persistent in (True, False):
        monkeypatch.setattr(tk.PERSISTENT, "enabled", persistent)
        slot = runner.new_cache()
        runner.forward(slot, prompt)
        with torch.inference_mode():
            step = GraphStep(runner.weights, slot, 1, runner.max_len, kernels="triton")
            step.load(prompt[-1:], prompt_len)
            logits, tokens = [], []
            for _ in range(steps):
                step.replay()  # chains: tokens = argmax, pos += 1
                logits.append(step.logits.clone())
                tokens.append(int(step.argmax))
        out.append((logits, tokens, slot))
    return out


@pytest.mark.parametrize(("kind", "ctas"), [("llama", 3), ("qwen2", 5), ("llama-tied", 1)])
def test_persistent_layers_match_the_per_layer_kernels(
    tk, monkeypatch, kind: str, ctas: int
) -> None:
    """The one-launch step (grid barriers on a GPU, a launch a stage in the interpreter)
    gives the per-layer kernels' logits and tokens, and writes the same keys and values;
    with 1, 3 and 5 CTAs sharing the tiles unevenly, q/k/v biases (qwen2)."""
    runner = _runner(kind)
    assert tk.persistent_ready(runner.weights) is None  # fold_norms stacked the layers
    if _INTERPRET:
        monkeypatch.setattr(tk.PERSISTENT, "ctas", ctas)
    (pl, pt, ps), (ll, lt, ls) = _step_pair(runner, tk, monkeypatch, 33, 3)
    assert pt == lt
    for a, b in zip(pl, ll, strict=True):
        _close(a, b, rel=2e-2)
    end = 33 + 3
    for layer in range(len(runner.weights.layers)):
        for a, b in ((ps.k, ls.k), (ps.v, ls.v)):
            assert torch.equal(a[layer][:, :33], b[layer][:, :33])  # the prompt's
            _close(a[layer][:, 33:end], b[layer][:, 33:end], rel=2e-2)


def test_unstacked_weights_take_the_per_layer_kernels(tk, monkeypatch) -> None:
    """Layer matrices not in one allocation: the persistent kernel says why and the step
    runs the per-layer kernels instead, with the same result."""
    runner = _runner("llama")
    (_, stacked, _), _ = _step_pair(runner, tk, monkeypatch, 20, 2)
    layer = runner.weights.layers[1]
    layer.wo = layer.wo.clone()
    assert "wo" in tk.persistent_ready(runner.weights)
    (_, unstacked, _), _ = _step_pair(runner, tk, monkeypatch, 20, 2)
    assert unstacked == stacked


def test_persistent_config_is_checked(tmp_path, monkeypatch) -> None:
    """Changed in place (the kernels' module holds the same object), from a JSON file as
    the sweep writes it; bad values and unknown fields refused and nothing changed."""
    from ling_local.engines import triton_setup
    from ling_local.engines.triton_persistent import PERSISTENT as seen_by_the_kernel

    for name in ("enabled", "l2_down", "gu_n"):
        monkeypatch.setattr(triton_setup.PERSISTENT, name, getattr(triton_setup.PERSISTENT, name))
    with pytest.raises(ValueError, match="fraction"):
        triton_setup.set_config("persistent", l2_down=1.5)
    with pytest.raises(TypeError):
        triton_setup.set_config("persistent", no_such_field=1)
    assert triton_setup.PERSISTENT.l2_down <= 1.0
    path = tmp_path / "best.json"
    path.write_text('{"persistent": {"enabled": true, "gu_n": 16}}')
    triton_setup.load_configs(path)
    assert seen_by_the_kernel.enabled and seen_by_the_kernel.gu_n == 16
