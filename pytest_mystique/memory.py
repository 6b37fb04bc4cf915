"""Memory figures: the trace's peak of live tensor bytes and the replay's; and the bound on what
the build may allocate on the CPU (:func:`allocation_limit`).

A storage that first appears as an op's *input* existed before the step (parameters, optimizer
state, the batch) and is counted as live for the whole step; one that an op *produces* is live
from that op to its last use. The replay is accounted the same way: the bytes of the distinct
storages its slots hold after each step, plus the step's own results.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import torch

try:
    import resource
except ImportError:  # (not on Windows: the build runs unbounded there)
    resource = None  # type: ignore[assignment]

from .graph import select_ops
from .trace import Trace, tensors_of


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
                size[sid] = max(size.get(sid, 0), (ref.offset + ref.extent()) * ref.itemsize)
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
        elif isinstance(o, torch.Tensor) and o.layout == torch.strided:  # (other layouts' memory is not counted)
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


#: The build's address space beyond the memory limit: what is reserved without being tensors (a
#: thread's stack and malloc arena, 72 MiB of address space each however little they hold; the
#: code a first call of a kernel loads), so that the limit is the tensors' alone.
SLACK_BYTES, SLACK_PER_THREAD = 1 << 30, 128 << 20


def _address_space() -> int | None:
    """This process's address space in bytes (Linux), or None where it cannot be read."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


@contextmanager
def allocation_limit(device: torch.device, max_memory: int | None) -> Iterator[int | None]:
    """Bound, while the build calls each op once on the CPU, what the process may allocate: its
    address space now plus ``max_memory`` (and :data:`SLACK_BYTES`). Yields the limit in bytes,
    None where there is none.

    The plan refuses a replay whose input tensors need more than ``max_memory``, but what an op
    allocates follows from its arguments: a trace whose padding or sizes were damaged can ask for
    tens of gigabytes. One allocation larger than the machine is refused by the kernel, but one
    that fits, filled by the kernel, or several together, let Linux's out-of-memory killer end the
    whole session. Under this limit such an allocation fails in torch as an out-of-memory error,
    and the op is skipped with its reason. (A GPU's allocator refuses by itself. On a machine with
    CUDA there is no limit: CUDA's runtime reserves far more address space than memory when it
    starts, which a CPU replay's op can make it do (``pin_memory``), and a limit would fail that.)"""
    start = _address_space() if device.type == "cpu" and max_memory is not None and resource is not None else None
    if start is None or torch.cuda.is_available():
        yield None
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = start + max_memory + SLACK_BYTES + SLACK_PER_THREAD * torch.get_num_threads()
    for bound in (soft, hard):
        if bound != resource.RLIM_INFINITY:
            limit = min(limit, bound)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    try:
        yield limit
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def out_of_memory(e: BaseException) -> bool:
    """Whether ``e`` is an allocation's failure (torch's or Python's)."""
    if isinstance(e, MemoryError):
        return True
    text = str(e)
    return isinstance(e, RuntimeError) and ("can't allocate memory" in text or "not enough memory" in text
                                            or "out of memory" in text)  # fmt: skip
