"""Verdicts through pytest --mystique: unsure and --mystique-strict, budget, the session summary."""

import shutil

import pytest

from pytest_mystique.inject import duplicate_ops

from conftest import corpus, read_json, write_json

FAST = ["--mystique-iters=10", "--mystique-budget=1", "--mystique-warmup=1", "--mystique-threads=1",
        "-p", "no:cacheprovider"]  # fmt: skip


@pytest.fixture
def doubled(pytester):
    """A recorded baseline for vit, then the trace replaced by one doing every op twice."""
    d = pytester.path / "traces"
    d.mkdir()
    shutil.copyfile(corpus("vit_infer.json.gz"), d / "vit.json.gz")
    pytester.runpytest("--mystique", "traces", *FAST).assert_outcomes(passed=1)
    write_json(d / "vit.json.gz", duplicate_ops(read_json(d / "vit.json.gz")))
    return d


def test_unsure_is_reported_and_fails_only_when_strict(pytester, doubled):
    # a process noise of 300% makes even a doubling unprovable: the estimate says slower, the test cannot
    noisy = ["--mystique-noise=3"]
    result = pytester.runpytest("--mystique", "traces", *FAST, *noisy)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*vit*112/112*+*%*unsure*", "*1 unsure (budget spent without a verdict): reported, not failed*"])
    strict = pytester.runpytest("--mystique", "traces", *FAST, *noisy, "--mystique-strict")
    strict.assert_outcomes(failed=1)
    strict.stdout.fnmatch_lines(["*vit reached no verdict within the budget (--mystique-strict)*"])


def test_slowdown_summary_names_alpha_split_and_bh_q(pytester, doubled):
    result = pytester.runpytest("--mystique", "traces", *FAST)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "*operators that added the most time per iteration*",
        "*+*aten::linear*->*",
        "*verdicts: 1 trace(s) compared, each tested at alpha 0.01/1*Benjamini-Hochberg*",
        "*vit: slower, p=*, BH q=*",
    ])  # fmt: skip


def test_budget_bounds_the_sampling(pytester, doubled):
    import json

    pytester.runpytest("--mystique", "traces", *FAST, "--mystique-noise=3", "--mystique-json=out.json")
    bench = json.loads((pytester.path / "out.json").read_text())["benchmarks"][0]
    # one look at the minimum of four segments, no more: the budget of 1 s is smaller than that
    assert bench["extra_info"]["segments"] == 4
    assert bench["extra_info"]["status"] == "unsure"


def test_bad_settings_are_usage_errors(pytester, doubled):
    for bad in ("--mystique-budget=0", "--mystique-alpha=0.7", "--mystique-noise=-1"):
        result = pytester.runpytest("--mystique", "traces", *FAST, bad)
        assert result.ret == pytest.ExitCode.USAGE_ERROR, bad


def test_format_1_baseline_is_still_compared_on_raw_times(pytester):
    import yaml

    d = pytester.path / "traces"
    d.mkdir()
    shutil.copyfile(corpus("vit_infer.json.gz"), d / "vit.json.gz")
    pytester.runpytest("--mystique", "traces", *FAST).assert_outcomes(passed=1)
    [path] = (pytester.path / ".mystique" / "baselines").rglob("*.yaml")
    data = yaml.safe_load(path.read_text())
    old = {k: data[k] for k in ("trace", "samples_s", "environment")} | {"format": 1}
    path.write_text(yaml.safe_dump(old))
    result = pytester.runpytest("--mystique", "traces", *FAST, "--mystique-json=out.json")
    result.assert_outcomes(passed=1)
    import json

    cmp = json.loads((pytester.path / "out.json").read_text())["benchmarks"][0]["extra_info"]["comparison"]
    assert cmp["calibrated"] is False and cmp["n_baseline"] == len(old["samples_s"]) // 5
