"""How long `pytest --mystique --collect-only` takes over many trace files.

Makes N copies of a real trace (default 1,000, the bundled traces in turn) in a temporary
directory, plus a few non-trace JSON files, then times the whole pytest process (start-up
included) collecting them. Prints a table; target: <= 2 s for 1,000 traces.

    python benchmarks/collect_speed.py [--n 1000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, nargs="+", default=[100, 1000])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    sources = sorted((ROOT / "traces").glob("*.json.gz"))
    if not sources:
        print("no bundled traces: run python scripts/make_traces.py first", file=sys.stderr)
        return 1
    rows = []
    # This venv also has the test tools; hypothesis's pytest plugin alone costs about a second of
    # start-up, so the figure is printed with and without it (a user's CI may not have it).
    variants = [("all installed plugins", []), ("without hypothesis plugin", ["-p", "no:hypothesispytest"])]
    for (label, extra), n in [(v, n) for v in variants for n in args.n]:
        with tempfile.TemporaryDirectory() as tmp:
            d = Path(tmp) / "traces"
            for i in range(n):
                sub = d / f"g{i // 100:03d}"
                sub.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(sources[i % len(sources)], sub / f"t{i:05d}.json.gz")
            for i in range(10):
                (d / f"not_a_trace_{i}.json").write_text('{"name": "x"}')
            cmd = [sys.executable, "-m", "pytest", "--mystique", "--collect-only", "-q", "-p", "no:cacheprovider",
                   *extra, str(d)]  # fmt: skip
            times = []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                out = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True)
                times.append(time.perf_counter() - t0)
                collected = sum(1 for line in out.stdout.splitlines() if "::" in line)
                if collected != n:
                    print(out.stdout[-2000:], out.stderr[-2000:], file=sys.stderr)
                    raise SystemExit(f"expected {n} items, collected {collected}")
            base_cmd = [sys.executable, "-m", "pytest", "--version"]
            t0 = time.perf_counter()
            subprocess.run(base_cmd, capture_output=True)
            startup = time.perf_counter() - t0
            rows.append((label, n, collected, statistics.median(times), min(times), startup))
    print(f"{'plugins':<26} {'traces':>7} {'collected':>10} {'median s':>9} {'min s':>7} {'pytest --version s':>19}")
    for label, n, c, med, mn, st in rows:
        print(f"{label:<26} {n:>7} {c:>10} {med:>9.3f} {mn:>7.3f} {st:>19.3f}")
    for label, n, _, med, _, _ in rows:
        if n == 1000:
            print(f"collect-only over 1,000 traces ({label}): {med:.3f} s, target <= 2 s: {'OK' if med <= 2 else 'MISSED'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
