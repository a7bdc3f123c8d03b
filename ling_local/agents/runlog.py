"""The run log: every chain run and each of its finished steps, in SQLite under the state dir.

A step's row is committed (WAL, synchronous=FULL) the moment the step finishes, before the
next step starts, so a crash or a kill loses at most the step that was running; ``resume``
reads the rows back and skips those steps. Several processes may share the file.
"""

from __future__ import annotations

import json
import secrets
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ling_local import paths
from ling_local.agents.events import jsonable
from ling_local.errors import AgentError, RunNotFound

__all__ = ["RunLog", "RunRecord", "StepRecord", "default_path", "new_run_id"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    chain TEXT NOT NULL,
    source TEXT,
    steps TEXT NOT NULL,
    inputs TEXT NOT NULL,
    status TEXT NOT NULL,
    error TEXT,
    created REAL NOT NULL,
    updated REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS steps (
    run_id TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
    idx INTEGER NOT NULL,
    name TEXT NOT NULL,
    output TEXT NOT NULL,
    started REAL NOT NULL,
    finished REAL NOT NULL,
    seconds REAL NOT NULL,
    prompt_tokens INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    attempts INTEGER NOT NULL,
    PRIMARY KEY (run_id, idx)
);
CREATE INDEX IF NOT EXISTS runs_by_time ON runs(created);
"""


def default_path() -> Path:
    return paths.state_dir() / "chains" / "runs.sqlite3"


def new_run_id() -> str:
    """Sortable by start time, short enough to type: 20261129-113005-3fa9c2."""
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3)


@dataclass(slots=True)
class StepRecord:
    index: int
    name: str
    output: Any
    started: float
    finished: float
    seconds: float
    prompt_tokens: int
    completion_tokens: int
    attempts: int


@dataclass(slots=True)
class RunRecord:
    run_id: str
    chain: str
    source: str | None
    step_names: list[str]
    inputs: dict[str, Any]
    status: str
    """running | finished | failed | cancelled (a killed run stays 'running')."""
    error: str | None
    created: float
    updated: float
    steps: list[StepRecord] = field(default_factory=list)

    def finished_steps(self) -> dict[int, StepRecord]:
        return {s.index: s for s in self.steps}


class RunLog:
    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path is not None else default_path()
        paths.ensure_private_dir(self.path.parent)
        self._db = sqlite3.connect(self.path, timeout=10.0, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute("PRAGMA foreign_keys=ON")
        with self._db:
            self._db.executescript(_SCHEMA)

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> RunLog:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # ------------------------------------------------------------------ writes
    def create(
        self,
        run_id: str,
        chain: str,
        step_names: list[str],
        inputs: dict[str, Any],
        source: str | None = None,
    ) -> None:
        now = time.time()
        try:
            with self._db:
                self._db.execute(
                    "INSERT INTO runs VALUES (?, ?, ?, ?, ?, 'running', NULL, ?, ?)",
                    (
                        run_id,
                        chain,
                        source,
                        json.dumps(step_names),
                        _dumps(inputs, "inputs"),
                        now,
                        now,
                    ),
                )
        except sqlite3.IntegrityError:
            raise AgentError(
                f"a run with id {run_id!r} already exists; resume it instead of starting it"
            ) from None

    def step_finished(self, run_id: str, record: StepRecord) -> None:
        output = _dumps(record.output, f"the output of step {record.name!r}")
        with self._db:
            self._db.execute(
                "INSERT OR REPLACE INTO steps VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    run_id,
                    record.index,
                    record.name,
                    output,
                    record.started,
                    record.finished,
                    record.seconds,
                    record.prompt_tokens,
                    record.completion_tokens,
                    record.attempts,
                ),
            )
            self._touch(run_id)

    def set_status(self, run_id: str, status: str, error: str | None = None) -> None:
        with self._db:
            self._db.execute(
                "UPDATE runs SET status = ?, error = ?, updated = ? WHERE run_id = ?",
                (status, error, time.time(), run_id),
            )

    def _touch(self, run_id: str) -> None:
        self._db.execute("UPDATE runs SET updated = ? WHERE run_id = ?", (time.time(), run_id))

    # ------------------------------------------------------------------ reads
    def get(self, run_id: str) -> RunRecord:
        row = self._db.execute("SELECT * FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        if row is None:
            raise RunNotFound(f"no chain run {run_id!r} in {self.path}")
        record = _run(row)
        rows = self._db.execute(
            "SELECT idx, name, output, started, finished, seconds, prompt_tokens, "
            "completion_tokens, attempts FROM steps WHERE run_id = ? ORDER BY idx",
            (run_id,),
        )
        record.steps = [StepRecord(r[0], r[1], json.loads(r[2]), *r[3:]) for r in rows]
        return record

    def runs(self, limit: int = 20) -> list[RunRecord]:
        rows = self._db.execute("SELECT * FROM runs ORDER BY created DESC LIMIT ?", (limit,))
        return [_run(r) for r in rows]


def _run(row: tuple) -> RunRecord:
    run_id, chain, source, steps, inputs, status, error, created, updated = row
    return RunRecord(
        run_id,
        chain,
        source,
        json.loads(steps),
        json.loads(inputs),
        status,
        error,
        created,
        updated,
    )


def _dumps(value: Any, what: str) -> str:
    try:
        return json.dumps(value, default=jsonable, ensure_ascii=False)
    except (TypeError, ValueError) as err:
        raise AgentError(
            f"{what} cannot be saved to the run log ({err}); use JSON data: str, numbers, "
            "lists, dicts or pydantic models"
        ) from None
