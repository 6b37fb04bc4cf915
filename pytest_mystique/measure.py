"""Measurement: warm-up, then timed iterations of a prepared replay.

On CUDA each iteration is bracketed by CUDA events (the GPU's own clock, queued behind the ops);
on the CPU by ``time.perf_counter_ns``. Raw per-iteration samples are kept: the statistics work on
them, and the baseline stores them.
"""

from __future__ import annotations

import gc
import math
import os
import re
import statistics
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from .defaults import DEFAULT_ITERS, DEFAULT_WARMUP  # noqa: F401 - re-exported
from .graph import BACKWARD


@dataclass
class Measurement:
    samples_s: list[float]
    device: str
    threads: int
    warmup: int
    setup_s: float = 0.0
    extra: dict = field(default_factory=dict)

    @property
    def median_s(self) -> float:
        return statistics.median(self.samples_s)

    @property
    def min_s(self) -> float:
        return min(self.samples_s)


def steady_allocator() -> bool:
    """Make the C heap's behaviour the same in every process (glibc only; elsewhere a no-op).

    glibc serves a large allocation either from the heap or from a fresh ``mmap`` (page faults on
    every use), choosing by a threshold that moves with the process's allocation history. The
    replay's intermediate tensors are such allocations, so one process would run a convolutional
    trace 30% slower than the next, in two stable modes, whatever the statistics do (measured on
    the bundled cnn_infer: 13 ms or 17-19 ms per step). Fixing the threshold at its maximum (32
    MiB; a long-running training process drifts there anyway) and not trimming the heap below
    256 MiB removes the bimodality (13.0-14.8 ms in every process). Returns whether it applied."""
    global _STEADY
    if _STEADY is None:
        _STEADY = False
        try:
            import ctypes

            libc = ctypes.CDLL("libc.so.6")
            _STEADY = bool(libc.mallopt(M_MMAP_THRESHOLD, 32 << 20)) & bool(libc.mallopt(M_TRIM_THRESHOLD, 256 << 20))
        except (OSError, AttributeError):
            pass
    return _STEADY


def allocator_regime() -> str:
    """How this process's C heap serves large allocations, for a sidecar or a report: ``steady``
    (:func:`steady_allocator` applied), ``tuned`` (glibc's thresholds set from the environment),
    ``glibc-default`` (the dynamic threshold), or ``other`` (not glibc)."""
    if _STEADY:
        return "steady"
    if os.environ.get("MALLOC_MMAP_THRESHOLD_") or "malloc" in os.environ.get("GLIBC_TUNABLES", ""):
        return "tuned"
    import platform

    return "glibc-default" if platform.libc_ver()[0] == "glibc" else "other"


M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters
_STEADY: bool | None = None


def thread_count(requested: int | None, recorded=None) -> int:
    """``--mystique-threads`` when given, else ``OMP_NUM_THREADS``, else ``recorded`` (the threads
    the trace's original step ran with, from its sidecar; at most torch's default here), else
    torch's default."""
    if requested:
        return requested
    env = os.environ.get("OMP_NUM_THREADS", "").strip()
    if env.isdigit() and int(env) > 0:
        return int(env)
    if isinstance(recorded, int) and not isinstance(recorded, bool) and recorded > 0:
        return min(recorded, torch.get_num_threads())
    return torch.get_num_threads()


@contextmanager
def torch_threads(n: int):
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def time_replay(replay, iters: int, between=None) -> list[float]:
    """Seconds per iteration of ``replay`` for ``iters`` iterations (a multi-rank replay times
    itself: its ranks run in other processes)."""
    own = getattr(replay, "time_iterations", None)
    if own is not None:
        return own(iters, between)
    return time_iterations(replay.run, replay.device, iters, between=between)


def time_iterations(run, device: torch.device, iters: int, between=None) -> list[float]:
    """Seconds per call of ``run`` for ``iters`` calls; ``between()`` (untimed) before each.
    Python's cyclic garbage collector is off meanwhile (as ``timeit`` does): its passes cost more
    in a process with a large heap (pytest's) than in a fresh one, an offset that is not the
    replay's."""
    with gc_paused():
        return _time_iterations(run, device, iters, between)


@contextmanager
def gc_paused():
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _time_iterations(run, device: torch.device, iters: int, between) -> list[float]:
    samples = []
    if device.type == "cuda":
        with torch.cuda.device(device):
            starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
            ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
            torch.cuda.synchronize()
            for s, e in zip(starts, ends):
                if between is not None:
                    between()
                s.record()
                run()
                e.record()
            torch.cuda.synchronize()
            return [s.elapsed_time(e) / 1e3 for s, e in zip(starts, ends)]
    clock = time.perf_counter_ns
    for _ in range(iters):
        if between is not None:
            between()
        t0 = clock()
        run()
        samples.append((clock() - t0) / 1e9)
    return samples


#: Warm-up lasts at least this long (and at least ``warmup`` iterations): the first iterations of a
#: process pay for cold caches, allocator growth and kernel selection (oneDNN, cuDNN, cuBLAS).
MIN_WARMUP_S = 0.3
MAX_WARMUP_ITERS = 200


def measure(replay, *, warmup: int = DEFAULT_WARMUP, iters: int = DEFAULT_ITERS, threads: int | None = None,
            min_warmup_s: float = MIN_WARMUP_S) -> Measurement:  # fmt: skip
    """Prepare (if needed), warm up and time ``replay``."""
    n = thread_count(threads)
    steady_allocator()
    with torch_threads(n):  # Replay.run turns autograd recording off itself
        t0 = time.perf_counter()
        replay.prepare()
        setup = time.perf_counter() - t0
        done, t_warm = 0, time.perf_counter()
        while done < warmup or (warmup and done < MAX_WARMUP_ITERS and time.perf_counter() - t_warm < min_warmup_s):
            replay.between_iterations()
            replay.run()
            done += 1
            if replay.device.type == "cuda":
                torch.cuda.synchronize(replay.device)
        samples = time_replay(replay, iters, between=replay.between_iterations)
    return Measurement(samples, str(replay.device), n, done, setup)


#: Profiler events that are operators (``aten::mm``, ``quantized::linear``, ``c10d::allreduce_``), not
#: the autograd engine's ranges and functions or ``record_function`` labels (``Optimizer.step#...``).
_OPERATOR_EVENT = re.compile(r"(?!autograd::|torch::autograd::)[a-z][a-z0-9_]*::[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)?")


@dataclass
class InsideOperators:
    """How long a step spends inside its operators: ``ops_s`` seconds per call (median), which is
    ``share`` of the call's time (median of the calls' shares), both taken under the profiler (or
    the instrument that says so)."""

    ops_s: float
    share: float
    ops: dict[str, int] | None = None  # calls by operator, where the instrument counts them
    #: the ranges of no operator that held the most of the call's time outside operators (see
    #: :func:`outside_ranges`), by name: their share of the call's time (median), where the
    #: instrument sees them
    outside: dict[str, float] | None = None
    #: operator calls in each profiled call (nested ones counted), where the instrument counts them
    counts: list[int] | None = None


#: How many of the ranges outside operators :func:`outside_ranges` names, and the least share of a
#: step's time each must hold.
OUTSIDE_NAMED, OUTSIDE_LEAST = 3, 0.05


def outside_ranges(ranges, wall_s: float) -> dict[str, float]:
    """The profiler's events that are no operator (``ranges``: ``record_function`` labels, a Python
    autograd Function's forward, an optimizer's ``step``, the autograd engine's functions), by
    their self time as a share of a call's ``wall_s``: the time inside them that no operator inside
    them took. That is where the step's time outside operators went: a Function whose forward runs
    a library's own C code (deepwave's wave propagation, through ctypes), an optimizer's Python
    loop. The autograd engine's ``evaluate_function`` ranges count as one."""
    own: dict[str, float] = {}
    for e in ranges:
        name = BACKWARD if e.key.startswith(BACKWARD) else e.key
        own[name] = own.get(name, 0.0) + e.self_cpu_time_total / 1e6
    return {name: min(1.0, s / wall_s) for name, s in own.items()} if wall_s > 0 else {}


def largest_outside(calls: list[dict[str, float]]) -> dict[str, float]:
    """Of :func:`outside_ranges` of several calls, the :data:`OUTSIDE_NAMED` ranges with the largest
    median shares (a range missing from a call counts 0 there), each of :data:`OUTSIDE_LEAST` at least."""
    medians = {name: statistics.median(call.get(name, 0.0) for call in calls) for name in {n for c in calls for n in c}}
    top = sorted(medians.items(), key=lambda kv: -kv[1])[:OUTSIDE_NAMED]
    return {name: share for name, share in top if share >= OUTSIDE_LEAST}


#: Seconds of steps that each side's profiled calls should cover at least (see :func:`profiled_calls`).
PROFILED_S = 0.25
#: Profiled calls made and not counted before those that are (the first profiler sessions of a
#: process ran slower here: a replay's first dozen calls of a 0.45 ms step read 1.0-1.4 ms, later
#: ones 0.6-0.9).
OPS_WARMUP = 2


def profiled_calls(step_s: float, at_least: int = 3, most: int = 100) -> int:
    """How many profiled calls time a step of ``step_s`` inside operators: ``at_least``, more for
    a short step (up to ``most``), so that the calls cover ``PROFILED_S`` of steps. A profiled
    call of a step under a millisecond reads anywhere from its floor to twice that (a quantized
    MLP's 0.45 ms step, one call at a time: 0.60 to 1.25 ms, in bursts), and three calls' median
    set its replay at 1.38-1.70 of its original in three runs where forty alternated calls of each
    side said 0.96-1.03 (with this count and two uncounted calls first: 0.97-1.03 in three)."""
    return max(at_least, min(most, math.ceil(PROFILED_S / max(step_s, 1e-6))))


def inside_operators(fn, *, calls: int = 3, between=None, warmup: int = 0) -> InsideOperators | None:
    """Time inside operators per call of ``fn``, over ``calls`` profiled calls after ``warmup``
    profiled calls that are not counted (a process's first profiler sessions run slower): the CPU
    profiler's self time of the operator events, summed (None where the profiler cannot run).
    What a step does outside them, its Python (module code, an optimizer's loop) and the
    autograd engine's own scheduling, is not in an execution trace, and no replay of the trace's
    operators takes that time: this tells the two apart. The profiler's own cost per event is in
    the figures alike for an original step and its replay. CPU time only: on CUDA the GPU's work
    is not in it."""
    try:
        from torch.profiler import ProfilerActivity, profile
    except ImportError:
        return None
    os.environ.setdefault("KINETO_LOG_LEVEL", "6")  # Kineto's lines on every start and stop, before its first use
    ops, shares, outside, counts = [], [], [], []
    for i in range(warmup + calls):
        if between is not None:
            between()
        try:
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                t0 = time.perf_counter()
                fn()
                wall = time.perf_counter() - t0
        except RuntimeError as e:  # the profiler's, not the step's own error
            if "profiler" not in str(e).lower():
                raise
            return None
        if i < warmup:
            continue
        operators, ranges = [], []
        for e in prof.key_averages():
            (operators if _OPERATOR_EVENT.fullmatch(e.key) else ranges).append(e)
        inside = sum(e.self_cpu_time_total for e in operators) / 1e6
        counts.append(sum(e.count for e in operators))
        ops.append(inside)
        shares.append(min(1.0, inside / wall) if wall > 0 else 1.0)
        outside.append(outside_ranges(ranges, wall))
    return InsideOperators(statistics.median(ops), statistics.median(shares), outside=largest_outside(outside),
                           counts=counts)  # fmt: skip


class OperatorWatch(TorchDispatchMode):
    """A dispatch mode that looks at a step's operator calls and changes nothing of what runs (the
    base of :func:`inside_operators_dispatch`'s clock and of the capture helper's look at a step's
    inputs, :func:`.recorder._record_inputs`).

    * A higher-order operator (``torch.cond``, flex_attention's) comes to it as one call, and runs
      as it would (torch refuses one under a mode that does not say it takes them).
    * torch.compile'd code compiles with the mode off and runs under it: the mode sees the
      operators the compiled code calls, which are those a trace records of it. By default torch
      refuses to compile under a mode and runs the Python instead, and where it must compile (an
      eager flex_attention or ``torch.cond`` compiles its operator with ``fullgraph=True``) the call
      fails; in torch 2.13 that refusal also made the same calls fail later, outside any mode."""

    supports_higher_order_operators = True

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        return True


def inside_operators_dispatch(fn, *, calls: int = 3, between=None) -> InsideOperators | None:
    """:func:`inside_operators` taken by another instrument: a clock read around every operator
    call where the dispatcher hands it to Python (a ``TorchDispatchMode``: below autograd, so the
    backward pass's operators are in it and the autograd layer's bookkeeping is not, each call
    counted once however its kernel calls other operators; under ``torch.inference_mode`` a
    composite such as ``matmul`` reaches it whole; a higher-order operator such as ``torch.cond``
    is one call), summed. The instruments disturb a step differently: the profiler records every
    event in its own buffers, this one runs Python around every call, and its window holds the
    call's own way back into the dispatcher (about a microsecond a call on the 2-core host: it
    pulls the ratios of steps of tiny operators towards 1), in an original step and its replay
    alike. Where their ratios of a replay to its original differ, the difference is the
    instruments' (the two put GIN's training at 1.07 and 0.99 of its original in one run:
    benchmarks/RESULTS.md). ``share`` is of the
    call's time under the mode, whose own Python lengthens it. ``ops`` counts the last call's
    operator calls by operator. ``record_function`` labels are not operators. CPU time only."""
    clock = time.perf_counter_ns

    class Clock(OperatorWatch):
        def __init__(self):
            super().__init__()
            self.ns = 0
            self.calls: dict[str, int] = {}

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.namespace == "profiler":  # a record_function label's enter and exit
                return func(*args, **(kwargs or {}))
            t0 = clock()
            out = func(*args, **(kwargs or {}))
            self.ns += clock() - t0
            name = func.name()
            self.calls[name] = self.calls.get(name, 0) + 1
            return out

    ops, shares, counted = [], [], {}
    for _ in range(calls):
        if between is not None:
            between()
        with Clock() as c:
            t0 = time.perf_counter()
            fn()
            wall = time.perf_counter() - t0
        ops.append(c.ns / 1e9)
        shares.append(min(1.0, c.ns / 1e9 / wall) if wall > 0 else 1.0)
        counted = c.calls
    return InsideOperators(statistics.median(ops), statistics.median(shares), counted)


#: The instruments that time a step's operators (:func:`inside_operators_alternated`'s ``timer``).
OP_TIMERS = {"profiler": inside_operators, "dispatch": inside_operators_dispatch}


def inside_operators_alternated(fns, n: int, befores=(None, None), measure=None,
                                timer: str = "profiler") -> list[InsideOperators] | None:  # fmt: skip
    """:func:`inside_operators` of each of ``fns`` (an original step and its replay), one measured
    call of each in turn, ``n`` times: the machine's drift then hits both alike. Medians.
    ``timer`` names the instrument (:data:`OP_TIMERS`); ``measure(fn, before)`` measures one call
    otherwise (a GPU's time inside kernels), None where it cannot."""
    if measure is None:
        def measure(fn, before):
            return OP_TIMERS[timer](fn, calls=1, between=before)

    got: list[list[InsideOperators]] = [[] for _ in fns]
    for _ in range(n):
        for i, (fn, before) in enumerate(zip(fns, befores)):
            one = measure(fn, before)
            if one is None:
                return None
            got[i].append(one)
    # (each side's operator counts call by call, where the instrument counts them: a step whose work
    # changes from call to call shows there)
    return [InsideOperators(statistics.median(g.ops_s for g in x), statistics.median(g.share for g in x),
                            counts=[c for g in x for c in (g.counts or ())] or None) for x in got]  # fmt: skip


def per_op_medians(replay, iters: int = 5) -> dict[str, float]:
    """Median seconds per iteration spent in each operator (summed over its calls), from
    ``iters`` instrumented iterations of a prepared replay. Each op is timed on its own (with a
    device synchronisation after it on CUDA), so the figures show where the time goes; the
    uninstrumented timing stays the reference for the whole step."""
    if hasattr(replay, "per_op_medians"):
        return replay.per_op_medians(iters)
    cuda = replay.device.type == "cuda"
    clock = time.perf_counter_ns
    runs: list[dict[str, float]] = []
    for _ in range(iters):
        acc: dict[str, float] = {}
        last = [clock()]

        def after(step, result, acc=acc, last=last):
            if cuda:
                torch.cuda.synchronize(replay.device)
            now = clock()
            acc[step.name] = acc.get(step.name, 0.0) + (now - last[0]) / 1e9
            last[0] = now

        replay.between_iterations()
        if cuda:
            torch.cuda.synchronize(replay.device)
        last[0] = clock()
        replay.run(after_step=after)
        runs.append(acc)
    names = {n for r in runs for n in r}
    return {n: statistics.median(r.get(n, 0.0) for r in runs) for n in names}
