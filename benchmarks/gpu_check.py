"""The CUDA path on a real GPU: device mapping, CUDA-event timing, memory, coverage.

For every single-rank trace given (default: ../shared/corpus and the bundled traces/), replayed on
one GPU (``--device``, default cuda:0): the devices the trace recorded and the devices the
replay's tensors lie on (a trace of cuda:3, or of the CPU, replays on the chosen GPU); ops
selected / replayed / substituted / skipped and each skip's reason; load and build time; the
replay's median per iteration timed with CUDA events (what the plugin gates on) beside the
wall-clock median of the same iterations with a device synchronisation after each (they should
agree within a few percent: events that missed work, or a synchronisation that is not one, show
here); the replay's peak of held tensor bytes (as benchmarks/fidelity.py counts it on the CPU)
against the trace's peak of live tensor bytes, and the GPU allocator's peak over the timed
iterations (``torch.cuda.max_memory_allocated``: held tensors, rounding, libraries' workspaces);
and, where the trace has an original CPU timing, the GPU/CPU speed-up.
Multi-rank jobs (``--jobs``) run their ranks on the GPUs there are, each in a time limit.

    python benchmarks/gpu_check.py [--device cuda:0] [--iters 20] [--jobs] [--rounds N] [TRACE ...]

(--rounds N: events against the host clock again, in N rounds alternated on the same replay, as
the separate medians of the table are taken minutes apart and a shared machine drifts between
them.)

(--jobs runs the folders of ../shared/corpus/multirank; a lone rank's file of a larger job given as
TRACE is reported as such.)

Without a GPU it says so and ends (exit code 2): nothing here runs on the CPU.
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import sys
import time
import traceback
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pytest_mystique.distributed import DistributedReplay, resolve_job  # noqa: E402
from pytest_mystique.measure import gc_paused, measure, time_replay  # noqa: E402
from pytest_mystique.memory import replay_peak_bytes, trace_peak_bytes  # noqa: E402
from pytest_mystique.report import format_table  # noqa: E402
from pytest_mystique.runner import Options, prepare_file  # noqa: E402
from pytest_mystique.sidecar import load_sidecar  # noqa: E402
from pytest_mystique.trace import tensors_of, trace_stem  # noqa: E402

CORPUS = ROOT.parent / "shared" / "corpus"


def recorded_devices(trace) -> set[str]:
    return {ref.device for n in trace.nodes for ref in tensors_of((*n.inputs, *n.outputs)) if ref.device}


def replay_devices(replay) -> set[str]:
    return {str(t.device) for t in replay.env if isinstance(t, torch.Tensor)} | {
        str(t.device) for _, t in replay.inputs() if isinstance(t, torch.Tensor)}  # fmt: skip


def wall_samples(replay, device: torch.device, iters: int) -> list[float]:
    """The same iterations timed by the host clock, with a device synchronisation after each, and
    Python's collector paused as the events' timing pauses it."""
    out = []
    with gc_paused():
        for _ in range(iters):
            replay.between_iterations()
            torch.cuda.synchronize(device)
            t0 = time.perf_counter()
            replay.run()
            torch.cuda.synchronize(device)
            out.append(time.perf_counter() - t0)
    return out


def alternated(replay, device: torch.device, iters: int, rounds: int) -> list[float]:
    """Events against the host clock in ``rounds`` alternated rounds of ``iters`` iterations each
    way on the same prepared replay (the order flips each round), so that the machine's drift hits
    both alike: the median events / median host clock of each round."""
    out = []
    for r in range(rounds):
        sides = [lambda: time_replay(replay, iters, between=replay.between_iterations), lambda: wall_samples(replay, device, iters)]
        got = [statistics.median(f()) for f in (sides if r % 2 == 0 else sides[::-1])]
        events, wall = got if r % 2 == 0 else got[::-1]
        out.append(events / wall)
    return out


def check_trace(path: Path, device: str, iters: int, rounds: int = 0) -> dict:
    replay, load_s = prepare_file(path, Options(device=device))
    if isinstance(replay, DistributedReplay):  # (a lone rank's file of a job of several ranks)
        raise ValueError(f"a job of {replay.world_size} ranks: give its folder with --jobs")
    dev = replay.device
    base = torch.cuda.memory_allocated(dev)
    m = measure(replay, iters=iters)
    held = replay_peak_bytes(replay)
    torch.cuda.reset_peak_memory_stats(dev)  # (the timed iterations' peak, not the build's)
    wall = wall_samples(replay, dev, iters)
    rep = replay.report
    side = load_sidecar(path)
    row = {
        "name": trace_stem(path), "recorded": ",".join(sorted(recorded_devices(replay.trace))) or "-",
        "replayed on": ",".join(sorted(replay_devices(replay))) or "-",
        "sel": rep.ops_total, "repl": rep.ops_replayed, "subst": sum(rep.substitutions.values()), "skip": rep.ops_skipped,
        "load s": f"{load_s:.2f}", "build s": f"{m.setup_s - replay.probe_s - replay.free_s:.2f}",
        "probe s": f"{replay.probe_s:.2f}",
        "event ms": f"{statistics.median(m.samples_s) * 1e3:.3f}", "wall ms": f"{statistics.median(wall) * 1e3:.3f}",
        "event/wall": f"{statistics.median(m.samples_s) / statistics.median(wall):.3f}",
        "held MiB": f"{held / 2**20:.1f}", "trace MiB": f"{trace_peak_bytes(replay.trace) / 2**20:.1f}",
        "allocator MiB": f"{(torch.cuda.max_memory_allocated(dev) - base) / 2**20:.1f}",
        "cpu orig ms": f"{side['original_median_s'] * 1e3:.2f}" if side else "-",
        "speed-up": f"{side['original_median_s'] / statistics.median(m.samples_s):.1f}x" if side else "-",
    }  # fmt: skip
    row["_skips"] = [f"skipped {n}x {op}: {why}" for (op, why), n in rep.skipped.most_common()]
    row["_subs"] = [f"substituted {n}x {op} -> {sub}" for (op, sub), n in rep.substitutions.most_common()]
    row["_notes"] = [f"note {n}x {text}" for text, n in rep.notes.most_common()]
    if rounds:
        ratios = alternated(replay, dev, iters, rounds)
        row["_notes"].append(f"events / host clock in {rounds} alternated rounds: {', '.join(f'{x:.3f}' for x in ratios)}")
    del replay
    torch.cuda.empty_cache()
    return row


def _job(path: str, device: str, iters: int, queue) -> None:
    try:
        first, ranks, job = resolve_job(Path(path))
        replay, _ = prepare_file(first, Options(device=device), ranks=ranks, name=job)
        m = measure(replay, iters=iters)
        rep = replay.report
        queue.put(f"{Path(path).name}: {replay.world_size} ranks on {torch.cuda.device_count()} GPU(s): "
                  f"{rep.ops_replayed}/{rep.ops_total} ops replayed, {rep.ops_skipped} skipped "
                  f"{[f'{op}: {why}' for (op, why), _ in rep.skipped.most_common(3)]}, "
                  f"median {statistics.median(m.samples_s) * 1e3:.3f} ms")  # fmt: skip
        close = getattr(replay, "close", None)
        if close:
            close()
    except Exception as e:  # noqa: BLE001 - the check reports whatever a job does
        queue.put(f"{Path(path).name}: {type(e).__name__}: {str(e)[:400]}")


def check_job(path: Path, device: str, iters: int, limit_s: float) -> str:
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    p = ctx.Process(target=_job, args=(str(path), device, iters, queue))
    t0 = time.perf_counter()
    p.start()
    p.join(limit_s)
    if p.is_alive():
        p.kill()
        p.join()
        return f"{path.name}: no answer within {limit_s:g} s (killed)"
    took = time.perf_counter() - t0
    return (queue.get() if not queue.empty() else f"{path.name}: exited {p.exitcode} without an answer") + \
        f" [{took:.0f} s]"  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("traces", nargs="*")
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--jobs", action="store_true", help="also the corpus's multi-rank jobs")
    ap.add_argument("--job-limit", type=float, default=120.0, help="seconds per multi-rank job")
    ap.add_argument("--rounds", type=int, default=0,
                    help="then set events against the host clock in this many alternated rounds per trace")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to check (this script needs a GPU)")
        return 2
    print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, {torch.cuda.device_count()} GPU(s): "
          f"{torch.cuda.get_device_name(0)}")  # fmt: skip
    paths = [Path(p) for p in args.traces] or sorted(CORPUS.glob("*.json.gz")) + sorted((ROOT / "traces").glob("*.json.gz"))
    paths = [p for p in paths if not p.is_dir()]
    rows = []
    for path in paths:
        try:
            rows.append(check_trace(path, args.device, args.iters, args.rounds))
        except Exception as e:  # noqa: BLE001 - one trace's failure is reported, the others go on
            print(f"# {path.name}: FAILED {type(e).__name__}: {e}")
            traceback.print_exc(limit=4)
    head = [k for k in (rows[0] if rows else {}) if not k.startswith("_")]
    print("\n".join(format_table([head] + [[str(r[k]) for k in head] for r in rows])))
    for r in rows:
        for line in r["_skips"] + r["_subs"] + r["_notes"]:
            print(f"# {r['name']}: {line}")
    sel, repl = sum(r["sel"] for r in rows), sum(r["repl"] for r in rows)
    print(f"coverage on {args.device}: {repl}/{sel} selected ops replayed; traces that failed: {len(paths) - len(rows)}")
    if args.jobs:
        jobs = CORPUS / "multirank"
        for job in sorted(p for p in jobs.iterdir() if p.is_dir()) if jobs.is_dir() else ():
            print(check_job(job, args.device, 5, args.job_limit), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
