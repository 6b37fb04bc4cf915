"""Replay fidelity, coverage, memory and engine speed on real traces.

For every trace in ../shared/corpus (and the bundled traces/ with --bundled), on the CPU with one
thread: ops selected / replayed / substituted / skipped, load time, setup time (build: planning,
binding and making the input tensors; probe: the ops' own first call, which finds the ops that
cannot run), the replay's peak of
held tensor bytes against the trace's peak of live tensor bytes, replay median, the original
step's median (from the .meta.json sidecar, where the trace has one) and their ratio. The last
lines give the geomean of |ratio - 1| and the coverage.

    python benchmarks/fidelity.py [--bundled] [--iters 15] [TRACE ...]
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pytest_mystique.measure import measure  # noqa: E402
from pytest_mystique.memory import replay_peak_bytes, trace_peak_bytes  # noqa: E402
from pytest_mystique.replay import Replay  # noqa: E402
from pytest_mystique.sidecar import load_sidecar  # noqa: E402
from pytest_mystique.trace import load_trace, trace_stem  # noqa: E402

CORPUS = ROOT.parent / "shared" / "corpus"


def mib(n: int) -> str:
    return f"{n / 2**20:.1f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("traces", nargs="*")
    ap.add_argument("--bundled", action="store_true", help="also the bundled traces/")
    ap.add_argument("--iters", type=int, default=15)
    ap.add_argument("--slow-iters", type=int, default=3, help="iterations for traces without an original timing")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    paths = [Path(p) for p in args.traces] or sorted(CORPUS.rglob("*.json.gz"))
    if args.bundled:
        paths += sorted((ROOT / "traces").glob("*.json.gz"))
    torch.set_num_threads(args.threads)
    head = ["trace", "sel", "repl", "subst", "skip", "load s", "build s", "probe s", "peak MiB", "trace MiB", "mem x",
            "replay ms", "orig ms", "ratio"]  # fmt: skip
    rows, errors, sel_total, rep_total = [], [], 0, 0
    for path in paths:
        t0 = time.perf_counter()
        trace = load_trace(path)
        load_s = time.perf_counter() - t0
        side = load_sidecar(path)
        orig = side.get("original_median_s") if side else None
        replay = Replay(trace, "cpu")
        m = measure(replay, iters=args.iters if orig else args.slow_iters, warmup=3 if orig else 1,
                    threads=args.threads, min_warmup_s=0.3 if orig else 0.0)  # fmt: skip
        rep = replay.report
        peak, tpeak = replay_peak_bytes(replay), trace_peak_bytes(trace)
        med = statistics.median(m.samples_s)
        ratio = med / orig if orig else None
        if ratio:
            errors.append(abs(ratio - 1))
        sel_total += rep.ops_total
        rep_total += rep.ops_replayed
        rows.append([
            trace_stem(path), rep.ops_total, rep.ops_replayed, sum(rep.substitutions.values()), rep.ops_skipped,
            f"{load_s:.2f}", f"{m.setup_s - replay.probe_s:.2f}", f"{replay.probe_s:.2f}", mib(peak), mib(tpeak), f"{peak / tpeak:.2f}" if tpeak else "-",
            f"{med * 1e3:.2f}", f"{orig * 1e3:.2f}" if orig else "-", f"{ratio:.3f}" if ratio else "-",
        ])  # fmt: skip
        for (op, why), n in rep.skipped.most_common():
            print(f"# {trace_stem(path)}: skipped {n}x {op}: {why}", file=sys.stderr)
        for (op, sub), n in rep.substitutions.most_common():
            print(f"# {trace_stem(path)}: substituted {n}x {op} -> {sub}", file=sys.stderr)
        del replay
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head))]
    for r in [head, *rows]:
        print("  ".join(str(c).rjust(w) if i else str(c).ljust(w) for i, (c, w) in enumerate(zip(r, widths))))
    if errors:
        geo = math.exp(statistics.mean(math.log(max(e, 1e-6)) for e in errors))
        worst = max(errors)
        print(f"fidelity: geomean |ratio-1| = {geo * 100:.1f}% over {len(errors)} timed traces, worst {worst * 100:.1f}%")
    print(f"coverage: {rep_total}/{sel_total} selected ops replayed ({rep_total / max(sel_total, 1) * 100:.1f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
