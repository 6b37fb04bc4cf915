"""mystique ab: two Python environments, interleaved rounds, on real traces."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from bad_inputs import set_op_schema

from pytest_mystique.ab import ab_trace
from pytest_mystique.errors import MystiqueError, ReplayError
from pytest_mystique.graph import select_ops
from pytest_mystique.trace import load_trace
from pytest_mystique.worker import Worker, cpu_sets

from conftest import bundled, corpus, read_json, write_json

CLI = [sys.executable, "-m", "pytest_mystique.cli", "ab"]


def slowed_python(tmp_path: Path) -> str:
    """A Python whose environment is slower: a site hook wraps every operator in a dispatch mode
    that does some Python work first, as a library's slower Python layer over torch would. Its toll
    is CPU work per op, so it scales with the host's load as the ops do (a thread competing for the
    interpreter lock, tried before, cost 1.1x to 1.7x depending on what else ran on the host)."""
    site = tmp_path / "slow_site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "from torch.utils._python_dispatch import TorchDispatchMode\n"
        "class _Toll(TorchDispatchMode):\n"
        "    def __torch_dispatch__(self, func, types, args=(), kwargs=None):\n"
        "        sum(range(5000))\n"
        "        return func(*args, **(kwargs or {}))\n"
        "_Toll().__enter__()\n"
    )
    exe = tmp_path / "slow-python"
    exe.write_text(f'#!/bin/sh\nPYTHONPATH="{site}${{PYTHONPATH:+:$PYTHONPATH}}" exec "{sys.executable}" "$@"\n')
    exe.chmod(0o755)
    return str(exe)


def run_ab(*args, timeout=300):
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, OMP_NUM_THREADS="1"))  # fmt: skip


def test_same_environment_twice_is_not_slower():
    # a stricter alpha than the default's 1%: this is one A/A run in a suite that CI runs once per
    # change, and a false alarm there would stop everything. The MLP's worker processes differ by
    # about the 2% --noise counts (20 runs of this command: B/A 0.959-1.036, sd 1.9%), so at the
    # default a run alarms about as often as the level says; ab_aa.py measures that rate.
    out = run_ab("--python", sys.executable, "--python", sys.executable, str(bundled("mlp_train")), "--budget", "6",
                 "--workers", "2", "--alpha", "0.001", "--json")  # fmt: skip
    assert out.returncode == 0, out.stderr
    [r] = json.loads(out.stdout, parse_constant=lambda c: pytest.fail(f"{c} in the JSON"))
    assert r["status"] in ("same", "unsure")
    # a pair's two workers share CPUs; the pairs take this process's CPUs in turn
    allowed = sorted(os.sched_getaffinity(0))
    assert r["pair_cpus"] == ([[allowed[0]], [allowed[1]]] if len(allowed) > 1 else [None, None])
    ops = len(select_ops(load_trace(bundled("mlp_train"))))  # 58: cross_entropy_loss through its parts
    assert r["a"]["ops_replayed"] == r["b"]["ops_replayed"] == r["a"]["ops_total"] == ops == 58
    assert r["rounds"] >= 4 and r["a"]["torch"] == r["b"]["torch"]
    # the rounds cycled through both pairs of workers, evenly
    assert r["pairs"] == 2 and sum(r["pair_rounds"]) == r["rounds"] and min(r["pair_rounds"]) >= r["rounds"] // 2
    assert all(0.8 < x < 1.25 for x in r["pair_ratios"]) and not r["notes"]
    out = run_ab("--python", sys.executable, "--python", sys.executable, str(bundled("mlp_train")), "--workers", "0")
    assert out.returncode == 2 and "--workers" in out.stderr


def test_a_pair_of_workers_that_cannot_load_is_left_out(tmp_path):
    """The second pair's B dies on its first request (as a worker whose build the machine's memory
    could not hold would): the comparison goes on with the first pair, and says so."""
    dying = tmp_path / "dying-python"
    dying.write_text('#!/bin/sh\necho "no memory left for this worker" >&2\nexit 3\n')
    dying.chmod(0o755)
    started = []
    try:
        for exe in (sys.executable, sys.executable, sys.executable, str(dying)):
            started.append(Worker(exe, 1))
        r = ab_trace([started[:2], started[2:]], bundled("cnn_infer"), budget_s=2)
        assert r["pairs"] == 1 and r["pair_rounds"] == [r["rounds"]] and r["status"] in ("same", "unsure")
        [note] = r["notes"]
        assert note.startswith("worker pair 2 left out:") and "exit status 3: no memory left for this worker" in note
        # every worker let go of the trace at the end
        with pytest.raises(MystiqueError, match="no trace loaded"):
            started[0].request(cmd="segment", iters=1)
    finally:
        for w in started:
            w.close()


def test_a_pair_of_workers_is_pinned_to_the_same_cpus():
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 2:
        pytest.skip("one CPU: nothing to pin to")
    sets = cpu_sets(3, 1)
    assert sets == [{allowed[0]}, {allowed[1]}, {allowed[2 % len(allowed)]}]
    assert cpu_sets(2, len(allowed)) == [None, None]  # a pair that needs every CPU is not pinned
    started = [Worker(sys.executable, 1, sets[0]), Worker(sys.executable, 1, sets[0]), Worker(sys.executable, 1, sets[1])]
    try:
        started.append(Worker(sys.executable, 1))
        assert started[-1].cpus is None  # unpinned unless asked
        # the worker's threads (torch's among them) start after the pinning and inherit it
        started[0].request(cmd="load", trace=str(bundled("mlp_train")), threads=1)
        for w, cpus in zip(started, (sets[0], sets[0], sets[1])):
            assert w.cpus == sorted(cpus)
            tids = os.listdir(f"/proc/{w.proc.pid}/task")
            assert {frozenset(os.sched_getaffinity(int(t))) for t in tids} == {frozenset(cpus)}
    finally:
        for w in started:
            w.close()


class ScriptedWorker:
    """A stand-in for a replay worker: it answers the protocol with an iteration time of its own
    (a process's offset, a slower environment) and fails where told, as a real one does."""

    def __init__(self, per_iter_s: float, fail: str | None = None, seed: int = 0):
        self.per_iter_s, self.fail, self.calls = per_iter_s, fail, []
        self.rng = np.random.default_rng(seed)

    def request(self, **req):
        self.calls.append(req["cmd"])
        if req["cmd"] == self.fail:
            raise MystiqueError("scripted-python", "replay worker exited (exit status -9: killed)")
        if req["cmd"] == "load":
            return {"ops_total": 10, "ops_replayed": 10, "skipped": [], "torch": "x", "python": "3"}
        if req["cmd"] == "warmup":
            return {"per_iter_s": self.per_iter_s, "iterations": 3}
        if req["cmd"] == "segment":
            return {"samples_s": list(self.per_iter_s * (1 + 0.002 * self.rng.random(req["iters"])))}
        return {"ok": True}


@pytest.mark.parametrize("fail", ["warmup", "segment"])
def test_a_pair_that_fails_later_is_left_out_and_the_rest_decide(fail):
    """Three pairs, B 20% slower in each (one worker of pair 3 with an offset of its own); the
    second pair's B dies at its warm-up or at its first segment. The rounds go on with pairs 1 and
    3, which find B slower; every worker is asked to let go of the trace at the end."""
    pairs = [(ScriptedWorker(0.010, seed=1), ScriptedWorker(0.012, seed=2)),
             (ScriptedWorker(0.010, seed=3), ScriptedWorker(0.012, fail=fail, seed=4)),
             (ScriptedWorker(0.0102, seed=5), ScriptedWorker(0.012, seed=6))]  # fmt: skip
    r = ab_trace(pairs, bundled("cnn_infer"), budget_s=5)
    assert r["status"] == "slower" and 1.15 < r["comparison"]["ratio"] < 1.22
    assert r["pairs"] == 2 and sum(r["pair_rounds"]) == r["rounds"] and len(r["pair_ratios"]) == 2
    [note] = r["notes"]
    assert note.startswith("worker pair 2 left out:") and "exit status -9" in note
    assert all(w.calls[-1] == "unload" for pair in pairs for w in pair)
    assert pairs[1][0].calls.count("segment") <= 1 and "segment" not in pairs[1][1].calls[pairs[1][1].calls.index(fail) + 1:]
    # one pair given flat, [A, B], as before there were pairs: identical sides are the same
    same = ab_trace([ScriptedWorker(0.010, seed=7), ScriptedWorker(0.010, seed=8)], bundled("cnn_infer"), budget_s=5)
    assert same["status"] == "same" and same["pairs"] == 1 and not same["notes"]
    # the first pair's failure is the trace's
    pairs[0][1].fail = fail
    with pytest.raises(MystiqueError, match="exit status -9"):
        ab_trace(pairs, bundled("cnn_infer"), budget_s=5)


def test_slower_environment_is_caught_and_fails(tmp_path):
    out = run_ab("--python", sys.executable, "--python", slowed_python(tmp_path), str(bundled("mlp_train")),
                 "--budget", "10")  # fmt: skip
    assert out.returncode == 1, out.stdout + out.stderr
    assert "SLOWER" in out.stdout and "mlp_train" in out.stdout
    line = next(x for x in out.stdout.splitlines() if x.startswith("mlp_train"))
    ratio = float(line.split()[5])
    assert ratio > 1.3  # (1.73-1.83 measured on the 2-core host, idle and beside a busy process)


def test_bad_trace_and_bad_python_are_clear_errors(tmp_path):
    bad = tmp_path / "broken.json"
    bad.write_text("{ not json")
    out = run_ab("--python", sys.executable, "--python", sys.executable, str(bad), "--budget", "2")
    assert out.returncode == 1 and "broken.json" in out.stderr and "invalid JSON" in out.stderr
    with pytest.raises(MystiqueError, match="cannot start a replay worker"):
        Worker(str(tmp_path / "no-such-python"), 1)
    out = run_ab("--python", sys.executable, str(bad))
    assert out.returncode == 2 and "exactly twice" in out.stderr
    out = run_ab("--python", sys.executable, "--python", str(tmp_path / "no-such-python"), str(bad))
    assert out.returncode == 2 and "cannot start a replay worker" in out.stderr and "no-such-python" in out.stderr
    assert "Traceback" not in out.stderr


def test_environments_that_replay_different_ops_are_not_compared(tmp_path):
    """B lacks an operator the trace records (an upgrade removed it, a library is missing) and no
    substitute runs: its replay leaves that op's time out, and a paired comparison would call B
    faster. It is an error naming both sides' coverage and B's skip reason instead."""
    data = read_json(corpus("vit_infer.json.gz"))
    set_op_schema(data, "gelu", "mylib::gelu_fast(Tensor self) -> Tensor")
    write_json(tmp_path / "vit.json.gz", data)
    workers = [Worker(sys.executable, 1) for _ in range(2)]
    try:
        with pytest.raises(ReplayError, match=r"A's replay skips 0 of 56 ops and B's 2 of 56: .*not compared "
                                              r"\(B: 2x aten::gelu: operator mylib::gelu_fast is not registered"):  # fmt: skip
            ab_trace(workers, corpus("vit_infer.json.gz"), trace_b=tmp_path / "vit.json.gz", budget_s=2)
    finally:
        for w in workers:
            w.close()
