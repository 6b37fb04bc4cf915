"""False alarms of ``mystique ab`` when both sides are the same environment (A/A).

Runs ``--runs`` A/A comparisons of the bundled traces (or the traces given), each with a fresh
pair of workers of this Python, as ``mystique ab --python X --python X`` does, and prints per
trace: the verdicts counted, the scatter of the estimated B / A ratio between runs (sd of its
log), the median standard error of a run's own rounds (the noise it adds left out), the largest
|log ratio|, and the rounds run.
A run's interval counts each worker's own offset as ``--noise``; where the ratios scatter between
runs by more than that and the sampling error together, the verdicts cry wolf.

    python benchmarks/ab_aa.py [--runs 20] [--budget 6] [TRACE ...]
"""

from __future__ import annotations

import argparse
import collections
import math
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pytest_mystique.ab import ab_trace  # noqa: E402
from pytest_mystique.defaults import DEFAULT_NOISE  # noqa: E402
from pytest_mystique.worker import Worker  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("traces", nargs="*")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--budget", type=float, default=6.0)
    ap.add_argument("--noise", type=float, default=DEFAULT_NOISE)
    args = ap.parse_args()
    traces = args.traces or sorted(str(p) for p in (ROOT / "traces").glob("*.json.gz"))
    rows: dict[str, list[dict]] = collections.defaultdict(list)
    for run in range(args.runs):
        workers = [Worker(sys.executable, 1) for _ in range(2)]
        try:
            for t in traces:
                r = ab_trace(workers, t, budget_s=args.budget, seed=run, process_noise=args.noise)
                c = r["comparison"]
                sampling = math.sqrt(max(c["se"] ** 2 - 2 * math.log1p(args.noise) ** 2, 0.0))  # without the noise counted
                rows[r["trace"]].append({"status": r["status"], "log": math.log(c["ratio"]), "se": sampling,
                                         "rounds": r["rounds"]})  # fmt: skip
                print(f"# run {run + 1}: {r['trace']}: {r['status']} {c['ratio']:.4f} "
                      f"[{c['ci_low']:.4f}, {c['ci_high']:.4f}] rounds {r['rounds']}", flush=True)  # fmt: skip
        finally:
            for w in workers:
                w.close()
    head = f"{'trace':24} {'runs':>4} {'same':>4} {'unsure':>6} {'slower':>6} {'faster':>6} " \
           f"{'sd log':>7} {'med se':>7} {'max |log|':>9} {'rounds':>6}"  # fmt: skip
    print(head)
    alarms = total = 0
    for name, rs in rows.items():
        n = collections.Counter(r["status"] for r in rs)
        logs = [r["log"] for r in rs]
        sd = statistics.stdev(logs) if len(logs) > 1 else math.nan
        alarms += n["slower"] + n["faster"]
        total += len(rs)
        print(f"{name:24} {len(rs):4d} {n['same']:4d} {n['unsure']:6d} {n['slower']:6d} {n['faster']:6d} "
              f"{sd:7.2%} {statistics.median(r['se'] for r in rs):7.2%} {max(map(abs, logs)):9.2%} "
              f"{statistics.median(r['rounds'] for r in rs):6.0f}")  # fmt: skip
    print(f"false alarms: {alarms}/{total} A/A comparisons ({alarms / max(total, 1):.1%}), budget {args.budget:g} s, "
          f"noise {args.noise:.1%}")  # fmt: skip


if __name__ == "__main__":
    main()
