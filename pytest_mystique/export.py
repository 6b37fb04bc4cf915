"""Portable benchmark: a prepared replay written out as a standalone Python script.

``mystique export TRACE -o bench.py`` writes a script that needs nothing but torch: the replay's
operator calls as straight-line code (``torch.ops.<ns>.<op>.<overload>(...)``), its input
tensors as a recipe (storage sizes, views, value ranges; filled from a seeded generator at run
time, never shipped as data), the frees after each tensor's last use, and a timing loop that
prints the op count, every iteration's time and the median. The device is chosen when the script
runs (``--device cuda:0``). Something to hand to a hardware vendor: Mystique's "portable
benchmark".

Input values follow the replay's: each view is filled with values in the range the replay gave
it (indices stay valid, scales stay positive; the optimizer's state is zero), index inputs with
the spread the replay gave them (distinct values, the hottest one's share), and sparse inputs
with their element counts. Inputs the step
writes in place are refilled every few iterations, outside the timing, and one untimed iteration
follows, as the replay does (:meth:`.replay.Replay.between_iterations`).
"""

from __future__ import annotations

import datetime as _dt
import functools
import inspect
import math
import textwrap

import torch

from .distributions import curve_counts, distinct_draws, in_runs, skewed, skewed_rows, zipf_exponent
from .errors import MystiqueError
from .ops import DUNDER_OPS
from .replay import RESEED_EVERY
from .tensors import distinct_view

_SCALARS = (bool, int, float, complex, str, type(None))


class ExportError(MystiqueError):
    """The replay holds something the exporter cannot write as code."""


def _const(v, where: str) -> str:
    """Python source for a constant argument."""
    if isinstance(v, float):
        return repr(v) if math.isfinite(v) else f"float({str(v)!r})"
    if isinstance(v, _SCALARS):
        return repr(v)
    if isinstance(v, torch.dtype):
        return str(v)
    if isinstance(v, torch.device):
        return "DEV"  # the device the script runs on
    if isinstance(v, torch.layout):
        return str(v)
    if isinstance(v, torch.memory_format):
        return str(v)
    if isinstance(v, torch.Generator):
        return "OP_GEN"  # the script's seeded generator on its device (the replay's stands in for the program's)
    if isinstance(v, (list, tuple)):
        inner = ", ".join(_const(x, where) for x in v)
        return f"[{inner}]" if isinstance(v, list) else f"({inner}{',' if len(v) == 1 else ''})"
    raise ExportError(None, f"{where}: cannot write a constant of type {type(v).__name__} as code")


def _op_expr(qualname: str) -> str:
    ns, _, rest = qualname.partition("::")
    name, _, overload = rest.partition(".")
    for part in (ns, name, overload):
        if not part.isidentifier() or (part.startswith("__") and part not in DUNDER_OPS):
            raise ExportError(None, f"operator name {qualname!r} is not a plain identifier")
    return f"torch.ops.{ns}.{name}.{overload}"


def _finite(x: float, instead: float) -> float:
    return float(x) if math.isfinite(x) else instead


def _inputs(replay) -> tuple[list[tuple[int, int]], list[tuple]]:
    """Storages (nbytes, is the step writing into it) and views (slot, storage, dtype, offset,
    shape, stride, low, high, written, spread) of the replay's input tensors. spread: None, or
    ``("skew", distinct share, hottest share, curve, tables)`` for an index input as the replay drew
    it (:class:`.distributions.Skew`; tables: :attr:`.ranges.IntRange.tables`), or
    ``("values", (...))`` for an integer input with a layout of its own (an embedding bag's sorted
    offsets, a packed sequence's batch sizes, lengths that sum to a size, row by row too), whose values the
    replay made to fit its op and the script takes as they are: drawn uniformly, offsets would
    not start at 0 nor rise, and the op would refuse them; and for one the program made from its
    own numbers (``torch.tensor([32, 24])``: the original's values)."""
    storages: dict[int, int] = {}
    index: dict[int, int] = {}
    views = []
    for (ref, _), slot in replay._externals.items():
        t = replay.env[slot]
        if not isinstance(t, torch.Tensor):
            continue
        st = t.untyped_storage()
        key = st.data_ptr()
        if key not in index:
            index[key] = len(index)
            storages[index[key]] = st.nbytes()
        low = high = 0
        if ref in replay.factory.zeros:
            low = high = 0.0  # starts every iteration at zero (the preparation's own call moved it)
        elif t.numel() and not t.is_complex():
            low, high = (x.item() for x in torch.aminmax(t.detach().reshape(-1).to(torch.float64)))
            low, high = (_finite(low, -1.0), _finite(high, 1.0)) if t.is_floating_point() else (int(low), int(high))
        skew, rng = replay.factory.skews.get(ref), replay.factory.ranges.get(ref)
        spread = None
        if skew is not None:  # (its hottest values lie above the range's lowest; the script draws above ``low``)
            shift = (0 if rng is None else rng.low) - int(low)
            spread = ("skew", skew.distinct, skew.top, skew.curve, 1 if rng is None else rng.tables,
                      tuple((r.distinct, r.top, r.curve, (), tuple(v + shift for v in r.values), r.runs) for r in skew.rows),
                      tuple(v + shift for v in skew.values), skew.runs)  # fmt: skip
        if ((rng is not None and rng.kind != "uniform" or ref in replay.factory.masks or ref in replay.factory.values
                or replay.factory.own_runs(ref))
                and t.numel()
                and not (t.is_floating_point() or t.is_complex())):  # fmt: skip
            spread = ("values", tuple(int(x) for x in distinct_view(t).detach().reshape(-1).tolist()))
        views.append((slot, index[key], str(t.dtype).removeprefix("torch."), t.storage_offset(), tuple(t.shape),
                      tuple(t.stride()), low, high, slot in replay._mutated, spread))  # fmt: skip
    return [(storages[i], any(v[1] == i and v[8] for v in views)) for i in range(len(storages))], views


#: The replay's own code for an index input's seeded draw (:mod:`.distributions`) and a mask's
#: distinct elements (torch alone), copied into the script so that it draws as the replay does.
_DRAWS = "\n\n\n".join(inspect.getsource(f).rstrip() for f in (distinct_draws, curve_counts, zipf_exponent, skewed, in_runs,
                                                                skewed_rows, distinct_view))  # fmt: skip


def export_script(replay, trace_path: str) -> str:
    """The source of a standalone benchmark of the prepared ``replay``."""
    if not replay.prepared:
        raise ExportError(trace_path, "the replay must be prepared before it is exported")
    storages, views = _inputs(replay)
    body, arounds = [], []
    for step in replay.steps:
        where = f"op {step.name} (node {step.node_id})"
        try:
            args = list(step.args)
            parts = [None] * len(args)
            for pos, slot in step.fills:
                parts[pos] = f"e[{slot}]"
            for pos, slots in step.list_fills:
                parts[pos] = "[" + ", ".join("None" if s < 0 else f"e[{s}]" for s in slots) + "]"
            for i, a in enumerate(args):
                if parts[i] is None:
                    parts[i] = _const(a, where)
            call_args = parts[: step.npos] + [f"{k}={v}" for k, v in zip(step.kwnames, parts[step.npos:])]
            around = _around(step.fn)
            if around is None:
                call = f"{_op_expr(step.op)}({', '.join(call_args)})"
            else:  # a substitute's own ops around its target (substitute.Composite): its function goes along
                arounds.append(around)
                call = f"{around.__name__}({', '.join([_op_expr(step.op), *call_args])})"
        except ExportError as e:
            raise ExportError(trace_path, e.problem) from None
        if not step.outs:
            body.append(call)
        else:
            body.append(f"r = {call}")
            result = "(r,)" if step.single else "r"
            body.append(f"r = {result}")
            for i, slot in step.outs:
                if isinstance(slot, int):
                    body.append(f"e[{slot}] = r[{i}]")
                else:
                    for j, s in enumerate(slot):
                        if s >= 0:
                            body.append(f"e[{s}] = r[{i}][{j}]")
        for s in step.frees:
            body.append(f"e[{s}] = None")
    n_slots = len(replay.env)
    step_src = "\n".join("    " + line for line in body) or "    pass"
    return _TEMPLATE.format(
        trace=str(trace_path).replace('"', "'"), date=_dt.date.today().isoformat(), torch=torch.__version__,
        ops=len(replay.steps), storages=repr(storages), views=_views_src(views), slots=n_slots, step=step_src,
        sparse=repr(_sparse_inputs(replay)), mkldnn=repr(_mkldnn_inputs(replay)), helpers=_helper_sources(arounds), grad=repr(_flagged(replay)),
        reseed=RESEED_EVERY, draws=_DRAWS,
    )  # fmt: skip


def _flagged(replay) -> list[int]:
    """The slots of the inputs that require grad in the replay (the parameters: a few ATen paths
    read the flag with autograd off, see :mod:`.grad_flags`): the script gives them the flag."""
    return sorted(slot for slot in set(replay._externals.values())
                  if isinstance(replay.env[slot], torch.Tensor) and replay.env[slot].requires_grad)  # fmt: skip


def _around(fn):
    """The function of a substitute that calls its target between ops of its own
    (:class:`.substitute.Composite`: a partial of that function and the target), or None."""
    from . import substitute

    if isinstance(fn, functools.partial) and getattr(fn.func, "__module__", None) == substitute.__name__:
        return fn.func
    return None


def _helper_sources(funcs) -> str:
    """The source of the substitutes' functions ``funcs`` and of the module's functions they call
    (this package's own code, never a trace's), for the script, which needs torch alone."""
    from . import substitute

    found: dict[str, str] = {}
    stack = list(funcs)
    while stack:
        f = stack.pop()
        if f.__name__ in found:
            continue
        found[f.__name__] = textwrap.dedent(inspect.getsource(f))
        codes = [f.__code__]
        while codes:  # (names read inside its comprehensions and lambdas too)
            code = codes.pop()
            codes.extend(c for c in code.co_consts if inspect.iscode(c))
            for name in code.co_names:
                g = getattr(substitute, name, None)
                if inspect.isfunction(g) and g.__module__ == substitute.__name__:
                    stack.append(g)
    if not found:
        return ""
    return "\n\n".join(found[k] for k in sorted(found)) + "\n\n"


def _inputs_of_layout(replay, layout: torch.layout) -> list[tuple[int, torch.Tensor]]:
    """(slot, tensor) of the inputs of ``layout`` the replay rebuilt (``Replay._unstrided_input``)."""
    return [(slot, t) for slot in sorted(replay.permanent)
            if isinstance(t := replay.env[slot], torch.Tensor) and t.layout == layout]  # fmt: skip


def _sparse_inputs(replay) -> list[tuple]:
    """(slot, shape, dtype, elements, sparse dimensions, coalesced) of the sparse COO inputs the
    replay rebuilt: the script draws their positions and values anew."""
    return [(slot, tuple(t.shape), str(t.dtype).removeprefix("torch."), t._nnz(), t.sparse_dim(), t.is_coalesced())
            for slot, t in _inputs_of_layout(replay, torch.sparse_coo)]  # fmt: skip


def _mkldnn_inputs(replay) -> list[tuple]:
    """(slot, shape, dtype) of the MKL-DNN inputs the replay rebuilt: the script draws them anew."""
    return [(slot, tuple(t.shape), str(t.dtype).removeprefix("torch."))
            for slot, t in _inputs_of_layout(replay, torch._mkldnn)]  # fmt: skip


def _views_src(views) -> str:
    lines = ",\n".join(f"    {v!r}" for v in views)
    return f"[\n{lines}\n]" if views else "[]"


_TEMPLATE = '''#!/usr/bin/env python3
"""Portable benchmark of an execution trace, exported by pytest-mystique.

trace: {trace}
exported: {date} with torch {torch}; {ops} operator calls per iteration.
Needs only torch. Usage: python THIS.py [--device cpu|cuda:0] [--iters 20] [--warmup 5] [--threads N]
Prints the op count, each iteration's time and the median.
"""

import argparse
import ctypes
import statistics
import time

import torch

OPS = {ops}
# storages: (bytes, written in place by the step); views: (slot, storage, dtype, offset, shape, stride, low, high,
# written, spread: None; ("skew", an index input's share of distinct values, its hottest value's share, the
# curve of the hottest values' shares, the tables whose indices it holds one after another, each row's
# (share of distinct values, hottest share, curve, -, hottest values, their runs) for a tensor of coordinates,
# the hottest values above low, and the (start, length) runs each stood in, where it stood together); or
# ("values", the values of an integer input with a layout its op needs: sorted offsets, lengths, or of a boolean
# one the capture recorded: a padding mask))
STORAGES = {storages}
VIEWS = {views}
# sparse COO inputs: (slot, shape, dtype, elements, sparse dimensions, coalesced)
SPARSE = {sparse}
# MKL-DNN inputs (an opaque layout of the CPU's oneDNN): (slot, shape, dtype), values in [-1, 1)
MKLDNN = {mkldnn}
# inputs that require grad, as the original's parameters did: with autograd off (the step runs under
# torch.no_grad) the flag still decides the path of a few ops (a matmul folding a batch, an embedding bag)
GRAD = {grad}


def fill(t, low, high, gen, spread=None):
    if t.numel() == 0:
        return
    if spread is not None and spread[0] == "values":  # (an expanded view's repeats written once)
        d = distinct_view(t)
        d.copy_(torch.tensor(spread[1], dtype=t.dtype).view(d.shape))
    elif t.dtype == torch.bool:
        t.copy_(torch.randint(0, 2, t.shape, generator=gen).to(torch.bool))
    elif t.is_floating_point() and high == low:  # one value throughout (an optimizer's state starts at zero)
        t.fill_(low)
    elif t.is_floating_point():
        t.copy_(torch.empty(t.shape, dtype=torch.float64).uniform_(low, high, generator=gen))
    elif t.is_complex():
        t.zero_()
    elif spread is not None:
        skew, tables = Skew(*spread[1:4], spread[5], spread[6], spread[7]), spread[4]
        t.copy_((int(low) + skewed_rows(int(high) - int(low) + 1, t.numel(), skew, gen, torch.device("cpu"), tables)).view(t.shape))
    else:
        t.copy_(torch.randint(int(low), int(high) + 1, t.shape, generator=gen))


class Skew:
    """An index input's spread as the replay drew it (its distributions.Skew; the draws below are its code)."""

    def __init__(self, distinct, top, curve, rows=(), values=(), runs=()):
        self.distinct, self.top, self.curve, self.values, self.runs = distinct, top, curve, values, runs
        self.rows = tuple(Skew(*row) for row in rows)


{draws}


def make_inputs(dev, gen):
    bases = [torch.empty(n, dtype=torch.uint8, device=dev) for n, _ in STORAGES]
    e = [None] * {slots}
    for slot, st, dtype, offset, shape, stride, low, high, _, spread in VIEWS:
        t = torch.empty(0, dtype=getattr(torch, dtype), device=dev)
        t.set_(bases[st].untyped_storage(), offset, shape, stride)
        fill(t, low, high, gen, spread)
        e[slot] = t
    for slot, shape, dtype, nnz, sparse_dim, coalesced in SPARSE:
        e[slot] = make_sparse(shape, getattr(torch, dtype), nnz, sparse_dim, coalesced, dev, gen)
    for slot, shape, dtype in MKLDNN:
        e[slot] = torch.empty(shape, dtype=getattr(torch, dtype)).uniform_(-1, 1, generator=gen).to_mkldnn()
    for slot in GRAD:
        e[slot].requires_grad_(True)
    return e


def make_sparse(shape, dtype, nnz, sparse_dim, coalesced, dev, gen):
    """nnz elements at distinct seeded positions of the sparse dimensions, values in [-1, 1)."""
    positions = 1
    for size in shape[:sparse_dim]:
        positions *= size
    flat = distinct_draws(positions, nnz, gen, torch.device("cpu"))
    if coalesced:
        flat = flat.sort().values
    rows = []
    for size in reversed(shape[:sparse_dim]):
        rows.append(flat % size)
        flat = flat // size
    values = torch.empty((nnz, *shape[sparse_dim:]), dtype=torch.float64)
    if dtype.is_floating_point or dtype.is_complex:
        values.uniform_(-1, 1, generator=gen)
    else:  # integers 0 or 1, booleans either
        values.copy_(torch.randint(0, 2, values.shape, generator=gen))
    t = torch.sparse_coo_tensor(torch.stack(rows[::-1]), values.to(dtype), shape, check_invariants=False).to(dev)
    return t._coalesced_(True) if coalesced else t


def refill(e, gen):
    for slot, _, _, _, _, _, low, high, written, spread in VIEWS:
        if written:
            fill(e[slot], low, high, gen, spread)


{helpers}def step(e):
{step}


def steady_allocator():
    """glibc: a fixed mmap threshold, so that every process allocates intermediates alike."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 32 << 20)  # M_MMAP_THRESHOLD
        libc.mallopt(-1, 256 << 20)  # M_TRIM_THRESHOLD
    except (OSError, AttributeError):
        pass


def main():
    steady_allocator()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda:0" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    global DEV, OP_GEN
    DEV = torch.device(args.device)
    OP_GEN = torch.Generator(device=DEV).manual_seed(1)  # what ops given the program's generator draw from
    cuda = DEV.type == "cuda"
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        e = make_inputs(DEV, gen)
        times = []
        for i in range(args.warmup + args.iters):
            if i % {reseed} == 0:  # re-seeded every few iterations, then one untimed iteration, as the replay does
                refill(e, gen)
                step(e)
            if cuda:
                torch.cuda.synchronize(DEV)
            t0 = time.perf_counter_ns()
            step(e)
            if cuda:
                torch.cuda.synchronize(DEV)
            if i >= args.warmup:
                times.append((time.perf_counter_ns() - t0) / 1e9)
    print(f"ops per iteration: {{OPS}}")
    print(f"device: {{DEV}}")
    for i, t in enumerate(times):
        print(f"iteration {{i}}: {{t * 1e3:.3f}} ms")
    print(f"median: {{statistics.median(times) * 1e3:.3f}} ms")


DEV = torch.device("cpu")
OP_GEN = None

if __name__ == "__main__":
    main()
'''
