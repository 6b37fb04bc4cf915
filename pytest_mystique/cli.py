"""The ``mystique`` command line: ``replay`` a trace, ``capture`` one from your own step, ``ab``
compare two Python environments on traces, ``history`` show the trend of past runs."""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import sys
from pathlib import Path

from .defaults import (
    DEFAULT_AB_WORKERS,
    DEFAULT_ALPHA,
    DEFAULT_BUDGET_S,
    DEFAULT_ITERS,
    DEFAULT_NOISE,
    DEFAULT_TOLERANCE,
    DEFAULT_WARMUP,
)
from .errors import MystiqueError
from .measure import OPS_WARMUP, inside_operators, per_op_medians, profiled_calls, torch_threads
from .memory import replay_peak_bytes, trace_peak_bytes
from .report import json_text, skipped_lines
from .runner import Options, host_share_note, release, replay_file, with_original_timing
from .sidecar import same_device_kind
from .units import fmt_bytes, fmt_seconds
from .worker import stdout_set_aside


def _threads(n: int) -> str:
    return f"{n} thread" if n == 1 else f"{n} threads"


def _replay(args: argparse.Namespace) -> int:
    opts = Options(device=args.device, warmup=args.warmup, iters=args.iters, threads=args.threads)
    # (--json: the answer alone on stdout, printed once the work is done and stdout is pointed back)
    with stdout_set_aside() if args.json else contextlib.nullcontext():
        outcome = _replayed(args, opts)
    if isinstance(outcome, int):
        return outcome
    summary = outcome
    if args.json:
        print(json_text(summary, indent=None if args.compact else 2))
        return 0
    _print_replay(summary, args.top)
    return 0


def _replayed(args: argparse.Namespace, opts: Options) -> dict | int:
    """The replay's summary, or the exit status of an error (printed)."""
    run = None
    try:
        run = replay_file(args.trace, opts)
        summary = with_original_timing(run.summary(), args.trace)
        with torch_threads(run.measurement.threads):
            if "ranks" not in summary:  # a multi-rank replay's tensors live in its rank processes
                summary["peak_bytes"] = replay_peak_bytes(run.replay)
                summary["trace_peak_bytes"] = trace_peak_bytes(run.replay.trace)
            if "original_ops_s" in summary and run.replay.device.type == "cpu":
                got = inside_operators(run.replay.run, calls=profiled_calls(summary["median_s"]),
                                       between=run.replay.between_iterations, warmup=OPS_WARMUP)  # fmt: skip
                if got is not None:
                    summary["ops_s"], summary["host_share"] = got.ops_s, 1 - got.share
                    summary["ops_fidelity_ratio"] = got.ops_s / summary["original_ops_s"]
            if args.per_op:
                per_op = per_op_medians(run.replay, iters=max(3, min(args.iters, 10)))
                summary["per_op_median_s"] = dict(sorted(per_op.items(), key=lambda kv: -kv[1]))
    except (MystiqueError, ValueError) as e:
        print(f"mystique: error: {e}", file=sys.stderr)
        return 2
    finally:
        release(run)
    return summary


def _print_replay(summary: dict, top: int) -> None:
    print(f"{summary['trace']}: {summary['ops_replayed']}/{summary['ops_total']} ops replayed on {summary['device']} "
          f"({_threads(summary['threads'])})")  # fmt: skip
    print(f"  load {summary['load_s']:.3f} s, setup {summary['setup_s']:.3f} s")
    print(f"  median {fmt_seconds(summary['median_s'])} over {len(summary['samples_s'])} iterations "
          f"(min {fmt_seconds(min(summary['samples_s']))})")  # fmt: skip
    if "fidelity_ratio" in summary:
        print(f"  original step {fmt_seconds(summary['original_median_s'])}: ratio {summary['fidelity_ratio']:.3f}")
        for note in summary.get("fidelity_unlike", ()):
            print(f"    unlike: {note}")
        if "ops_fidelity_ratio" in summary:
            print(f"  inside operators: replay {fmt_seconds(summary['ops_s'])}, original "
                  f"{fmt_seconds(summary['original_ops_s'])}: ratio {summary['ops_fidelity_ratio']:.3f} "
                  f"({host_share_note(summary['original_host_share'], summary['host_share'], summary.get('original_outside'))})")  # fmt: skip
    elif "original_median_s" in summary and not same_device_kind(summary.get("original_device"), summary["device"]):
        print(f"  original step {fmt_seconds(summary['original_median_s'])} on {summary['original_device'][:40]}: "
              f"replay on {summary['device']} is not comparable (use --device)")  # fmt: skip
    elif "original_median_s" in summary:
        print(f"  original step {fmt_seconds(summary['original_median_s'])} at {_threads(summary['original_threads'])}: "
              f"replay at {_threads(summary['threads'])} is not comparable (use --threads)")  # fmt: skip
    if "peak_bytes" in summary:
        print(f"  peak tensor memory {fmt_bytes(summary['peak_bytes'])} (trace: {fmt_bytes(summary['trace_peak_bytes'])} live)")
    if "per_op_median_s" in summary:
        total = sum(summary["per_op_median_s"].values()) or 1.0
        print("  top operators (median per iteration, instrumented):")
        for name, secs in list(summary["per_op_median_s"].items())[:top]:
            print(f"    {fmt_seconds(secs):>10}  {secs / total:6.1%}  {name}")
    for line in skipped_lines(summary):
        print(f"  {line}")


def _load_callable(spec: str):
    """``path/to/script.py:function`` or ``package.module:function`` (the user's own code)."""
    target, sep, attr = spec.rpartition(":")
    if not sep or not attr:
        raise SystemExit(f"mystique capture: expected SCRIPT.py:FUNCTION or MODULE:FUNCTION, got {spec!r}")
    if target.endswith(".py"):
        path = Path(target).resolve()
        module_spec = importlib.util.spec_from_file_location(path.stem, path)
        if module_spec is None or module_spec.loader is None:
            raise SystemExit(f"mystique capture: cannot load {path}")
        module = importlib.util.module_from_spec(module_spec)
        sys.path.insert(0, str(path.parent))
        module_spec.loader.exec_module(module)
    else:
        module = importlib.import_module(target)
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise SystemExit(f"mystique capture: {attr!r} in {target!r} is not callable")
    return fn


def _capture(args: argparse.Namespace) -> int:
    import torch

    from .recorder import capture_step

    if args.threads:
        torch.set_num_threads(args.threads)
    fn = _load_callable(args.step)
    step = fn() if args.factory else fn
    result = capture_step(step, args.output, warmup=args.warmup, runs=args.runs, what=args.what or args.step)
    print(f"wrote {result.path} and {result.sidecar_path}")
    return 0


def _ab(args: argparse.Namespace) -> int:
    from . import report
    from .ab import ab_trace
    from .worker import start_pairs

    if len(args.python) != 2:
        print("mystique ab: error: give --python exactly twice (A, then B)", file=sys.stderr)
        return 2
    if args.workers < 1:
        print("mystique ab: error: --workers must be 1 or more", file=sys.stderr)
        return 2
    try:
        pairs = start_pairs(args.python, args.workers, args.threads)
    except MystiqueError as e:
        print(f"mystique ab: error: {e}", file=sys.stderr)
        return 2
    started = [w for pair in pairs for w in pair]
    results, failed = [], False
    try:
        for trace in args.traces:
            pairs = [pair for pair in pairs if all(w.alive() for w in pair)]  # (a dead one was reported)
            if not pairs:
                break
            try:
                results.append(ab_trace(pairs, trace, budget_s=args.budget, tolerance=args.tolerance,
                                        alpha=args.alpha / len(args.traces), threads=args.threads,
                                        device=args.device, seed=args.seed, process_noise=args.noise))  # fmt: skip
            except MystiqueError as e:
                print(f"mystique ab: error: {e}", file=sys.stderr)
                results.append({"trace": Path(trace).name, "status": "error", "error": str(e)})
                failed = True
    finally:
        for w in started:
            w.close()
    if args.json:
        print(json_text(results))
    else:
        first = next((r for r in results if "a" in r), None)
        if first:
            print(f"A: {args.python[0]} (torch {first['a']['torch']}, Python {first['a']['python']})")
            print(f"B: {args.python[1]} (torch {first['b']['torch']}, Python {first['b']['python']})")
        for line in report.format_table(report.ab_rows(results)):
            print(line)
        for r in results:
            for note in r.get("notes", ()):
                print(f"{r['trace']}: {note}")
        print(f"B / A ratio of low-quantile step times, {1 - 2 * args.alpha / max(1, len(args.traces)):.1%} "
              f"intervals from paired rounds; tolerance {args.tolerance:.0%}")  # fmt: skip
    slower = any(r.get("status") == "slower" for r in results)
    return 1 if slower or failed else 0


def _export(args: argparse.Namespace) -> int:
    from .export import export_script
    from .replay import Replay
    from .trace import load_trace

    try:
        replay = Replay(load_trace(args.trace), "cpu")
        with torch_threads(args.threads or 1):
            replay.prepare(timed=False)
        source = export_script(replay, args.trace)
    except MystiqueError as e:
        print(f"mystique export: error: {e}", file=sys.stderr)
        return 2
    from .baseline import atomic_write

    atomic_write(Path(args.output), source)
    Path(args.output).chmod(0o755)
    rep = replay.report
    print(f"wrote {args.output}: {rep.ops_replayed} of {rep.ops_total} ops (run it with: python {args.output} --device DEV)")
    for s in rep.skipped_list():
        print(f"  not exported (skipped) {s['count']}x {s['op']}: {s['reason']}")
    for s in rep.substitutions_list():
        print(f"  substituted {s['count']}x {s['op']} -> {s['replacement']}")
    return 0


def _history(args: argparse.Namespace) -> int:
    from . import trend
    from .history import default_path, open_store
    from .history_postgres import is_url, redact

    path = args.db if is_url(args.db) else Path(args.db) if args.db else default_path()
    if path is None:
        print("mystique history: the history is off here (mystique_history = off)", file=sys.stderr)
        return 2
    if isinstance(path, Path) and not path.exists():
        print(f"mystique history: error: {path}: no history database (run pytest --mystique first, or give --db)",
              file=sys.stderr)  # fmt: skip
        return 2
    store = open_store(path)
    path = redact(path) if isinstance(path, str) else path
    try:
        rows = store.results(limit=args.limit)
    except MystiqueError as e:
        print(f"mystique history: error: {e}", file=sys.stderr)
        return 2
    by_trace: dict[str, list[dict]] = {}
    for r in rows:
        by_trace.setdefault(r["trace"], []).append(r)
    wanted = args.traces or sorted(by_trace)
    missing = [t for t in wanted if t not in by_trace]
    for t in missing:
        print(f"mystique history: no runs of {t!r} in {path}", file=sys.stderr)
    series = [trend.build_series(t, by_trace[t]) for t in wanted if t in by_trace]
    print(f"history: {path}")
    for line in trend.text_report(series, last=args.last):
        print(line)
    if args.html:
        def progress(n, total, name):
            print(f"  [{n}/{total}] plotting {name}", file=sys.stderr)

        try:
            trend.write_html(series, args.html, progress=progress)
        except ImportError:
            print("mystique history: error: --html needs matplotlib (pip install 'pytest-mystique[html]')",
                  file=sys.stderr)  # fmt: skip
            return 2
        print(f"wrote {args.html}")
    return 2 if missing and not series else 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="mystique", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)

    r = sub.add_parser("replay", help="replay one execution trace and print its timing")
    r.add_argument("trace", help="execution trace file (.json or .json.gz)")
    r.add_argument("--device", default="auto", help="auto (default), cpu, cuda, cuda:N")
    r.add_argument("--iters", type=int, default=DEFAULT_ITERS, help=f"timed iterations (default {DEFAULT_ITERS})")
    r.add_argument("--warmup", type=int, default=DEFAULT_WARMUP, help=f"warm-up iterations (default {DEFAULT_WARMUP})")
    r.add_argument("--threads", type=int, default=None, help="CPU threads (default: OMP_NUM_THREADS, else the trace's capture (.meta.json), else torch's)")
    r.add_argument("--json", action="store_true", help="print one JSON object")
    r.add_argument("--compact", action="store_true", help="with --json: on one line")
    r.add_argument("--per-op", action="store_true", help="time each operator and show the top ones")
    r.add_argument("--top", type=int, default=15, help="with --per-op: how many operators to show (default 15)")
    r.set_defaults(func=_replay)

    c = sub.add_parser("capture", help="record an execution trace of your step, with its original timing")
    c.add_argument("step", help="SCRIPT.py:FUNCTION or MODULE:FUNCTION; the function is one step")
    c.add_argument("-o", "--output", required=True, help="trace file to write (.json or .json.gz)")
    c.add_argument("--factory", action="store_true", help="FUNCTION builds the model and returns the step")
    c.add_argument("--runs", type=int, default=20, help="timed runs of the step before the capture (default 20)")
    c.add_argument("--warmup", type=int, default=3, help="warm-up runs (default 3)")
    c.add_argument("--threads", type=int, default=None, help="torch CPU threads while capturing")
    c.add_argument("--what", default="", help="a description stored in the timing sidecar")
    c.set_defaults(func=_capture)

    a = sub.add_parser("ab", help="replay traces alternately in two Python environments and compare them")
    a.add_argument("traces", nargs="+", metavar="TRACE", help="execution trace files")
    a.add_argument("--python", action="append", required=True, metavar="EXE",
                   help="a Python executable with torch and pytest-mystique; give it twice: A, then B")  # fmt: skip
    a.add_argument("--budget", type=float, default=DEFAULT_BUDGET_S * 2,
                   help=f"seconds of rounds per trace (default {DEFAULT_BUDGET_S * 2:g})")  # fmt: skip
    a.add_argument("--tolerance", type=float, default=DEFAULT_TOLERANCE, help="changes within this are the same")
    a.add_argument("--alpha", type=float, default=DEFAULT_ALPHA, help="false alarm chance over all traces")
    a.add_argument("--threads", type=int, default=1, help="CPU threads per worker (default 1)")
    a.add_argument("--noise", type=float, default=DEFAULT_NOISE,
                   help=f"offset between two worker processes that rounds cannot remove (default {DEFAULT_NOISE:g})")  # fmt: skip
    a.add_argument("--workers", type=int, default=DEFAULT_AB_WORKERS, metavar="K",
                   help=f"worker processes per environment, each holding a replay of the trace; the rounds cycle "
                        f"through the K pairs so that their offsets average out (default {DEFAULT_AB_WORKERS})")  # fmt: skip
    a.add_argument("--device", default="cpu", help="replay device in both workers (default cpu)")
    a.add_argument("--seed", type=int, default=0, help="seed of the round order")
    a.add_argument("--json", action="store_true", help="print the results as JSON")
    a.set_defaults(func=_ab)

    x = sub.add_parser("export", help="write a standalone benchmark script (needs only torch) of a trace")
    x.add_argument("trace", help="execution trace file")
    x.add_argument("-o", "--output", required=True, help="the script to write, e.g. bench.py")
    x.add_argument("--threads", type=int, default=None, help="CPU threads while preparing (default 1)")
    x.set_defaults(func=_export)

    h = sub.add_parser("history", help="recent runs per trace and the change points of their series")
    h.add_argument("traces", nargs="*", metavar="TRACE", help="trace names (default: all)")
    h.add_argument("--db", default=None,
                   help="history database: SQLite file or postgresql:// URL (default: the one pytest --mystique writes here)")  # fmt: skip
    h.add_argument("--html", default=None, metavar="PATH", help="also write a self-contained HTML report")
    h.add_argument("--last", type=int, default=10, help="runs to list per trace (default 10)")
    h.add_argument("--limit", type=int, default=100000, help="results to read (newest first, default 100000)")
    h.set_defaults(func=_history)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if getattr(args, "iters", 2) < 2:
        print("mystique: error: --iters must be at least 2", file=sys.stderr)
        return 2
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
