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
import math
import os
import sqlite3
from contextlib import closing
from pathlib import Path

from .errors import MystiqueError

SCHEMA_VERSION = 2  # 2: level and details columns
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
    recorded TEXT NOT NULL,
    level REAL,
    details TEXT
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
            if row is not None and int(row[0]) > SCHEMA_VERSION:
                raise HistoryError(self.path, f"history schema {row[0]} is newer than this pytest-mystique reads")
            if row is None or int(row[0]) < SCHEMA_VERSION:
                _upgrade(con)
        except sqlite3.Error as e:
            con.close()
            raise HistoryError(self.path, _problem(e)) from None
        return con

    def record(self, run_uuid: str, result: dict) -> None:
        """Append one trace result (and its run's row, the first time) in one transaction."""
        now = _now()
        with closing(self._connect()) as con:
            try:
                con.execute("BEGIN IMMEDIATE")
                con.execute(f"INSERT OR IGNORE INTO runs ({', '.join(RUN_COLUMNS)}) VALUES ({', '.join('?' * len(RUN_COLUMNS))})",
                            run_row(run_uuid, result, now))  # fmt: skip
                (run_id,) = con.execute("SELECT id FROM runs WHERE run_uuid = ?", (run_uuid,)).fetchone()
                con.execute(f"INSERT INTO results ({', '.join(RESULT_COLUMNS)}) VALUES ({', '.join('?' * len(RESULT_COLUMNS))})",
                            result_row(run_id, result, now))  # fmt: skip
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
                rows = con.execute(results_query(trace, "?"), (trace, limit) if trace else (limit,)).fetchall()
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


RUN_COLUMNS = ("run_uuid", "started", "git_commit", "hardware_key", "environment")
RESULT_COLUMNS = ("run_id", "trace", "file", "status", "median_s", "n", "samples", "ratio", "ci_low", "ci_high",
                  "p_value", "ops_total", "ops_replayed", "per_op", "recorded", "level", "details")  # fmt: skip


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def run_row(run_uuid: str, result: dict, now: str) -> tuple:
    """The values of RUN_COLUMNS for the run a result belongs to."""
    env = json.dumps(result.get("environment"), sort_keys=True, default=str)
    return (run_uuid, now, result.get("git_commit"), result.get("hardware_key"), env)


def result_row(run_id: int, result: dict, now: str) -> tuple:
    """The values of RESULT_COLUMNS for one trace result."""
    cmp = result.get("comparison") or {}
    details = {k: result.get(k) for k in DETAIL_KEYS if result.get(k) is not None}
    per_op = result.get("per_op_median_s")
    return (run_id, result["trace"], result.get("file"), result["status"], result.get("median_s"),
            len(result.get("samples_s") or []), json.dumps(result.get("samples_s") or []),
            cmp.get("ratio"), cmp.get("ci_low"), cmp.get("ci_high"), cmp.get("p_slower"),
            result.get("ops_total"), result.get("ops_replayed"), json.dumps(per_op) if per_op else None, now,
            result.get("level"), json.dumps(details, default=str))  # fmt: skip


def earlier_sessions(rows: list[dict], file: str, hardware_key: str, baseline_median_s: float,
                     baseline_environment: dict | None = None) -> dict[str, list[tuple[float, float]]]:  # fmt: skip
    """A trace's comparisons with one baseline (known by its median) on one hardware, among its
    history ``rows`` (oldest first), each as (log ratio to the baseline, that session's own
    variance): under ``drift`` all of them, the evidence :func:`.stats.session_drift` reads; under
    ``reference`` those pooled with the baseline's session (:func:`reference_sessions`). Rows this
    version cannot read are not evidence. Each row's details are decoded once."""
    found = list(_comparisons(rows, file, hardware_key, baseline_median_s))
    return {"drift": [(r, v) for r, v, _, _ in found], "reference": reference_sessions(found, baseline_environment)}


#: Sessions at most that are pooled with a baseline's as its reference (:func:`reference_sessions`).
REFERENCE_SESSIONS = 5


def reference_sessions(found: list[tuple], baseline_environment: dict | None) -> list[tuple[float, float]]:
    """The sessions that stand beside a baseline's own as its reference: of the comparisons with
    it (``found`` by :func:`earlier_sessions`, oldest first), the first :data:`REFERENCE_SESSIONS`
    that ran on the baseline's exact environment (torch, Python, numpy, CUDA, driver, OS: the
    fingerprint) and found no change (verdict ``same``). They are more draws of the level the
    baseline measured, each with a session offset of its own, so pooling them averages down the
    one the baseline session happened to have (:func:`.stats.welch_runs`). Only the first ones
    count: the reference is then fixed, and a later slow change of an unrecorded kind is not folded
    into it; a session on another environment (the upgrade under test) never is. As (log ratio to
    the baseline, that session's own variance)."""
    if not baseline_environment:
        return []
    out = []
    for r, v, row, status in found:
        if status != "same":
            continue
        try:
            env = json.loads(row.get("environment") or "null")
        except ValueError:
            continue
        if env == baseline_environment:
            out.append((r, v))
            if len(out) == REFERENCE_SESSIONS:
                break
    return out


def _comparisons(rows, file, hardware_key, baseline_median_s):
    for row in rows:
        try:
            details = json.loads(row.get("details") or "{}")
            cmp = details.get("comparison") or {}
            if (row.get("file") == file and details.get("hardware_key") == hardware_key
                    and cmp.get("baseline_median_s") == baseline_median_s and cmp.get("ratio", 0) > 0):  # fmt: skip
                r = math.log(cmp["ratio"]) + float(cmp.get("reference_shift") or 0.0)
                yield r, float(cmp.get("current_var", math.nan)), row, row.get("status")
        except (ValueError, TypeError, AttributeError):
            continue


def results_query(trace: str | None, mark: str, prefix: str = "") -> str:
    """Newest results first (optionally of one trace), with their run's fields; ``mark`` is the
    driver's parameter placeholder."""
    return (
        "SELECT r.*, runs.run_uuid, runs.started, runs.git_commit, runs.environment "
        f"FROM {prefix}results r JOIN {prefix}runs runs ON runs.id = r.run_id "
        + (f"WHERE r.trace = {mark} " if trace else "")
        + f"ORDER BY r.id DESC LIMIT {mark}"
    )


#: Result fields kept in the ``details`` column (JSON). ``run_levels``: the judged runs' segment
#: levels (log, probe-normalised when probed), so that a later analysis can judge the recorded
#: sessions again under another noise model.
DETAIL_KEYS = ("device", "threads", "segments", "runs", "segment_iters", "sampling_s", "probed", "tolerance", "comparison",
               "attribution", "hardware_key", "ops_skipped", "timed", "xdist_worker", "run_levels")  # fmt: skip


def _upgrade(con: sqlite3.Connection) -> None:
    """Bring a database written by an older pytest-mystique to this schema, in one transaction."""
    con.execute("BEGIN IMMEDIATE")
    try:
        have = {r[1] for r in con.execute("PRAGMA table_info(results)")}
        for column, kind in (("level", "REAL"), ("details", "TEXT")):
            if column not in have:
                con.execute(f"ALTER TABLE results ADD COLUMN {column} {kind}")
        con.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
        con.execute("COMMIT")
    except sqlite3.Error:
        con.execute("ROLLBACK")
        raise


def _problem(e: sqlite3.Error) -> str:
    text = str(e)
    if "not a database" in text or "malformed" in text:
        return f"corrupt history database ({text}); it was left untouched"
    if "locked" in text or "busy" in text:
        return f"history database is locked by another process ({text})"
    return f"history database error: {text}"


def find_ini(start: Path) -> tuple[Path | None, dict]:
    """The pytest configuration file that applies in ``start`` (pytest's documented search: in
    each directory upwards, pytest.ini, .pytest.ini, pyproject.toml with [tool.pytest.ini_options],
    tox.ini with [pytest], setup.cfg with [tool:pytest]) and its mystique settings."""
    import configparser

    for d in (start, *start.parents):
        for name in ("pytest.ini", ".pytest.ini"):
            if (d / name).is_file():
                return d / name, _ini_section(d / name, "pytest")
        pyproject = d / "pyproject.toml"
        if pyproject.is_file():
            try:
                import tomllib
            except ImportError:  # Python 3.10
                tomllib = None
            if tomllib is not None:
                try:
                    opts = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("tool", {}).get("pytest", {})
                except (OSError, ValueError):
                    opts = {}
                if "ini_options" in opts:
                    return pyproject, {k: str(v) for k, v in opts["ini_options"].items()}
        for name, section in (("tox.ini", "pytest"), ("setup.cfg", "tool:pytest")):
            if (d / name).is_file():
                try:
                    found = _ini_section(d / name, section)
                except configparser.Error:
                    continue
                if found is not None:
                    return d / name, found
    return None, {}


def _ini_section(path: Path, section: str) -> dict | None:
    import configparser

    cp = configparser.ConfigParser(interpolation=None)
    cp.read(path, encoding="utf-8")
    return dict(cp[section]) if cp.has_section(section) else ({} if path.name.endswith("pytest.ini") else None)


def default_path(cwd: Path | None = None) -> Path | str | None:
    """Where the plugin run from ``cwd`` writes its history (the same rules as the plugin's
    ``history_path``): ``mystique_history`` or ``mystique_baseline_dir`` of the ini file, else
    ``.mystique/baselines/history.sqlite`` under the rootdir."""
    cwd = cwd or Path.cwd()
    ini, opts = find_ini(cwd)
    base = ini.parent if ini else cwd
    value = (opts or {}).get("mystique_history")
    if value == "off":
        return None
    if value and value.startswith(("postgresql://", "postgres://")):
        return value
    if value:
        return (base / value).resolve()
    bdir = (opts or {}).get("mystique_baseline_dir")
    return ((base / bdir).resolve() if bdir else base / ".mystique" / "baselines") / "history.sqlite"


def open_store(target, timeout_s: float = DEFAULT_TIMEOUT_S):
    """The history store for ``target``: a ``postgresql://`` URL or an SQLite file path."""
    from .history_postgres import PostgresHistoryStore, is_url

    return PostgresHistoryStore(target, timeout_s) if is_url(target) else HistoryStore(target, timeout_s)
