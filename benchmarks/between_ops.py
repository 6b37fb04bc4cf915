"""What the original's Python between its operators does to the operators' own time.

A model's inference step runs module code between its operators (attribute lookups, argument
checks, hooks); its replay calls the operators back to back. The profiler's time *inside*
operators should not see that difference, yet small steps' replays run their operators a few
percent faster than their originals. This script tests whether that is the work between them: for
each model (built as ``model_zoo.py`` builds it), alternated profiled calls of the original step,
the replay's timed iteration, and the replay's instrumented loop with a fixed amount of Python
work after every operator (``N`` dictionary lookups, nothing torch sees), and the time inside
operators of each, relative to the original's. The work between operators is measured here only:
a replay never does it (what it times is the operators' calls).

    python benchmarks/between_ops.py [--calls 12] [--lookups 0 50 200 800] [--steps infer|train] [MODEL ...]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import warnings
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import model_zoo  # noqa: E402

from pytest_mystique.measure import inside_operators, steady_allocator  # noqa: E402
from pytest_mystique.recorder import capture_step  # noqa: E402
from pytest_mystique.replay import Replay  # noqa: E402
from pytest_mystique.report import format_table  # noqa: E402
from pytest_mystique.trace import load_trace  # noqa: E402

TABLE = {i: str(i) for i in range(1 << 15)}


def python_work(n: int):
    """An ``after_step`` that makes ``n`` dictionary lookups: Python that torch never sees."""
    keys = list(range(0, len(TABLE), max(1, len(TABLE) // max(n, 1))))[:n]

    def after(step, result):
        for k in keys:
            TABLE[k]

    return after


def looped(replay, after):
    """The replay's instrumented loop, ``after`` called after every operator."""

    def loop():
        with torch.no_grad():
            replay.run(after)

    return loop


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", default=["t5", "bart", "gpt_neox", "swin", "whisper"])
    ap.add_argument("--calls", type=int, default=12, help="profiled calls of each side")
    ap.add_argument("--lookups", type=int, nargs="+", default=[0, 50, 200, 800])
    ap.add_argument("--steps", choices=("infer", "train"), default="infer")
    args = ap.parse_args()
    import transformers

    model_zoo.tf = transformers
    transformers.logging.set_verbosity_error()
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    steady_allocator()
    tmp = Path(tempfile.mkdtemp(prefix="between_ops."))
    head = ["trace", "ops", "original ms", "replay"] + [f"+{n} lookups" for n in args.lookups]
    rows = [head]
    for name in args.models:
        step = model_zoo.make(name, args.steps == "train")
        path = tmp / f"{name}.json.gz"
        capture_step(step, path, warmup=2, runs=1, min_warmup_s=0)
        replay = Replay(load_trace(path), "cpu").prepare()

        def timed(replay=replay):
            with torch.no_grad():
                replay.run()

        sides = [("original", step, None), ("replay", timed, replay.between_iterations)]
        for n in args.lookups:
            sides.append((n, looped(replay, python_work(n)), replay.between_iterations))
        got: dict = {label: [] for label, _, _ in sides}
        for _ in range(args.calls):
            for label, fn, before in sides:
                got[label].append(inside_operators(fn, calls=1, between=before).ops_s)
        orig = statistics.median(got["original"])
        rows.append([f"{name}_{args.steps}", str(replay.report.ops_total), f"{orig * 1e3:.2f}"]
                    + [f"{statistics.median(got[label]) / orig:.3f}" for label, _, _ in sides[1:]])  # fmt: skip
        print(f"{name}: done", file=sys.stderr, flush=True)
    print("\n".join(format_table(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
