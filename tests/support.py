"""Test helpers: a real daemon in a subprocess (the way a user runs it) and the model it
serves. Shared by every test package (daemon, lsp, tui, agents, bench)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
SHIPPED_TINY = REPO / "ling_local" / "models" / "tiny"


def shipped_model_available() -> bool:
    return (SHIPPED_TINY / "config.json").is_file() and any(SHIPPED_TINY.glob("*.safetensors"))


def write_profile(path: Path, model_dir: str, name: str = "test", **sections: dict) -> Path:
    """Write a torch-engine profile TOML for `model_dir` (extra sections override)."""
    base = {
        "engine": {"kind": "torch", "warmup": False},
        "model": {"path": model_dir, "name": name, "context_length": 2048},
        "prompt": {"chat_template": "plain"},
    }
    for key, value in sections.items():
        base.setdefault(key, {}).update(value)
    lines = [f'name = "{name}"']
    for section, values in base.items():
        lines.append(f"[{section}]")
        for k, v in values.items():
            lines.append(f"{k} = {json.dumps(v)}")
    path.write_text("\n".join(lines) + "\n")
    return path


def child_env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LING_LOCAL_")}
    env.update(LING_LOCAL_HOME=str(home), PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1")
    env.update(extra)
    return env


@dataclass
class DaemonProcess:
    process: subprocess.Popen
    home: Path
    url: str
    token: str
    log: Path
    env: dict[str, str] = field(default_factory=dict)

    def client(self, **kw):
        from ling_local.client import Client

        return Client(self.url, self.token, **kw)

    def async_client(self, **kw):
        from ling_local.client import AsyncClient

        return AsyncClient(self.url, self.token, **kw)

    def http(self) -> httpx.Client:
        base = self.url if not self.url.startswith("unix:") else "http://localhost"
        transport = httpx.HTTPTransport(uds=self.url[5:]) if self.url.startswith("unix:") else None
        return httpx.Client(
            base_url=base,
            transport=transport,
            trust_env=False,
            headers={"Authorization": f"Bearer {self.token}"},
            timeout=60,
        )

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        return self.process.returncode


def start_daemon(
    profile: str | Path,
    home: Path,
    *args: str,
    timeout: float = 120.0,
    env: dict[str, str] | None = None,
    wait_ready: bool = True,
) -> DaemonProcess:
    """Run `python -m ling_local serve` like a user would and wait until it is ready
    (or only until it listens, with ``wait_ready=False``)."""
    home.mkdir(parents=True, exist_ok=True)
    log = home / "daemon.stderr"
    child = child_env(home, **(env or {}))
    cmd = [sys.executable, "-m", "ling_local", "serve", "--profile", str(profile), *args]
    if "--port" not in args and "--uds" not in args:
        cmd += ["--port", "0"]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=child, cwd=str(REPO))
    runtime = home / "run" / "daemon.json"
    deadline = time.monotonic() + timeout
    url = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"daemon exited with {proc.returncode}:\n{log.read_text()}")
        if runtime.is_file():
            try:
                info = json.loads(runtime.read_text())
                if info["pid"] == proc.pid:
                    url = info["url"]
                    break
            except (ValueError, KeyError):
                pass
        time.sleep(0.05)
    if url is None:
        proc.kill()
        raise RuntimeError(f"daemon did not start:\n{log.read_text()}")
    token = (home / "config" / "token").read_text().strip()
    daemon = DaemonProcess(proc, home, url, token, log, child)
    if not wait_ready:
        return daemon
    try:
        with daemon.client() as client:
            client.wait_ready(timeout=max(1.0, deadline - time.monotonic()))
    except BaseException:
        daemon.stop()  # never leave a daemon behind when its engine failed to start
        raise
    return daemon


def small_causal_lm(arch: str, *, tied: bool = True, **config: object):
    """A random 2-layer, 128-wide model of a transformers architecture ("llama", "qwen2"
    with q/k/v biases, "qwen3" with q/k norms) for engine tests; `config` overrides the
    shape (e.g. num_key_value_heads=2 for grouped KV heads). Seeded: same weights each call."""
    import torch
    from transformers import (
        LlamaConfig,
        LlamaForCausalLM,
        Qwen2Config,
        Qwen2ForCausalLM,
        Qwen3Config,
        Qwen3ForCausalLM,
    )

    classes = {
        "llama": (LlamaConfig, LlamaForCausalLM),
        "qwen2": (Qwen2Config, Qwen2ForCausalLM),
        "qwen3": (Qwen3Config, Qwen3ForCausalLM),
    }
    config_cls, model_cls = classes[arch]
    shape: dict = dict(
        vocab_size=512,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=512,
        tie_word_embeddings=tied,
    )
    shape.update(config)
    torch.manual_seed(0)
    return model_cls(config_cls(**shape)).eval()
