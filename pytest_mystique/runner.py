"""One trace from file to verdict: load, replay, measure, compare with the baseline, store.

The pytest plugin and the CLI are thin layers over :func:`replay_file` and :func:`judge`.
"""

from __future__ import annotations

import gc
import signal
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass

from .baseline import BaselineExists, BaselineStore, git_commit, make_record
from .environment import differences, fingerprint, hardware_key
from .errors import ReplayError
from .measure import DEFAULT_ITERS, DEFAULT_WARMUP, Measurement, measure
from .replay import Replay, resolve_device
from .sidecar import load_sidecar
from .stats import DEFAULT_TOLERANCE, compare
from .trace import DEFAULT_MAX_TRACE_BYTES, load_trace


@dataclass
class Options:
    device: str = "auto"
    warmup: int = DEFAULT_WARMUP
    iters: int = DEFAULT_ITERS
    threads: int | None = None
    max_memory: int | None = None
    max_trace_bytes: int = DEFAULT_MAX_TRACE_BYTES
    seed: int = 0
    timeout_s: float | None = None


@dataclass
class ReplayRun:
    replay: Replay
    measurement: Measurement
    load_s: float

    def summary(self) -> dict:
        rep = self.replay.report
        m = self.measurement
        return {
            "trace": self.replay.trace.name,
            "file": str(self.replay.trace.path),
            "schema": self.replay.trace.schema,
            "device": m.device,
            "threads": m.threads,
            "ops_total": rep.ops_total,
            "ops_replayed": rep.ops_replayed,
            "ops_skipped": rep.ops_skipped,
            "skipped": rep.skipped_list(),
            "substitutions": rep.substitutions_list(),
            "notes": dict(rep.notes),
            "load_s": self.load_s,
            "setup_s": m.setup_s,
            "probe_s": self.replay.probe_s,
            "warmup": m.warmup,
            "timer": "cuda events" if m.device.startswith("cuda") else "perf_counter_ns",
            "samples_s": m.samples_s,
            "median_s": m.median_s,
        }


class _Deadline(BaseException):
    """Raised by the timer; a BaseException so that no per-op error handling swallows it."""


@contextmanager
def deadline(seconds: float | None, path):
    """Interrupt the block after ``seconds`` (SIGALRM; the main thread of a Unix process, where
    pytest runs items). The replay returns to Python between ops, so a hang in a loop of ops or
    a slow op is cut at the next op boundary."""
    if not seconds or not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        yield
        return

    def fire(signum, frame):
        raise _Deadline()

    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    except _Deadline:
        raise ReplayError(path, f"replay did not finish within {seconds:g} s (--mystique-timeout); stopped") from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def replay_file(path, options: Options) -> ReplayRun:
    with deadline(options.timeout_s, path):
        t0 = time.perf_counter()
        trace = load_trace(path, max_bytes=options.max_trace_bytes)
        load_s = time.perf_counter() - t0
        replay = Replay(trace, resolve_device(options.device), seed=options.seed, max_memory=options.max_memory)
        m = measure(replay, warmup=options.warmup, iters=options.iters, threads=options.threads)
    return ReplayRun(replay, m, load_s)


def with_original_timing(summary: dict, trace_path) -> dict:
    """Add the original step's timing (from the sidecar, when there is one) and the fidelity ratio."""
    side = load_sidecar(trace_path)
    if side and side.get("original_median_s"):
        summary["original_median_s"] = side["original_median_s"]
        summary["original_threads"] = side.get("threads")
        if side.get("threads") in (None, summary.get("threads")):
            summary["fidelity_ratio"] = summary["median_s"] / side["original_median_s"]
    return summary


def judge(run: ReplayRun, store: BaselineStore, baseline_name: str, *, tolerance: float = DEFAULT_TOLERANCE,
          update: bool = False, rootdir=None) -> dict:  # fmt: skip
    """Compare with the stored baseline (recording one when there is none, or when ``update``)."""
    result = run.summary()
    env = fingerprint(run.replay.device, run.measurement.threads)
    key = hardware_key(env)
    result["environment"] = env
    result["hardware_key"] = key
    result["tolerance"] = tolerance
    result["git_commit"] = commit = git_commit(rootdir)
    baseline = None if update else store.load(key, baseline_name)  # a corrupt one raises, untouched
    if baseline is None:
        existed = store.path_for(key, baseline_name).exists()
        record = make_record(
            baseline_name, str(run.replay.trace.path), run.measurement.samples_s, env,
            ops_total=run.replay.report.ops_total, ops_replayed=run.replay.report.ops_replayed,
            commit=commit,
        )  # fmt: skip
        try:
            result["baseline_path"] = str(store.save(key, baseline_name, record, replace=update))
        except BaselineExists:
            baseline = store.load(key, baseline_name)  # another run won the race: compare with it
        else:
            result["status"] = "updated" if existed else "new"
            return result
    cmp = compare(baseline.samples_s, run.measurement.samples_s, tolerance=tolerance)
    result["baseline_path"] = str(baseline.path)
    result["baseline_median_s"] = cmp.baseline_median_s
    result["comparison"] = cmp.as_dict()
    result["status"] = cmp.verdict
    result["env_changes"] = differences(baseline.environment, env)
    return result


def release(run: ReplayRun | None) -> None:
    """Drop a replay's tensors now rather than whenever the collector runs."""
    if run is not None:
        run.replay.env.clear()
        run.replay.steps.clear()
    gc.collect()
