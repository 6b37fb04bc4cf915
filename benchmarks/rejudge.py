"""Judge the sessions of a stat_power run again, offline, under other settings of the noise model.

Every comparison the plugin makes stores the judged runs' segment levels in the history
(``details.run_levels``), and every new baseline stores its own. This script reads a history
database written by ``benchmarks/stat_power.py --keep DIR`` (``DIR/baselines/history.sqlite``) and
replays the verdicts in order: for each trace, the baseline in force, the sessions pooled with it
(:func:`pytest_mystique.history.reference_sessions`), the session drift learnt from the sessions before, and the looks of
the sequential test after 1, 2, 4, ... runs, as the plugin does (the runs its budget allowed are
not stored: the recorded count, at least 4, stands for them). The first row re-judges with the
settings the run used; it must reproduce the recorded verdicts (printed as a check) before the
other rows mean anything. A session's condition (A/A, +5%, ...) is told by its trace's number of
ops, read from the work directory's copies (``DIR/c0``, ``DIR/c1``, ... in the order of
``DIR/conditions.json``).

    python benchmarks/rejudge.py /tmp/sp/baselines/history.sqlite
"""

from __future__ import annotations

import argparse
import collections
import json
import sqlite3
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pytest_mystique import stats  # noqa: E402
from pytest_mystique.defaults import DEFAULT_ALPHA, DEFAULT_DRIFT, DEFAULT_NOISE  # noqa: E402
from pytest_mystique.history import reference_sessions  # noqa: E402
from pytest_mystique.sampling import look_points  # noqa: E402

#: name -> (process noise prior, its weight in runs, drift prior)
MODELS = {
    "as run": (DEFAULT_NOISE, stats.PRIOR_DF, DEFAULT_DRIFT),
    "process prior 1.5%": (0.015, stats.PRIOR_DF, DEFAULT_DRIFT),
    "process prior worth 5 runs": (DEFAULT_NOISE, 5, DEFAULT_DRIFT),
    "drift prior 0.5%": (DEFAULT_NOISE, stats.PRIOR_DF, 0.005),
    "no drift term": (DEFAULT_NOISE, stats.PRIOR_DF, 0.0),
    "process 1%, drift 0.5%": (0.01, stats.PRIOR_DF, 0.005),
}


def load(db: str) -> list[tuple[str, str, int, list, str]]:
    """(trace, status, ops, run levels, the run's environment as stored) per result with levels."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    out = []
    query = ("SELECT r.trace, r.status, r.ops_total, r.details, runs.environment FROM results r "
             "JOIN runs ON runs.id = r.run_id ORDER BY r.id")  # fmt: skip
    for trace, status, ops, details, env in con.execute(query):
        levels = json.loads(details or "{}").get("run_levels")
        if levels:
            out.append((trace, status, ops, levels, env))
    con.close()
    return out


def judge(rows, noise: float, prior_df: int, drift_prior: float) -> list[str | None]:
    """Each row's verdict under the model (None for a baseline's own row)."""
    saved, stats.PRIOR_DF = stats.PRIOR_DF, prior_df
    try:
        base: dict[str, tuple[list, dict | None]] = {}  # the baseline's run levels and environment
        # since the baseline: (log ratio, own variance, the run's row, verdict), as history.earlier_sessions finds them
        seen: dict[str, list] = collections.defaultdict(list)
        verdicts = []
        for trace, status, _ops, levels, env in rows:
            if status in ("new", "updated"):
                base[trace], seen[trace] = (levels, json.loads(env or "null")), []
                verdicts.append(None)
                continue
            if trace not in base:
                verdicts.append(None)
                continue
            earlier = seen[trace]
            base_levels, base_env = base[trace]
            drift, _ = stats.session_drift([(r, v) for r, v, _, _ in earlier], drift_prior)
            reference = reference_sessions(earlier, base_env)
            kw = dict(process_noise=noise, drift=drift, reference=reference)
            most = max(len(levels), 4)
            spending, verdict = stats.Spending(DEFAULT_ALPHA), "undecided"
            for k in range(1, len(levels) + 1):
                final = k == len(levels)
                if final or k in look_points(most, first=1):
                    cmp = stats.compare_runs(base_levels, levels[:k], alpha=spending.at(k / most, final), final=final, **kw)
                    verdict = cmp.verdict
                    if verdict != "undecided":
                        break
            earlier.append((cmp.baseline_log_ratio, cmp.current_var, {"environment": env}, verdict))
            verdicts.append(verdict)
        return verdicts
    finally:
        stats.PRIOR_DF = saved


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("history", help="history.sqlite of a stat_power --keep run")
    args = ap.parse_args()
    rows = load(args.history)
    by_ops = conditions(Path(args.history).resolve().parents[1])

    def condition(trace, ops):
        return by_ops.get((trace, ops), f"{ops} ops")

    conds = [condition(t, o) for t, _, o, _, _ in rows]
    recorded = [None if s in ("new", "updated") else s for _, s, _, _, _ in rows]
    judged = {c for c, r in zip(conds, recorded) if r is not None}
    names = [c for c in dict.fromkeys(by_ops.values()) if c in judged] + sorted(judged - set(by_ops.values()))
    print("model | " + " | ".join(f"{c}: slower / same / faster / unsure" for c in names))
    print(" | ".join(["recorded"] + [counts(conds, recorded, c) for c in names]))
    for name, model in MODELS.items():
        verdicts = judge(rows, *model)
        print(" | ".join([name] + [counts(conds, verdicts, c) for c in names]))
        if name == "as run":
            same = sum(v == r for v, r in zip(verdicts, recorded) if r is not None)
            check = f"{same} of {sum(r is not None for r in recorded)} recorded verdicts reproduced"
    print(f"check: {check}")


def conditions(work: Path) -> dict[tuple[str, int], str]:
    """(trace name, selected ops) -> condition name, from a stat_power work directory."""
    from pytest_mystique.graph import select_ops
    from pytest_mystique.trace import load_trace

    names = list(json.loads((work / "conditions.json").read_text()))
    out = {}
    for i, name in enumerate(names):
        for path in sorted((work / f"c{i}" / "traces").glob("*.json.gz")):
            out[(path.name.split(".")[0], len(select_ops(load_trace(path))))] = name
    return out


def counts(conds, verdicts, cond) -> str:
    vs = [v for c, v in zip(conds, verdicts) if c == cond and v is not None]
    return " / ".join(str(vs.count(k)) for k in ("slower", "same", "faster", "unsure"))


if __name__ == "__main__":
    main()
