"""The training loop: the target and its draft learn side by side from the same batches (the
draft's small kernels fill time the GPU would otherwise spend idle between the target's), each
with its own AdamW and warmup + cosine schedule; bf16 autocast on CUDA; a wall-clock budget
fixes the step count once the step time is known; held-out loss is logged as it goes."""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass

import torch

from training.pack import EpochBuilder

__all__ = ["LoopSettings", "heldout_loss", "lr_at", "train"]


@dataclass(slots=True)
class LoopSettings:
    lr: tuple[float, ...]
    """Peak learning rate of each model (target first)."""
    batch_rows: int
    seq_len: int
    budget_s: float
    """Wall-clock seconds for the whole loop; the step count is derived from it ..."""
    steps: int | None = None
    """... unless it is given here."""
    warmup: int = 150
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    eval_every: int = 250
    probe_start: int = 10
    probe_steps: int = 40
    """Steps ``probe_start``..``probe_steps`` are timed, then the step count is fixed (before
    the end of warmup, so the schedule agrees)."""
    max_epochs: float = 6.0
    compile: bool = False
    """``torch.compile`` the training forward passes (on CUDA: 78 against 118 ms a step for
    target + draft on an H200, after ~25 s of compilation)."""

    def __post_init__(self) -> None:
        if self.steps is None and not self.probe_start < self.probe_steps < self.warmup:
            raise ValueError("need probe_start < probe_steps < warmup when steps is not given")


def lr_at(step: int, total: int, s: LoopSettings, peak: float) -> float:
    if step < s.warmup:
        return peak * (step + 1) / s.warmup
    progress = min(1.0, (step - s.warmup) / max(1, total - s.warmup))
    return peak * (s.min_lr_ratio + (1 - s.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


def _autocast(device: str) -> torch.autocast:
    kind = "cuda" if str(device).startswith("cuda") else "cpu"
    return torch.autocast(kind, dtype=torch.bfloat16, enabled=kind == "cuda")


@torch.no_grad()
def heldout_loss(model: torch.nn.Module, rows: torch.Tensor, batch: int, device: str) -> float:
    model.eval()
    total, count = 0.0, 0
    for i in range(0, rows.shape[0], batch):
        x = rows[i : i + batch].to(device=device, dtype=torch.long)
        with _autocast(device):
            loss = model(input_ids=x, labels=x).loss
        total += loss.item() * x.shape[0]
        count += x.shape[0]
    model.train()
    return total / max(count, 1)


def _optimizer(model: torch.nn.Module, s: LoopSettings, lr: float, device: str):
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [
        {"params": decay, "weight_decay": s.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    fused = str(device).startswith("cuda")
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), eps=1e-8, fused=fused)


def _sync(device: str) -> None:
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


def train(
    names: list[str],
    models: list[torch.nn.Module],
    data: EpochBuilder,
    val_rows: torch.Tensor,
    s: LoopSettings,
    device: str,
    seed: int,
    log=print,
) -> dict:
    """Train ``models`` in place on the same batches; returns the history of each."""
    for m in models:
        m.to(device).train()
    opts = [_optimizer(m, s, lr, device) for m, lr in zip(models, s.lr, strict=True)]
    fwd = [torch.compile(m) if s.compile else m for m in models]
    gen = torch.Generator().manual_seed(seed)
    total = s.steps or 10**9
    t_start = time.perf_counter()
    t_probe = 0.0
    hist: dict = {
        "settings": asdict(s),
        "models": {n: {"step": [], "loss": [], "val": []} for n in names},
    }
    pending: list[list[torch.Tensor]] = [[] for _ in models]
    rows = perm = None
    cursor = step = epoch = 0
    while step < total:
        if rows is None or cursor + s.batch_rows > rows.shape[0]:
            t0 = time.perf_counter()
            rows = data.next_epoch().to(device)
            hist.setdefault("data_wait_s", []).append(round(time.perf_counter() - t0, 2))
            perm = torch.randperm(rows.shape[0], generator=gen).to(device)
            cursor = 0
            epoch += 1
            if s.steps is None and step == 0:
                total = max(s.warmup + 1, int(s.max_epochs * (rows.shape[0] // s.batch_rows)))
                hist["epoch_cap_steps"] = total
        x = rows[perm[cursor : cursor + s.batch_rows]].long()
        cursor += s.batch_rows
        for i, (m, f, opt) in enumerate(zip(models, fwd, opts, strict=True)):
            for g in opt.param_groups:
                g["lr"] = lr_at(step, total, s, s.lr[i])
            with _autocast(device):
                loss = f(input_ids=x, labels=x).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(m.parameters(), s.grad_clip)
            opt.step()
            opt.zero_grad(set_to_none=True)
            pending[i].append(loss.detach())
        step += 1
        if s.steps is None and step == s.probe_start:
            _sync(device)
            t_probe = time.perf_counter()
        if s.steps is None and step == s.probe_steps:
            _sync(device)
            per_step = (time.perf_counter() - t_probe) / (s.probe_steps - s.probe_start)
            left = s.budget_s - (time.perf_counter() - t_start)
            # held-out checks and epoch switches cost a few percent
            total = min(total, step + max(1, int(left / per_step / 1.05)))
            hist["seconds_per_step_probe"] = per_step
            log(f"[train] {per_step * 1e3:.1f} ms/step, {total} steps planned")
        if step % 20 == 0 or step == total:
            for i, n in enumerate(names):
                vals = torch.stack(pending[i]).float().tolist()
                h = hist["models"][n]
                h["step"] += list(range(step - len(vals) + 1, step + 1))
                h["loss"] += vals
                pending[i].clear()
            if step % 100 == 0:
                lossess = " ".join(f"{n} {hist['models'][n]['loss'][-1]:.3f}" for n in names)
                log(f"[train] step {step}/{total} epoch {epoch} {lossess} "
                    f"{time.perf_counter() - t_start:.0f}s")  # fmt: skip
        late = time.perf_counter() - t_start > 1.1 * s.budget_s
        if s.steps is None and step < total and late:
            hist["stopped_by_time_guard"] = step
            total = step
        if step % s.eval_every == 0 or step == total:
            for n, m in zip(names, models, strict=True):
                val = heldout_loss(m, val_rows, s.batch_rows, device)
                hist["models"][n]["val"].append((step, val))
            log(f"[train] step {step} held-out " + " ".join(
                f"{n} {hist['models'][n]['val'][-1][1]:.4f}" for n in names))  # fmt: skip
    _sync(device)
    secs = time.perf_counter() - t_start
    hist.update(
        steps=step,
        seconds=secs,
        tokens=step * s.batch_rows * s.seq_len,
        tokens_per_s=step * s.batch_rows * s.seq_len / secs,
        epochs=step * s.batch_rows * s.seq_len / max(1, data.tokens_per_epoch[0]),
        tokens_per_epoch=data.tokens_per_epoch[0],
    )
    for n in names:
        h = hist["models"][n]
        last = h["loss"][-20:]
        h["final_train_loss"] = sum(last) / max(1, len(last))
        h["final_heldout_loss"] = h["val"][-1][1] if h["val"] else None
    return hist
