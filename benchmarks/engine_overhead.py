"""The replay engine's own cost per op, against a bare loop calling the same pre-bound ops.

For each trace: one iteration is recorded (every op's concrete arguments and result). Then
  * bare loop:  for fn, args, kwargs in calls: fn(*args, **kwargs)
  * engine:     Replay.run() (the steps as straight-line code: binds outputs, releases dead tensors)
are timed twice: with the real ops, and with each op replaced by a stub returning its recorded
result, which isolates the Python work around the calls. Target: engine - bare <= 2 us per op.
Also prints load and setup time, and the build: setup less the ops' first calls and the freeing of
their outputs (target for param_resnet_ddp_1gpu: load + build <= 1 s).

    python benchmarks/engine_overhead.py [TRACE ...]
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pytest_mystique.replay import Replay  # noqa: E402
from pytest_mystique.trace import load_trace, trace_stem  # noqa: E402

CORPUS = ROOT.parent / "shared" / "corpus"
DEFAULT = ["vit_infer", "distilbert_train", "llama_train"]


def timed(fn, reps: int, before=None) -> float:
    samples = []
    for _ in range(reps):
        if before is not None:
            before()
        t0 = time.perf_counter_ns()
        fn()
        samples.append((time.perf_counter_ns() - t0) / 1e9)
    return statistics.median(samples)


def record(replay: Replay) -> list[tuple]:
    calls = []
    originals = [s.fn for s in replay.steps]
    for step, fn in zip(replay.steps, originals):
        def rec(*a, _fn=fn, **k):
            r = _fn(*a, **k)
            calls.append((_fn, a, k, r))
            return r
        step.fn = rec
    replay.invalidate()  # the timed iteration is code made from the steps' ops: made again
    replay.run()
    for step, fn in zip(replay.steps, originals):
        step.fn = fn
    replay.invalidate()
    return calls


def main() -> int:
    paths = [Path(p) for p in sys.argv[1:]] or [CORPUS / f"{n}.json.gz" for n in DEFAULT]
    torch.set_num_threads(1)
    print(f"{'trace':<22} {'ops':>5} {'load s':>7} {'setup s':>8} {'build s':>8} {'bare ms':>8} {'engine ms':>10} "
          f"{'stub bare ms':>12} {'stub engine ms':>14} {'overhead us/op':>15}")  # fmt: skip
    worst = 0.0
    for path in paths:
        t0 = time.perf_counter()
        trace = load_trace(path)
        load_s = time.perf_counter() - t0
        replay = Replay(trace, "cpu")
        t0 = time.perf_counter()
        with torch.no_grad():
            replay.prepare()
        setup_s = time.perf_counter() - t0
        build_s = setup_s - replay.probe_s - replay.free_s  # the engine's part: not the ops, not freeing their outputs
        n = len(replay.steps)
        with torch.no_grad():
            replay.run()
            calls = record(replay)

            def bare(calls=calls):
                for fn, a, k, _ in calls:
                    fn(*a, **k)

            # (the engine's iterations find the state the measurement gives them: re-seeded every
            # few, so that a training step's parameters do not drift for fifteen optimizer steps)
            real_bare, real_engine = timed(bare, 15), timed(replay.run, 15, replay.between_iterations)
            originals = [s.fn for s in replay.steps]
            stubs = [(lambda *a, _r=r, **k: _r) for _, _, _, r in calls]
            for step, stub in zip(replay.steps, stubs):
                step.fn = stub
            replay.invalidate()
            stub_calls = [(stub, a, k, r) for stub, (_, a, k, r) in zip(stubs, calls)]
            stub_bare = timed(lambda stub_calls=stub_calls: bare(stub_calls), 200)
            stub_engine = timed(replay.run, 200)
            for step, fn in zip(replay.steps, originals):
                step.fn = fn
            replay.invalidate()
        per_op = (stub_engine - stub_bare) / n * 1e6
        worst = max(worst, per_op)
        print(f"{trace_stem(path):<22} {n:>5} {load_s:>7.3f} {setup_s:>8.3f} {build_s:>8.3f} {real_bare * 1e3:>8.2f} "
              f"{real_engine * 1e3:>10.2f} {stub_bare * 1e3:>12.3f} {stub_engine * 1e3:>14.3f} {per_op:>15.2f}")  # fmt: skip
    print(f"engine overhead: at most {worst:.2f} us per op over the bare loop (target <= 2 us)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
