"""The history store in PostgreSQL, for many CI runners sharing one history.

Chosen by a URL: ``--mystique-history postgresql://user@host/db`` (or the ini key). Same rows as
the SQLite store (:mod:`.history`), in tables ``mystique_runs`` and ``mystique_results``; each
result is one transaction, so concurrent runners and a killed run lose nothing and leave no half
rows. Uses psycopg 3 (``pip install 'pytest-mystique[postgres]'``).
"""

from __future__ import annotations

import re

from .history import RESULT_COLUMNS, RUN_COLUMNS, HistoryError, _now, result_row, results_query, run_row

PREFIX = "mystique_"
SCHEMA_VERSION = 1
_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS {PREFIX}meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS {PREFIX}runs (
    id BIGSERIAL PRIMARY KEY, run_uuid TEXT NOT NULL UNIQUE, started TEXT NOT NULL, git_commit TEXT,
    hardware_key TEXT, environment TEXT
);
CREATE TABLE IF NOT EXISTS {PREFIX}results (
    id BIGSERIAL PRIMARY KEY, run_id BIGINT NOT NULL REFERENCES {PREFIX}runs(id), trace TEXT NOT NULL, file TEXT,
    status TEXT NOT NULL, median_s DOUBLE PRECISION, n INTEGER, samples TEXT, ratio DOUBLE PRECISION,
    ci_low DOUBLE PRECISION, ci_high DOUBLE PRECISION, p_value DOUBLE PRECISION, ops_total INTEGER,
    ops_replayed INTEGER, per_op TEXT, recorded TEXT NOT NULL, level DOUBLE PRECISION, details TEXT
);
CREATE INDEX IF NOT EXISTS {PREFIX}results_trace ON {PREFIX}results(trace, id);
"""


def is_url(target) -> bool:
    return isinstance(target, str) and target.startswith(("postgresql://", "postgres://"))


def redact(url: str) -> str:
    """The URL without its password, for messages."""
    return re.sub(r"(//[^:/@]*):[^@/]*@", r"\1:***@", url)


class PostgresHistoryStore:
    def __init__(self, url: str, timeout_s: float = 30.0):
        self.url = url
        self.timeout_s = timeout_s
        self.where = redact(url)

    def _connect(self):
        try:
            import psycopg
        except ImportError:
            raise HistoryError(self.where, "a PostgreSQL history needs psycopg: pip install 'pytest-mystique[postgres]'") from None
        try:
            con = psycopg.connect(self.url, connect_timeout=max(1, int(self.timeout_s)), autocommit=False)
        except psycopg.Error as e:
            raise HistoryError(self.where, f"cannot connect to the history database: {_first_line(e)}") from None
        try:
            with con.transaction():
                # two runners creating the schema at once would collide in the catalog: serialise
                con.execute("SELECT pg_advisory_xact_lock(hashtext('pytest-mystique schema'))")
                con.execute(_SCHEMA)
                row = con.execute(f"SELECT value FROM {PREFIX}meta WHERE key = 'schema_version'").fetchone()
                if row is None:
                    con.execute(f"INSERT INTO {PREFIX}meta VALUES ('schema_version', %s)", (str(SCHEMA_VERSION),))
                elif int(row[0]) > SCHEMA_VERSION:
                    raise HistoryError(self.where, f"history schema {row[0]} is newer than this pytest-mystique reads")
        except psycopg.Error as e:
            con.close()
            raise HistoryError(self.where, f"history database error: {_first_line(e)}") from None
        return con

    def record(self, run_uuid: str, result: dict) -> None:
        """Append one trace result (and its run's row, the first time) in one transaction."""
        now = _now()
        con = self._connect()  # (first: it says so where psycopg is not installed)
        import psycopg
        try:
            with con.transaction():
                con.execute(f"INSERT INTO {PREFIX}runs ({', '.join(RUN_COLUMNS)}) VALUES "
                            f"({', '.join(['%s'] * len(RUN_COLUMNS))}) ON CONFLICT (run_uuid) DO NOTHING",
                            run_row(run_uuid, result, now))  # fmt: skip
                (run_id,) = con.execute(f"SELECT id FROM {PREFIX}runs WHERE run_uuid = %s", (run_uuid,)).fetchone()
                con.execute(f"INSERT INTO {PREFIX}results ({', '.join(RESULT_COLUMNS)}) VALUES "
                            f"({', '.join(['%s'] * len(RESULT_COLUMNS))})", result_row(run_id, result, now))  # fmt: skip
        except psycopg.Error as e:
            raise HistoryError(self.where, f"history database error: {_first_line(e)}") from None
        finally:
            con.close()

    def results(self, trace: str | None = None, limit: int = 1000) -> list[dict]:
        """Recent results, oldest first, optionally of one trace."""
        con = self._connect()
        import psycopg
        from psycopg.rows import dict_row
        try:
            with con.cursor(row_factory=dict_row) as cur:
                cur.execute(results_query(trace, "%s", PREFIX), (trace, limit) if trace else (limit,))
                rows = cur.fetchall()
        except psycopg.Error as e:
            raise HistoryError(self.where, f"history database error: {_first_line(e)}") from None
        finally:
            con.close()
        return [dict(r) for r in reversed(rows)]

    def check(self) -> str:
        self._connect().close()
        return "ok"


def _first_line(e: Exception) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0]
