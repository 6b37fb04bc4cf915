"""Replay fidelity, coverage, memory and engine speed on real traces.

For every trace in ../shared/corpus (and the bundled traces/ with --bundled), on the CPU with one
thread: ops selected / replayed / substituted / skipped, load time, setup time (build: planning,
binding and making the input tensors; probe: the ops' own first call, which finds the ops that
cannot run), the replay's peak of
held tensor bytes against the trace's peak of live tensor bytes, what the process's resident
memory grew by at its peak while the trace was loaded, built and measured (Linux; the build calls
every op once, and must not hold more than an iteration does), replay median, the original
step's median (from the .meta.json sidecar, where the trace has one) and their ratio. The last
lines give the geomean of |ratio - 1|, the coverage, and the machine-speed probe's time (the
plugin's, :mod:`pytest_mystique.calibrate`) at the start and the end: a shared host's speed moves
these figures from one session to the next, and the probe says by how much.

    python benchmarks/fidelity.py [--bundled] [--iters 15] [TRACE ...]
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pytest_mystique.calibrate import probe  # noqa: E402
from pytest_mystique.distributed import DistributedReplay, resolve_job  # noqa: E402
from pytest_mystique.measure import allocator_regime, measure, time_iterations  # noqa: E402
from pytest_mystique.memory import replay_peak_bytes, trace_peak_bytes  # noqa: E402
from pytest_mystique.runner import Options, prepare_file  # noqa: E402
from pytest_mystique.sidecar import load_sidecar, unlike  # noqa: E402
from pytest_mystique.trace import trace_stem  # noqa: E402

CORPUS = ROOT.parent / "shared" / "corpus"


def mib(n: int) -> str:
    return f"{n / 2**20:.1f}"


def resident_kib(field: str) -> int | None:
    """This process's ``VmRSS`` or ``VmHWM`` (its peak) in KiB, from /proc (None elsewhere)."""
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))
    except (OSError, StopIteration, ValueError):
        return None


def reset_resident_peak() -> bool:
    """Start ``VmHWM`` again from the current resident size (Linux 4.0+)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("traces", nargs="*")
    ap.add_argument("--bundled", action="store_true", help="also the bundled traces/")
    ap.add_argument("--rounds", type=int, default=8, help="timing rounds, round-robin over the traces")
    ap.add_argument("--iters", type=int, default=8, help="timed iterations per trace per round")
    ap.add_argument("--slow-iters", type=int, default=2, help="iterations for traces without an original timing")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    # the corpus's single traces, and each multi-rank job (a folder of per-rank files) as one entry
    paths = [Path(p) for p in args.traces] or sorted(CORPUS.glob("*.json.gz")) + sorted(
        p for p in (CORPUS / "multirank").iterdir() if p.is_dir())  # fmt: skip
    if args.bundled:
        paths += sorted((ROOT / "traces").glob("*.json.gz"))
    torch.set_num_threads(args.threads)
    host_start = probe_ms()
    entries = []
    # The traces without an original timing are loaded, built, measured and let go first, the
    # timed ones (held for the rounds below) after them: a trace then meets the process as the
    # plugin leaves it between items, with no other replay held. (The DDP ResNet's load took
    # 0.29 s after two held replays and a freed one, 0.18 s after freed ones only.)
    jobs = [resolve_job(path) for path in paths]
    sides = [load_sidecar(first) for first, _, _ in jobs]
    for index in sorted(range(len(paths)), key=lambda i: sides[i] is not None):
        path, (first, ranks, job), side = paths[index], jobs[index], sides[index]
        orig = side if side and side.get("threads", args.threads) == args.threads else None
        before = resident_kib("VmRSS") if reset_resident_peak() else None
        replay, load_s = prepare_file(first, Options(device="cpu", threads=args.threads), ranks=ranks, name=job)
        m = measure(replay, iters=args.slow_iters, warmup=1, threads=args.threads, min_warmup_s=0.0)
        peak_kib = resident_kib("VmHWM")
        multi = isinstance(replay, DistributedReplay)
        e = {"index": index, "name": f"{path.name} ({replay.world_size} ranks)" if multi else trace_stem(path), "replay": replay,
             "load_s": load_s, "setup_s": m.setup_s, "probe_s": replay.probe_s, "free_s": replay.free_s,
             "samples": [] if orig else m.samples_s, "orig": orig,
             "peak": 0 if multi else replay_peak_bytes(replay), "tpeak": 0 if multi else trace_peak_bytes(replay.trace),
             "rss": None if multi or before is None or peak_kib is None else (peak_kib - before) * 1024}  # fmt: skip
        if multi:
            replay.close()
        for note in unlike(orig, threads=args.threads, allocator=allocator_regime()) if orig else ():
            print(f"# {e['name']}: unlike the original: {note}", file=sys.stderr)
        rep = replay.report
        e["counts"] = (rep.ops_total, rep.ops_replayed, sum(rep.substitutions.values()), rep.ops_skipped)
        for (op, why), n in rep.skipped.most_common():
            print(f"# {e['name']}: skipped {n}x {op}: {why}", file=sys.stderr)
        for (op, sub), n in rep.substitutions.most_common():
            print(f"# {e['name']}: substituted {n}x {op} -> {sub}", file=sys.stderr)
        if not orig:
            e["replay"] = None  # release big untimed replays now
        entries.append(e)
    # Machine speed drifts over seconds to minutes on shared hosts: time the traces round-robin
    # so that a slow spell hits all of them, and summarise all rounds together.
    timed = [e for e in entries if e["orig"]]
    with torch.no_grad():
        for _ in range(args.rounds):
            for e in timed:
                e["replay"].run()  # re-warm after the other traces ran
                e["samples"] += time_iterations(e["replay"].run, torch.device("cpu"), args.iters,
                                                between=e["replay"].between_iterations)  # fmt: skip
    head = ["trace", "sel", "repl", "subst", "skip", "load s", "build s", "probe s", "free s", "peak MiB", "trace MiB",
            "mem x", "rss+ MiB", "replay ms", "orig ms", "ratio", "min ms", "orig min", "min ratio"]  # fmt: skip
    rows, errors, min_errors, sel_total, rep_total = [], [], [], 0, 0
    for e in sorted(entries, key=lambda e: e["index"]):
        med, mn = statistics.median(e["samples"]), min(e["samples"])
        o = e["orig"]
        ratio = med / o["original_median_s"] if o else None
        min_ratio = mn / o["original_min_s"] if o and o.get("original_min_s") else None
        if ratio:
            errors.append(abs(ratio - 1))
        if min_ratio:
            min_errors.append(abs(min_ratio - 1))
        total, replayed, subst, skipped = e["counts"]
        sel_total += total
        rep_total += replayed
        rows.append([
            e["name"], total, replayed, subst, skipped, f"{e['load_s']:.2f}", f"{e['setup_s'] - e['probe_s'] - e['free_s']:.2f}",
            f"{e['probe_s']:.2f}", f"{e['free_s']:.2f}", mib(e["peak"]) if e["peak"] else "-", mib(e["tpeak"]) if e["tpeak"] else "-",
            f"{e['peak'] / e['tpeak']:.2f}" if e["tpeak"] else "-", mib(e["rss"]) if e["rss"] is not None else "-",
            f"{med * 1e3:.2f}", f"{o['original_median_s'] * 1e3:.2f}" if o else "-", f"{ratio:.3f}" if ratio else "-",
            f"{mn * 1e3:.2f}", f"{o['original_min_s'] * 1e3:.2f}" if o and o.get("original_min_s") else "-",
            f"{min_ratio:.3f}" if min_ratio else "-",
        ])  # fmt: skip
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head))]
    for r in [head, *rows]:
        print("  ".join(str(c).rjust(w) if i else str(c).ljust(w) for i, (c, w) in enumerate(zip(r, widths))))
    for label, errs in (("median", errors), ("min", min_errors)):
        if errs:
            geo = math.exp(statistics.mean(math.log(max(x, 1e-6)) for x in errs))
            print(f"fidelity ({label}s): geomean |ratio-1| = {geo * 100:.1f}% over {len(errs)} timed traces, "
                  f"worst {max(errs) * 100:.1f}%, within 5%: {sum(x <= 0.05 for x in errs)}/{len(errs)}")  # fmt: skip
    print(f"coverage: {rep_total}/{sel_total} selected ops replayed ({rep_total / max(sel_total, 1) * 100:.1f}%)")
    print(f"host: machine-speed probe {host_start:.3f} ms at the start, {probe_ms():.3f} ms at the end (median of 200)")
    return 0


def probe_ms(n: int = 200) -> float:
    """The machine-speed probe's median over ``n`` runs, in milliseconds."""
    return statistics.median(probe() for _ in range(n)) * 1e3


if __name__ == "__main__":
    sys.exit(main())
