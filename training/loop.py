"""The training loop for one model: AdamW, warmup + cosine, bf16 autocast on CUDA, a wall-clock
budget that fixes the step count once the step time is known, and held-out loss checks that
keep the best weights."""

from __future__ import annotations

import math
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass

import torch
from tokenizers import Tokenizer
from tqdm import tqdm

from training.data import SourceFile
from training.pack import epoch_rows


@dataclass(slots=True)
class LoopSettings:
    lr: float
    batch_rows: int
    seq_len: int
    budget_s: float
    """Wall-clock seconds for the whole loop; the step count is derived from it ..."""
    steps: int | None = None
    """... unless it is given here."""
    warmup: int = 100
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    eval_every: int = 200
    probe_start: int = 5
    probe_steps: int = 30
    """Steps ``probe_start``..``probe_steps`` are timed, then the step count is fixed (before
    the end of warmup, so the schedule agrees). The next epoch's data is made ready first: its
    preparation competes for the GIL and would make the steps look slower than they are."""
    max_epochs: float = 10.0
    """Without ``steps``: stop after this many passes over the data even if time is left
    (the stdlib is small; past this the held-out loss stops improving)."""

    def __post_init__(self) -> None:
        if self.steps is None and not self.probe_start < self.probe_steps < self.warmup:
            raise ValueError("need probe_start < probe_steps < warmup when steps is not given")


class EpochStream:
    """Rows of token ids, epoch after epoch, the next epoch prepared in a background thread
    (tokenization runs in Rust without the GIL). Deterministic for a given seed."""

    def __init__(
        self, tok: Tokenizer, files: list[SourceFile], seed: int, seq_len: int, cut_every: int = 0
    ) -> None:
        self._args = (tok, files, seed)
        self._seq_len = seq_len
        self._cut_every = cut_every
        self._pool = ThreadPoolExecutor(max_workers=1)
        self._epoch = 0
        self._next = self._pool.submit(epoch_rows, tok, files, seed, 0, seq_len, cut_every)
        self.tokens_seen_epochs: list[int] = []
        self.wait_s = 0.0
        """Time the training loop spent waiting for data."""

    def next_epoch(self) -> torch.Tensor:
        t0 = time.perf_counter()
        rows = self._next.result()
        self.wait_s += time.perf_counter() - t0
        self._epoch += 1
        tok, files, seed = self._args
        self._next = self._pool.submit(
            epoch_rows, tok, files, seed, self._epoch, self._seq_len, self._cut_every
        )
        self.tokens_seen_epochs.append(rows.numel())
        return rows

    def wait_ready(self) -> None:
        """Block until the next epoch is prepared (counted as waiting for data)."""
        t0 = time.perf_counter()
        self._next.result()
        self.wait_s += time.perf_counter() - t0

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def lr_at(step: int, total: int, s: LoopSettings) -> float:
    if step < s.warmup:
        return s.lr * (step + 1) / s.warmup
    progress = min(1.0, (step - s.warmup) / max(1, total - s.warmup))
    return s.lr * (s.min_lr_ratio + (1 - s.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


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


def _autocast(device: str) -> torch.autocast:
    kind = "cuda" if str(device).startswith("cuda") else "cpu"
    return torch.autocast(kind, dtype=torch.bfloat16, enabled=kind == "cuda")


def _optimizer(model: torch.nn.Module, s: LoopSettings, device: str) -> torch.optim.AdamW:
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [
        {"params": decay, "weight_decay": s.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    fused = str(device).startswith("cuda")
    return torch.optim.AdamW(groups, lr=s.lr, betas=(0.9, 0.95), eps=1e-8, fused=fused)


def train(
    name: str,
    model: torch.nn.Module,
    stream: EpochStream,
    val_rows: torch.Tensor,
    s: LoopSettings,
    device: str,
    seed: int,
) -> dict:
    """Train ``model`` in place (ending with its best held-out weights); returns the history."""
    model.to(device).train()
    opt = _optimizer(model, s, device)
    gen = torch.Generator().manual_seed(seed)
    total = s.steps or 10**9
    t_start = time.perf_counter()
    t_probe = None
    history: dict = {"name": name, "settings": asdict(s), "step": [], "loss": [], "val": []}
    best = (float("inf"), -1, None)
    pending: list[torch.Tensor] = []
    rows = perm = None
    cursor = 0
    bar = tqdm(total=total if s.steps else None, desc=name, unit="step", mininterval=2.0)
    step = 0
    while step < total:
        if rows is None or cursor + s.batch_rows > rows.shape[0]:
            rows = stream.next_epoch().to(device)
            perm = torch.randperm(rows.shape[0], generator=gen).to(device)
            cursor = 0
            if s.steps is None and step == 0:
                total = max(s.warmup + 1, int(s.max_epochs * (rows.shape[0] // s.batch_rows)))
                history["epoch_cap_steps"] = total
                bar.total = total
        x = rows[perm[cursor : cursor + s.batch_rows]].long()
        cursor += s.batch_rows
        for g in opt.param_groups:
            g["lr"] = lr_at(step, total, s)
        with _autocast(device):
            loss = model(input_ids=x, labels=x).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), s.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        pending.append(loss.detach())
        step += 1
        if s.steps is None and step == s.probe_start:
            stream.wait_ready()
            _sync(device)
            t_probe = time.perf_counter()
        if s.steps is None and step == s.probe_steps:
            _sync(device)
            per_step = (time.perf_counter() - t_probe) / (s.probe_steps - s.probe_start)
            left = s.budget_s - (time.perf_counter() - t_start)
            # held-out checks cost about one step per 50 rows of validation each time
            total = min(total, step + max(1, int(left / per_step / 1.03)))
            history["seconds_per_step_probe"] = per_step
            bar.total = total
            bar.refresh()
        if step % 10 == 0 or step == total:
            vals = torch.stack(pending).float().tolist()
            history["step"] += list(range(step - len(vals) + 1, step + 1))
            history["loss"] += vals
            pending.clear()
            bar.set_postfix(loss=f"{sum(vals) / len(vals):.3f}", lr=f"{lr_at(step, total, s):.1e}")
        bar.update(1)
        late = time.perf_counter() - t_start > 1.2 * s.budget_s  # the probe was too hopeful
        if s.steps is None and step % 10 == 0 and step < total and late:
            history["stopped_by_time_guard"] = step
            total = step
        if step % s.eval_every == 0 or step == total:
            val = heldout_loss(model, val_rows, s.batch_rows, device)
            history["val"].append((step, val))
            bar.write(f"[{name}] step {step}/{total} held-out loss {val:.4f}")
            if val < best[0]:
                state = {k: v.detach().clone() for k, v in model.state_dict().items()}
                best = (val, step, state)
    bar.close()
    _sync(device)
    history["steps"] = step
    history["seconds"] = time.perf_counter() - t_start
    history["tokens"] = step * s.batch_rows * s.seq_len
    history["tokens_per_s"] = history["tokens"] / history["seconds"]
    history["epochs"] = history["tokens"] / max(1, stream.tokens_seen_epochs[0])
    history["data_wait_s"] = stream.wait_s
    last = history["loss"][-20:]
    history["final_train_loss"] = sum(last) / max(1, len(last))
    history["final_heldout_loss"] = history["val"][-1][1] if history["val"] else None
    history["best_heldout_loss"], history["best_step"] = best[0], best[1]
    if best[2] is not None and best[1] != step:
        model.load_state_dict(best[2])
    return history


def _sync(device: str) -> None:
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()
