"""Adaptive sampling: time segments of a replay until the statistics reach a verdict.

A trace starts with :data:`FIRST_LOOK` segments; while the comparison with its baseline is
undecided, more segments are added, and the data are looked at again each time their number has
doubled (4, 8, 16, 32 segments), until the time budget is spent or the sampling
error is below half the process noise (more segments could not narrow the interval much). Each look spends
an equal share of the significance level (Bonferroni over the looks the budget allows), so
stopping as soon as the interval is clear does not raise the false-alarm rate. Without a baseline
(a new one is being recorded) the whole budget is spent, up to :data:`BASELINE_SEGMENTS`.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field

import torch

from . import calibrate
from .defaults import DEFAULT_ALPHA, DEFAULT_BUDGET_S, DEFAULT_NOISE, DEFAULT_TOLERANCE, DEFAULT_WARMUP, SEGMENT_S
from .measure import MAX_WARMUP_ITERS, MIN_WARMUP_S, steady_allocator, thread_count, time_replay, torch_threads
from .stats import Comparison, compare_levels, segment_level

FIRST_LOOK = 4
BASELINE_SEGMENTS = 40
MAX_SEGMENT_ITERS = 1000


@dataclass
class Segment:
    samples_s: list[float]
    probe_s: list[float]  # empty where there is no probe (CUDA)

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


def sample(replay, *, budget_s: float = DEFAULT_BUDGET_S, baseline: list[Segment] | None = None,
           baseline_signature: str | None = None, segment_iters: int | None = None, tolerance: float = DEFAULT_TOLERANCE,
           alpha: float = DEFAULT_ALPHA, process_noise: float = DEFAULT_NOISE, threads: int | None = None,
           warmup: int = DEFAULT_WARMUP, comparison_extra=None) -> Sampled:  # fmt: skip
    """Prepare, warm up and time ``replay`` in segments, stopping at a verdict against
    the ``baseline``'s segments or when ``budget_s`` is spent. Times are normalised by the probe's
    when both sides have probe times taken with the same :func:`.calibrate.signature`."""
    n_threads = thread_count(threads)
    steady_allocator()
    cuda = replay.device.type == "cuda"
    probed = not cuda and getattr(replay, "probed", True)  # a multi-rank replay's ranks time themselves
    with torch_threads(n_threads):
        t0 = time.perf_counter()
        replay.prepare()
        setup_s = time.perf_counter() - t0
        done, per_iter = warm_up(replay, warmup)
        m = segment_iters or min(MAX_SEGMENT_ITERS, max(5, math.ceil(SEGMENT_S / max(per_iter, 1e-9))))
        seg_s = m * (per_iter + (_probe_s() if probed else 0))
        max_segments = max(FIRST_LOOK, min(BASELINE_SEGMENTS, int(budget_s / max(seg_s, 1e-9))))
        points = look_points(max_segments)
        calibrated = comparable(baseline or [], baseline_signature, probed)
        out = Sampled([], str(replay.device), n_threads, done, m, setup_s, 0.0, probed,
                      calibrate.signature() if probed else None)  # fmt: skip
        start = time.perf_counter()
        alpha_look = alpha / len(points)
        for k in points:
            while len(out.segments) < k:
                out.segments.append(_segment(replay, m, probe=probed))
            spent = time.perf_counter() - start
            if baseline is None:
                if spent >= budget_s:
                    break
                continue
            cur_levels = [s.level(calibrated) for s in out.segments]
            # stop when the budget would be exceeded, or when more segments cannot narrow the
            # interval much: the sampling error is already below half the process noise
            settled = statistics.stdev(cur_levels) / math.sqrt(k) < math.log1p(process_noise) / 2
            final = k == points[-1] or spent + seg_s * (k // 2) > budget_s or settled
            extra = dict(comparison_extra or {}, calibrated=calibrated, current_median_s=out.median_s)
            cmp = compare_levels([b.level(calibrated) for b in baseline], cur_levels, tolerance=tolerance, alpha=alpha_look,
                                 process_noise=process_noise, final=final, **extra)  # fmt: skip
            out.looks.append({"segments": k, "seconds": round(spent, 3), "verdict": cmp.verdict,
                              "ratio": cmp.ratio, "ci": [cmp.ci_low, cmp.ci_high]})  # fmt: skip
            out.comparison = cmp
            if cmp.verdict != "undecided":
                break
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
