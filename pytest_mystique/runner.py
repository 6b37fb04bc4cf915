"""One trace from file to verdict: load, replay, measure, compare with the baseline, store.

The pytest plugin is a thin layer over :func:`check_file` (sample to a verdict against the stored
baseline); the CLI's ``replay`` over :func:`replay_file` (a fixed number of iterations).
"""

from __future__ import annotations

import contextlib
import dataclasses
import faulthandler
import functools
import gc
import math
import os
import signal
import statistics
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch

from . import __version__
from .baseline import BaselineExists, BaselineStore, git_commit, make_record
from .collectives import Comms, has_collectives, local_world, topology
from .defaults import (
    DEFAULT_ALPHA,
    DEFAULT_BUDGET_S,
    DEFAULT_DRIFT,
    DEFAULT_ITERS,
    DEFAULT_NOISE,
    DEFAULT_TOLERANCE,
    DEFAULT_WARMUP,
)
from .distributed import SHARED_CORES_NOISE, DistributedReplay, resolve_job
from .environment import REPLAY_VERSION, differences, fingerprint, hardware_key
from .errors import ReplayError
from .measure import Measurement, allocator_regime, measure, per_op_medians, thread_count, torch_threads
from .replay import Replay, resolve_device
from .sampling import BASELINE_RUNS, Sampled, comparable, judged_runs, probe_shift, sample
from .sidecar import load_sidecar, recorded_device, same_device_kind, unlike
from .stats import compare_runs, session_drift
from .trace import DEFAULT_MAX_TRACE_BYTES, load_trace
from .worker import fresh_run


@dataclass
class Options:
    device: str = "auto"
    warmup: int = DEFAULT_WARMUP
    iters: int | None = None  # iterations per segment; None: as many as fill SEGMENT_S
    threads: int | None = None
    max_memory: int | None = None
    max_trace_bytes: int = DEFAULT_MAX_TRACE_BYTES
    seed: int = 0
    timeout_s: float | None = None
    budget_s: float = DEFAULT_BUDGET_S
    alpha: float = DEFAULT_ALPHA  # for this trace (the plugin divides the session's among its traces)
    process_noise: float = DEFAULT_NOISE
    drift: float = DEFAULT_DRIFT  # session offset between the baseline's session and this one
    runs: int = BASELINE_RUNS  # most fresh processes a trace is sampled in (1: this process only)


@dataclass
class ReplayRun:
    replay: Replay
    measurement: Measurement | Sampled
    load_s: float

    def summary(self) -> dict:
        rep = self.replay.report
        m = self.measurement
        out = {
            "trace": self.replay.trace.name,
            "file": str(self.replay.trace.path),
            "schema": self.replay.trace.schema,
            "device": m.device,
            "threads": m.threads,
            "ops_total": rep.ops_total,
            "ops_replayed": rep.ops_replayed,
            "ops_skipped": rep.ops_skipped,
            "skipped": rep.skipped_list(),
            "substitutions": rep.substitutions_list(),
            "notes": dict(rep.notes),
            "load_s": self.load_s,
            "setup_s": m.setup_s,
            "probe_s": self.replay.probe_s,
            "free_s": self.replay.free_s,
            "liveness": getattr(self.replay, "liveness", None),  # (a multi-rank job's ranks decide each their own)
            "warmup": m.warmup,
            "timer": "cuda events" if m.device.startswith("cuda") else "perf_counter_ns",
            "samples_s": m.samples_s,
            "median_s": m.median_s,
        }
        if isinstance(self.replay, DistributedReplay):
            out.update(world_size=self.replay.world_size, ranks=self.replay.rank_summary(), threads=self.replay.threads,
                       step_time="slowest rank per iteration")  # fmt: skip
        if isinstance(m, Sampled):
            out.update(segments=len(m.segments), runs=m.runs, segment_iters=m.segment_iters, sampling_s=m.sampling_s,
                       probed=m.probed, looks=m.looks)  # fmt: skip
            out["notes"] = dict(out["notes"]) | dict.fromkeys(m.notes, 1)
        return out


class _Deadline(BaseException):
    """Raised by the timer; a BaseException so that no per-op error handling swallows it."""


@contextmanager
def deadline(seconds: float | None, path):
    """Interrupt the block after ``seconds`` (SIGALRM; the main thread of a Unix process, where
    pytest runs items). The replay returns to Python between ops, so a hang in a loop of ops or
    a slow op is cut at the next op boundary."""
    if not seconds or not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        yield
        return

    def fire(signum, frame):
        raise _Deadline()

    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    except _Deadline:
        raise ReplayError(path, f"replay did not finish within {seconds:g} s (--mystique-timeout); stopped") from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def prepare_file(path, options: Options, *, ranks: dict | None = None, name: str | None = None) -> tuple[Replay, float]:
    """Load and validate ``path``; the replay of it, not yet prepared, and the load time.

    A trace of a job of several ranks (``ranks``: its per-rank files, or a lone file whose process
    groups span several ranks) gives a :class:`.distributed.DistributedReplay`; a single-rank
    trace with collectives replays them on a one-process group."""
    t0 = time.perf_counter()
    trace = load_trace(path, max_bytes=options.max_trace_bytes)
    load_s = time.perf_counter() - t0
    device = resolve_device(options.device)
    comms = None
    if ranks or has_collectives(trace):
        world = max(topology(trace).world_size or 1, max(ranks) + 1 if ranks else 1)
        if world > 1:
            replay = DistributedReplay(ranks or {0: Path(path)}, world, name=name or trace.name, path=Path(path),
                                       schema=trace.schema, device=device, seed=options.seed,
                                       max_memory=options.max_memory,
                                       threads=options.threads or max(1, thread_count(None) // world),
                                       max_trace_bytes=options.max_trace_bytes)  # fmt: skip
            return replay, load_s
        if local_world(device):
            comms = Comms(trace, 0, 1)
    return Replay(trace, device, seed=options.seed, max_memory=options.max_memory, comms=comms), load_s


def build_identity(replay, options: Options) -> dict | None:
    """What decides whether building ``replay`` can crash its process: the trace's bytes (their
    SHA-256, as :func:`.trace.load_trace` read them), the torch that runs its kernels, this plugin
    and the replay's version (how it makes their inputs) and the seed of the data. A baseline
    recorded from a build of the same identity, in the same environment, proves that build safe in
    process: :func:`build_canary` is not needed again. None for a multi-rank job."""
    if not isinstance(replay, Replay) or not replay.trace.sha256:
        return None
    return {"trace_sha256": replay.trace.sha256, "torch": str(torch.__version__), "plugin": __version__,
            "replay": REPLAY_VERSION, "seed": int(options.seed)}  # fmt: skip


def build_canary(replay) -> bool:
    """Build ``replay`` first in a forked child process. An op that crashes its process (a
    kernel that trusts an input the trace could not give, such as a packed sequence's batch
    sizes, and reads outside its memory) then ends the child, not the test session: this raises a
    ReplayError naming the trace and the op. Where the build's data went NaN or inf, the child
    also runs the iterations that start the timing (:data:`CANARY_ITERATIONS`, after the state's
    reset, as the warm-up does): such data reach kernels that take them for positions (a box's
    NaN coordinates, which torchvision's RoIAlign turns into indices: a Faster R-CNN trace
    captured elsewhere, whose target boxes are drawn, took the log of negative widths, and its
    first iterations' weights were NaN). Errors other than crashes are left to the real build,
    which reports them. Only where the OS forks and for a replay on the CPU (a forked child cannot
    use a GPU its parent opened); a multi-rank replay runs in its own processes already, and a
    single-rank one with collectives runs them on its process group, whose threads a forked child
    does not have (its first collective waited forever). Returns whether the child built."""
    if (not hasattr(os, "fork") or not isinstance(replay, Replay) or replay.device.type != "cpu" or replay.prepared
            or replay.comms is not None):  # fmt: skip
        return False
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: build, say nothing, leave without running the parent's exit handlers
        code = 0
        try:
            os.close(read)
            faulthandler.disable()  # (its crash is the parent's to report, naming the op: no dump of the child's stack)
            torch.set_num_threads(1)  # a forked child must not wait on the parent's OpenMP threads
            replay.progress = write
            replay.prepare(timed=False)
            if replay.nonfinite_at:
                _iterations_canary(replay, write)
        except BaseException:  # noqa: BLE001 - the parent's own build meets it again and reports it
            code = 1
        os._exit(code)
    os.close(write)
    last = b""
    try:
        with os.fdopen(read, "rb") as f:
            for line in f:
                last = line
        _, status = os.waitpid(pid, 0)
    except BaseException:  # a deadline or an interrupt while waiting: the child goes too
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        raise
    if os.WIFSIGNALED(status):
        sig = signal.Signals(os.WTERMSIG(status)).name
        op = last.decode(errors="replace").strip() or "its preparation"
        raise ReplayError(replay.trace.path, f"replaying op {op} crashed the process ({sig}): the kernel trusted input "
                                             f"data the trace does not hold; nothing was timed")  # fmt: skip
    return True


#: Iterations the build canary runs after a build whose data went NaN or inf (see :func:`build_canary`)
CANARY_ITERATIONS = 2


def _iterations_canary(replay, write: int) -> None:
    """In the canary's child: the replay's state reset and :data:`CANARY_ITERATIONS` iterations
    run, each op named on ``write`` before it runs."""
    steps = replay.steps
    where = (f", in an iteration after the build, whose data had gone NaN or inf (first in the output of "
             f"{replay.nonfinite_at})")  # fmt: skip
    done = 0

    def say(i: int) -> None:
        os.write(write, f"{steps[i].name} (node {steps[i].node_id}){where}\n".encode())

    def after(step, result) -> None:
        nonlocal done
        done += 1
        if done < len(steps):
            say(done)

    replay.reset_state()
    for _ in range(CANARY_ITERATIONS if steps else 0):
        done = 0
        say(0)
        replay.run(after)


def as_captured(options: Options, trace_path) -> Options:
    """``options`` with the thread count the trace's original step ran with (its sidecar's
    ``threads``, at most torch's default here) when neither ``options.threads`` nor
    ``OMP_NUM_THREADS`` sets one: replaying a one-thread capture with all of a small host's cores
    times something else than the original did, and on a 2-core host two threads measure the
    neighbours more than the replay."""
    if options.threads:
        return options
    side = load_sidecar(trace_path)  # a malformed sidecar raises, naming its file
    recorded = side.get("threads") if side else None
    threads = thread_count(None, recorded)
    return dataclasses.replace(options, threads=threads) if threads != thread_count(None) else options


def replay_file(path, options: Options) -> ReplayRun:
    """Replay ``path`` for ``options.iters`` timed iterations (no baseline, no adaptive sampling).
    The build runs first in a child process (:func:`build_canary`), as the plugin's does: an op
    whose kernel crashes on the replay's data (torch_spline_conv's basis, given a kernel size of
    0, ended ``mystique replay`` on SIGFPE) is then an error naming the trace and the op."""
    options = as_captured(options, path)
    with deadline(options.timeout_s, path):
        first, ranks, name = resolve_job(path)
        replay, load_s = prepare_file(first, options, ranks=ranks, name=name)
        build_canary(replay)
        m = measure(replay, warmup=options.warmup, iters=options.iters or DEFAULT_ITERS, threads=options.threads)
    return ReplayRun(replay, m, load_s)


def with_original_timing(summary: dict, trace_path) -> dict:
    """Add the original step's timing (from the sidecar, when there is one) and the fidelity ratio."""
    side = load_sidecar(trace_path)
    if side and side.get("original_median_s"):
        summary["original_median_s"] = side["original_median_s"]
        summary["original_threads"] = side.get("threads")
        recorded = recorded_device(side)
        if recorded:
            summary["original_device"] = recorded
        # (a CPU step replayed on a GPU, the default device where there is one: no ratio)
        if side.get("threads") in (None, summary.get("threads")) and same_device_kind(recorded, summary.get("device")):
            summary["fidelity_ratio"] = summary["median_s"] / side["original_median_s"]
            if side.get("original_ops_s") and side.get("original_ops_share") is not None:  # the capture helper's
                summary["original_ops_s"] = side["original_ops_s"]
                summary["original_host_share"] = 1 - side["original_ops_share"]
                if side.get("original_outside"):
                    summary["original_outside"] = side["original_outside"]
        unlike_notes = unlike(side, threads=summary.get("threads"), allocator=allocator_regime(),
                              device=summary.get("device"))  # fmt: skip
        if unlike_notes:
            summary["fidelity_unlike"] = unlike_notes
    return summary


def host_share_note(share: float, replay_share: float | None = None, ranges: dict | None = None) -> str:
    """What the capture helper's profile of the original step says of its time outside operators,
    and, from ``ranges`` (the sidecar's ``original_outside``), in which ranges of no operator the
    most of it went."""
    replay = f", the replay {replay_share:.0%}" if replay_share is not None else ""
    where = ""
    if ranges:
        shown = ", ".join(f"{name[:80]} {v:.0%}" for name, v in sorted(ranges.items(), key=lambda kv: -kv[1]))
        where = f" (in ranges that ran no operator for it: {shown})"
    return (f"outside operators: {share:.0%} of the original's profiled step{where}{replay}; the original's Python, "
            f"the autograd engine's own work and code that runs outside torch's operators (a library's own C "
            f"code) are not in a trace")  # fmt: skip


def check_file(path, options: Options, store: BaselineStore, baseline_name: str, *,
               tolerance: float = DEFAULT_TOLERANCE, update: bool = False, rootdir=None,
               turn=contextlib.nullcontext, ranks: dict | None = None,
               name: str | None = None, earlier=None) -> tuple[ReplayRun, dict]:  # fmt: skip
    """Replay ``path`` and sample it until a verdict against its stored baseline (recording a
    baseline when there is none, or when ``update``). Returns the run and its result.

    ``turn()`` is held while timing (:func:`.parallel.cpu_turn`): loading and preparing happen
    before, so parallel workers overlap them. ``options.timeout_s`` bounds each part on its own.
    A multi-rank replay's processes are ended before this returns, whatever happened.
    ``earlier(hardware_key, baseline_median_s, baseline_environment)``, when given, returns this
    trace's earlier sessions against that baseline from the history, as (log ratio, own variance)
    pairs, oldest first: under ``drift`` those the session drift is estimated from
    (:func:`.stats.session_drift`), under ``reference`` those pooled with the baseline's session
    (:func:`.history.reference_sessions`)."""
    opened: list = []
    try:
        return _check_file(path, options, store, baseline_name, tolerance, update, rootdir, turn, ranks, name, opened,
                           earlier)  # fmt: skip
    finally:
        for replay in opened:
            if isinstance(replay, DistributedReplay):
                replay.close()


def _check_file(path, options: Options, store: BaselineStore, baseline_name: str, tolerance: float, update: bool,
                rootdir, turn, ranks: dict | None, name: str | None, opened: list,
                earlier=None) -> tuple[ReplayRun, dict]:  # fmt: skip
    options = as_captured(options, path)
    threads = thread_count(options.threads)
    with deadline(options.timeout_s, path):
        replay, load_s = prepare_file(path, options, ranks=ranks, name=name)
        opened.append(replay)
        if isinstance(replay, DistributedReplay) and replay.noisy:
            options = dataclasses.replace(options, process_noise=max(options.process_noise, SHARED_CORES_NOISE))
        env = fingerprint(replay.device, threads)
        key = hardware_key(env)
        baseline = None if update else store.load(key, baseline_name)  # a corrupt one raises, untouched
        drift_note, reference = None, ()
        if baseline is not None and earlier is not None:
            seen = earlier(key, baseline.median_s, baseline.environment)
            reference = seen["reference"]
            drift, used = session_drift(seen["drift"], options.drift)
            if drift > options.drift:
                drift_note = (f"this machine's session-to-session drift for this trace is {drift:.1%} (from its last "
                              f"{used} sessions in the history; --mystique-drift {options.drift:.1%}): intervals are "
                              f"wider")  # fmt: skip
                options = dataclasses.replace(options, drift=drift)
        t0 = time.perf_counter()
        identity = build_identity(replay, options)
        # a baseline of this very build proves it does not crash: the canary would only double it
        # (the environment too: whether a read outside a buffer faults can depend on the OS, libc,
        # the allocator's layout)
        proven = (identity is not None and baseline is not None and baseline.built == identity
                  and not differences(baseline.environment, env))  # fmt: skip
        # what the JSON says: "ran"; "proven" (its baseline's build was this one); "none" (not a
        # CPU replay in this process, or no fork here)
        canary = "proven" if proven else "ran" if build_canary(replay) else "none"
        with torch_threads(threads):
            replay.prepare()
        setup_s = time.perf_counter() - t0
        if baseline is not None:
            same_work(replay, baseline)
    with turn(), deadline(options.timeout_s, path):
        began = time.time()
        sampled = _sample(replay, options, baseline, tolerance, startup_s=load_s + setup_s, reference=reference)
        sampled.setup_s = setup_s
        if drift_note:
            sampled.notes.append(drift_note)
        per_op = _per_op(replay, sampled)  # timed too: inside the turn
        timed = [began, time.time()]
        run = ReplayRun(replay, sampled, load_s)
        result = run.summary()
        result.update(environment=env, hardware_key=key, tolerance=tolerance, git_commit=git_commit(rootdir), timed=timed,
                      per_op_median_s=per_op,
                      level=math.exp(statistics.fmean(s.level(sampled.probed) for s in sampled.segments)),
                      run_levels=[[round(x, 6) for x in run] for run in judged_runs(sampled.segments, sampled.probed)],
                      build_canary=canary)  # fmt: skip
        if baseline is None:
            record = make_record(
                baseline_name, str(replay.trace.path), sampled, env, ops_total=replay.report.ops_total,
                ops_replayed=replay.report.ops_replayed, commit=result["git_commit"],
                per_op_median_s=result["per_op_median_s"], built=identity,
            )  # fmt: skip
            existed = store.path_for(key, baseline_name).exists()
            try:
                result["baseline_path"] = str(store.save(key, baseline_name, record, replace=update))
            except BaselineExists:
                baseline = store.load(key, baseline_name)  # another run won the race: compare with it
                same_work(replay, baseline)
                sampled.comparison = _offline_comparison(baseline, sampled, options, tolerance)
            else:
                result["status"] = "updated" if existed else "new"
                return run, result
        cmp = sampled.comparison
        result.update(baseline_path=str(baseline.path), baseline_median_s=cmp.baseline_median_s,
                      comparison=cmp.as_dict(), status=cmp.verdict,
                      env_changes=differences(baseline.environment, env))  # fmt: skip
        if cmp.verdict == "slower" and baseline.per_op_median_s:
            result["attribution"] = attribute(baseline.per_op_median_s, result["per_op_median_s"])
    return run, result


def same_work(replay, baseline) -> None:
    """Raise :class:`ReplayError` where ``replay`` skips another number of ops than the replay its
    baseline timed: an operator this torch lacks (an upgrade removed or renamed it, a library is
    missing) and no substitute runs would leave its time out, and the comparison would call the
    lighter step faster, or pass it; one that replays now and was skipped then adds time the
    baseline never had. Either way the two times measure different work."""
    if baseline.ops is None:
        return
    total, replayed = baseline.ops
    rep = replay.report
    if total - replayed == rep.ops_skipped:
        return
    why = "; ".join(f"{n}x {op}: {reason}" for (op, reason), n in rep.skipped.most_common(3))
    raise ReplayError(replay.trace.path,
                      f"its replay now skips {rep.ops_skipped} of {rep.ops_total} ops, and the replay its baseline "
                      f"timed skipped {total - replayed} of {total} ({baseline.path}): the two times would measure "
                      f"different work, so they are not compared"
                      + (f" (skipped now: {why}{'; ...' if len(rep.skipped) > 3 else ''})" if why else "")
                      + ". Make the same ops replay (the skip reasons say what is missing), or record a new "
                        "baseline with --mystique-update where the change is meant")  # fmt: skip


def _sample(replay, options: Options, baseline, tolerance: float, startup_s: float = 0.0, reference=()) -> Sampled:
    kw = {}
    if baseline is not None:
        kw = dict(baseline=baseline.segments, baseline_signature=baseline.probe_signature, segment_iters=options.iters or baseline.segment_iters,
                  comparison_extra={"baseline_median_s": baseline.median_s}, reference=reference)  # fmt: skip
    fresh = None
    if options.runs > 1 and not isinstance(replay, DistributedReplay):  # a multi-rank job has its own processes
        fresh = functools.partial(fresh_run, replay.trace.path, device=str(replay.device),
                                  threads=thread_count(options.threads), seed=options.seed,
                                  max_memory=options.max_memory, max_trace_bytes=options.max_trace_bytes,
                                  warmup=options.warmup)  # fmt: skip
    return sample(replay, budget_s=options.budget_s, tolerance=tolerance, alpha=options.alpha,
                  process_noise=options.process_noise, drift=options.drift, threads=options.threads,
                  warmup=options.warmup,
                  fresh_run=fresh, runs=options.runs, startup_s=startup_s,
                  **({"segment_iters": options.iters} if options.iters and baseline is None else {}), **kw)  # fmt: skip


def _offline_comparison(baseline, sampled: Sampled, options: Options, tolerance: float):
    calibrated = comparable(baseline.segments, baseline.probe_signature, sampled.probed)
    return compare_runs(judged_runs(baseline.segments, calibrated), judged_runs(sampled.segments, calibrated),
                        tolerance=tolerance, alpha=options.alpha, process_noise=options.process_noise,
                        drift=options.drift,
                        probe_shift=probe_shift(baseline.segments, sampled.segments) if calibrated else 0.0,
                        calibrated=calibrated, baseline_median_s=baseline.median_s,
                        current_median_s=sampled.median_s)  # fmt: skip


def _per_op(replay, sampled: Sampled) -> dict[str, float]:
    with torch_threads(sampled.threads):
        return per_op_medians(replay, iters=PER_OP_ITERS)


#: Instrumented iterations for the per-op medians stored with a baseline and used to attribute a slowdown.
PER_OP_ITERS = 5
TOP_OPS = 5


def attribute(baseline_ops: dict[str, float], current_ops: dict[str, float], top: int = TOP_OPS) -> list[dict]:
    """The operators that account for a change: per-op median seconds per iteration now against
    the baseline's, the ``top`` largest additions first."""
    rows = []
    for name in set(baseline_ops) | set(current_ops):
        before, now = baseline_ops.get(name, 0.0), current_ops.get(name, 0.0)
        rows.append({"op": name, "baseline_s": before, "current_s": now, "added_s": now - before})
    rows.sort(key=lambda r: -r["added_s"])
    return [r for r in rows[:top] if r["added_s"] > 0]


def release(run: ReplayRun | None) -> None:
    """Drop a replay's tensors now rather than whenever the collector runs."""
    if run is not None:
        run.replay.env.clear()
        run.replay.steps.clear()
        run.replay.invalidate()  # its straight-line function holds the ops and their arguments
        if isinstance(run.replay, DistributedReplay):
            run.replay.close()
    gc.collect()
