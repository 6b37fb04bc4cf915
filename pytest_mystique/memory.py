"""Memory figures: the trace's peak of live tensor bytes and the replay's.

A storage that first appears as an op's *input* existed before the step (parameters, optimizer
state, the batch) and is counted as live for the whole step; one that an op *produces* is live
from that op to its last use. The replay is accounted the same way: the bytes of the distinct
storages its slots hold after each step, plus the step's own results.
"""

from __future__ import annotations

import torch

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
