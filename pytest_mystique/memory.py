"""Memory figures: the trace's peak of live tensor bytes and the replay's; the default memory
limit, and the bound it sets on what the build may allocate on the CPU (:func:`allocation_limit`).

A storage that first appears as an op's *input* existed before the step (parameters, optimizer
state, the batch) and is counted as live for the whole step; one that an op *produces* is live
from that op to its last use. The replay is accounted the same way: the bytes of the distinct
storages its slots hold after each step, plus the step's own results.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch

try:
    import resource
except ImportError:  # (not on Windows: the build runs unbounded there)
    resource = None  # type: ignore[assignment]

from .graph import select_ops
from .trace import Trace, tensors_of
from .units import fmt_bytes


def trace_peak_bytes(trace: Trace) -> int:
    ops = select_ops(trace)
    size: dict[int, int] = {}
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    preexisting: set[int] = set()
    for i, node in enumerate(ops):
        for side, values in (("in", node.inputs), ("out", node.outputs)):
            for ref in tensors_of(values):
                sid = ref.storage_id
                size[sid] = max(size.get(sid, 0), ref.reach_bytes())
                if sid not in first:
                    first[sid] = i
                    if side == "in":
                        preexisting.add(sid)
                last[sid] = i
    n = len(ops)
    delta = [0] * (n + 1)
    for sid, nbytes in size.items():
        lo, hi = (0, n - 1) if sid in preexisting else (first[sid], last[sid])
        delta[lo] += nbytes
        delta[hi + 1] -= nbytes
    peak = cur = 0
    for d in delta[:n]:
        cur += d
        peak = max(peak, cur)
    return peak


def _storage_bytes(objs, seen: set[int]) -> int:
    total = 0
    stack = list(objs)
    while stack:
        o = stack.pop()
        if isinstance(o, torch.Tensor) and o.layout == torch.sparse_coo:
            stack.extend((o._indices(), o._values()))
        elif isinstance(o, torch.Tensor) and o.layout == torch.strided and not o._is_zerotensor():
            # (other layouts' memory is not counted; a zero tensor of forward-mode AD has none)
            st = o.untyped_storage()
            key = st.data_ptr()
            if key not in seen and st.nbytes():
                seen.add(key)
                total += st.nbytes()
        elif isinstance(o, (list, tuple)):
            stack.extend(o)
    return total


def replay_peak_bytes(replay) -> int:
    """One instrumented iteration of a prepared replay; returns the peak of held tensor bytes."""
    peak = 0

    def after_step(step, result) -> None:
        nonlocal peak
        seen: set[int] = set()
        held = _storage_bytes(replay.env, seen) + _storage_bytes([result], seen)
        peak = max(peak, held)

    replay.reset_state()
    replay.run(after_step=after_step)
    return peak


def default_memory_limit(device: torch.device) -> int:
    """Without --mystique-max-memory: 80% of the device's memory (the machine's RAM for the CPU)."""
    try:
        if device.type == "cuda":
            return int(torch.cuda.get_device_properties(device).total_memory * 0.8)
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") * 0.8)
    except (ValueError, OSError, AttributeError, RuntimeError):
        return 64 << 30


#: The build's address space beyond the memory limit: what is reserved without being tensors (a
#: thread's stack and malloc arena, 72 MiB of address space each however little they hold; a
#: process group's threads, 64 MiB each; the code a first call of a kernel loads).
SLACK_BYTES, SLACK_PER_THREAD = 1 << 30, 128 << 20


@dataclass(frozen=True)
class Limit:
    """The address space the build may reach, and what set it (for the messages)."""

    nbytes: int
    by: str


def _address_space() -> int | None:
    """This process's address space in bytes (Linux), or None where it cannot be read."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def _available_memory() -> int | None:
    """What the machine can give without swapping now (Linux's MemAvailable), or None."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) << 10
    except (OSError, ValueError, IndexError):
        pass
    return None


def limits_allocations(device: torch.device) -> bool:
    """Whether a build on ``device`` runs under :func:`allocation_limit`'s limit here: on the CPU
    of a Linux machine without CUDA."""
    return device.type == "cpu" and resource is not None and _address_space() is not None \
        and not torch.cuda.is_available()  # fmt: skip


@contextmanager
def allocation_limit(device: torch.device, max_memory: int | None) -> Iterator[Limit | None]:
    """Bound what the process may allocate while the build calls each op once on the CPU: its
    address space now plus ``max_memory`` (or the memory the machine has available, if less) and
    :data:`SLACK_BYTES`. Yields the :class:`Limit`, None where there is none.

    The plan refuses a replay whose input tensors need more than ``max_memory``, but what an op
    allocates follows from its arguments: a trace whose padding or sizes were damaged can ask for
    tens of gigabytes. One allocation larger than the machine is refused by the kernel, but one
    that fits, filled by the kernel, or several together, let Linux's out-of-memory killer end the
    whole session. Under this limit such an allocation fails in torch as an out-of-memory error,
    and the op is skipped with its reason. The limit is the whole process's, threads' stacks too:
    the thread pool is started first, at its full size, so that a pool growing near the limit does
    not fail to start a thread (which ends the process). (A GPU's allocator refuses by itself. On a
    machine with CUDA there is no limit: CUDA's runtime reserves far more address space than memory
    when it starts, which a CPU replay's op can make it do (``pin_memory``), and a limit would fail
    that.)"""
    if max_memory is None or not limits_allocations(device):
        yield None
        return
    if torch.get_num_threads() > 1:
        torch.ones(32768 * torch.get_num_threads()).add_(1)  # (starts every thread of the pool: a grain each)
    start = _address_space() or 0
    room, by = max_memory, f"the {fmt_bytes(max_memory)} memory limit (--mystique-max-memory)"
    available = _available_memory()
    if available is not None and available < room:
        room, by = available, f"the {fmt_bytes(available)} of memory the machine had available"
    limit = start + room + SLACK_BYTES + SLACK_PER_THREAD * torch.get_num_threads()
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY and soft <= limit:  # (the soft limit is at most the hard one)
        limit, by = soft, "the process's address-space limit (ulimit -v)"
    try:
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
        yield Limit(limit, by)
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def out_of_memory(e: BaseException) -> bool:
    """Whether ``e`` is an allocation's failure (torch's, C++'s or Python's)."""
    if isinstance(e, MemoryError):
        return True
    text = str(e)
    return isinstance(e, RuntimeError) and any(w in text for w in ("can't allocate memory", "not enough memory",
                                                                   "bad_alloc"))  # fmt: skip
