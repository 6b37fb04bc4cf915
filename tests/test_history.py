"""History store and trend report: runs appended by pytest --mystique, change points, HTML."""

import base64
import json
import math
import re
import shutil
import sqlite3
import subprocess
import sys

import pytest

from pytest_mystique import trend
from pytest_mystique.history import HistoryStore, default_path
from pytest_mystique.inject import duplicate_ops

from conftest import corpus, read_json, write_json

FAST = ["--mystique-iters=10", "--mystique-budget=1", "--mystique-warmup=1", "--mystique-threads=1",
        "-p", "no:cacheprovider", "--mystique-tolerance=3"]  # fmt: skip


def history_cli(cwd, *args):
    return subprocess.run([sys.executable, "-m", "pytest_mystique.cli", "history", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300)  # fmt: skip


def test_runs_are_appended_and_the_trend_names_the_injected_change(pytester):
    pytester.makeini("[pytest]\nmystique_baseline_dir = perf/baselines\n")
    d = pytester.path / "traces"
    d.mkdir()
    shutil.copyfile(corpus("vit_infer.json.gz"), d / "vit.json.gz")
    for _ in range(3):
        pytester.runpytest("--mystique", "traces", *FAST).assert_outcomes(passed=1)
    write_json(d / "vit.json.gz", duplicate_ops(read_json(d / "vit.json.gz")))
    for _ in range(3):
        pytester.runpytest("--mystique", "traces", *FAST).assert_outcomes(passed=1)  # tolerance 300%: passes

    db = pytester.path / "perf" / "baselines" / "history.sqlite"
    assert default_path(pytester.path) == db  # the CLI finds what the plugin wrote, by the ini file
    rows = HistoryStore(db).results("vit")
    assert [r["ops_total"] for r in rows] == [56] * 3 + [112] * 3
    assert all(r["level"] > 0 and r["per_op"] and '"segments"' in r["details"] for r in rows)
    for r in rows:  # the judged runs' segment levels, kept for a later re-analysis: the row's level is their mean
        judged = [x for run in json.loads(r["details"])["run_levels"] for x in run]
        assert len(judged) == json.loads(r["details"])["segments"]
        assert math.exp(sum(judged) / len(judged)) == pytest.approx(r["level"], rel=1e-5)

    out = history_cli(pytester.path, "vit", "--html", "report.html")
    assert out.returncode == 0, out.stderr
    assert "vit: 6 run(s)" in out.stdout
    m = re.search(r"change point at run (\d+) \(.*\): \+(\d+\.\d)%", out.stdout)
    assert m and m.group(1) == "4" and float(m.group(2)) > 50, out.stdout
    html = (pytester.path / "report.html").read_text()
    png = base64.b64decode(re.search(r"data:image/png;base64,([A-Za-z0-9+/=]+)", html).group(1))
    assert png.startswith(b"\x89PNG") and len(png) > 5000
    assert "plotting vit" in out.stderr  # progress


def _row(store, run, level, torch_version):
    store.record(f"run{run}", {
        "trace": "t", "status": "same", "median_s": level / 100, "samples_s": [level / 100] * 4, "level": level,
        "environment": {"torch": torch_version, "python": "3.11.7"}, "git_commit": f"{run:040x}",
    })  # fmt: skip


def test_change_point_reports_the_environment_change(tmp_path):
    store = HistoryStore(tmp_path / "h.sqlite")
    noise = [0.004, -0.006, 0.002, 0.0, -0.003, 0.005, -0.001, 0.003, -0.004, 0.001, 0.002, -0.002]
    for i, e in enumerate(noise):
        _row(store, i, (1.0 if i < 7 else 1.08) * (1 + e), "2.13.0" if i < 7 else "2.14.0")
    [s] = [trend.build_series("t", store.results("t"))]
    [cp] = s.change_points
    assert cp.index == 7 and cp.ratio == pytest.approx(1.08, abs=0.01)
    assert cp.env_changes == ["torch 2.13.0 -> 2.14.0"]
    flat = trend.build_series("t", store.results("t")[:7])
    assert flat.change_points == []


def test_missing_or_corrupt_history_is_a_clear_error(tmp_path):
    out = history_cli(tmp_path)
    assert out.returncode == 2 and "no history database" in out.stderr
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(b"this is not a database" * 100)
    out = history_cli(tmp_path, "--db", str(bad))
    assert out.returncode == 2 and "corrupt history database" in out.stderr
    assert bad.read_bytes() == b"this is not a database" * 100


def test_old_history_schema_is_upgraded_in_place(tmp_path):
    db = tmp_path / "old.sqlite"
    con = sqlite3.connect(db)
    con.executescript(
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
        "INSERT INTO meta VALUES ('schema_version', '1');"
        "CREATE TABLE runs (id INTEGER PRIMARY KEY, run_uuid TEXT NOT NULL UNIQUE, started TEXT NOT NULL,"
        " git_commit TEXT, hardware_key TEXT, environment TEXT);"
        "CREATE TABLE results (id INTEGER PRIMARY KEY, run_id INTEGER NOT NULL, trace TEXT NOT NULL, file TEXT,"
        " status TEXT NOT NULL, median_s REAL, n INTEGER, samples TEXT, ratio REAL, ci_low REAL, ci_high REAL,"
        " p_value REAL, ops_total INTEGER, ops_replayed INTEGER, per_op TEXT, recorded TEXT NOT NULL);"
        "INSERT INTO runs VALUES (1, 'r1', '2026-01-01T00:00:00+00:00', NULL, NULL, '{}');"
        "INSERT INTO results (run_id, trace, status, median_s, recorded) VALUES (1, 't', 'new', 0.01, 'x');"
    )
    con.commit()
    con.close()
    store = HistoryStore(db)
    _row(store, 2, 1.0, "2.13.0")
    rows = store.results("t")
    assert [r["median_s"] for r in rows] == [0.01, 0.01] and rows[0]["level"] is None and rows[1]["level"] == 1.0


def test_change_points_ignore_wiggles_below_the_process_noise():
    """Levels of two bundled traces over 9 real runs on the CI host (mystique history): the
    unchanged one wiggles by up to 5% over two runs, the other had 30% of its ops doubled from
    run 6 on. Only the real change is named."""
    from pytest_mystique.trend import change_points

    unchanged = [11.187, 10.993, 10.993, 11.078, 10.816, 11.580, 11.540, 11.074, 11.095]
    doubled = [10.251, 10.388, 10.338, 10.403, 10.209, 15.344, 15.331, 15.830, 15.545]
    assert change_points(unchanged) == []
    assert change_points(doubled) == [5]
