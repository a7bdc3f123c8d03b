"""What every launch of the Triton decode step's kernels takes beyond its tensors: tile
constexprs from the block sizes (`setup`), programmatic dependent launch, the L2 prefetch
count, the TMA descriptor of the weights, and the scratch buffers a captured step keeps.
Used by the launchers in `kernels`; imports triton only for the descriptors."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import cache

import torch

from ling_local.engines.embedded.triton.setup import CONFIGS, VERIFY_CONFIGS

__all__ = ["Scratch", "launch_options", "on_gpu", "pow2", "prefetches", "prepare"]


def pow2(n: int) -> int:
    """The smallest power of two >= n (1 for n <= 1)."""
    return 1 << max(0, (n - 1).bit_length())


def _tiles(name: str, t: int, max_block_n: int | None, paired: bool) -> dict:
    """Tile constexprs and num_warps of kernel `name` for T tokens. T = 1: `CONFIGS` as is.
    T > 1 (a verify): `VERIFY_CONFIGS`' tensor-core tiles padded to 16 tokens, where the
    rows allow a 16-row block; else broadcast-and-sum tiles with BLOCK_K shrunk to keep the
    [T, block_n, block_k] accumulator about the T = 1 size."""
    if t == 1:
        cfg = CONFIGS[name]
        block_t, block_n, block_k, dot = 1, cfg.block_n, cfg.block_k, False
    else:
        cfg = VERIFY_CONFIGS[name]
        block_n = cfg.block_n
        if max_block_n is not None and max_block_n % block_n:
            block_n = max_block_n
        if block_n >= 16:
            block_t, block_k, dot = max(16, pow2(t)), cfg.block_k, True
        else:
            block_t = pow2(t)
            block_k, dot = max(16, CONFIGS[name].block_k // block_t), False
    tiles = dict(
        BLOCK_T=block_t, BLOCK_N=block_n, BLOCK_K=block_k, USE_DOT=dot, PREFETCH=cfg.prefetch,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )  # fmt: skip
    if not paired:
        tiles.update(TMA=cfg.tma and t == 1, STAGES=cfg.num_stages)
    elif cfg.tma:
        raise ValueError(f"{name}: the paired kernel (QKV, gate/up) loads no tiles through TMA")
    return tiles


def on_gpu(t: torch.Tensor) -> bool:
    """Whether kernels on `t` run on the GPU (not in Triton's CPU interpreter)."""
    return t.is_cuda and os.environ.get("TRITON_INTERPRET") != "1"


@cache
def _sm90(index: int) -> bool:
    """Hopper or later: programmatic dependent launch, TMA, bulk prefetch."""
    return torch.cuda.get_device_capability(index)[0] >= 9


def launch_options(t: torch.Tensor) -> dict:
    """Launch options: programmatic dependent launch where the GPU has it (Hopper and
    later); each kernel lets its successor launch right after its own wait."""
    if on_gpu(t) and _sm90(t.device.index or 0):
        return {"launch_pdl": True, "USE_PDL": True}
    return {"USE_PDL": False}


def prefetches(launch: dict, t: torch.Tensor) -> bool:
    """Whether an L2 prefetch before the wait has a predecessor to overlap (PDL on); in
    Triton's CPU interpreter its address arithmetic runs and the prefetch itself is not."""
    return launch["USE_PDL"] or not on_gpu(t)


_DESCRIPTORS: dict[tuple, object] = {}


def _weights(weight: torch.Tensor, tiles: dict) -> torch.Tensor | object:
    """What the plain GEMV's `w_desc` gets: a [BLOCK_N, BLOCK_K] TMA descriptor of `weight`
    when the tiles ask for TMA and TMA can take it (Hopper or the interpreter; a box of at
    most 256 per side; rows 16-byte aligned), else the weight itself (unused; `TMA` is
    then turned off in `tiles`). Descriptors are cached per tensor and box."""
    bn, bk = tiles["BLOCK_N"], tiles["BLOCK_K"]
    usable = (
        tiles["TMA"]
        and bn <= 256
        and bk <= 256
        and weight.is_contiguous()
        and (weight.shape[1] * weight.element_size()) % 16 == 0
        and (not on_gpu(weight) or _sm90(weight.device.index or 0))
    )
    if not usable:
        tiles["TMA"] = False
        return weight
    key = (weight.data_ptr(), tuple(weight.shape), weight.dtype, bn, bk)
    desc = _DESCRIPTORS.get(key)
    if desc is None:
        from triton.tools.tensor_descriptor import TensorDescriptor

        if len(_DESCRIPTORS) > 4096:  # weights come and go (tests, reloads)
            _DESCRIPTORS.clear()
        desc = _DESCRIPTORS[key] = TensorDescriptor.from_tensor(weight, [bn, bk])
    return desc


def prepare(
    name: str,
    x: torch.Tensor,
    weight: torch.Tensor,
    max_block_n: int | None = None,
    paired: bool = False,
) -> tuple[dict, object]:
    """A GEMV launch of kernel `name` on x [T, K]: its constexprs and launch options (tiles,
    PDL, `ON_GPU`, with `l2_keep` `KEEP` and `keep_ctas`; `paired` (QKV, gate/up: a CTA
    reads two row blocks) also `L2` and `l2_bytes`, the L2 prefetch per row block, a
    16-byte multiple), and for the plain GEMV its `w_desc` argument (else None)."""
    t, k = x.shape
    tiles = _tiles(name, t, max_block_n, paired)
    launch = launch_options(x)
    desc = None if paired else _weights(weight, tiles)
    cfg = CONFIGS[name] if t == 1 else VERIFY_CONFIGS[name]
    kw = {**tiles, **launch, "ON_GPU": on_gpu(x)}
    if paired:
        nbytes = int(cfg.l2_prefetch * tiles["BLOCK_N"] * k * weight.element_size()) // 16 * 16
        on = nbytes > 0 and prefetches(launch, x)
        kw.update(L2=on, l2_bytes=nbytes if on else 0)
    elif cfg.l2_prefetch > 0:
        raise ValueError(f"{name}: l2_prefetch is the paired kernels' (QKV, gate/up)")
    if t == 1 and cfg.l2_keep > 0 and not kw.get("TMA"):
        ctas = -(-weight.shape[0] // (tiles["BLOCK_N"] * (2 if paired else 1)))
        kw.update(KEEP=True, keep_ctas=max(1, round(cfg.l2_keep * ctas)))
    return kw, desc


@dataclass(eq=False)
class Scratch:
    """Buffers the kernels of one captured step keep between launches: the attention's
    partials and counters, the head's argmax keys and counter, the screened head's upper
    bounds, lower-bound key and its pick's keys and counter, the banned-token mask. The
    counters and keys are reset by the kernels that use them, so a graph replays as is."""

    device: torch.device
    vocab: int
    banned: torch.Tensor | None = None
    buffers: dict[str, torch.Tensor] = field(default_factory=dict)

    def get(self, name: str, shape: tuple[int, ...], dtype: torch.dtype, fill=None):
        buf = self.buffers.get(name)
        if buf is None or buf.shape != shape:
            if fill is None:
                buf = torch.empty(shape, dtype=dtype, device=self.device)
            else:
                buf = torch.full(shape, fill, dtype=dtype, device=self.device)
            self.buffers[name] = buf
        return buf

    def banned_mask(self) -> torch.Tensor:
        mask = self.buffers.get("banned_mask")
        if mask is None:
            mask = torch.zeros(self.vocab, dtype=torch.int8, device=self.device)
            if self.banned is not None and self.banned.numel():
                mask[self.banned] = 1
            self.buffers["banned_mask"] = mask
        return mask
