"""SIGKILL a running `pytest --mystique` at random moments; check that nothing was lost.

Each trial starts pytest on a few traces sharing one baseline directory and history database,
kills it with SIGKILL after a random delay (while it replays, writes baselines or history), then
checks: every baseline file parses and holds a complete record, no temporary file is left where
readers look, the history database passes SQLite's integrity check, and every result of a run
that completed before is still there. Prints a table; data lost must be 0.

    python benchmarks/kill_trials.py [--trials 50]
"""

from __future__ import annotations

import argparse
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pytest_mystique.baseline import validate  # noqa: E402
from pytest_mystique.history import HistoryStore  # noqa: E402

CMD = ["--mystique", "traces", "--mystique-iters=3", "--mystique-warmup=1", "--mystique-threads=1",
       "--mystique-tolerance=5", "-p", "no:cacheprovider", "-q"]  # fmt: skip


def run_trials(workdir: Path, trace: Path, trials: int = 50, seed: int = 0, traces: int = 3) -> dict:
    rng = random.Random(seed)
    d = workdir / "traces"
    d.mkdir(parents=True, exist_ok=True)
    for i in range(traces):
        shutil.copyfile(trace, d / f"t{i}.json.gz")
    db = workdir / ".mystique" / "baselines" / "history.sqlite"
    # One complete run first: its results must survive every later killed run.
    subprocess.run([sys.executable, "-m", "pytest", *CMD], cwd=workdir, capture_output=True, timeout=600, check=True)
    completed = len(HistoryStore(db).results())
    stats = {"trials": trials, "killed": 0, "unreadable_baselines": 0, "history_ok": 0, "lost_results": 0,
             "completed_results": completed}  # fmt: skip
    for t in range(trials):
        update = ["--mystique-update"] if t % 2 else []  # half the trials rewrite every baseline
        p = subprocess.Popen([sys.executable, "-m", "pytest", *CMD, *update], cwd=workdir,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        time.sleep(rng.uniform(0.5, 6.0))
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
            stats["killed"] += 1
        p.wait()
        for f in (workdir / ".mystique" / "baselines").rglob("*.yaml"):
            try:
                validate(yaml.safe_load(f.read_text()), f)
            except Exception:  # noqa: BLE001 - any failure to read counts
                stats["unreadable_baselines"] += 1
        store = HistoryStore(db)
        if store.check() == "ok":
            stats["history_ok"] += 1
        rows = store.results(limit=100000)
        stats["lost_results"] += max(0, completed - len(rows))
        completed = len(rows)
    return stats


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=50)
    ap.add_argument("--trace", default=str(ROOT / "traces" / "mlp_train.json.gz"))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        s = run_trials(Path(tmp), Path(args.trace), args.trials)
        wall = time.perf_counter() - t0
    print(f"{'trials':>7} {'killed':>7} {'unreadable baselines':>21} {'history ok':>11} {'results lost':>13} {'wall s':>7}")
    print(f"{s['trials']:>7} {s['killed']:>7} {s['unreadable_baselines']:>21} {s['history_ok']:>11} "
          f"{s['lost_results']:>13} {wall:>7.1f}")  # fmt: skip
    print(f"data lost: {s['unreadable_baselines'] + s['lost_results']} (must be 0)")
    return 0 if s["unreadable_baselines"] == 0 and s["lost_results"] == 0 and s["history_ok"] == s["trials"] else 1


if __name__ == "__main__":
    sys.exit(main())
