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

__all__ = ["pack_weights", "restore_checkpoint", "unpack_weights"]

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


def restore_checkpoint(parts_dir: str | Path, name: str, meta_dir: str | Path, out_dir: str | Path):
    """A Hugging Face folder (bf16, shards <= 15 MB) from packed weights and the run's
    config and tokenizer files (``meta_dir``: ``tiny/`` of the run's bundle.tar.gz)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    meta_dir, out_dir = Path(meta_dir), Path(out_dir)
    config = AutoConfig.from_pretrained(meta_dir)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    missing, unexpected = model.load_state_dict(unpack_weights(parts_dir, name), strict=False)
    if unexpected or set(missing) - {"lm_head.weight"}:
        raise ValueError(f"{name}: missing {missing}, unexpected {unexpected}")
    model.tie_weights()
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in out_dir.glob("*.safetensors*"):
        old.unlink()
    model.save_pretrained(out_dir, max_shard_size="15MB")
    for f in meta_dir.iterdir():
        if f.name != "config.json":
            (out_dir / f.name).write_bytes(f.read_bytes())
    return model


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(
        prog="python -m training.transfer",
        description="Restore the run's models into Hugging Face folders.",
    )
    p.add_argument("--parts", type=Path, required=True, help="folder with NAME.w000 ...")
    p.add_argument("--bundle", type=Path, required=True, help="the unpacked bundle.tar.gz")
    p.add_argument("--out", type=Path, required=True, help="e.g. ling_local/models")
    args = p.parse_args(argv)
    for name in ("tiny", "tiny-draft"):
        restore_checkpoint(args.parts, name, args.bundle / name, args.out / name)
        print(f"{name}: {sorted(f.name for f in (args.out / name).iterdir())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
