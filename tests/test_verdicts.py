"""Verdicts through pytest --mystique: unsure and --mystique-strict, budget, the session summary."""

import math
import shutil

import pytest

from pytest_mystique.inject import duplicate_ops

from conftest import corpus, read_json, write_json

# The CPU's path (its machine-speed probe and canary), also where a GPU is visible (MYSTIQUE_TEST_GPU=1).
FAST = ["--mystique-iters=10", "--mystique-budget=1", "--mystique-warmup=1", "--mystique-threads=1",
        "--mystique-device=cpu", "-p", "no:cacheprovider"]  # fmt: skip
# For comparisons of an unchanged trace whose verdict is not what a test is about (the pooling, the
# drift, the raw-time fallback): one process per side within a 1 s budget, on a host that moves by
# 10-30% between runs seconds apart, judges an A/A session slower now and then at 5% (clean-clone CI
# saw +9.3%, p 0.009, raw medians +13%). The tolerance of test_plugin's A/A tests: an unchanged trace
# passes, one doing twice the work still fails.
CALM = [*FAST, "--mystique-tolerance=0.4"]
# Raw times (a baseline the probe cannot divide) carry the host's whole move: +32% between two runs
# seconds apart on a busy day here, a "slower" verdict at 0.4 (CI [+0.5%, +52.8%]). The tests that
# compare on raw times are about the fallback and its note, not the verdict.
RAW_CALM = [*FAST, "--mystique-tolerance=1.5"]


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


def _rewrite_vit_baseline(pytester, rewrite):
    """Record a baseline of the ViT trace, replace its YAML by ``rewrite(data)``, compare against it;
    the comparison's JSON and the pytester result."""
    import json

    import yaml

    d = pytester.path / "traces"
    d.mkdir()
    shutil.copyfile(corpus("vit_infer.json.gz"), d / "vit.json.gz")
    pytester.runpytest("--mystique", "traces", *CALM).assert_outcomes(passed=1)
    [path] = (pytester.path / ".mystique" / "baselines").rglob("*.yaml")
    path.write_text(yaml.safe_dump(rewrite(yaml.safe_load(path.read_text()))))
    result = pytester.runpytest("--mystique", "traces", *RAW_CALM, "--mystique-json=out.json", "-rA")
    result.assert_outcomes(passed=1)
    cmp = json.loads((pytester.path / "out.json").read_text())["benchmarks"][0]["extra_info"]["comparison"]
    return cmp, result


def test_format_1_baseline_is_still_compared_on_raw_times(pytester):
    old = {}

    def to_format_1(data):
        old.update({k: data[k] for k in ("trace", "samples_s", "environment")} | {"format": 1})
        return old

    cmp, _ = _rewrite_vit_baseline(pytester, to_format_1)
    assert cmp["calibrated"] is False and cmp["n_baseline"] == len(old["samples_s"]) // 5


def test_baseline_timed_with_another_probe_is_compared_on_raw_times(pytester):
    """A baseline whose probe differs (an older probe version, another numpy) is not divided by
    today's probe: the comparison uses raw times and says so."""
    from pytest_mystique import calibrate

    def older_probe(data):
        assert data["probe_signature"] == calibrate.signature()
        return data | {"probe_signature": calibrate.signature().replace(f"probe {calibrate.PROBE_VERSION} ", "")}

    cmp, result = _rewrite_vit_baseline(pytester, older_probe)
    assert cmp["calibrated"] is False
    result.stdout.fnmatch_lines(["*note (1x): the baseline was timed with another machine-speed probe*raw times*"])


def test_baseline_is_sampled_in_fresh_processes(pytester):
    import json

    import yaml

    d = pytester.path / "traces"
    d.mkdir()
    shutil.copyfile(corpus("vit_infer.json.gz"), d / "vit.json.gz")
    roomy = [a for a in FAST if not a.startswith("--mystique-budget")] + ["--mystique-budget=30", "--mystique-runs=3"]
    result = pytester.runpytest("--mystique", "traces", *roomy, "-rA")
    result.assert_outcomes(passed=1)
    [path] = (pytester.path / ".mystique" / "baselines").rglob("*.yaml")
    segments = yaml.safe_load(path.read_text())["segments"]
    runs = sorted({s["run"] for s in segments})
    # this process planned (3 segments), then fresh processes, as many as asked for and the budget allows
    assert runs == list(range(len(runs))) and 2 <= len(runs) <= 4, runs
    result.stdout.fnmatch_lines([f"*56/56 ops*{len(runs)} process(es)*"])
    counts = [sum(s["run"] == r for s in segments) for r in runs]
    assert counts[0] == 3 and all(c == counts[1] >= 2 for c in counts[1:]), counts
    assert all(s["probe_s"] for s in segments)
    # a comparison looks after 1, 2, ... fresh runs and says how many it used (a noisy host: wide tolerance)
    pytester.runpytest("--mystique", "traces", *roomy, "--mystique-tolerance=0.4",
                       "--mystique-json=out.json").assert_outcomes(passed=1)  # fmt: skip
    info = json.loads((pytester.path / "out.json").read_text())["benchmarks"][0]["extra_info"]
    cmp = info["comparison"]
    assert cmp["runs_baseline"] == len(runs) - 1 and cmp["runs_current"] == info["runs"] - 1
    assert [look["runs"] for look in info["looks"]] == list(range(1, cmp["runs_current"] + 1))


def test_session_drift_from_the_history_widens_the_interval(pytester):
    import json

    from pytest_mystique.history import HistoryStore

    d = pytester.path / "traces"
    d.mkdir()
    shutil.copyfile(corpus("vit_infer.json.gz"), d / "vit.json.gz")
    pytester.runpytest("--mystique", "traces", *CALM).assert_outcomes(passed=1)
    pytester.runpytest("--mystique", "traces", *CALM, "--mystique-json=first.json").assert_outcomes(passed=1)
    first = json.loads((pytester.path / "first.json").read_text())["benchmarks"][0]["extra_info"]
    assert first["comparison"]["drift"] == pytest.approx(0.01)  # the default: the history has one session
    db = pytester.path / ".mystique" / "baselines" / "history.sqlite"
    store = HistoryStore(db)
    rows = store.results("vit")
    last = json.loads(rows[-1]["details"])
    assert len(rows) == 2 and last["comparison"]["current_var"] > 0
    # earlier sessions of this machine that moved by 8% from one to the next
    for i in range(12):
        cmp = dict(last["comparison"], ratio=math.exp(0.08 * (-1) ** i))
        store.record(f"earlier-{i}", {"trace": "vit", "file": rows[-1]["file"], "status": "same",
                                      "hardware_key": last["hardware_key"], "comparison": cmp})
    result = pytester.runpytest("--mystique", "traces", *CALM, "--mystique-json=out.json", "-rA")
    cmp = json.loads((pytester.path / "out.json").read_text())["benchmarks"][0]["extra_info"]["comparison"]
    assert cmp["drift"] > 0.04
    assert math.log(cmp["ci_high"] / cmp["ratio"]) > 2 * math.log1p(0.04)
    result.stdout.fnmatch_lines(["*session-to-session drift for this trace is *% (from its last 1? sessions*"])
    # another hardware key's or another baseline's sessions are not this one's evidence
    assert pytester.runpytest("--mystique", "traces", *CALM, "--mystique-update").ret == 0
    pytester.runpytest("--mystique", "traces", *CALM, "--mystique-json=new.json")
    cmp = json.loads((pytester.path / "new.json").read_text())["benchmarks"][0]["extra_info"]["comparison"]
    assert cmp["drift"] == pytest.approx(0.01)


def test_one_run_stays_in_this_process(pytester):
    import yaml

    d = pytester.path / "traces"
    d.mkdir()
    shutil.copyfile(corpus("vit_infer.json.gz"), d / "vit.json.gz")
    roomy = [a for a in FAST if not a.startswith("--mystique-budget")] + ["--mystique-budget=60"]
    pytester.runpytest("--mystique", "traces", *roomy, "--mystique-runs=1").assert_outcomes(passed=1)
    [path] = (pytester.path / ".mystique" / "baselines").rglob("*.yaml")
    assert {s["run"] for s in yaml.safe_load(path.read_text())["segments"]} == {0}
    assert pytester.runpytest("--mystique", "traces", *FAST, "--mystique-runs=0").ret == pytest.ExitCode.USAGE_ERROR


def test_failed_fresh_process_is_reported_and_the_verdict_uses_what_there_is():
    from pytest_mystique.errors import MystiqueError
    from pytest_mystique.replay import Replay
    from pytest_mystique.sampling import sample
    from pytest_mystique.trace import load_trace

    calls = []

    def broken(**kw):
        calls.append(kw)
        raise MystiqueError("worker", "replay worker exited")

    replay = Replay(load_trace(corpus("vit_infer.json.gz")), "cpu")
    base = sample(replay, budget_s=30, segment_iters=10, threads=1, fresh_run=broken, runs=5)
    # planned (3 segments), then the failure: this process samples on, as when it is alone
    assert len(calls) == 1 and base.runs == 1 and len(base.segments) >= 4
    assert "fresh process failed, so this process's run was used alone: worker: replay worker exited" in base.notes[0]
    assert base.looks == []  # nothing to look at without a baseline
    # (the two samples are of the same replay seconds apart: a tolerance the host's own moves stay under)
    cur = sample(replay, budget_s=30, segment_iters=10, threads=1, fresh_run=broken, baseline=base.segments,
                 baseline_signature=base.probe_signature, tolerance=0.4)  # fmt: skip
    assert len(calls) == 2 and cur.runs == 1 and cur.notes
    assert cur.comparison.verdict in ("same", "unsure") and cur.comparison.runs_current == 1
    assert [look["runs"] for look in cur.looks] == [1]  # one look, on this process's run


def test_fresh_runs_are_judged_without_the_planning_run():
    """Three fresh runs (stand-ins that time the same replay here) are what the verdict uses; the
    planning segments of this process are recorded but left out of it."""
    from pytest_mystique.replay import Replay
    from pytest_mystique.sampling import _segment, judged_runs, sample
    from pytest_mystique.trace import load_trace

    replay = Replay(load_trace(corpus("vit_infer.json.gz")), "cpu")

    def here(*, segments, segment_iters, probe):
        return [_segment(replay, segment_iters, probe=probe) for _ in range(segments)]

    base = sample(replay, budget_s=30, segment_iters=10, threads=1, fresh_run=here, runs=3)
    assert sorted({s.run for s in base.segments}) == [0, 1, 2, 3]
    assert [len(r) for r in judged_runs(base.segments, True)] == [sum(s.run == k for s in base.segments)
                                                                   for k in (1, 2, 3)]  # fmt: skip
    cur = sample(replay, budget_s=30, segment_iters=10, threads=1, fresh_run=here, runs=3, baseline=base.segments,
                 baseline_signature=base.probe_signature)  # fmt: skip
    assert cur.comparison.runs_baseline == 3 and cur.comparison.runs_current == cur.runs - 1
    assert [look["runs"] for look in cur.looks] == list(range(1, cur.runs))
    # alpha 0.01 spent over the looks after 1, 2 and 3 runs, O'Brien-Fleming style: the last look
    # tests at more than Bonferroni's share, an earlier one at far less
    last = cur.looks[-1]
    if last["runs"] == 3:
        assert 1 - 2 * 0.01 < cur.comparison.confidence < 1 - 2 * 0.01 / 3
    else:
        assert cur.comparison.confidence > 1 - 2 * 0.01 / 3


def test_first_sessions_on_the_baselines_environment_are_pooled_with_it(pytester):
    """The baseline's session offset averages down with the sessions that followed it on the same
    environment: the history's first sessions that found no change are pooled with the baseline
    (up to REFERENCE_SESSIONS), and those of another environment, or that found a change, are not."""
    import json
    import sqlite3
    from contextlib import closing

    import yaml

    from pytest_mystique.history import REFERENCE_SESSIONS, HistoryStore

    d = pytester.path / "traces"
    d.mkdir()
    shutil.copyfile(corpus("vit_infer.json.gz"), d / "vit.json.gz")
    pytester.runpytest("--mystique", "traces", *CALM).assert_outcomes(passed=1)
    pytester.runpytest("--mystique", "traces", *CALM, "--mystique-json=first.json").assert_outcomes(passed=1)
    first = json.loads((pytester.path / "first.json").read_text())["benchmarks"][0]["extra_info"]["comparison"]
    assert first["reference_sessions"] == 0  # no earlier session of this baseline yet
    store = HistoryStore(pytester.path / ".mystique" / "baselines" / "history.sqlite")
    last = store.results("vit")[-1]
    details = json.loads(last["details"])
    env = yaml.safe_load(next((pytester.path / ".mystique" / "baselines").rglob("*.yaml")).read_text())["environment"]
    cmp = details["comparison"]
    assert json.loads(last["environment"]) == env and cmp["reference_sessions"] == 0
    # That session's own ratio (a real measurement, anywhere within the noise) would be the first of
    # the pooled ones: it is taken out, so that the pooled level is the planted sessions' alone
    with closing(sqlite3.connect(store.path)) as con, con:
        con.execute("DELETE FROM results WHERE id = ?", (last["id"],))

    def plant(tag, ratio, status="same", environment=env):
        # each planted session's own variance is that of a session whose processes agree within 1%, not
        # whatever this test's one-process session measured: the pooled shift depends on the ratio of
        # the sides' variances, and a noisy second session here left the baseline most of the weight
        store.record(tag, {"trace": "vit", "file": last["file"], "status": status, "environment": environment,
                           "hardware_key": details["hardware_key"],
                           "comparison": dict(cmp, ratio=ratio, current_var=1e-4)})  # fmt: skip

    plant("upgrade", math.exp(-0.2), environment=dict(env, torch="9.9"))  # another environment
    plant("changed", math.exp(-0.2), status="faster")  # a session that found a change
    for i in range(REFERENCE_SESSIONS + 3):  # the baseline's session ran 3% fast: later ones sit 3% above it
        plant(f"later-{i}", math.exp(0.03 + 0.002 * (-1) ** i))
    pytester.runpytest("--mystique", "traces", *CALM, "--mystique-json=out.json").assert_outcomes(passed=1)
    pooled = json.loads((pytester.path / "out.json").read_text())["benchmarks"][0]["extra_info"]["comparison"]
    assert pooled["reference_sessions"] == REFERENCE_SESSIONS
    # the reference moved most of the way to the later sessions' level (the mean of the pooled ones: 3.04% with
    # five, of equal weights), and never past it
    level = sum(0.03 + 0.002 * (-1) ** i for i in range(REFERENCE_SESSIONS)) / REFERENCE_SESSIONS
    assert level / 2 < pooled["reference_shift"] <= level + 1e-9
    # the sessions were stored against the baseline alone, so the drift evidence stays comparable
    newest = json.loads(store.results("vit")[-1]["details"])["comparison"]
    assert newest["reference_shift"] == pytest.approx(pooled["reference_shift"])


def test_a_baseline_whose_probe_was_off_raises_no_alarm():
    """A baseline session whose probe ran far slow (a fresh process's probe is now and then far off
    while its replay is not): divided by it alone, today's unchanged replay looks much slower. The
    verdict judges the raw times too, raises no alarm, and the report says why."""
    import dataclasses

    from pytest_mystique.replay import Replay
    from pytest_mystique.sampling import _segment, judged_runs, probe_shift, sample
    from pytest_mystique.stats import PROBE_SHIFT, compare_runs
    from pytest_mystique.trace import load_trace

    replay = Replay(load_trace(corpus("vit_infer.json.gz")), "cpu")

    def here(*, segments, segment_iters, probe):
        return [_segment(replay, segment_iters, probe=probe) for _ in range(segments)]

    # this host's speed moves by 10-30% between samples seconds apart: the planted offset (the probe
    # twice as slow) stays far outside that, and the tolerance of the A/A tests (CALM) absorbs it
    kw = dict(budget_s=6, segment_iters=10, threads=1, fresh_run=here, runs=3, tolerance=0.4)
    base = sample(replay, **kw)
    off = [dataclasses.replace(s, probe_s=[x * 2 for x in s.probe_s]) for s in base.segments]
    cur = sample(replay, **kw, baseline=off, baseline_signature=base.probe_signature)
    cmp = cur.comparison
    # the planted halving, less whatever the host's probe itself moved between the two samples (checked
    # exactly below; that move reached +36% once in CI, so the sum alone is no fixed figure)
    assert cmp.spanned and cmp.probe_shift < -PROBE_SHIFT
    # the interval spans the raw estimate and the normalised one (twice the honest ratio, checked
    # below): its lower end lies at or below the raw one's. No alarm, unless the host itself moved
    # between the two samples so far that the raw times alone are significantly slower (+14% once
    # in CI); then both ends say slower and the rule calls it, as it must to catch a real slowdown
    # beside a host that sped up
    assert cmp.ci_low <= min(cmp.ratio, 1 + cmp.raw_change) * (1 + 1e-9)
    assert cmp.verdict in ("same", "unsure") or cmp.ci_low > 1
    moved = f"the machine-speed probe's time moved {math.expm1(cmp.probe_shift):+.0%}"  # as the comparison measured it
    assert any(moved in n and "spans the raw and the probe-normalised" in n for n in cur.notes)
    # the same current segments against the baseline as it was: the probe's move is the planted one
    # less, and the comparison spans only where the probe itself moved beyond PROBE_SHIFT
    shift = probe_shift(base.segments, cur.segments)
    assert shift - cmp.probe_shift == pytest.approx(math.log(2))
    honest = compare_runs(judged_runs(base.segments, True), judged_runs(cur.segments, True), tolerance=0.4,
                          alpha=0.01, final=True, probe_shift=shift)  # fmt: skip
    # what the division by the corrupted probe alone says: twice the honest ratio
    assert honest.spanned == (abs(shift) > PROBE_SHIFT) and honest.ratio == pytest.approx(cmp.ratio / 2)
