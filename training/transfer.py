"""Move bf16 weights through a narrow pipe losslessly: each bf16 value is split into its high
byte (sign and 7 exponent bits: a handful of values, so it compresses ~2.5x) and its low byte
(mantissa: near random, stored as is), then cut into parts of at most ``max_part`` bytes.

    pack_weights(state_dict, dest, "tiny")   -> dest/tiny.w000, tiny.w001, ...
    unpack_weights(dest, "tiny")             -> the same state dict, bit for bit
"""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path

import torch

__all__ = ["pack_weights", "unpack_weights"]

MAX_PART = 15 * 1000 * 1000


def pack_weights(
    state: dict[str, torch.Tensor], dest: str | Path, name: str, max_part: int = MAX_PART
) -> list[Path]:
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    keys = sorted(state)
    flat = torch.cat([state[k].detach().to("cpu", torch.bfloat16).reshape(-1) for k in keys])
    raw = flat.view(torch.uint8).view(-1, 2).numpy()  # little-endian: [low, high]
    high = zlib.compress(raw[:, 1].tobytes(), 9)
    low = raw[:, 0].tobytes()
    header = json.dumps(
        {"keys": keys, "shapes": [list(state[k].shape) for k in keys], "high": len(high)}
    ).encode()
    blob = struct.pack("<I", len(header)) + header + high + low
    parts = []
    for i in range(0, len(blob), max_part):
        path = dest / f"{name}.w{i // max_part:03d}"
        path.write_bytes(blob[i : i + max_part])
        parts.append(path)
    return parts


def unpack_weights(src: str | Path, name: str) -> dict[str, torch.Tensor]:
    blob = b"".join(p.read_bytes() for p in sorted(Path(src).glob(f"{name}.w[0-9][0-9][0-9]")))
    (n,) = struct.unpack("<I", blob[:4])
    header = json.loads(blob[4 : 4 + n])
    pos = 4 + n
    high = zlib.decompress(blob[pos : pos + header["high"]])
    low = blob[pos + header["high"] :]
    if len(low) != len(high):
        raise ValueError(f"{name}: truncated weights ({len(low)} low bytes, {len(high)} high)")
    pairs = torch.empty(len(low), 2, dtype=torch.uint8)
    pairs[:, 0] = torch.frombuffer(bytearray(low), dtype=torch.uint8)
    pairs[:, 1] = torch.frombuffer(bytearray(high), dtype=torch.uint8)
    flat = pairs.view(-1).view(torch.bfloat16)
    state, at = {}, 0
    for key, shape in zip(header["keys"], header["shapes"], strict=True):
        size = 1
        for d in shape:
            size *= d
        state[key] = flat[at : at + size].view(shape).clone()
        at += size
    return state
