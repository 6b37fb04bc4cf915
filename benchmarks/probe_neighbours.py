"""The machine-speed probe beside busy neighbours: does it measure the machine, or the neighbours?

The probe (pytest_mystique.calibrate) divides every replay's time, so it must move with the
machine's speed and not with whatever else runs there: another pytest-xdist worker preparing its
traces, a compiler, the other side of an A/B run. For each number of processes running the probe
loop at once (1 = alone), the probe's time in milliseconds, median and spread over every run of
every process, with numpy's BLAS held to one thread during the probe (as calibrate does) and,
for comparison, with the BLAS's own pool of a thread per core (``--blas-threads 0``: the probe
before that limit).

    python benchmarks/probe_neighbours.py [--seconds 8] [--procs 1 2 3]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pytest_mystique.report import format_table  # noqa: E402

CHILD = r"""
import sys, time
from pytest_mystique import calibrate
seconds, blas = float(sys.argv[1]), int(sys.argv[2])
if blas == 0:  # the BLAS's own thread pool, as before the one-thread limit
    calibrate._one_blas_thread = lambda: __import__("contextlib").nullcontext()
xs, end = [], time.time() + seconds
while time.time() < end:
    xs.append(calibrate.probe())
    time.sleep(0.002)  # the replay's share of a sampling loop, roughly: the probe runs between iterations
print(" ".join(f"{x:.6g}" for x in xs))
"""


def probe_times(procs: int, seconds: float, blas: int) -> list[float]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    ps = [subprocess.Popen([sys.executable, "-c", CHILD, str(seconds), str(blas)], stdout=subprocess.PIPE,
                           text=True, env=env) for _ in range(procs)]  # fmt: skip
    return [float(x) for p in ps for x in p.communicate()[0].split()]


def quantile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=8.0, help="each process's probe loop")
    ap.add_argument("--procs", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--blas-threads", type=int, nargs="+", default=[1, 0], help="1: as calibrate runs; 0: the pool")
    args = ap.parse_args()
    rows = [["BLAS threads", "processes", "probes", "median ms", "p10 ms", "p90 ms", "max ms", "median / alone"]]
    for blas in args.blas_threads:
        alone = None
        for procs in args.procs:
            xs = probe_times(procs, args.seconds, blas)
            med = quantile(xs, 0.5)
            alone = alone or med
            rows.append(["1" if blas else "pool", str(procs), str(len(xs)), f"{med * 1e3:.2f}",
                         f"{quantile(xs, 0.1) * 1e3:.2f}", f"{quantile(xs, 0.9) * 1e3:.2f}",
                         f"{max(xs) * 1e3:.2f}", f"{med / alone:.2f}"])  # fmt: skip
    print(f"{os.cpu_count()} CPUs")
    print("\n".join(format_table(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
