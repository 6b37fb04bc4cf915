"""The statistics: segment levels, the verdict rules, paired comparisons and the FDR adjustment."""

import math
from statistics import NormalDist

import numpy as np
import pytest
from scipy.stats import t as t_dist

from pytest_mystique.defaults import DEFAULT_DRIFT
from pytest_mystique.history import REFERENCE_SESSIONS
from pytest_mystique.sampling import look_points
from pytest_mystique.stats import (
    Spending,
    benjamini_hochberg,
    compare,
    compare_levels,
    compare_paired,
    compare_runs,
    obf_spent,
    offset_share,
    process_variance,
    segment_level,
    session_drift,
)


def noisy(median, n, rng, spread=0.03):
    # Timing noise is skewed: a floor plus a long right tail.
    return list(median * (1 + spread * rng.gamma(2.0, 0.5, n) - spread))


def levels(level, n, rng, sd=0.02):
    return list(level + sd * rng.standard_normal(n))


def test_segment_level_divides_by_the_probe():
    xs, probe = [0.010, 0.011, 0.030], [0.001, 0.0011, 0.002]
    assert segment_level(xs, probe) == pytest.approx(segment_level(xs) - segment_level(probe))
    # a machine twice as slow doubles both: the level does not move
    assert segment_level([2 * x for x in xs], [2 * p for p in probe]) == pytest.approx(segment_level(xs, probe))


def test_same_distribution_rarely_alarms():
    rng = np.random.default_rng(0)
    verdicts = [compare_levels(levels(0, 8, rng), levels(0, 8, rng), alpha=0.01).verdict for _ in range(400)]
    assert verdicts.count("slower") <= 4
    assert verdicts.count("same") > 300


def test_doubling_is_slower_with_interval_around_two():
    rng = np.random.default_rng(1)
    c = compare(noisy(0.1, 40, rng), noisy(0.2, 40, rng))
    assert c.verdict == "slower" and not c.calibrated
    assert c.ci_low < c.ratio < c.ci_high and 1.8 < c.ci_low and c.ci_high < 2.2
    assert c.p_slower < 0.001


def test_process_noise_widens_the_interval():
    rng = np.random.default_rng(4)
    b, c = levels(0, 10, rng, 0.005), levels(math.log(1.08), 10, rng, 0.005)
    quiet = compare_levels(b, c, process_noise=0.0, drift=0.0)
    noisy_host = compare_levels(b, c, process_noise=0.03, drift=0.0)
    assert quiet.verdict == "slower" and noisy_host.verdict != "slower"
    assert noisy_host.ci_high - noisy_host.ci_low > 3 * (quiet.ci_high - quiet.ci_low)


def test_small_significant_slowdown_inside_tolerance_is_same():
    rng = np.random.default_rng(2)
    c = compare_levels(levels(0, 30, rng, 0.002), levels(math.log(1.02), 30, rng, 0.002), tolerance=0.05,
                       process_noise=0.0, drift=0.0)
    assert c.p_slower < 0.01  # significant...
    assert c.verdict == "same"  # ...but surely within tolerance


def test_undecided_until_final_then_unsure_or_same():
    rng = np.random.default_rng(5)
    b, c = levels(0, 4, rng, 0.05), levels(math.log(1.08), 4, rng, 0.05)
    kw = {"process_noise": 0.05}
    assert compare_levels(b, c, final=False, **kw).verdict == "undecided"
    assert compare_levels(b, c, final=True, **kw).verdict == "unsure"  # +8% suggested, not shown
    c2 = levels(math.log(1.01), 4, rng, 0.05)
    assert compare_levels(b, c2, final=True, **kw).verdict in ("same", "unsure")


def test_improvement_is_reported_as_faster():
    rng = np.random.default_rng(3)
    assert compare(noisy(0.1, 40, rng), noisy(0.07, 40, rng)).verdict == "faster"


def test_paired_rounds_cancel_drift():
    rng = np.random.default_rng(6)
    drift = 0.3 * rng.standard_normal(12)  # the machine's speed moves by 30% between rounds
    a = drift + 0.005 * rng.standard_normal(12)
    b = drift + math.log(1.10) + 0.005 * rng.standard_normal(12)
    paired = compare_paired(b - a, process_noise=0.0)
    assert paired.verdict == "slower" and 1.08 < paired.ci_low < paired.ratio < paired.ci_high < 1.12
    assert compare_levels(list(a), list(b), process_noise=0).verdict != "slower"  # unpaired: lost in the drift


def simulated_ab(pairs: int, slowdown: float, rng, rounds: int = 12, offset: float = 0.02, sd: float = 0.01):
    """An A/B run's rounds cycling through ``pairs`` pairs of worker processes, each worker with
    an offset of its own (sd ``offset``), B slower by ``slowdown``; judged as mystique ab judges."""
    offsets = rng.normal(0.0, offset, (pairs, 2))
    groups = [r % pairs for r in range(rounds)]
    d = [math.log1p(slowdown) + offsets[g, 1] - offsets[g, 0] + sd * rng.standard_normal() for g in groups]
    return compare_paired(d, groups=groups, process_noise=offset).verdict


def test_offset_share_of_several_worker_pairs():
    assert offset_share([0] * 7) == 1.0
    assert offset_share([0, 1, 2] * 4) == pytest.approx(1 / 3)
    assert offset_share([0, 1, 2, 0]) == pytest.approx((4 + 1 + 1) / 16)


def test_worker_pairs_average_their_offsets_without_false_alarms():
    """Offsets of 2% a process: one pair's interval must count them whole, and misses a +8%
    slowdown two times in five; three pairs' rounds average them, so the interval narrows
    (catching nearly all) while identical sides still alarm about as rarely as the level says
    (1% a side: 8 of 400 expected; counting only a ninth of the offsets' variance for three
    pairs, as a share of 1/k² would, raises about 30)."""
    rng = np.random.default_rng(11)
    for pairs in (1, 3):
        alarms = sum(simulated_ab(pairs, 0.0, rng) in ("slower", "faster") for _ in range(400))
        assert alarms <= 16, (pairs, alarms)  # (4%; 11 and 4 with this seed)
    caught = {pairs: sum(simulated_ab(pairs, 0.08, rng) == "slower" for _ in range(300)) for pairs in (1, 3)}
    assert caught[1] < 0.85 * 300 and caught[3] > 0.95 * 300, caught  # (184 and 293)


def test_benjamini_hochberg_matches_the_definition():
    p = [0.01, 0.04, 0.03, 0.005, 0.5]
    q = benjamini_hochberg(p)
    # sorted p: .005 .01 .03 .04 .5 -> p*m/rank: .025 .025 .05 .05 .5, then running minimum from the top
    assert q == pytest.approx([0.025, 0.05, 0.05, 0.025, 0.5])
    assert benjamini_hochberg([]) == []


def test_looks_double_and_end_at_the_cap():
    assert look_points(40) == [4, 8, 16, 32, 40]
    assert look_points(3) == [4]


def test_needs_two_segments():
    with pytest.raises(ValueError):
        compare_levels([0.1], [0.1, 0.2])


def runs(level, n_runs, rng, offset_sd=0.012, segments=6, sd=0.01):
    """Runs of segment levels, each run (process) with an offset of its own."""
    return [levels(level + offset_sd * rng.standard_normal(), segments, rng, sd) for _ in range(n_runs)]


def test_more_processes_narrow_the_interval():
    rng = np.random.default_rng(7)
    base5, cur3 = runs(0, 5, rng), runs(0, 3, rng)
    one = compare_runs(base5[:1], cur3[:1], process_noise=0.015, drift=0.0)
    many = compare_runs(base5, cur3, process_noise=0.015, drift=0.0)
    assert (many.runs_baseline, many.runs_current) == (5, 3)
    # process variance (1/5 + 1/3) instead of (1 + 1): the interval is about half as wide
    assert many.ci_high - many.ci_low < 0.6 * (one.ci_high - one.ci_low)
    assert compare_levels(base5[0], cur3[0], process_noise=0.015, drift=0.0).ci_low == pytest.approx(one.ci_low)
    # a session offset is one draw per side: more processes do not shrink it
    floor = 2 * math.log1p(0.02) ** 2
    for c in (compare_runs(base5, cur3, process_noise=0.015, drift=0.02),
              compare_runs(base5 * 4, cur3 * 4, process_noise=0.015, drift=0.02)):
        assert math.log(c.ci_high / c.ratio) > 2 * math.sqrt(floor)


def test_process_variance_pools_the_prior_with_the_scatter_between_runs_either_way():
    rng = np.random.default_rng(8)
    prior = math.log1p(0.015) ** 2
    agreeing, scattered = runs(0, 16, rng, offset_sd=0.0), runs(0, 8, rng, offset_sd=0.06)
    quiet_trace = process_variance([agreeing], 0.015)
    assert 0.3 * prior < quiet_trace < 0.5 * prior  # 15 runs that agree against a prior worth 10
    noisy_trace = process_variance([scattered], 0.015)
    assert noisy_trace > 2 * prior
    assert process_variance([[levels(0, 6, rng)]], 0.015) == pytest.approx(prior)  # one run tells nothing about processes
    assert quiet_trace < process_variance([agreeing, scattered], 0.015) < noisy_trace  # the sides are pooled
    # the comparison reports the process noise it used and its interval's standard error
    c = compare_runs(agreeing, scattered, process_noise=0.015, drift=0.0, alpha=0.01)
    assert c.process_noise == 0.015
    assert c.process_sd == pytest.approx(math.expm1(math.sqrt(process_variance([agreeing, scattered], 0.015))))
    assert math.log(c.ci_high / c.ratio) == pytest.approx(float(t_dist.ppf(0.99, c.df)) * c.se)


def sequential(base, cur, looks=(1, 2, 4, 5), **kw):
    """The verdict of the sampler's looks at ``cur``'s first 1, 2, 4 and 5 runs (alpha 0.01 spent
    across them), stopping at the first that decides."""
    spending = Spending(0.01)
    for k in looks:
        cmp = compare_runs(base, cur[:k], alpha=spending.at(k / looks[-1], k == looks[-1]), final=k == looks[-1], **kw)
        if cmp.verdict != "undecided":
            return cmp.verdict


@pytest.mark.parametrize("offset_sd", [0.015, 0.02])
def test_runs_keep_false_alarms_rare_when_sessions_drift(offset_sd):
    """Simulated with the noise measured on the 2-core CI host: each process has an offset of its
    own (1.5-2% sd), and each session (the baseline's, today's) one more, shared by all its
    processes (the drift DEFAULT_DRIFT stands for). A 14-run baseline against 5 fresh runs of 2
    segments each, as the default budget allows, looked at after 1, 2, 4 and 5 runs. Without the
    session term the model takes the many processes for precision and raises false alarms; with
    it they stay at 1% or below, and +10% is still caught."""
    rng = np.random.default_rng(9)
    kw = {"process_noise": 0.02}

    def side(level, n_runs):
        session = DEFAULT_DRIFT * rng.standard_normal()
        return runs(level + session, n_runs, rng, offset_sd, segments=2, sd=0.015)

    pairs = [(side(0, 14), side(0, 5)) for _ in range(500)]
    aa = [sequential(b, c, **kw) for b, c in pairs]
    assert aa.count("slower") <= 5  # <= 1%
    blind = [sequential(b, c, drift=0.0, **kw) for b, c in pairs]
    assert blind.count("slower") + blind.count("faster") > aa.count("slower") + aa.count("faster")
    slow = [sequential(side(0, 14), side(math.log(1.10), 5), **kw) for _ in range(200)]
    assert slow.count("slower") >= 190  # >= 95%


def test_sequential_looks_spend_alpha_exactly_and_leave_most_for_the_last():
    """Looks after 1, 2, 4 and 5 of 5 runs, whose estimate's error is part baseline (which more
    runs do not shrink) and part the runs': the exact boundaries of Spending keep the chance of
    a false alarm over all looks at alpha (Monte Carlo on that very correlation), where
    Bonferroni's alpha / 4 per look wastes most of it; the last look tests near alpha itself,
    and a real change of 6% is found more often."""
    assert obf_spent(1.0, 0.01) == 0.01 and obf_spent(0.25, 0.01) < 1e-6 < obf_spent(0.5, 0.01) < obf_spent(0.8, 0.01)
    looks, base_var, run_var = (1, 2, 4, 5), 0.02**2, 0.03**2
    se = [math.sqrt(base_var + run_var / k) for k in looks]
    spending = Spending(0.01)
    levels = [spending.level(k / 5, e, final=k == 5) for k, e in zip(looks, se)]
    assert levels[0] < 1e-7 and 0.009 < levels[-1] <= 0.01
    rng = np.random.default_rng(4)
    n = 200_000
    base = math.sqrt(base_var) * rng.standard_normal(n)
    cum = (math.sqrt(run_var) * rng.standard_normal((n, 5))).cumsum(axis=1)

    def alarms(change, per_look):
        hit = np.zeros(n, dtype=bool)
        for k, e, level in zip(looks, se, per_look):
            hit |= (cum[:, k - 1] / k + change - base) / e > NormalDist().inv_cdf(1 - level)
        return hit.mean()

    exact, bonferroni = alarms(0.0, levels), alarms(0.0, [0.01 / 4] * 4)
    assert 0.009 < exact < 0.011 and bonferroni < 0.007
    assert alarms(0.06, levels) > alarms(0.06, [0.01 / 4] * 4) + 0.08


def test_session_drift_is_learnt_from_the_history_never_below_the_prior():
    rng = np.random.default_rng(10)
    own = math.log1p(0.005) ** 2

    def series(sd, n=30, step_at=None):
        r = sd * rng.standard_normal(n)
        if step_at is not None:
            r[step_at:] += math.log(1.2)  # a real regression halfway through the series
        return [(float(x), own) for x in r]

    assert session_drift(series(0.04)[:2], 0.01) == (0.01, 0)  # too few sessions: the prior
    drift, used = session_drift(series(0.04), 0.01)
    assert used == 30 and 0.025 < drift < 0.055  # a drifting machine: about its 4%
    assert session_drift(series(0.002), 0.01)[0] == pytest.approx(0.01)  # a quiet one: never below the prior
    assert session_drift(series(0.002, step_at=15), 0.01)[0] < 0.015  # one real change is not drift
    noisy_own = [(r, math.log1p(0.04) ** 2) for r, _ in series(0.04)]
    assert session_drift(noisy_own, 0.01)[0] < 0.025  # scatter the sessions' own variance explains


class Host:
    """A simulated CI host: each session (a baseline's, a comparison's) has an offset shared by
    its processes (``drift_sd``), each process one of its own (``process_sd``), each 2-segment
    run's segments ``segment_sd`` more."""

    def __init__(self, rng, process_sd=0.02, drift_sd=DEFAULT_DRIFT, segment_sd=0.015):
        self.rng, self.process_sd, self.drift_sd, self.segment_sd = rng, process_sd, drift_sd, segment_sd

    def side(self, level, n_runs):
        session = self.drift_sd * self.rng.standard_normal()
        return runs(level + session, n_runs, self.rng, self.process_sd, segments=2, sd=self.segment_sd)

    def reference(self, base, **kw):
        """The baseline's first sessions on its environment (5 runs each), as the plugin pools them."""
        out = []
        for _ in range(REFERENCE_SESSIONS):
            c = compare_runs(base, self.side(0, 5), **kw)
            out.append((c.baseline_log_ratio, c.current_var))
        return out


def test_pooling_the_baseline_with_its_first_sessions_keeps_false_alarms_rare_and_gains_power():
    """The simulation above, with each baseline followed by 5 sessions on its environment (5 runs
    each, offsets of their own) that the plugin pools with it. The baseline's own session offset,
    which weighs in every comparison against it, averages down: false alarms stay at 1% or below,
    and a +5% change is caught more often than against the baseline alone."""
    host = Host(np.random.default_rng(11))
    kw = {"process_noise": 0.02}
    bases = [host.side(0, 14) for _ in range(300)]
    refs = [host.reference(b, **kw) for b in bases]
    # the same two sides: the pooled reference narrows the interval and moves the estimate by its shift
    cur = host.side(0, 5)
    alone, pooled_one = compare_runs(bases[0], cur, **kw), compare_runs(bases[0], cur, reference=refs[0], **kw)
    assert pooled_one.reference_sessions == REFERENCE_SESSIONS and alone.reference_sessions == 0
    assert pooled_one.ci_high / pooled_one.ci_low < alone.ci_high / alone.ci_low
    assert pooled_one.baseline_log_ratio == pytest.approx(math.log(alone.ratio))
    aa = [sequential(b, host.side(0, 5), reference=r, **kw) for b, r in zip(bases, refs)]
    assert aa.count("slower") <= 3 and aa.count("faster") <= 3  # <= 1%
    five = [host.side(math.log(1.05), 5) for _ in bases]
    pooled = [sequential(b, c, reference=r, **kw) for b, c, r in zip(bases, five, refs)]
    alone = [sequential(b, c, **kw) for b, c in zip(bases, five)]
    assert pooled.count("slower") > alone.count("slower") + 15
    ten = [sequential(b, host.side(math.log(1.10), 5), reference=r, **kw) for b, r in zip(bases, refs)]
    assert ten.count("slower") >= 0.95 * len(ten)


def test_processes_that_agree_more_than_the_prior_narrow_the_interval_and_catch_five_percent():
    """The host as the last stat_power measurement found it: the bundled traces' baseline
    processes scattered by 0.8-1.1% (probe-normalised), half the configured 2%, and the sessions
    by about 1%. Pooling the prior with that scatter (rather than never going below the prior)
    catches +5% in more than 9 of 10 comparisons against a 16-run baseline and its first 5
    sessions (the floored model: about 84%), and false alarms stay at 1% or below."""
    host = Host(np.random.default_rng(12), process_sd=0.01, segment_sd=0.006)
    kw = {"process_noise": 0.02}
    bases = [host.side(0, 16) for _ in range(200)]
    refs = [host.reference(b, **kw) for b in bases]
    aa = [sequential(b, host.side(0, 5), reference=r, **kw) for b, r in zip(bases, refs)]
    assert aa.count("slower") <= 2 and aa.count("faster") <= 2
    five = [sequential(b, host.side(math.log(1.05), 5), reference=r, **kw) for b, r in zip(bases, refs)]
    assert five.count("slower") >= 0.9 * len(five)


def test_a_probe_that_moved_too_far_is_not_trusted_alone():
    """A/A sides whose probe-normalised levels differ by +24% only because the baseline's probe ran
    22% slower (its replay times equal to today's): judged on both estimates, not `slower`. The same
    data with a probe that moved 5% are judged as before, and a real slowdown that both the raw
    and the normalised estimates show is still caught when the probe moved."""
    rng = np.random.default_rng(3)
    base = [list(rng.normal(0.0, 0.01, 4)) for _ in range(2)]
    cur = [list(rng.normal(0.24, 0.01, 4)) for _ in range(2)]
    trusted = compare_runs(base, cur, probe_shift=-0.05)
    assert trusted.verdict == "slower" and not trusted.spanned
    spanned = compare_runs(base, cur, probe_shift=-0.22)
    assert spanned.spanned and spanned.verdict == "same"  # the raw estimate, +2%, is within tolerance
    assert spanned.ci_low < 1.0 < 1.2 < spanned.ci_high and spanned.p_slower > 0.01
    assert spanned.ratio == pytest.approx(trusted.ratio)  # the estimate reported stays the normalised one
    assert spanned.raw_change == pytest.approx(math.exp(math.log(spanned.ratio) - 0.22) - 1)
    # either direction: a probe that sped up and a replay that did not look faster than they are
    faster = compare_runs(cur, base, probe_shift=0.22)
    assert compare_runs(cur, base).verdict == "faster" and faster.verdict == "same"
    # +12% in the raw times, +34% normalised: slower either way
    real = compare_runs(base, [list(rng.normal(0.34, 0.01, 4)) for _ in range(2)], probe_shift=-0.22)
    assert real.spanned and real.verdict == "slower" and real.ci_low > 1.05
    # where sampling stops with no significant change, the estimate nearer no change is judged
    wide = compare_runs(base[:1], cur[:1], probe_shift=-0.30, final=True)
    assert wide.verdict == "same"


def test_the_probe_holds_numpys_blas_to_one_thread_and_gives_the_pool_back(monkeypatch):
    """The machine-speed probe runs on one core: with the BLAS's pool of threads, a second process
    beside it made it 40 times slower on a 2-core host (benchmarks/probe_neighbours.py), so it
    measured the neighbours, not the machine. The user's setting is restored after it."""
    from threadpoolctl import threadpool_info, threadpool_limits

    from pytest_mystique import calibrate

    def blas_threads():
        return [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]

    seen = []
    with threadpool_limits(limits=2, user_api="blas"):
        assert blas_threads() and set(blas_threads()) == {2}
        assert calibrate.probe() > 0
        monkeypatch.setattr(calibrate, "_workload", lambda: seen.append(blas_threads()) or 1e-3)
        calibrate.probe()
        assert set(seen[0]) == {1}
        assert set(blas_threads()) == {2}
