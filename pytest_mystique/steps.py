"""What a prepared replay is made of, and how one of its calls is made.

A *planned op* is a trace's operator resolved to a ``torch.ops`` overload, its recorded arguments
converted to the schema's types (tensors still as the trace's references); a *step* is one
pre-bound call of the timed iteration: the op, its constant arguments and the slots its tensors
are read from and its outputs written to. The *report* tells the user what became of each op.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import torch

from .ops import NO_DEFAULT
from .trace import Node, TensorRef, Unstrided


@dataclass
class TensorArg:
    ref: TensorRef


@dataclass
class TensorListArg:
    refs: list[TensorRef | None]


@dataclass
class UnstridedArg:
    """A tensor recorded without storage (sparse...): what an earlier replayed op with the id the
    trace gives it returned, or, for an input of the step (``rebuild``), a sparse tensor made from
    its recorded shape."""

    tensor_id: int
    rebuild: Unstrided | None = None


@dataclass
class PlannedOp:
    node: Node
    overload: Any
    values: list[Any]  # constants, TensorArg or TensorListArg, in schema order
    kwnames: tuple[str, ...]  # names of the trailing keyword-only arguments
    substitution: str | None = None
    collective: bool = False  # a c10d op, called through torch.distributed (collectives.py)
    # inputs no replayed op makes that are views an op inside a replayed one made of an earlier
    # output -> that output (read through a view of it: Replay._view_of)
    views: dict[TensorRef, TensorRef] = field(default_factory=dict)
    refused: str = ""  # for a substitute called where the recorded op failed: that op's error


@dataclass(slots=True)
class Step:
    """One call of the replay loop."""

    fn: Any
    args: list[Any]
    fills: list[tuple[int, int]]  # (position in args, env slot)
    list_fills: list[tuple[int, tuple[int, ...]]]  # (position, slots; -1 for None)
    npos: int  # args[:npos] are positional, the rest are keyword arguments named kwnames
    kwnames: tuple[str, ...]
    outs: list[tuple[int, Any]]  # (result index, slot or tuple of slots)
    single: bool  # the op returns one value, not a tuple
    frees: tuple[int, ...] = ()
    name: str = ""
    node_id: int = -1
    out: int | None = None  # where ``outs`` is just the single result's slot (most ops): that slot
    grad: bool = False  # it runs with autograd recording (a training step's forward op)
    op: str = ""  # the overload called, "namespace::name.overload"
    # (a backward pass's first op) slots whose autograd graph is let go first: each becomes its
    # ``.data``, the same memory without the graph. ``detach()`` would do it too, through the
    # dispatcher: 0.44 us a tensor against 0.30, and an operator event the original never had,
    # counted in the replay's time inside operators (1,744 of them in a small RWKV's training step)
    release: tuple[int, ...] = ()
    # not a traced op: the view an op's input is of an earlier op's output (Replay._view_of), or a
    # copy of an input on the device (Replay._host_copied); dropped where nothing reads it
    view: bool = False


@dataclass
class Report:
    """What the replay did with the trace's ops; shown to the user."""

    ops_total: int = 0
    ops_replayed: int = 0
    skipped: Counter = field(default_factory=Counter)  # (op, reason) -> count
    substitutions: Counter = field(default_factory=Counter)  # (op, replacement) -> count
    notes: Counter = field(default_factory=Counter)  # free-text remarks -> count

    @property
    def ops_skipped(self) -> int:
        return sum(self.skipped.values())

    def skipped_list(self) -> list[dict]:
        return [{"op": op, "reason": why, "count": n} for (op, why), n in self.skipped.most_common()]

    def substitutions_list(self) -> list[dict]:
        return [{"op": op, "replacement": rep, "count": n} for (op, rep), n in self.substitutions.most_common()]


def arg_refs(v: Any) -> list[TensorRef]:
    """The trace's tensors a planned argument reads (a list's defined items)."""
    if isinstance(v, TensorArg):
        return [v.ref]
    if isinstance(v, TensorListArg):
        return [r for r in v.refs if r is not None]
    return []


def kept_positions(args: list, npos: int, kwnames: tuple[str, ...], filled: set[int], facts) -> list[int] | None:
    """The positions of ``args`` to pass: all but the trailing positional ones and the keyword-only
    ones whose value is the schema's default (a parameter is never left out). None where nothing
    is left out, or the schema does not describe ``args``."""
    defaults = facts.defaults
    if len(args) > len(defaults):
        return None

    def default(i: int) -> bool:
        v, d = args[i], defaults[i]
        if i in filled or d is NO_DEFAULT:
            return False
        if v is None or d is None:
            return v is d
        return type(v) is type(d) and (repr(v) == repr(d) if isinstance(v, float) else v == d)

    n = npos
    while n and default(n - 1):
        n -= 1
    kept = [*range(n), *(i for i in range(npos, len(args)) if not default(i))]
    return kept if len(kept) < len(args) else None


def call_op(fn, args: list, npos: int, kwnames: tuple[str, ...]):
    """``fn`` called with ``args[:npos]`` as positional arguments and the rest named ``kwnames``."""
    return fn(*args[:npos], **dict(zip(kwnames, args[npos:]))) if kwnames else fn(*args)


def bound_call(step: Step, facts, args: list, outputs: list):
    """The op's first call, through its Python binding where it has one (:func:`ops.python_binding`),
    which then becomes ``step.fn``; through the ``OpOverload`` where the binding does not take
    these arguments (a Python signature that differs from the schema's: ``Tensor.to``'s memory
    format is keyword-only; an operator dunder such as ``Tensor.__and__`` says so by returning
    ``NotImplemented``) or returns tensors of other shapes or types than the trace records."""
    binding = facts.binding
    if binding is not None:
        try:
            result = call_op(binding, args, step.npos, step.kwnames)
        except TypeError:  # the binding's argument parser; an op's own errors come again below
            result = NotImplemented
        if result is not NotImplemented:  # (kept, a declining binding would do nothing in every iteration)
            results = (result,) if facts.returns <= 1 else tuple(result)
            if all(not isinstance(out, TensorRef) or not out.defined or as_recorded(out, r)
                   for out, r in zip(outputs, results)):  # fmt: skip
                step.fn = binding
                return result
    return call_op(step.fn, args, step.npos, step.kwnames)


def read_slots(step: Step) -> list[int]:
    """The slots a step reads: its tensor arguments', then its tensor lists' items (``None`` left out)."""
    return [s for _, s in step.fills] + [s for _, slots in step.list_fills for s in slots if s >= 0]


def out_slots(outs: list[tuple[int, Any]]) -> list[int]:
    """The slots a step's ``outs`` fill (a list output's slots one by one, its unbound items left out)."""
    return [s for _, out in outs for s in ((out,) if isinstance(out, int) else out) if s >= 0]


def as_recorded(out: TensorRef, value: Any) -> bool:
    """``value`` is a tensor of the shape and type the trace records for the output ``out``."""
    return isinstance(value, torch.Tensor) and tuple(value.shape) == out.shape and str(value.dtype)[6:] == out.dtype


def filled_args(step: Step, env: list) -> list:
    """``step``'s arguments with its tensors read from the slots of ``env``."""
    args = step.args.copy()
    for pos, slot in step.fills:
        args[pos] = env[slot]
    for pos, slots in step.list_fills:
        args[pos] = [env[s] if s >= 0 else None for s in slots]
    return args


def runs_without_grad(step: Step, args: list) -> bool:
    """The op, which failed with grad mode on, runs with it off: autograd was what refused it (an
    op's own complaint, an index out of range, comes again and is handled as such)."""
    try:
        call_op(step.fn, args, step.npos, step.kwnames)
    except Exception:  # noqa: BLE001 - not autograd's doing
        return False
    return True
