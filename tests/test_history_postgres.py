"""The history in PostgreSQL: two runners writing at once lose nothing; mystique history reads it."""

import shutil
import subprocess
import sys

import pytest

from pytest_mystique.history_postgres import PostgresHistoryStore, redact

from conftest import bundled

FAST = ["--mystique-iters=5", "--mystique-budget=1", "--mystique-warmup=1", "--mystique-threads=1",
        "-p", "no:cacheprovider", "--mystique-tolerance=3"]  # fmt: skip


def test_two_concurrent_runners_share_one_history(tmp_path, postgres_url):
    runners = []
    for name in ("one", "two"):
        d = tmp_path / name / "traces"
        d.mkdir(parents=True)
        for trace in ("mlp_train", "embbag_rec"):
            shutil.copyfile(bundled(trace), d / f"{trace}.json.gz")
        cmd = [sys.executable, "-m", "pytest", "--mystique", "traces", *FAST, f"--mystique-history={postgres_url}"]
        runners.append(subprocess.Popen(cmd, cwd=tmp_path / name, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    outs = [p.communicate(timeout=300)[0].decode() for p in runners]
    assert all(p.returncode == 0 for p in runners), outs
    assert not any("history not recorded" in o for o in outs), outs

    rows = PostgresHistoryStore(postgres_url).results()
    assert sorted(r["trace"] for r in rows) == ["embbag_rec", "embbag_rec", "mlp_train", "mlp_train"]
    assert len({r["run_uuid"] for r in rows}) == 2 and all(r["level"] > 0 and r["per_op"] for r in rows)

    out = subprocess.run([sys.executable, "-m", "pytest_mystique.cli", "history", "--db", postgres_url],
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stderr
    print(out.stdout)  # shown with -s
    assert "mlp_train: 2 run(s)" in out.stdout and "embbag_rec: 2 run(s)" in out.stdout


def test_unreachable_server_is_reported_and_the_run_goes_on(pytester):
    # (without psycopg the run says to install it, before it tries to connect: the test below)
    pytest.importorskip("psycopg", reason="psycopg is not installed: the connection is never tried")
    d = pytester.path / "traces"
    d.mkdir()
    shutil.copyfile(bundled("mlp_train"), d / "mlp_train.json.gz")
    url = "postgresql://someone:secret@127.0.0.1:1/nowhere"
    result = pytester.runpytest("--mystique", "traces", *FAST, f"--mystique-history={url}")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["history not recorded: postgresql://someone:***@127.0.0.1:1/nowhere: cannot connect*"])
    assert "secret" not in result.stdout.str()
    assert redact(url) == "postgresql://someone:***@127.0.0.1:1/nowhere"


def test_missing_psycopg_is_reported_and_the_run_goes_on(pytester, monkeypatch):
    """Without psycopg (a host that installed pytest-mystique without its postgres extra) a
    PostgreSQL history is not recorded, with the reason; the trace's verdict stands. Before, the
    import escaped and errored the trace's item (seen on a GPU host with no psycopg)."""
    monkeypatch.setitem(sys.modules, "psycopg", None)  # (an import of it raises ImportError)
    d = pytester.path / "traces"
    d.mkdir()
    shutil.copyfile(bundled("mlp_train"), d / "mlp_train.json.gz")
    result = pytester.runpytest("--mystique", "traces", *FAST, "--mystique-history=postgresql://ci@127.0.0.1:1/perf")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["history not recorded: postgresql://ci@127.0.0.1:1/perf: a PostgreSQL history needs "
                                 "psycopg: pip install 'pytest-mystique[[]postgres]'"])  # fmt: skip
