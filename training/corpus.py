"""Build the training corpus: permissively licensed Python source from pinned PyPI wheels plus
this machine's CPython standard library.

    python -m training.corpus download --wheels /work/corpus/wheels
    python -m training.corpus build --wheels /work/corpus/wheels --out /work/corpus/build

``download`` fetches each wheel of ``corpus_packages.txt`` (``pip download --no-deps
--only-binary=:all:``, so no package code ever runs). ``build`` reads the wheels as zip files
(nothing is installed), keeps a package only when its METADATA says it is clearly permissive
(:mod:`training.licences`), filters and deduplicates the ``*.py`` files (:mod:`training.filters`)
and writes:

- ``corpus.json``: the manifest, ``{"packages": [{"name", "version", "license", "files"}]}``
  listing exactly the files trained on, and ``heldout`` (same shape) for evaluation only;
- ``train.jsonl.xz`` and ``heldout.jsonl.xz``: one ``{"package", "path", "text"}`` a line, the
  bundle sent to the GPU machine.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import sysconfig
import zipfile
from dataclasses import dataclass, field
from email.parser import BytesHeaderParser
from pathlib import Path

from training.filters import Deduplicator, reject_reason
from training.licences import licence_of

HERE = Path(__file__).resolve().parent
PACKAGES_FILE = HERE / "corpus_packages.txt"
PYTHON_VERSION = "3.12"
MAX_PACKAGE_CHARS = 4_500_000
"""A package's kept files stop at this many characters (files taken in the order of their
path's SHA-1), so that no single project's style dominates the corpus."""
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "any")


@dataclass(frozen=True, slots=True)
class Pin:
    name: str
    version: str
    heldout: bool


@dataclass(slots=True)
class Package:
    name: str
    version: str
    license: str
    heldout: bool
    files: dict[str, str] = field(default_factory=dict)
    """relative path -> text"""


def read_pins(path: Path = PACKAGES_FILE) -> list[Pin]:
    pins = []
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        spec, *flags = line.split()
        name, _, version = spec.partition("==")
        if not version or set(flags) - {"heldout"}:
            raise ValueError(f"bad line in {path.name}: {line!r}")
        pins.append(Pin(name, version, "heldout" in flags))
    return pins


def _norm(name: str) -> str:
    return name.lower().replace("-", "_").replace(".", "_")


def find_wheel(wheels: Path, pin: Pin) -> Path | None:
    want = f"{_norm(pin.name)}-{pin.version}-"
    for p in sorted(wheels.glob("*.whl")):
        if _norm(p.name.split("-", 1)[0]) + "-" + p.name.split("-")[1] + "-" == want:
            return p
    return None


def download(wheels: Path, pins: list[Pin]) -> None:
    wheels.mkdir(parents=True, exist_ok=True)
    for pin in pins:
        if find_wheel(wheels, pin):
            continue
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
        cmd += ["--python-version", PYTHON_VERSION, "--implementation", "cp"]
        cmd += ["--abi", "cp" + PYTHON_VERSION.replace(".", "")]
        for plat in PLATFORMS:
            cmd += ["--platform", plat]
        cmd += ["-q", "-d", str(wheels), f"{pin.name}=={pin.version}"]
        result = subprocess.run(cmd, capture_output=True, text=True)
        status = "ok" if result.returncode == 0 else "FAILED " + result.stderr.strip()[-300:]
        print(f"{pin.name}=={pin.version}: {status}", flush=True)


def _metadata(zf: zipfile.ZipFile):
    name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
    return BytesHeaderParser().parsebytes(zf.read(name))


def read_wheel(path: Path, pin: Pin) -> tuple[str | None, dict[str, bytes]]:
    """The wheel's licence (None unless clearly permissive) and its ``*.py`` members."""
    with zipfile.ZipFile(path) as zf:
        lic = licence_of(_metadata(zf))
        files = {
            n: zf.read(n)
            for n in sorted(zf.namelist())
            if n.endswith(".py") and ".dist-info/" not in n and ".data/" not in n
        }
    return lic, files


def stdlib_files() -> tuple[str, dict[str, bytes]]:
    root = Path(sysconfig.get_paths()["stdlib"])
    files = {}
    for p in sorted(root.rglob("*.py")):
        rel = p.relative_to(root)
        if {"site-packages", "dist-packages", "__pycache__"} & set(rel.parts) or not p.is_file():
            continue
        files[rel.as_posix()] = p.read_bytes()
    return ".".join(map(str, sys.version_info[:3])), files


def build(wheels: Path, out: Path, pins: list[Pin]) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    version, std = stdlib_files()
    sources: list[tuple[Pin, str | None, dict[str, bytes]]] = [
        (Pin("cpython-stdlib", version, False), "PSF-2.0", std)
    ]
    skipped: list[dict] = []
    for pin in pins:
        wheel = find_wheel(wheels, pin)
        if wheel is None:
            skipped.append({"name": pin.name, "version": pin.version, "why": "no wheel"})
            continue
        lic, files = read_wheel(wheel, pin)
        sources.append((pin, lic, files))
    # training packages first, so a held-out file that duplicates training text is dropped
    sources.sort(key=lambda s: s[0].heldout)
    dedup = Deduplicator()
    packages: list[Package] = []
    reasons: dict[str, int] = {}
    for pin, lic, raw_files in sources:
        if lic is None:
            skipped.append({"name": pin.name, "version": pin.version, "why": "licence"})
            continue
        pkg = Package(pin.name, pin.version, lic, pin.heldout)
        size = 0
        for rel in sorted(raw_files, key=lambda r: hashlib.sha1(r.encode()).hexdigest()):
            raw = raw_files[rel]
            why = reject_reason(rel, raw) or ("package_cap" if size > MAX_PACKAGE_CHARS else None)
            why = why or dedup.seen(raw)
            if why:
                reasons[why] = reasons.get(why, 0) + 1
                continue
            pkg.files[rel] = raw.decode("utf-8")
            size += len(pkg.files[rel])
        if pkg.files:
            packages.append(pkg)
    manifest = _write(out, packages)
    manifest["skipped"] = skipped
    manifest["rejected_files"] = dict(sorted(reasons.items()))
    (out / "corpus.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def _entry(p: Package) -> dict:
    return {"name": p.name, "version": p.version, "license": p.license, "files": sorted(p.files)}


def _write(out: Path, packages: list[Package]) -> dict:
    stats = {}
    for split, held in (("train", False), ("heldout", True)):
        chosen = [p for p in packages if p.heldout == held]
        path = out / f"{split}.jsonl"
        digest = hashlib.sha256()
        with path.open("w", encoding="utf-8") as fh:
            for p in chosen:
                for rel, text in sorted(p.files.items()):
                    line = json.dumps({"package": p.name, "path": rel, "text": text}) + "\n"
                    fh.write(line)
                    digest.update(line.encode())
        # xz in blocks, several threads: ~6x smaller than the text
        subprocess.run(["xz", "-9", "-T0", "-f", str(path)], check=True)
        stats[split] = {
            "packages": len(chosen),
            "files": sum(len(p.files) for p in chosen),
            "chars": sum(len(t) for p in chosen for t in p.files.values()),
            "jsonl_sha256": digest.hexdigest(),
        }
    return {
        "packages": [_entry(p) for p in packages if not p.heldout],
        "heldout": [_entry(p) for p in packages if p.heldout],
        "stats": stats,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m training.corpus", description=__doc__)
    p.add_argument("command", choices=["download", "build"])
    p.add_argument("--wheels", type=Path, required=True, help="folder of downloaded wheels")
    p.add_argument("--out", type=Path, help="build: output folder")
    p.add_argument("--packages", type=Path, default=PACKAGES_FILE)
    args = p.parse_args(argv)
    pins = read_pins(args.packages)
    if args.command == "download":
        download(args.wheels, pins)
        return 0
    if args.out is None:
        p.error("build needs --out")
    manifest = build(args.wheels, args.out, pins)
    print(json.dumps({k: manifest[k] for k in ("stats", "skipped", "rejected_files")}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
