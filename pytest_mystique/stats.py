"""Statistics: is the current replay slower than its baseline, the same, faster, or can't we tell?

The unit of replication is a *segment*: a run of ``m`` replay iterations, each timed next to the
machine-speed probe (:mod:`.calibrate`). A segment's *level* is
``log(q10(replay times) / q10(probe times))``: the 10th percentile keeps the iterations that ran
while the machine was not disturbed, the probe cancels the machine's own speed. Iterations inside
a segment are not independent (a disturbance lasts longer than one iteration); segments are far
apart enough to be treated as independent, and their scatter measures the noise honestly.

A run's level is the mean of its segments' levels. Two runs are compared with Welch's t on the
segment levels, with the variance widened by ``process_noise``: the part of the run-to-run
scatter that no amount of sampling inside one process removes (measured on this project's CI
machines with benchmarks/stat_power.py; ``--mystique-noise``). The result is a confidence
interval for the ratio current / baseline of the (probe-normalised) step time.

Verdicts, for a tolerance ``tol`` and a significance level ``alpha``:

* ``same``: the whole interval lies inside (1 - tol, 1 + tol): any change is within tolerance;
* ``slower``: the interval lies above 1 (a one-sided test at ``alpha`` says slower) and reaches
  1 + tol (the slowdown may be as large as the tolerance): the test fails;
* ``faster``: the mirror image;
* when sampling stops (budget spent, or the sampling error already small next to the process
  noise, :mod:`.sampling`) with none of these: ``same`` if the estimate is below 1 + tol (no
  significant change, none suggested), else ``unsure`` (a slowdown suggested, not shown): reported,
  and failing only under ``--mystique-strict``.

The interval's level is ``1 - 2 * alpha``; :mod:`.sampling` passes ``alpha`` already divided among
its looks at the data and among the session's traces, so that the chance of any false alarm stays
below the level the user asked for.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass

import numpy as np
from scipy import stats as sps

from .defaults import DEFAULT_ALPHA, DEFAULT_NOISE, DEFAULT_TOLERANCE
from .units import fmt_seconds as _fmt_s

#: The quantile of a segment's iteration times that stands for the segment.
QUANTILE = 0.1

VERDICTS = ("same", "slower", "faster", "unsure")


def segment_level(samples_s, probe_s=None) -> float:
    """log of the segment's low quantile, divided by the probe's when there is one."""
    level = math.log(float(np.quantile(np.asarray(samples_s, dtype=float), QUANTILE)))
    if probe_s is not None and len(probe_s):
        level -= math.log(float(np.quantile(np.asarray(probe_s, dtype=float), QUANTILE)))
    return level


@dataclass(frozen=True)
class Comparison:
    verdict: str  # one of VERDICTS, or "undecided" while sampling goes on
    ratio: float  # exp(mean level now - mean level of the baseline)
    ci_low: float
    ci_high: float
    confidence: float
    p_slower: float  # one-sided p-value of "current is slower"
    p_faster: float
    baseline_median_s: float
    current_median_s: float
    n_baseline: int  # segments
    n_current: int
    tolerance: float
    calibrated: bool = True  # levels normalised by the machine-speed probe
    process_noise: float = DEFAULT_NOISE
    raw_ratio: float | None = None  # median(current) / median(baseline), uncalibrated

    @property
    def change(self) -> float:
        return self.ratio - 1.0

    @property
    def p_value(self) -> float:
        return self.p_faster if self.verdict == "faster" else self.p_slower

    def as_dict(self) -> dict:
        d = asdict(self)
        d["change"] = self.change
        return d

    def describe(self) -> str:
        pct = f"{self.change * 100:+.1f}%"
        ci = f"[{(self.ci_low - 1) * 100:+.1f}%, {(self.ci_high - 1) * 100:+.1f}%]"
        how = "probe-normalised" if self.calibrated else "raw times"
        return (
            f"{pct} ({self.confidence:.1%} CI {ci}, p={self.p_value:.2g}, {how}; "
            f"median {_fmt_s(self.current_median_s)} vs baseline {_fmt_s(self.baseline_median_s)}, "
            f"{self.n_current} vs {self.n_baseline} segments, tolerance {self.tolerance:.0%})"
        )


def welch(base_levels, cur_levels, process_noise: float) -> tuple[float, float, float]:
    """Difference of mean levels, its standard error (process noise included) and the degrees of
    freedom (Welch-Satterthwaite; the process-noise term counts as known)."""
    b = np.asarray(base_levels, dtype=float)
    c = np.asarray(cur_levels, dtype=float)
    vb = b.var(ddof=1) / len(b) if len(b) > 1 else 0.0
    vc = c.var(ddof=1) / len(c) if len(c) > 1 else 0.0
    noise = 2 * math.log1p(process_noise) ** 2  # both runs carry it
    total = vb + vc + noise
    # Satterthwaite: the known noise term has infinite degrees of freedom, it adds nothing below
    denom = (vb**2 / (len(b) - 1) if len(b) > 1 else 0.0) + (vc**2 / (len(c) - 1) if len(c) > 1 else 0.0)
    df = total**2 / denom if denom > 0 else math.inf
    se = math.sqrt(total)
    return float(c.mean() - b.mean()), se, max(df, 1.0)


def compare_levels(base_levels, cur_levels, *, tolerance: float = DEFAULT_TOLERANCE, alpha: float = DEFAULT_ALPHA,
                   process_noise: float = DEFAULT_NOISE, final: bool = True, **extra) -> Comparison:  # fmt: skip
    """Verdict on two independent lists of segment levels (see the module's docstring); ``extra``
    fills the descriptive fields of :class:`Comparison` (medians, calibrated, raw_ratio)."""
    if len(base_levels) < 2 or len(cur_levels) < 2:
        raise ValueError("need at least two segments on each side to compare")
    d, se, df = welch(base_levels, cur_levels, process_noise)
    return _verdict(d, se, df, tolerance, alpha, final, n_baseline=len(base_levels), n_current=len(cur_levels),
                    process_noise=process_noise, **extra)  # fmt: skip


def compare_paired(differences, *, tolerance: float = DEFAULT_TOLERANCE, alpha: float = DEFAULT_ALPHA,
                   process_noise: float = DEFAULT_NOISE, final: bool = True, **extra) -> Comparison:  # fmt: skip
    """Verdict on paired level differences (B - A, one per round of an interleaved A/B run): a
    t interval on their mean. Drift of the machine cancels within each pair; what stays is each
    worker process's own offset, counted as ``process_noise`` on both sides as in
    :func:`compare_levels`."""
    x = np.asarray(differences, dtype=float)
    if len(x) < 2:
        raise ValueError("need at least two rounds to compare")
    v = float(x.var(ddof=1)) / len(x)
    noise = 2 * math.log1p(process_noise) ** 2
    df = (v + noise) ** 2 / (v**2 / (len(x) - 1)) if v > 0 else math.inf
    return _verdict(float(x.mean()), math.sqrt(v + noise), df, tolerance, alpha, final, n_baseline=len(x),
                    n_current=len(x), process_noise=process_noise, **extra)  # fmt: skip


def _verdict(d: float, se: float, df: float, tolerance: float, alpha: float, final: bool, **fields) -> Comparison:
    if se > 0:
        t = d / se
        p_slower, p_faster = float(sps.t.sf(t, df)), float(sps.t.cdf(t, df))
        half = float(sps.t.ppf(1 - alpha, df)) * se
    else:
        p_slower = p_faster = 0.5 if d == 0 else float(d < 0)
        half = 0.0
    lo, hi = math.exp(d - half), math.exp(d + half)
    up, down = 1 + tolerance, 1 - tolerance
    if down < lo and hi < up:
        verdict = "same"
    elif lo > 1 and hi >= up:
        verdict = "slower"
    elif hi < 1 and lo <= down:
        verdict = "faster"
    elif not final:
        verdict = "undecided"
    else:  # budget spent: no significant change; is the estimate itself within tolerance?
        verdict = "same" if math.exp(d) < up else "unsure"
    fields = {"baseline_median_s": math.nan, "current_median_s": math.nan} | fields
    return Comparison(verdict, math.exp(d), lo, hi, 1 - 2 * alpha, p_slower, p_faster, tolerance=tolerance, **fields)


def compare(baseline_s, current_s, *, segment: int = 5, **kw) -> Comparison:
    """Compare two flat lists of iteration times (no probe), cut into segments of ``segment``
    iterations: for callers that have plain samples (tests, old baselines)."""
    def levels(xs):
        return [segment_level(xs[i:i + segment]) for i in range(0, len(xs) - segment + 1, segment)]

    b, c = levels(list(baseline_s)), levels(list(current_s))
    return compare_levels(b, c, calibrated=False, baseline_median_s=statistics.median(baseline_s),
                          current_median_s=statistics.median(current_s), **kw)  # fmt: skip


def benjamini_hochberg(p_values: list[float]) -> list[float]:
    """Benjamini-Hochberg adjusted p-values (q-values), in the input order."""
    m = len(p_values)
    if not m:
        return []
    order = sorted(range(m), key=lambda i: p_values[i])
    q = [0.0] * m
    running = 1.0
    for rank in range(m, 0, -1):
        i = order[rank - 1]
        running = min(running, p_values[i] * m / rank)
        q[i] = running
    return q
