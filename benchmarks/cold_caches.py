"""What the engine's code costs right after an op that streamed a large tensor, on this host.

A replay's build (``Replay.prepare``) calls each op once and does its own bookkeeping between the
calls: the arguments of the next op, the checks of the last one's outputs, the bindings. The build's
figure (setup less the ops' calls and the freeing of their outputs) counts that bookkeeping only.
But right after an op that read or wrote tens of megabytes the host's caches hold that op's data,
not the engine's code and objects, and the first calls after it run many times slower. This
script measures both sides of that:

  * a probe of two tiny torch calls (``torch.empty(1)`` and a 16-element sum), timed after
    nothing, after a small op, and after an op over ``--mib`` MiB that writes in place, writes into
    a kept output, or allocates and frees its output. Where the in-place op slows the probe as much
    as the allocating one, the cost is the caches', not the allocator's;
  * a trace (default: the corpus's DDP ResNet, target 4 of issue 3) loaded, planned alone (the
    build's first pass, pure Python that no op's memory touches), then built on the
    ``meta`` device (ops that touch no memory: the engine's bookkeeping alone) and on the CPU, with
    the count of its selected ops whose outputs reach 4 MiB together, and the CPU build's extra time per such op.
  * the machine-speed probe's time (the plugin's, :mod:`pytest_mystique.calibrate`), which says how
    fast the host ran then: these figures follow a shared host's speed from one session to the next.

    python benchmarks/cold_caches.py [--mib 32] [--reps 30] [--trace NAME | --no-trace]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pytest_mystique.calibrate import probe  # noqa: E402
from pytest_mystique.graph import select_ops  # noqa: E402
from pytest_mystique.measure import gc_paused  # noqa: E402
from pytest_mystique.replay import Replay  # noqa: E402
from pytest_mystique.report import format_table  # noqa: E402
from pytest_mystique.trace import load_trace, tensors_of  # noqa: E402

CORPUS = ROOT.parent / "shared" / "corpus"
BIG = 4 << 20  # an output of at least this many bytes empties a good part of a 2-core host's caches


def probe_after(before, reps: int) -> float:
    """Median seconds of two tiny torch calls made right after ``before()``."""
    small = torch.randn(16)
    samples = []
    for _ in range(reps):
        before()
        t0 = time.perf_counter()
        torch.empty(1)
        small.sum()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def after_big_ops(mib: int, reps: int) -> list[list[str]]:
    x = torch.randn(mib * (1 << 20) // 4)
    kept = torch.empty_like(x)
    small = torch.randn(16)

    def allocate_and_free():
        y = x * 1.0000001
        del y

    cases = [("nothing", lambda: None), ("a 16-element op", lambda: small * 2),
             (f"in place over {mib} MiB", lambda: x.mul_(1.0000001)),
             (f"into a kept {mib} MiB output", lambda: torch.mul(x, 1.0000001, out=kept)),
             (f"allocating and freeing {mib} MiB", allocate_and_free)]  # fmt: skip
    base = None
    rows = []
    for name, before in cases:
        t = probe_after(before, reps)
        base = base or t
        rows.append([name, f"{t * 1e6:.1f}", f"{t / base:.1f}x"])
    return rows


def build_s(trace, device: str) -> tuple[float, float]:
    """The build (setup less the ops' calls and frees) and the ops' calls, in seconds."""
    replay = Replay(trace, device)
    t0 = time.perf_counter()
    replay.prepare()
    setup = time.perf_counter() - t0
    built = setup - replay.probe_s - replay.free_s
    probe = replay.probe_s
    del replay
    gc.collect()
    return built, probe


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, default=32)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--trace", default="param_resnet_ddp_1gpu")
    ap.add_argument("--no-trace", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)
    head = ["probe (2 tiny calls) after", "median us", "vs after nothing"]
    print("\n".join(format_table([head, *after_big_ops(args.mib, args.reps)])))
    if args.no_trace:
        return 0
    path = CORPUS / f"{args.trace}.json.gz"
    t0 = time.perf_counter()
    trace = load_trace(path)
    load = time.perf_counter() - t0
    big = sum(1 for n in select_ops(trace) if sum(r.numel * r.itemsize for r in tensors_of(n.outputs)) >= BIG)
    planning = Replay(trace, "meta")
    t0 = time.perf_counter()
    with gc_paused():  # (as Replay.prepare plans)
        planning._plan()
    plan = time.perf_counter() - t0
    del planning
    meta, _ = build_s(trace, "meta")
    cpu, cpu_ops = build_s(trace, "cpu")
    print()
    host = statistics.median(probe() for _ in range(200)) * 1e3
    print("\n".join(format_table([
        ["trace", "load s", "plan s", "build meta s", "build cpu s", "ops' calls cpu s", "ops with outputs >= 4 MiB",
         "(cpu - meta) per such op us", "load + build cpu s", "host probe ms"],
        [args.trace, f"{load:.2f}", f"{plan:.2f}", f"{meta:.2f}", f"{cpu:.2f}", f"{cpu_ops:.1f}", str(big),
         f"{(cpu - meta) / max(big, 1) * 1e6:.0f}", f"{load + cpu:.2f}", f"{host:.3f}"]])))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
