"""Statistics: is the current replay slower than its baseline?

The effect measured is the ratio of medians (current / baseline), robust to the long right tail
that timing samples have. Its confidence interval comes from a bootstrap that resamples both
samples independently (``scipy.stats.bootstrap``, BCa when it can, percentile otherwise). The
null hypothesis "not slower" is tested with a one-sided Mann-Whitney U test.

A trace is ``slower`` (the test fails) only when both agree: the slowdown is significant
(p < alpha) and the whole confidence interval lies above ``1 + tolerance``. It is ``faster``
when the mirror image holds, and ``same`` otherwise.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass

import numpy as np
from scipy import stats as sps

from .defaults import DEFAULT_ALPHA, DEFAULT_CONFIDENCE, DEFAULT_TOLERANCE
from .units import fmt_seconds as _fmt_s

BOOTSTRAP_RESAMPLES = 2000


@dataclass(frozen=True)
class Comparison:
    verdict: str  # "same", "slower", "faster"
    ratio: float  # median(current) / median(baseline)
    ci_low: float
    ci_high: float
    confidence: float
    p_slower: float  # one-sided MWU p-value for "current is slower"
    p_faster: float
    baseline_median_s: float
    current_median_s: float
    n_baseline: int
    n_current: int
    tolerance: float

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
        return (
            f"{pct} ({self.confidence:.0%} CI {ci}, p={self.p_value:.2g}, "
            f"median {_fmt_s(self.current_median_s)} vs baseline {_fmt_s(self.baseline_median_s)}, "
            f"n={self.n_current} vs {self.n_baseline}, tolerance {self.tolerance:.0%})"
        )


def _ratio_of_medians(base, cur, axis=-1):
    return np.median(cur, axis=axis) / np.median(base, axis=axis)


def ratio_interval(baseline, current, confidence: float = DEFAULT_CONFIDENCE, seed: int = 0) -> tuple[float, float]:
    """Bootstrap confidence interval of median(current) / median(baseline)."""
    base = np.asarray(baseline, dtype=float)
    cur = np.asarray(current, dtype=float)
    rng = np.random.default_rng(seed)
    for method in ("BCa", "percentile"):
        try:
            res = sps.bootstrap(
                (base, cur), _ratio_of_medians, vectorized=True, paired=False, confidence_level=confidence,
                n_resamples=BOOTSTRAP_RESAMPLES, method=method, random_state=rng,
            )  # fmt: skip
        except (ValueError, FloatingPointError):
            continue
        lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
        if math.isfinite(lo) and math.isfinite(hi):
            return lo, hi
    r = float(_ratio_of_medians(base, cur))
    return r, r


def compare(baseline, current, *, tolerance: float = DEFAULT_TOLERANCE, alpha: float = DEFAULT_ALPHA,
            confidence: float = DEFAULT_CONFIDENCE) -> Comparison:  # fmt: skip
    if len(baseline) < 2 or len(current) < 2:
        raise ValueError("need at least two samples on each side to compare")
    base_med = statistics.median(baseline)
    cur_med = statistics.median(current)
    ratio = cur_med / base_med
    lo, hi = ratio_interval(baseline, current, confidence)
    p_slower = float(sps.mannwhitneyu(current, baseline, alternative="greater").pvalue)
    p_faster = float(sps.mannwhitneyu(current, baseline, alternative="less").pvalue)
    if p_slower < alpha and lo > 1 + tolerance:
        verdict = "slower"
    elif p_faster < alpha and hi < 1 - tolerance:
        verdict = "faster"
    else:
        verdict = "same"
    return Comparison(verdict, ratio, lo, hi, confidence, p_slower, p_faster, base_med, cur_med,
                      len(baseline), len(current), tolerance)  # fmt: skip
