"""Adaptive sampling: time a replay in runs of segments until the statistics reach a verdict.

A *run* is one process's sampling: warm-up, then segments (:data:`FIRST_LOOK` at least) until
the run's own sampling error is below half the process noise, or its share of the time budget is
spent. Each process has a speed offset of its own that no sampling inside it removes (:mod:`.stats`),
so replication happens across processes: a baseline is recorded in :data:`BASELINE_RUNS` runs,
this process's and fresh worker processes' (:func:`.worker.fresh_run`), each one as long as the
first. A comparison looks at the data after each of its runs: the first in this process, then, while
undecided, up to ``max_runs - 1`` more in fresh processes, until a verdict or the budget is spent.
Each look spends an equal share of the significance level (Bonferroni over the looks), so stopping
as soon as the interval is clear does not raise the false-alarm rate.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
from dataclasses import dataclass, field

import torch

from . import calibrate
from .defaults import (
    DEFAULT_ALPHA,
    DEFAULT_BUDGET_S,
    DEFAULT_NOISE,
    DEFAULT_RUNS,
    DEFAULT_TOLERANCE,
    DEFAULT_WARMUP,
    SEGMENT_S,
)
from .errors import MystiqueError
from .measure import MAX_WARMUP_ITERS, MIN_WARMUP_S, steady_allocator, thread_count, time_replay, torch_threads
from .stats import Comparison, compare_runs, segment_level

FIRST_LOOK = 4
#: At most this many segments in one run.
RUN_SEGMENTS = 40
MAX_SEGMENT_ITERS = 1000
#: Runs (processes) a new baseline is recorded in; a comparison uses at most :data:`MAX_RUNS`.
BASELINE_RUNS = DEFAULT_RUNS
MAX_RUNS = 3
#: Seconds a fresh Python process takes to start and import torch and this package (measured:
#: 2.5-3 s on the 2-core CI host; a first guess at a run's cost before one was timed).
FRESH_PROCESS_S = 3.0


@dataclass
class Segment:
    samples_s: list[float]
    probe_s: list[float]  # empty where there is no probe (CUDA)
    run: int = 0  # which process sampled it (0: the plugin's own)

    def level(self, calibrated: bool) -> float:
        return segment_level(self.samples_s, self.probe_s if calibrated else None)


@dataclass
class Sampled:
    """What :func:`sample` measured, and the verdict when there was a baseline."""

    segments: list[Segment]
    device: str
    threads: int
    warmup: int
    segment_iters: int
    setup_s: float
    sampling_s: float
    probed: bool  # machine-speed probe timed before each iteration
    probe_signature: str | None
    comparison: Comparison | None = None
    looks: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def runs(self) -> int:
        return len({s.run for s in self.segments})

    @property
    def samples_s(self) -> list[float]:
        return [x for s in self.segments for x in s.samples_s]

    @property
    def median_s(self) -> float:
        xs = sorted(self.samples_s)
        n = len(xs)
        return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def look_points(max_segments: int, first: int = FIRST_LOOK) -> list[int]:
    """Segment counts at which the data are examined: ``first``, then twice as many each time
    (few looks: each one costs a share of the significance level)."""
    points, k = [], first
    while k < max_segments:
        points.append(k)
        k *= 2
    points.append(max(max_segments, first))
    return points


def by_run(segments: list[Segment], calibrated: bool) -> list[list[float]]:
    """Segment levels grouped by the run (process) that sampled them."""
    runs: dict[int, list[float]] = {}
    for s in segments:
        runs.setdefault(s.run, []).append(s.level(calibrated))
    return list(runs.values())


def sample(replay, *, budget_s: float = DEFAULT_BUDGET_S, baseline: list[Segment] | None = None,
           baseline_signature: str | None = None, segment_iters: int | None = None, tolerance: float = DEFAULT_TOLERANCE,
           alpha: float = DEFAULT_ALPHA, process_noise: float = DEFAULT_NOISE, threads: int | None = None,
           warmup: int = DEFAULT_WARMUP, comparison_extra=None, fresh_run=None, runs: int = BASELINE_RUNS,
           startup_s: float = 0.0) -> Sampled:  # fmt: skip
    """Prepare, warm up and time ``replay`` in runs of segments, stopping at a verdict against
    the ``baseline``'s segments or when ``budget_s`` is spent. ``fresh_run(segments=, segment_iters=,
    probe=)`` samples one more run in a fresh process (None: this process only); ``runs`` is the
    number of runs of a new baseline (a comparison uses at most :data:`MAX_RUNS` of them);
    ``startup_s``: what loading and preparing the trace took before this call (a fresh process
    pays it again). Times are normalised by the probe's when both sides have probe times taken
    with the same :func:`.calibrate.signature`."""
    n_threads = thread_count(threads)
    steady_allocator()
    cuda = replay.device.type == "cuda"
    probed = not cuda and getattr(replay, "probed", True)  # a multi-rank replay's ranks time themselves
    max_runs = 1 if fresh_run is None else max(1, runs if baseline is None else min(runs, MAX_RUNS))
    with torch_threads(n_threads):
        t0 = time.perf_counter()
        replay.prepare()
        setup_s = time.perf_counter() - t0
        done, per_iter = warm_up(replay, warmup)
        m = segment_iters or min(MAX_SEGMENT_ITERS, max(5, math.ceil(SEGMENT_S / max(per_iter, 1e-9))))
        seg_s = m * (per_iter + (_probe_s() if probed else 0))
        # a new baseline is judged, later, on probe-normalised levels wherever there is a probe
        calibrated = comparable(baseline, baseline_signature, probed) if baseline is not None else probed
        out = Sampled([], str(replay.device), n_threads, done, m, setup_s, 0.0, probed,
                      calibrate.signature() if probed else None)  # fmt: skip
        start = time.perf_counter()
        # the first run, in this process: until its sampling error is small next to the process
        # noise, or its share of the budget (less a fresh process's start) is spent
        run_budget = budget_s / max_runs - (FRESH_PROCESS_S if max_runs > 1 else 0)
        cap = max(FIRST_LOOK, min(RUN_SEGMENTS, int(run_budget / max(seg_s, 1e-9))))
        while len(out.segments) < cap:
            out.segments.append(_segment(replay, m, probe=probed))
            k = len(out.segments)
            levels = [s.level(calibrated) for s in out.segments]
            if k >= FIRST_LOOK and statistics.stdev(levels) / math.sqrt(k) < math.log1p(process_noise) / 2:
                break
        per_run = len(out.segments)
        first_s = time.perf_counter() - start
        run_cost = first_s + startup_s + setup_s + per_iter * done + FRESH_PROCESS_S
        # as many looks as runs the budget allows (decided before any look), each at an equal share
        max_runs = min(max_runs, 1 + int(max(0.0, budget_s - first_s) // max(run_cost, 1e-9)))
        alpha_look = alpha / max_runs
        run = 1  # runs sampled so far
        while True:
            spent = time.perf_counter() - start
            final = run >= max_runs or spent + run_cost > budget_s  # no run that would exceed the budget
            if baseline is not None:
                extra = dict(comparison_extra or {}, calibrated=calibrated, current_median_s=out.median_s)
                cmp = compare_runs(by_run(baseline, calibrated), by_run(out.segments, calibrated), tolerance=tolerance,
                                   alpha=alpha_look, process_noise=process_noise, final=final, **extra)  # fmt: skip
                if out.looks and out.looks[-1]["runs"] == run:  # a failed fresh run: the same data, now final
                    out.looks.pop()
                out.looks.append({"runs": run, "segments": len(out.segments), "seconds": round(spent, 3),
                                  "verdict": cmp.verdict, "ratio": cmp.ratio, "ci": [cmp.ci_low, cmp.ci_high]})  # fmt: skip
                out.comparison = cmp
                if cmp.verdict != "undecided":
                    break
            if final:
                break
            t_run = time.perf_counter()
            try:
                segs = fresh_run(segments=per_run, segment_iters=m, probe=probed)
            except MystiqueError as e:
                out.notes.append(f"sampling in a fresh process failed, so {run} run(s) were used: {e}")
                max_runs = run  # judge (or record) what there is
                continue
            run_cost = time.perf_counter() - t_run
            out.segments += [dataclasses.replace(g, run=run) for g in segs]
            run += 1
        out.sampling_s = time.perf_counter() - start
    return out


def comparable(baseline: list[Segment], baseline_signature: str | None, probed: bool) -> bool:
    """Whether the probe may normalise a comparison with ``baseline``: both sides have probe
    times, taken with the same Python and numpy."""
    return probed and all(b.probe_s for b in baseline) and baseline_signature == calibrate.signature()


def warm_up(replay, warmup: int, min_s: float = MIN_WARMUP_S) -> tuple[int, float]:
    """At least ``warmup`` iterations and ``min_s`` seconds; returns the count and the median
    seconds per iteration of the second half."""
    done, times = 0, []
    t_start = time.perf_counter()
    while done < max(warmup, 1) or (done < MAX_WARMUP_ITERS and time.perf_counter() - t_start < min_s):
        replay.reset_state()
        t = time.perf_counter()
        replay.run()
        if replay.device.type == "cuda":
            torch.cuda.synchronize(replay.device)
        times.append(time.perf_counter() - t)
        done += 1
    tail = sorted(times[len(times) // 2:])
    return done, tail[len(tail) // 2]


def _probe_s() -> float:
    return min(calibrate.probe() for _ in range(3))


def _segment(replay, m: int, *, probe: bool) -> Segment:
    probes: list[float] = []

    def between():
        if probe:
            probes.append(calibrate.probe())
        replay.reset_state()

    return Segment(time_replay(replay, m, between=between), probes)
