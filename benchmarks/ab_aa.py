"""False alarms and power of ``mystique ab``: identical environments (A/A), and B slowed down.

Runs ``--runs`` comparisons of each bundled trace (or of the traces given) per condition and per
count of worker pairs (``--workers 1 3``: each run starts that many fresh pairs of workers of this
Python, as ``mystique ab --python X --python X --workers K`` does; the counts alternate run by
run, so a slow spell of the host meets them all; 1 unless given, where the command's default is
3). The conditions: A/A, and with ``--slowed 0.05 0.10`` B replaying a copy of the trace in which
ops run twice, chosen so that it runs that much slower alternated with the original in one
process (the slowdown measured so is printed). Per
condition, pairs and trace: the verdicts counted, the scatter of the estimated log ratio B / A
between runs (sd), the median standard error of a run's own rounds (the process noise the
interval adds left out), the mean ratio, and the rounds run. A run's interval counts each worker's
own offset as ``--noise`` (divided among the pairs); where the ratios scatter between runs by more
than that and the sampling error together, the verdicts cry wolf.

    python benchmarks/ab_aa.py [--runs 20] [--budget 6] [--workers 1 3] [--slowed 0.05 0.10] [TRACE ...]
"""

from __future__ import annotations

import argparse
import collections
import math
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from stat_power import slowed_copy  # noqa: E402

from pytest_mystique.ab import ab_trace  # noqa: E402
from pytest_mystique.defaults import DEFAULT_NOISE  # noqa: E402
from pytest_mystique.stats import offset_variance  # noqa: E402
from pytest_mystique.trace import trace_stem  # noqa: E402
from pytest_mystique.worker import start_pairs  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("traces", nargs="*")
    ap.add_argument("--runs", type=int, default=20, help="comparisons per condition, pair count and trace")
    ap.add_argument("--budget", type=float, default=6.0, help="seconds of rounds per comparison")
    ap.add_argument("--noise", type=float, default=DEFAULT_NOISE)
    ap.add_argument("--workers", type=int, nargs="+", default=[1], help="pairs of workers per run, alternated")
    ap.add_argument("--slowed", type=float, nargs="*", default=[], help="slowdowns of B to test besides A/A")
    args = ap.parse_args()
    traces = [Path(t) for t in args.traces] or sorted((ROOT / "traces").glob("*.json.gz"))
    tmp = Path(tempfile.mkdtemp(prefix="ab_power_"))
    conditions: dict[str, dict[str, tuple[Path, float]]] = {"A/A": {trace_stem(t): (t, 0.0) for t in traces}}
    for target in args.slowed:
        copies = {}
        for t in traces:
            out = tmp / f"{target:g}_{t.name}"
            _, (_, got) = slowed_copy(t, out, target)
            copies[trace_stem(t)] = (out, got)
            print(f"# {trace_stem(t)}: a copy {got:+.1%} slower alternated in one process", flush=True)
        conditions[f"+{target:.0%}"] = copies
    rows: dict[tuple[str, int, str], list[dict]] = collections.defaultdict(list)
    for run in range(args.runs):
        for k in args.workers:
            pairs = start_pairs([sys.executable, sys.executable], k, 1)  # pinned as mystique ab pins them
            try:
                for cond, copies in conditions.items():
                    for t in traces:
                        b, _ = copies[trace_stem(t)]
                        r = ab_trace(pairs, t, trace_b=b, budget_s=args.budget, seed=run, process_noise=args.noise)
                        c = r["comparison"]
                        groups = [j for j, n in enumerate(r["pair_rounds"]) for _ in range(n)]
                        # the run's own sampling error, without the offsets' noise its interval counts
                        sampling = math.sqrt(max(c["se"] ** 2 - offset_variance(args.noise, groups), 0.0))
                        rows[(cond, k, trace_stem(t))].append({"status": r["status"], "log": math.log(c["ratio"]),
                                                               "se": sampling, "rounds": r["rounds"]})  # fmt: skip
                        print(f"# run {run + 1}, {k} pair(s), {cond}: {trace_stem(t)}: {r['status']} {c['ratio']:.4f} "
                              f"[{c['ci_low']:.4f}, {c['ci_high']:.4f}] rounds {r['rounds']}", flush=True)  # fmt: skip
            finally:
                for w in (w for pair in pairs for w in pair):
                    w.close()
    print(f"{'condition':9} {'pairs':>5} {'trace':18} {'true':>6} {'runs':>4} {'same':>4} {'unsure':>6} {'slower':>6} "
          f"{'faster':>6} {'sd log':>7} {'med se':>7} {'mean B/A':>8} {'rounds':>6}")  # fmt: skip
    for (cond, k, name), rs in rows.items():
        n = collections.Counter(r["status"] for r in rs)
        logs = [r["log"] for r in rs]
        sd = statistics.stdev(logs) if len(logs) > 1 else math.nan
        true = conditions[cond][name][1]
        print(f"{cond:9} {k:5d} {name:18} {true:+6.1%} {len(rs):4d} {n['same']:4d} {n['unsure']:6d} {n['slower']:6d} "
              f"{n['faster']:6d} {sd:7.2%} {statistics.median(r['se'] for r in rs):7.2%} "
              f"{math.exp(statistics.fmean(logs)):8.3f} {statistics.median(r['rounds'] for r in rs):6.0f}")  # fmt: skip
    for cond in conditions:
        for k in args.workers:
            rs = [r for (c, kk, _), v in rows.items() if c == cond and kk == k for r in v]
            n = collections.Counter(r["status"] for r in rs)
            what = "false alarms" if cond == "A/A" else "caught (slower)"
            hits = n["slower"] + n["faster"] if cond == "A/A" else n["slower"]
            print(f"{cond}, {k} pair(s): {what} {hits}/{len(rs)} ({hits / max(len(rs), 1):.1%}); "
                  f"unsure {n['unsure']}, faster {n['faster']}")  # fmt: skip
    print(f"budget {args.budget:g} s a comparison, noise {args.noise:.1%} a worker")


if __name__ == "__main__":
    main()
