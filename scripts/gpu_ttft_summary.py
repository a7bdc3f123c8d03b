"""Issue 29's numbers from a scripts/gpu_ttft.sh run, against its targets (H200, a 0.5B-1B
model, through the daemon): a keystroke's 8-16 new tokens on a cached 1,500-token prefix in
<= 8 ms; a 2,000-token cold prefill at or below SGLang's; the first request after ready
within 1.5x of the steady state; TPOT unchanged (issue 29's run: 0.62-0.75 ms with the
Triton kernels, 2.18-2.55 with PyTorch's, same model shape).

    python3 scripts/gpu_ttft_summary.py $OUT       # what gpu_ttft.sh's last stage runs
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def _load(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _get(data: dict | None, *keys: str):
    for key in keys:
        if not isinstance(data, dict) or key not in data:
            return None
        data = data[key]
    return data


def _fmt(value, unit: str = " ms") -> str:
    return "n/a" if value is None else f"{value:g}{unit}"


def main(out: Path) -> None:
    print("issue 29, H200, random Qwen2.5-0.5B-shaped model (bf16)")
    rows = []
    for kernels in ("triton", "torch"):
        ks = _load(out / f"keystroke_{kernels}.json")
        if ks is None:
            print(f"  keystroke {kernels}: no result")
            continue
        cached = _get(ks, "cached_prefix", "client_ttft_ms_median")
        rows.append((kernels, ks))
        print(f"  daemon, {kernels} kernels (ready after {_fmt(ks.get('ready_s'), ' s')}):")
        print(
            f"    keystroke, {ks['new_prompt_tokens']} new on {ks['prefix_tokens']} cached: "
            f"client {_fmt(cached)} (engine {_fmt(_get(ks, 'cached_prefix', 'ttft_ms_median'))})"
            f"  target <= 8 ms: {'MET' if cached is not None and cached <= 8 else 'not met'}"
        )
        print(
            f"    cold {ks['cold_tokens']}: client "
            f"{_fmt(_get(ks, 'cold', 'client_ttft_ms_median'))} "
            f"(engine {_fmt(_get(ks, 'cold', 'ttft_ms_median'))})"
        )
        ratio = ks.get("first_vs_steady")
        print(
            f"    first after ready: client {_fmt(_get(ks, 'first_after_ready', 'client_ttft_ms'))}"
            f", {_fmt(ratio, 'x')} the steady cold  target <= 1.5x: "
            f"{'MET' if ratio is not None and ratio <= 1.5 else 'not met'}"
        )
        print(
            f"    decode TPOT {_fmt(ks.get('decode_tpot_ms_median'))} "
            f"(client {_fmt(ks.get('client_tpot_ms_median'))})"
        )
        for kind in ("first_after_ready", "cold", "cached_prefix"):
            trace = _get(ks, kind, "trace") or _get(ks, kind, "trace_median")
            if trace:
                print(f"    trace {kind}: " + ", ".join(f"{k} {v}" for k, v in trace.items()))
    engine = _load(out / "engine" / "engine_bench.json")
    sglang = _load(out / "sglang" / "engine_bench.json")
    table = [r for d in (engine, sglang) if d for r in d["rows"]]
    if table:
        print("  TTFT columns, in process (SGLang at its /generate client), ms:")
        for r in table:
            print(
                f"    {r['name'][:48]:48s} cold {_fmt(r.get('ttft_cold_ms'), '')}"
                f"  cached {_fmt(r.get('ttft_cached_ms'), '')}"
                + (f"  TPOT {r['tpot_ms']:.3f}" if r.get("tpot_ms") else "")
                + f"  {r.get('note', '')[:90]}"
            )
    sg = next((r for r in (sglang or {}).get("rows", []) if r.get("ttft_cold_ms")), None)
    for kernels, ks in rows:
        ours = _get(ks, "cold", "client_ttft_ms_median")
        if sg and ours is not None:
            verdict = "MET" if ours <= sg["ttft_cold_ms"] else "not met"
            print(
                f"  cold {ks['cold_tokens']}: daemon ({kernels}) {ours} ms vs SGLang "
                f"{sg['ttft_cold_ms']} ms (both at the client)  target <= SGLang: {verdict}"
            )


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "."))
