"""Statistics: is the current replay slower than its baseline, the same, faster, or can't we tell?

The unit of replication is a *segment*: a run of ``m`` replay iterations, each timed next to the
machine-speed probe (:mod:`.calibrate`). A segment's *level* is
``log(q10(replay times) / q10(probe times))``: the 10th percentile keeps the iterations that ran
while the machine was not disturbed, the probe cancels the machine's own speed. Iterations inside
a segment are not independent (a disturbance lasts longer than one iteration); segments are far
apart enough to be treated as independent, and their scatter measures the noise honestly.

A *run* is one process's sampling (a fresh worker process, or the plugin's own process when it
samples alone, :mod:`.sampling`); its level is the mean of its segments' levels. Each run carries
an offset of its own that no sampling inside it removes (measured on this project's 2-core CI
machines: 1-3% sd from one process to the next, depending on the day): ``process_noise``, the
prior for it (``--mystique-noise``), pooled with the scatter between a trace's own runs, up or
down (:func:`process_variance`). A side's level is the mean of its runs' levels, so a
baseline recorded in twelve processes carries a twelfth of the process variance, and a comparison
that adds runs narrows its interval. The two sides are compared with Welch's t (the process-noise
term with the degrees of freedom it was estimated from). The result is a confidence interval for
the ratio current / baseline of the (probe-normalised) step time.

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
the session's traces and spent across its looks at the data (:class:`Spending`), so that the
chance of any false alarm stays below the level the user asked for.
"""

from __future__ import annotations

import collections
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from statistics import NormalDist
from typing import NamedTuple

import numpy as np

from .defaults import DEFAULT_ALPHA, DEFAULT_DRIFT, DEFAULT_NOISE, DEFAULT_TOLERANCE
from .units import fmt_seconds as _fmt_s

#: The quantile of a segment's iteration times that stands for the segment.
QUANTILE = 0.1

VERDICTS = ("same", "slower", "faster", "unsure")

#: How far the machine-speed probe's own level may move between the two sides (log scale) before
#: the verdict stops trusting the division by it alone. A fresh process's probe is now and then
#: 5-45% off while its replay is not (README, "The verdict"); over a side of a few runs that moves
#: the probe's mean by a few percent, while one or two such processes on a short side move it by
#: 10-25% and the normalised level by as much the other way. Beyond this, the replay may follow the
#: probe fully (the machine changed), not at all (the probe was off), or anywhere between: the
#: interval spans the estimates of both ends (:func:`_verdict`).
PROBE_SHIFT = math.log1p(0.10)


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
    process_noise: float = DEFAULT_NOISE  # the configured prior ...
    process_sd: float = math.nan  # ... and one process's offset used, pooled with the runs' scatter
    raw_ratio: float | None = None  # median(current) / median(baseline), uncalibrated
    runs_baseline: int = 1  # processes each side was sampled in
    runs_current: int = 1
    drift: float = 0.0  # the session offset counted on each side (see welch_runs)
    current_var: float = math.nan  # variance of this session's level from its own runs (log scale)
    reference_sessions: int = 0  # later sessions pooled with the baseline's (see welch_runs)
    reference_shift: float = 0.0  # log of the pooled reference's level over the baseline's alone
    se: float = math.nan  # standard error of the log ratio, and its degrees of freedom
    df: float = math.nan
    probe_shift: float = 0.0  # log of the probe's level now over the baseline's (0 when not probed)
    spanned: bool = False  # the probe moved beyond PROBE_SHIFT: judged on raw and normalised estimates

    @property
    def raw_change(self) -> float:
        """The change with the probe's move put back: what the raw times say."""
        return self.ratio * math.exp(self.probe_shift) - 1.0

    @property
    def change(self) -> float:
        return self.ratio - 1.0

    @property
    def baseline_log_ratio(self) -> float:
        """log of this session's level over the baseline session's alone (the ratio is over the
        reference the baseline's session was pooled into, when it was)."""
        return math.log(self.ratio) + self.reference_shift

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
            f"{self.n_current} vs {self.n_baseline} segments in {self.runs_current} vs {self.runs_baseline} "
            f"process(es){self.pooled()}, tolerance {self.tolerance:.0%})"
        )

    def pooled(self) -> str:
        if not self.reference_sessions:
            return ""
        return (f", baseline pooled with its first {self.reference_sessions} session(s) on the same environment "
                f"({math.expm1(self.reference_shift) * 100:+.1f}%)")  # fmt: skip


#: Weight, in degrees of freedom, of the configured process noise against the scatter observed
#: between one trace's runs.
PRIOR_DF = 10


def process_variance(sides, process_noise: float) -> float:
    """Variance of one run's offset, on the log scale: the configured ``process_noise`` as a prior
    worth :data:`PRIOR_DF` runs, pooled with the scatter between the runs of each side beyond what
    their sampling explains. The pool moves either way: a trace that is noisier on this machine
    widens its intervals, and one whose processes agree more closely than the prior says narrows
    them (a 16-run baseline whose processes scatter by 1% against a 2% prior gives 1.5%). The
    prior keeps one side's few runs from deciding alone; a side of one run tells nothing about
    processes and leaves the prior as it is."""
    prior = math.log1p(process_noise) ** 2
    ss, df = 0.0, 0
    for runs in map(_arrays, sides):
        if len(runs) < 2:
            continue
        means = np.array([r.mean() for r in runs])
        sampling = statistics.fmean(_sampling_var(r) for r in runs)
        ss += (len(runs) - 1) * max(0.0, float(means.var(ddof=1)) - sampling)
        df += len(runs) - 1
    return (PRIOR_DF * prior + ss) / (PRIOR_DF + df)


def _arrays(runs) -> list[np.ndarray]:
    """A side's runs as arrays of segment levels, empty runs left out."""
    return [np.asarray(r, dtype=float) for r in runs if len(r)]


def _sampling_var(levels: np.ndarray) -> float:
    return float(levels.var(ddof=1)) / len(levels) if len(levels) > 1 else 0.0


class Welch(NamedTuple):
    """What :func:`welch_runs` found."""

    d: float  # difference of the sides' levels (log), from the pooled reference when there is one
    se: float
    df: float
    own: float  # the current side's own variance (its processes and sampling), for session_drift
    shift: float  # log of the pooled reference over the baseline's level alone
    pooled: int  # sessions pooled with the baseline's
    process_var: float  # one run's offset variance used (process_variance)


def welch_runs(base_runs, cur_runs, process_noise: float, drift: float = 0.0, reference=()) -> Welch:
    """Difference of the sides' mean levels (each the mean of its runs' means), its standard error
    and the degrees of freedom (Welch-Satterthwaite, the noise terms counting with the degrees of
    freedom they were estimated from: :data:`PRIOR_DF` for the priors, plus the runs').

    ``drift`` is the *session offset*: how far the machine's state moves a whole sampling session
    (all its processes alike) between the baseline's day and today, beyond what the probe
    cancels. It is one draw per side, so no number of processes averages it out: each side counts
    ``log1p(drift)^2`` whatever its number of runs. ``own`` is the current side's own variance
    (its processes and sampling), which :func:`session_drift` needs.

    ``reference``: later sessions on the baseline's own environment, as (log ratio to the
    baseline, that session's own variance). Each is another draw of the same level with a session
    offset of its own, so the baseline's level is pooled with theirs (inverse-variance weights,
    each counting ``drift`` too): the baseline side's offset, which otherwise weighs in every
    comparison until the baseline is re-recorded, averages down with the sessions pooled. The
    baseline side's terms are scaled by its weight's share of the pool, and the difference is
    taken from the pooled level (``shift``, log; ``pooled`` sessions)."""
    sides = [_arrays(base_runs), _arrays(cur_runs)]
    sp2 = process_variance(sides, process_noise)
    session2 = math.log1p(drift) ** 2
    level, parts = [], []
    for runs in sides:
        k = len(runs)
        level.append(statistics.fmean(float(r.mean()) for r in runs))
        sampling = [_sampling_var(r) / k**2 for r in runs]
        parts.append((session2 + sp2 / k, sampling, [len(r) for r in runs]))
    shift, share = 0.0, 1.0
    pool = [(r, session2 + v) for r, v in reference if math.isfinite(r) and math.isfinite(v) and session2 + v > 0]
    base_var = parts[0][0] + sum(parts[0][1])
    if pool and base_var > 0:
        total_w = 1.0 / base_var + sum(1.0 / v for _, v in pool)
        shift = sum(r / v for r, v in pool) / total_w
        share = (1.0 / base_var) / total_w
    process, sampling, denom = 0.0, 0.0, 0.0
    for side, (proc, samp, lengths) in enumerate(parts):
        f = share if side == 0 else 1.0
        process += f * proc
        for v, n in zip(samp, lengths):
            sampling += f * v
            denom += (f * v) ** 2 / (n - 1) if n > 1 else 0.0
    cur = sides[1]  # its own variance, without the session term
    own = (sp2 * len(cur) + sum(_sampling_var(r) for r in cur)) / len(cur) ** 2
    denom += process**2 / (PRIOR_DF + sum(len(runs) - 1 for runs in sides if len(runs) > 1))
    total = process + sampling
    df = total**2 / denom if denom > 0 else math.inf
    return Welch(level[1] - level[0] - shift, math.sqrt(total), max(df, 1.0), own, shift, len(pool) if share < 1 else 0, sp2)


def compare_runs(base_runs, cur_runs, *, tolerance: float = DEFAULT_TOLERANCE,
                 alpha: float | Callable[[float], float] = DEFAULT_ALPHA, process_noise: float = DEFAULT_NOISE,
                 drift: float = DEFAULT_DRIFT, final: bool = True, reference=(), probe_shift: float = 0.0,
                 **extra) -> Comparison:  # fmt: skip
    """Verdict on two sides given as lists of runs, each run a list of segment levels (see the
    module's docstring); ``alpha``: the one-sided level, or a function of the estimate's standard
    error that gives it (a look of a sequential test, :meth:`Spending.level`); ``reference``:
    sessions pooled with the baseline's (:func:`welch_runs`); ``probe_shift``: the log of the
    probe's level on the current side over the baseline's, when the levels are normalised by it
    (beyond :data:`PROBE_SHIFT` the raw estimate is judged too); ``extra`` fills the descriptive
    fields of :class:`Comparison`."""
    base_runs, cur_runs = _arrays(base_runs), _arrays(cur_runs)
    nb, nc = (sum(len(r) for r in side) for side in (base_runs, cur_runs))
    if nb < 2 or nc < 2:
        raise ValueError("need at least two segments on each side to compare")
    w = welch_runs(base_runs, cur_runs, process_noise, drift, reference)
    spanned = abs(probe_shift) > PROBE_SHIFT
    return _verdict(w.d, w.se, w.df, tolerance, alpha(w.se) if callable(alpha) else alpha, final,
                    span=probe_shift if spanned else 0.0, n_baseline=nb, n_current=nc,
                    process_noise=process_noise, process_sd=math.expm1(math.sqrt(w.process_var)),
                    runs_baseline=len(base_runs), runs_current=len(cur_runs), drift=drift, current_var=w.own,
                    reference_sessions=w.pooled, reference_shift=w.shift, probe_shift=probe_shift, spanned=spanned,
                    **extra)  # fmt: skip


def obf_spent(t: float, alpha: float) -> float:
    """The share of a one-sided significance level ``alpha`` that the looks up to information
    fraction ``t`` may spend: Lan and DeMets' (1983) spending function of O'Brien-Fleming type,
    ``2 * (1 - Phi(z_{1 - alpha/2} / sqrt(t)))``. Next to nothing is spent early (a look at a
    quarter of the data tests at about 1e-7 for alpha 0.01) and nearly all of ``alpha`` is left
    for the last look, which Bonferroni's equal shares would test at ``alpha / looks``."""
    if t >= 1:
        return alpha
    if t <= 0:
        return 0.0
    z = NormalDist().inv_cdf(1 - alpha / 2)
    return min(alpha, 2 * NormalDist().cdf(-z / math.sqrt(t)))


class Spending:
    """The significance levels of successive looks at accumulating data, such that the chance of
    any false alarm over all looks is ``alpha`` (one-sided): a group-sequential design with the
    spending function :func:`obf_spent`.

    Each look gives its information fraction ``t`` (the share of the planned runs it has) and the
    standard error of its estimate. The estimates of successive looks are strongly correlated: a
    later one reuses the earlier data and the baseline's side and the session offsets do not
    shrink at all. So the boundaries are computed exactly for that correlation, by the recursive
    numerical integration of Armitage, McPherson and Rowe (1969): the score ``d / se^2`` moves
    like a random walk in the information ``1 / se^2``, and the density of the walks that no look
    has stopped is carried on a grid from one look to the next. Each look's boundary is set so that
    the walks it stops carry exactly the share of ``alpha`` that the spending function adds by its
    ``t``; a look that is the last, whenever it comes (the budget is spent), spends all that is
    left. With a Bonferroni split instead, four looks would test each at ``alpha / 4``; here the
    last look tests at nearly ``alpha`` itself. :meth:`level` returns the look's nominal one-sided
    level, which the t interval of :func:`_verdict` uses."""

    GRID = 501  # the levels converge from below (conservative): 1.3% short of the limit at 501

    def __init__(self, alpha: float):
        self.alpha = alpha
        self.spent = 0.0
        self._info = 0.0
        self._grid: np.ndarray | None = None  # scores of the walks not stopped yet ...
        self._mass: np.ndarray | None = None  # ... and their probability (one grid cell each)

    def at(self, t: float, final: bool = False) -> Callable[[float], float]:
        """The level of a look at ``t`` as a function of its standard error (for ``compare_*``'s
        ``alpha``)."""
        return lambda se: self.level(t, se, final)

    def level(self, t: float, se: float, final: bool = False) -> float:
        from scipy.optimize import brentq
        from scipy.special import ndtr

        target = self.alpha if final else obf_spent(t, self.alpha)
        step = max(target - self.spent, 1e-15)
        self.spent = max(self.spent, target)
        if not se > 0 or not math.isfinite(se):
            return step
        info = 1.0 / se**2
        if self._grid is None:  # the first look: the score is N(0, info)
            bound = NormalDist().inv_cdf(1 - step) * math.sqrt(info)
            self._carry(np.zeros(1), np.ones(1), info, bound)
            return step
        # information that hardly grows (the baseline's error dominates) is floored: a look taken
        # as a little more independent of the last than it is gets a slightly stricter boundary
        d_info = max(info - self._info, 1e-3 * self._info)
        sd = math.sqrt(d_info)
        s, mass = self._grid, self._mass

        def stopped(b: float) -> float:  # probability that a walk not stopped yet crosses b now
            return float(np.sum(mass * ndtr((s - b) / sd)))

        lo, hi = s[0] - 40 * sd, s[-1] + 40 * sd
        bound = brentq(lambda b: stopped(b) - step, lo, hi, xtol=1e-9 * sd) if stopped(lo) > step else lo
        info = self._info + d_info
        if not final:  # no look after the last
            self._carry(s, mass, d_info, bound, info)
        return float(ndtr(-bound / math.sqrt(info)))

    def _carry(self, s: np.ndarray, mass: np.ndarray, d_info: float, bound: float, info: float | None = None) -> None:
        """The walks not stopped by ``bound`` after an increment of ``d_info``, on a new grid."""
        info = d_info if info is None else info
        sd = math.sqrt(d_info)
        grid = np.linspace(min(bound - sd, -10 * math.sqrt(info)), bound, self.GRID)
        h = grid[1] - grid[0]
        dens = np.exp(-0.5 * ((grid[:, None] - s[None, :]) / sd) ** 2) @ mass / (sd * math.sqrt(2 * math.pi))
        self._grid, self._mass, self._info = grid, dens * h, info


#: Earlier sessions at most that :func:`session_drift` looks at (the newest).
DRIFT_SESSIONS = 30


def session_drift(history: list[tuple[float, float]], prior: float) -> tuple[float, int]:
    """The session offset for a trace, from its own earlier sessions against the same baseline.

    ``history``: (log ratio to the baseline, that session's own variance), oldest first. Between
    sessions, a trace's log ratio moves by its session offset plus its own sampling; so the
    scatter of successive sessions, less what their own variances explain, is the offset's
    variance on this machine. Successive differences and their median make the estimate robust
    to a real change in the series (a regression, an upgrade) and to the odd wild session. It is
    pooled with ``prior`` (:data:`PRIOR_DF` degrees of freedom against one per difference) and
    never taken below it: a machine that drifts more than the project measured widens its own
    intervals, none narrows them. Returns the drift (as a fraction) and the sessions used."""
    rows = [(r, v) for r, v in history[-DRIFT_SESSIONS:] if math.isfinite(r) and math.isfinite(v)]
    prior2 = math.log1p(prior) ** 2
    if len(rows) < 3:
        return prior, 0
    diffs = np.abs(np.diff([r for r, _ in rows]))
    # |difference| of two normal draws of variance s2 each: median = 0.6745 * sqrt(2 * s2)
    s2 = (float(np.median(diffs)) / 0.6745) ** 2 / 2
    own = float(np.median([v for _, v in rows]))
    est = max(0.0, s2 - own)
    n = len(diffs)
    pooled = max(prior2, (PRIOR_DF * prior2 + n * est) / (PRIOR_DF + n))
    return math.expm1(math.sqrt(pooled)), len(rows)


def compare_levels(base_levels, cur_levels, **kw) -> Comparison:
    """:func:`compare_runs` with one run on each side (two flat lists of segment levels)."""
    return compare_runs([list(base_levels)], [list(cur_levels)], **kw)


def compare_paired(differences, *, tolerance: float = DEFAULT_TOLERANCE,
                   alpha: float | Callable[[float], float] = DEFAULT_ALPHA, process_noise: float = DEFAULT_NOISE,
                   final: bool = True, groups: Sequence[int] | None = None, **extra) -> Comparison:  # fmt: skip
    """Verdict on paired level differences (B - A, one per round of an interleaved A/B run): a
    t interval on their mean. Drift of the machine cancels within each pair; what stays is each
    worker process's own offset, counted as ``process_noise`` on both sides as in
    :func:`compare_levels`. ``groups``: the pair of worker processes that ran each round, where
    several did; the offsets of independent pairs average out as :func:`offset_share` says."""
    x = np.asarray(differences, dtype=float)
    if len(x) < 2:
        raise ValueError("need at least two rounds to compare")
    if groups is not None and len(groups) != len(x):
        raise ValueError(f"{len(groups)} groups for {len(x)} rounds")
    v = float(x.var(ddof=1)) / len(x)
    noise = offset_variance(process_noise, groups)
    df = (v + noise) ** 2 / (v**2 / (len(x) - 1)) if v > 0 else math.inf
    se = math.sqrt(v + noise)
    return _verdict(float(x.mean()), se, df, tolerance, alpha(se) if callable(alpha) else alpha, final, n_baseline=len(x),
                    n_current=len(x), process_noise=process_noise, process_sd=process_noise, **extra)  # fmt: skip


def offset_variance(process_noise: float, groups: Sequence[int] | None = None) -> float:
    """What the worker processes' own offsets add to the variance of a paired mean (log scale):
    ``process_noise`` for each of a pair's two workers, times :func:`offset_share` of the rounds'
    pairs (``groups``; one pair where None)."""
    return 2 * math.log1p(process_noise) ** 2 * (offset_share(groups) if groups is not None else 1.0)


def offset_share(groups: Sequence[int]) -> float:
    """The share of one pair's process offsets left in the mean of rounds run by several pairs of
    worker processes (``groups``: the pair of each round): with ``n_j`` of the ``n`` rounds from
    pair ``j``, the mean holds each pair's offset with weight ``n_j / n``, so the offsets'
    variance in it is the sum of ``(n_j / n) ** 2`` times one pair's (1 for one pair, ``1 / k``
    for ``k`` pairs of as many rounds each)."""
    counts = collections.Counter(groups)
    n = sum(counts.values())
    return sum((c / n) ** 2 for c in counts.values()) if n else 1.0


def _verdict(d: float, se: float, df: float, tolerance: float, alpha: float, final: bool, span: float = 0.0,
             **fields) -> Comparison:  # fmt: skip
    """``span``: a second estimate lies at ``d + span`` with the same error (the raw times', when
    the probe moved too far to be trusted alone, :data:`PROBE_SHIFT`); the interval covers both,
    a change is significant only where both say so, and the estimate judged when sampling stops
    undecided is the one nearer no change. (Calling a change only where both estimates lie beyond
    the tolerance was tried and missed a real 2x: the host sped up 28% between the sessions, the
    probe followed, and the raw estimate, +26% [+14%, +38%], stayed inside a 40% tolerance.)"""
    # imported here: scipy.stats takes most of a second to import, and a fresh replay process
    # (:mod:`.worker`), which imports this module through the sampler, never compares
    from scipy import stats as sps

    low, high = min(d, d + span), max(d, d + span)
    if se > 0:
        p_slower, p_faster = float(sps.t.sf(low / se, df)), float(sps.t.cdf(high / se, df))
        half = float(sps.t.ppf(1 - alpha, df)) * se
    else:
        p_slower, p_faster = (0.5, 0.5) if low <= 0 <= high else (float(high < 0), float(low > 0))
        half = 0.0
    # a first look at two segments of one run can have a t quantile beyond any float's exp: an
    # interval without an upper end, which decides nothing
    lo, hi = math.exp(max(low - half, -700.0)), math.exp(high + half) if high + half < 700 else math.inf
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
        verdict = "same" if math.exp(min(d, d + span, key=abs)) < up else "unsure"
    fields = {"baseline_median_s": math.nan, "current_median_s": math.nan} | fields
    return Comparison(verdict, math.exp(d), lo, hi, 1 - 2 * alpha, p_slower, p_faster, tolerance=tolerance, se=se, df=df,
                      **fields)  # fmt: skip


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
