"""The history store: every run's results, appended to an SQLite database.

One row per run (time, git commit, hardware, environment) and one per trace result (verdict,
median, samples, comparison). SQLite gives what a shared store needs for free: transactions (a
killed run leaves complete rows or none), write-ahead logging (readers never block the writer),
and a busy timeout (pytest-xdist workers and separate runs writing at once wait their turn).
A corrupt or locked database is reported as such; it is never replaced or repaired silently.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import sqlite3
from contextlib import closing
from pathlib import Path

from .errors import MystiqueError

SCHEMA_VERSION = 1
DEFAULT_TIMEOUT_S = 30.0

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY,
    run_uuid TEXT NOT NULL UNIQUE,
    started TEXT NOT NULL,
    git_commit TEXT,
    hardware_key TEXT,
    environment TEXT
);
CREATE TABLE IF NOT EXISTS results (
    id INTEGER PRIMARY KEY,
    run_id INTEGER NOT NULL REFERENCES runs(id),
    trace TEXT NOT NULL,
    file TEXT,
    status TEXT NOT NULL,
    median_s REAL,
    n INTEGER,
    samples TEXT,
    ratio REAL,
    ci_low REAL,
    ci_high REAL,
    p_value REAL,
    ops_total INTEGER,
    ops_replayed INTEGER,
    per_op TEXT,
    recorded TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS results_trace ON results(trace, id);
"""


class HistoryError(MystiqueError):
    """The history database cannot be read or written."""


class HistoryStore:
    def __init__(self, path: str | os.PathLike, timeout_s: float = DEFAULT_TIMEOUT_S):
        self.path = Path(path)
        self.timeout_s = timeout_s

    def _connect(self) -> sqlite3.Connection:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            con = sqlite3.connect(self.path, timeout=self.timeout_s, isolation_level=None)
        except (OSError, sqlite3.Error) as e:
            raise HistoryError(self.path, f"cannot open history database: {e}") from None
        try:
            con.execute("PRAGMA journal_mode=WAL")
            con.execute("PRAGMA synchronous=NORMAL")
            con.executescript(_SCHEMA)
            row = con.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
            if row is None:
                con.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
            elif int(row[0]) > SCHEMA_VERSION:
                raise HistoryError(self.path, f"history schema {row[0]} is newer than this pytest-mystique reads")
        except sqlite3.Error as e:
            con.close()
            raise HistoryError(self.path, _problem(e)) from None
        return con

    def record(self, run_uuid: str, result: dict) -> None:
        """Append one trace result (and its run's row, the first time) in one transaction."""
        cmp = result.get("comparison") or {}
        now = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        with closing(self._connect()) as con:
            try:
                con.execute("BEGIN IMMEDIATE")
                con.execute(
                    "INSERT OR IGNORE INTO runs (run_uuid, started, git_commit, hardware_key, environment) "
                    "VALUES (?, ?, ?, ?, ?)",
                    (run_uuid, now, result.get("git_commit"), result.get("hardware_key"),
                     json.dumps(result.get("environment"), sort_keys=True, default=str)),
                )  # fmt: skip
                (run_id,) = con.execute("SELECT id FROM runs WHERE run_uuid = ?", (run_uuid,)).fetchone()
                con.execute(
                    "INSERT INTO results (run_id, trace, file, status, median_s, n, samples, ratio, ci_low, "
                    "ci_high, p_value, ops_total, ops_replayed, per_op, recorded) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (run_id, result["trace"], result.get("file"), result["status"], result.get("median_s"),
                     len(result.get("samples_s") or []), json.dumps(result.get("samples_s") or []),
                     cmp.get("ratio"), cmp.get("ci_low"), cmp.get("ci_high"), cmp.get("p_slower"),
                     result.get("ops_total"), result.get("ops_replayed"),
                     json.dumps(result.get("per_op_median_s")) if result.get("per_op_median_s") else None, now),
                )  # fmt: skip
                con.execute("COMMIT")
            except sqlite3.Error as e:
                if con.in_transaction:
                    con.execute("ROLLBACK")
                raise HistoryError(self.path, _problem(e)) from None

    def results(self, trace: str | None = None, limit: int = 1000) -> list[dict]:
        """Recent results, oldest first, optionally of one trace."""
        with closing(self._connect()) as con:
            con.row_factory = sqlite3.Row
            try:
                query = (
                    "SELECT r.*, runs.run_uuid, runs.started, runs.git_commit, runs.environment "
                    "FROM results r JOIN runs ON runs.id = r.run_id "
                    + ("WHERE r.trace = ? " if trace else "")
                    + "ORDER BY r.id DESC LIMIT ?"
                )
                rows = con.execute(query, (trace, limit) if trace else (limit,)).fetchall()
            except sqlite3.Error as e:
                raise HistoryError(self.path, _problem(e)) from None
        return [dict(r) for r in reversed(rows)]

    def check(self) -> str:
        """SQLite's own integrity check: ``ok`` for a sound database."""
        with closing(self._connect()) as con:
            try:
                return con.execute("PRAGMA integrity_check").fetchone()[0]
            except sqlite3.Error as e:
                raise HistoryError(self.path, _problem(e)) from None


def _problem(e: sqlite3.Error) -> str:
    text = str(e)
    if "not a database" in text or "malformed" in text:
        return f"corrupt history database ({text}); it was left untouched"
    if "locked" in text or "busy" in text:
        return f"history database is locked by another process ({text})"
    return f"history database error: {text}"
