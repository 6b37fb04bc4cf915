"""The statistical check on real replay samples and on controlled ones."""

import numpy as np
import pytest

from pytest_mystique.stats import compare


def noisy(median, n, rng, spread=0.03):
    # Timing noise is skewed: a floor plus a long right tail.
    return list(median * (1 + spread * rng.gamma(2.0, 0.5, n) - spread))


def test_same_distribution_is_same():
    rng = np.random.default_rng(0)
    verdicts = [compare(noisy(0.1, 15, rng), noisy(0.1, 15, rng)).verdict for _ in range(100)]
    assert verdicts.count("slower") <= 1


def test_doubling_is_slower_with_interval_around_two():
    rng = np.random.default_rng(1)
    c = compare(noisy(0.1, 15, rng), noisy(0.2, 15, rng))
    assert c.verdict == "slower"
    assert c.ci_low < c.ratio < c.ci_high and 1.8 < c.ci_low and c.ci_high < 2.2
    assert c.p_slower < 0.001


def test_small_slowdown_inside_tolerance_passes():
    rng = np.random.default_rng(2)
    c = compare(noisy(0.1, 30, rng, 0.005), noisy(0.102, 30, rng, 0.005), tolerance=0.05)
    assert c.p_slower < 0.01  # significant...
    assert c.verdict == "same"  # ...but within tolerance


def test_improvement_is_reported_as_faster():
    rng = np.random.default_rng(3)
    assert compare(noisy(0.1, 15, rng), noisy(0.07, 15, rng)).verdict == "faster"


def test_needs_two_samples():
    with pytest.raises(ValueError):
        compare([0.1], [0.1, 0.2])
