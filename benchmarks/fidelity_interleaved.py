"""Replay fidelity measured against the live original, interleaved in one process.

On a shared host the machine's speed drifts by tens of percent over minutes, so a replay timed
now and an original timed at capture time differ by the drift as much as by the replay's error.
For the bundled traces the original step can be rebuilt (scripts/make_traces.py), so this script
alternates blocks of original steps and replay iterations in the same process and compares the
medians of all blocks: drift hits both sides alike.

    python benchmarks/fidelity_interleaved.py [--rounds 15] [--block 5] [NAME ...]
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
sys.path.insert(0, str(ROOT / "scripts"))

import make_traces  # noqa: E402

from pytest_mystique.replay import Replay  # noqa: E402
from pytest_mystique.trace import load_trace  # noqa: E402


def block(fn, n: int, before=None) -> list[float]:
    out = []
    for _ in range(n):
        if before is not None:
            before()  # untimed, as in the plugin
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", default=list(make_traces.MODELS))
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--block", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(1)
    print(f"{'trace':<20} {'ops':>5} {'original ms':>12} {'replay ms':>10} {'ratio':>7} {'block ratio IQR':>16}")
    errors = []
    for name in args.names:
        torch.manual_seed(0)
        step, _ = make_traces.MODELS[name]()
        replay = Replay(load_trace(ROOT / "traces" / f"{name}.json.gz"), "cpu").prepare()

        def run_replay(replay=replay):
            with torch.no_grad():
                replay.run()

        resets = {run_replay: replay.reset_state, step: None}

        block(step, 5)
        block(run_replay, 5, replay.reset_state)
        orig, rep, ratios = [], [], []
        for r in range(args.rounds):
            first, second = (step, run_replay) if r % 2 == 0 else (run_replay, step)
            a, b = block(first, args.block, resets[first]), block(second, args.block, resets[second])
            o, p = (a, b) if r % 2 == 0 else (b, a)
            orig += o
            rep += p
            ratios.append(statistics.median(p) / statistics.median(o))
        ratio = statistics.median(rep) / statistics.median(orig)
        errors.append(abs(ratio - 1))
        q = statistics.quantiles(ratios, n=4)
        print(f"{name:<20} {replay.report.ops_replayed:>5} {statistics.median(orig) * 1e3:>12.2f} "
              f"{statistics.median(rep) * 1e3:>10.2f} {ratio:>7.3f} {q[0]:>7.3f}-{q[2]:<7.3f}")  # fmt: skip
    geo = math.exp(statistics.mean(math.log(max(e, 1e-6)) for e in errors))
    print(f"interleaved fidelity: geomean |ratio-1| = {geo * 100:.1f}%, worst {max(errors) * 100:.1f}%, "
          f"within 5%: {sum(e <= 0.05 for e in errors)}/{len(errors)}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
