"""Adaptive sampling: time a replay in runs of segments until the statistics reach a verdict.

A *run* is one process's sampling. Each process has a speed offset of its own that no sampling
inside it removes (:mod:`.stats`), so replication happens across processes: this process warms
the replay up and times :data:`PLAN_SEGMENTS` segments to plan, then fresh worker processes
(:func:`.worker.fresh_run`) each add a short run, of as many segments as make the best use of
their start-up cost (:func:`fresh_segments`), and only theirs are judged (:func:`judged_runs`).
A new baseline is recorded in as many runs as :data:`BASELINE_BUDGET_FACTOR` times the budget
allows, at most ``runs``: it is recorded once, and its error weighs in every later comparison.
A comparison looks at the data after 1, 2, 4, ... fresh runs and after the last the budget allows
(:func:`look_points`), adding runs while undecided. The significance level is spent across the
looks O'Brien-Fleming style (:class:`.stats.Spending`): early looks stop only on a glaring
change, the last one tests at nearly the whole level, and stopping as soon as the interval is
clear does not raise the false-alarm rate. Without fresh processes (``runs`` 1, a multi-rank job, or a budget
too small for two), this process's run is the only one: segments until its sampling error is
below half the process noise or the budget is spent.

Fresh processes are started anew (``python -m pytest_mystique.worker``), not forked from one that
has imported torch: measured on the CI host, children forked from one parent share an offset
(sd 2.5-2.7% between parents against 1.6-2.3% between the children of one), so only a new
interpreter is a new sample of the offset.
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
    DEFAULT_DRIFT,
    DEFAULT_NOISE,
    DEFAULT_RUNS,
    DEFAULT_TOLERANCE,
    DEFAULT_WARMUP,
    SEGMENT_S,
)
from .errors import MystiqueError
from .measure import MAX_WARMUP_ITERS, MIN_WARMUP_S, steady_allocator, thread_count, time_replay, torch_threads
from .stats import Comparison, Spending, compare_runs, segment_level

FIRST_LOOK = 4
#: Segments this process samples to plan the fresh processes' runs (its own run is not judged then).
PLAN_SEGMENTS = 3
#: At most this many segments in one run.
RUN_SEGMENTS = 40
#: A fresh process's run has at least this many segments (its sampling error is estimated from them).
FRESH_SEGMENTS = 2
MAX_SEGMENT_ITERS = 1000
#: Runs (processes) a new baseline is recorded in, and a comparison's most (both within the budget).
BASELINE_RUNS = DEFAULT_RUNS
#: A new baseline is sampled with this many times the budget.
BASELINE_BUDGET_FACTOR = 3
#: Seconds a fresh Python process takes to start and import torch and this package (measured:
#: 1.5-2 s on the 2-core CI host; a first guess at a run's cost before one was timed).
FRESH_PROCESS_S = 2.0


@dataclass
class Segment:
    samples_s: list[float]
    probe_s: list[float]  # empty where there is no probe (CUDA)
    run: int = 0  # which process sampled it (0: the plugin's own)

    def level(self, calibrated: bool) -> float:
        return segment_level(self.samples_s, self.probe_s if calibrated else None)

    def probe_level(self) -> float:
        return segment_level(self.probe_s)


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


def look_points(most: int, first: int = FIRST_LOOK) -> list[int]:
    """Counts (of segments, rounds or runs) at which the data are examined: ``first``, then twice
    as many each time, and ``most`` (few looks: each one costs a share of the significance level)."""
    points, k = [], first
    while k < most:
        points.append(k)
        k *= 2
    points.append(max(most, first))
    return points


def fresh_segments(level_var: float, process_noise: float, start_s: float, segment_s: float, most: int) -> int:
    """Segments per fresh-process run: the count that minimises the variance of a side's level for
    the time spent, ``(noise^2 + level_var / m) * (start_s + m * segment_s)``, i.e.
    ``m = sqrt(level_var * start_s / (noise^2 * segment_s))``, kept within [FRESH_SEGMENTS, most]."""
    noise2 = max(math.log1p(process_noise) ** 2, 1e-12)
    m = math.sqrt(max(level_var, 0.0) * max(start_s, 0.0) / (noise2 * max(segment_s, 1e-9)))
    return max(FRESH_SEGMENTS, min(most, round(m)))


def judged_runs(segments: list[Segment], calibrated: bool, level=None) -> list[list[float]]:
    """Segment levels (``level(segment)`` when given) grouped by the run (process) that sampled
    them, for the verdict: the fresh processes' runs where there are any (this process's run only
    planned them: its state depends on what the session did before, and its kind of process
    differs from theirs), else this process's run."""
    runs: dict[int, list[float]] = {}
    for s in segments:
        runs.setdefault(s.run, []).append(level(s) if level else s.level(calibrated))
    if len(runs) > 1:
        runs.pop(0, None)
    return list(runs.values())


def probe_shift(baseline: list[Segment], current: list[Segment]) -> float:
    """log of the machine-speed probe's level on the current side over the baseline's, each side's
    level taken over its judged runs as the replay's is (:func:`.stats.compare_runs` judges the raw
    estimate too when it is large)."""

    def side(segments: list[Segment]) -> float:
        return statistics.fmean(statistics.fmean(r) for r in judged_runs(segments, True, Segment.probe_level))

    return side(current) - side(baseline)


def sample(replay, *, budget_s: float = DEFAULT_BUDGET_S, baseline: list[Segment] | None = None,
           baseline_signature: str | None = None, segment_iters: int | None = None, tolerance: float = DEFAULT_TOLERANCE,
           alpha: float = DEFAULT_ALPHA, process_noise: float = DEFAULT_NOISE, drift: float = DEFAULT_DRIFT,
           threads: int | None = None,
           warmup: int = DEFAULT_WARMUP, comparison_extra=None, fresh_run=None, runs: int = BASELINE_RUNS,
           startup_s: float = 0.0, reference=()) -> Sampled:  # fmt: skip
    """Prepare, warm up and time ``replay`` in runs of segments, stopping at a verdict against
    the ``baseline``'s segments or when ``budget_s`` is spent. ``fresh_run(segments=, segment_iters=,
    probe=)`` samples one more run in a fresh process (None: this process only); ``runs`` is the
    most runs, of a new baseline or of a comparison (the budget may allow fewer);
    ``startup_s``: what loading and preparing the trace took before this call (a fresh process
    pays it again); ``reference``: later sessions pooled with the baseline's
    (:func:`.stats.welch_runs`). Times are normalised by the probe's when both sides have probe
    times taken with the same :func:`.calibrate.signature`."""
    n_threads = thread_count(threads)
    steady_allocator()
    cuda = replay.device.type == "cuda"
    probed = not cuda and getattr(replay, "probed", True)  # a multi-rank replay's ranks time themselves
    fresh = fresh_run is not None and runs > 1  # else: this process's run is the only one, and judged
    if baseline is None:  # recorded once, its error weighs in every later comparison
        budget_s *= BASELINE_BUDGET_FACTOR
    with torch_threads(n_threads):
        t0 = time.perf_counter()
        replay.prepare()
        setup_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        done, per_iter = warm_up(replay, warmup)
        warmup_s = time.perf_counter() - t0
        m = segment_iters or min(MAX_SEGMENT_ITERS, max(5, math.ceil(SEGMENT_S / max(per_iter, 1e-9))))
        seg_s = m * (per_iter + (_probe_s() if probed else 0))
        # a new baseline is judged, later, on probe-normalised levels wherever there is a probe
        calibrated = comparable(baseline, baseline_signature, probed) if baseline is not None else probed
        out = Sampled([], str(replay.device), n_threads, done, m, setup_s, 0.0, probed,
                      calibrate.signature() if probed else None)  # fmt: skip
        start = time.perf_counter()

        def this_process(cap: int) -> None:  # until the sampling error is small next to the process noise
            while len(out.segments) < cap:
                out.segments.append(_segment(replay, m, probe=probed))
                levels = [s.level(calibrated) for s in out.segments]
                k = len(levels)
                if k >= FIRST_LOOK and statistics.stdev(levels) / math.sqrt(k) < math.log1p(process_noise) / 2:
                    break

        # this process's run: with fresh runs to come, a few segments to plan them; alone, until its
        # sampling error is small next to the process noise or the budget is spent
        alone_cap = max(FIRST_LOOK, min(RUN_SEGMENTS, int(budget_s / max(seg_s, 1e-9))))
        this_process(PLAN_SEGMENTS if fresh else alone_cap)
        seg_s = (time.perf_counter() - start) / len(out.segments)
        start_cost = FRESH_PROCESS_S + startup_s + setup_s + warmup_s  # what a fresh run pays before sampling
        levels = [s.level(calibrated) for s in out.segments]
        left_s = budget_s - (time.perf_counter() - start)
        # at least two runs where the budget allows them: a run's length never crowds out replication
        fit = max(FRESH_SEGMENTS, int((left_s / min(runs, 2) - start_cost) / max(seg_s, 1e-9)))
        per_run = fresh_segments(statistics.variance(levels), process_noise, start_cost, seg_s, min(RUN_SEGMENTS, fit))
        run_cost = start_cost + per_run * seg_s
        # as many judged runs as the budget allows, decided before any look; a look after 1, 2, 4, ...
        # of them and after the last, each at an equal share of the significance level
        most = min(runs, int(max(0.0, left_s) // max(run_cost, 1e-9)))

        def alone() -> None:  # no fresh run: this process's run is judged, alone
            nonlocal fresh
            fresh = False
            left = budget_s - (time.perf_counter() - start)
            this_process(max(FIRST_LOOK, min(RUN_SEGMENTS, int(left / max(seg_s, 1e-9)))))

        if fresh and most < 2:  # one fresh run would say nothing about the scatter between processes
            alone()
        most = most if fresh else 1
        points = look_points(most, first=1)
        spending = Spending(alpha)  # O'Brien-Fleming: most of alpha is left for the last look
        judged = 0 if fresh else 1  # runs sampled so far that the verdict uses
        while True:
            spent = time.perf_counter() - start
            # no run that would exceed the budget (the first was planned to fit)
            final = judged >= most or (judged > 0 and spent + run_cost > budget_s)
            if baseline is not None and judged and (final or judged in points):
                extra = dict(comparison_extra or {}, calibrated=calibrated, current_median_s=out.median_s)
                cmp = compare_runs(judged_runs(baseline, calibrated), judged_runs(out.segments, calibrated),
                                   tolerance=tolerance, alpha=spending.at(judged / most, final), process_noise=process_noise, drift=drift,
                                   final=final, reference=reference if calibrated else (),
                                   probe_shift=probe_shift(baseline, out.segments) if calibrated else 0.0,
                                   **extra)  # fmt: skip
                if out.looks and out.looks[-1]["runs"] == judged:  # a failed fresh run: the same data, now final
                    out.looks.pop()
                out.looks.append({"runs": judged, "segments": len(out.segments), "seconds": round(spent, 3),
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
                used = f"{judged} fresh run(s) were used" if judged else "this process's run was used alone"
                out.notes.append(f"sampling in a fresh process failed, so {used}: {e}")
                if not judged:
                    alone()
                most, judged = max(judged, 1), max(judged, 1)  # judge (or record) what there is
                continue
            run_cost = time.perf_counter() - t_run
            judged += 1
            out.segments += [dataclasses.replace(g, run=judged) for g in segs]
        out.sampling_s = time.perf_counter() - start
    if baseline is not None and any(s.run for s in baseline) != any(s.run for s in out.segments):
        kinds = ("the pytest process", "fresh processes")
        out.notes.append(f"the baseline was sampled in {kinds[any(s.run for s in baseline)]} and this run in "
                         f"{kinds[any(s.run for s in out.segments)]}: processes of two kinds, which may differ by "
                         f"about 1%, are compared; --mystique-update re-records the baseline")  # fmt: skip
    cmp = out.comparison
    if cmp is not None and cmp.spanned:
        out.notes.append(f"the machine-speed probe's time moved {math.expm1(cmp.probe_shift):+.0%} from the baseline's "
                         f"session, the replay's raw times {cmp.raw_change:+.1%}: whether the replay "
                         f"follows such a move is unknown, so the interval spans the raw and the probe-normalised "
                         f"estimates")  # fmt: skip
    if baseline is not None and probed and not calibrated:
        out.notes.append(f"the baseline was timed with another machine-speed probe ({baseline_signature or 'none'}; "
                         f"now {calibrate.signature()}), so raw times are compared, which the machine's own "
                         f"speed moves more; --mystique-update re-records the baseline")  # fmt: skip
    return out


def comparable(baseline: list[Segment], baseline_signature: str | None, probed: bool) -> bool:
    """Whether the probe may normalise a comparison with ``baseline``: both sides have probe
    times, taken with the same probe (:func:`.calibrate.signature`: its version, Python's and numpy's)."""
    return probed and all(b.probe_s for b in baseline) and baseline_signature == calibrate.signature()


def warm_up(replay, warmup: int, min_s: float = MIN_WARMUP_S) -> tuple[int, float]:
    """At least ``warmup`` iterations and ``min_s`` seconds; returns the count and the median
    seconds per iteration of the second half."""
    done, times = 0, []
    t_start = time.perf_counter()
    while done < max(warmup, 1) or (done < MAX_WARMUP_ITERS and time.perf_counter() - t_start < min_s):
        replay.between_iterations()
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
        replay.between_iterations()

    return Segment(time_replay(replay, m, between=between), probes)
