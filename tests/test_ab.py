"""mystique ab: two Python environments, interleaved rounds, on real traces."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_mystique.ab import Worker
from pytest_mystique.errors import MystiqueError
from pytest_mystique.graph import select_ops
from pytest_mystique.trace import load_trace

from conftest import bundled

CLI = [sys.executable, "-m", "pytest_mystique.cli", "ab"]


def slowed_python(tmp_path: Path) -> str:
    """A Python whose environment is slower: a site hook starts a thread that competes for the
    interpreter lock, as a regression in a library's Python code would."""
    site = tmp_path / "slow_site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import threading\n"
        "def _spin():\n"
        "    while True:\n"
        "        sum(range(1000))\n"
        "threading.Thread(target=_spin, daemon=True).start()\n"
    )
    exe = tmp_path / "slow-python"
    exe.write_text(f'#!/bin/sh\nPYTHONPATH="{site}${{PYTHONPATH:+:$PYTHONPATH}}" exec "{sys.executable}" "$@"\n')
    exe.chmod(0o755)
    return str(exe)


def run_ab(*args, timeout=300):
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, OMP_NUM_THREADS="1"))  # fmt: skip


def test_same_environment_twice_is_not_slower():
    out = run_ab("--python", sys.executable, "--python", sys.executable, str(bundled("mlp_train")), "--budget", "6",
                 "--json")  # fmt: skip
    assert out.returncode == 0, out.stderr
    [r] = json.loads(out.stdout)
    assert r["status"] in ("same", "unsure")
    ops = len(select_ops(load_trace(bundled("mlp_train"))))  # 58: cross_entropy_loss through its parts
    assert r["a"]["ops_replayed"] == r["b"]["ops_replayed"] == r["a"]["ops_total"] == ops == 58
    assert r["rounds"] >= 4 and r["a"]["torch"] == r["b"]["torch"]


def test_slower_environment_is_caught_and_fails(tmp_path):
    out = run_ab("--python", sys.executable, "--python", slowed_python(tmp_path), str(bundled("mlp_train")),
                 "--budget", "8")  # fmt: skip
    assert out.returncode == 1, out.stdout + out.stderr
    assert "SLOWER" in out.stdout and "mlp_train" in out.stdout
    line = next(x for x in out.stdout.splitlines() if x.startswith("mlp_train"))
    ratio = float(line.split()[5])
    assert ratio > 1.2


def test_bad_trace_and_bad_python_are_clear_errors(tmp_path):
    bad = tmp_path / "broken.json"
    bad.write_text("{ not json")
    out = run_ab("--python", sys.executable, "--python", sys.executable, str(bad), "--budget", "2")
    assert out.returncode == 1 and "broken.json" in out.stderr and "invalid JSON" in out.stderr
    with pytest.raises(MystiqueError, match="cannot start a replay worker"):
        Worker(str(tmp_path / "no-such-python"), 1)
    out = run_ab("--python", sys.executable, str(bad))
    assert out.returncode == 2 and "exactly twice" in out.stderr
