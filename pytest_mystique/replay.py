"""The replay engine: turns a trace's selected operators into a list of pre-bound calls.

Preparation runs in three passes:

1. *plan* (:mod:`.plan`): resolve every selected op to a ``torch.ops`` overload, convert its
   recorded arguments to the schema's types, and collect what the input data must look like
   (index ranges) and how large each storage is;
2. *build*: walk the ops in order, binding each tensor argument to the output of an earlier
   replayed op when there is one (same tensor id and layout), to a view of such an output (same
   storage), or else to a seeded input tensor; each op is called once here, so an op that cannot
   run is found now and skipped with its error as the reason;
3. *liveness*: an op's output is released after its last consumer; in an inference step it is
   held until just before the op that the trace shows taking its memory, where the original's
   program had let go of it (see :meth:`Replay._liveness`).

:meth:`Replay.run` then executes one iteration: the steps as straight-line code, each a call of
the pre-bound op on its tensors' local variables and its constant arguments
(:mod:`.straightline`). Nothing else happens inside the iteration.
"""

from __future__ import annotations

import math
import os
import re
import time
import warnings
from collections import Counter
from contextlib import contextmanager, nullcontext
from typing import Any, NamedTuple

import torch

from .collectives import Comms
from .errors import ReplayError, reason
from .graph import RESIZES, UNINITIALISED, opaque_autograd_nodes
from .measure import gc_paused
from .memory import Limit, allocation_limit, default_memory_limit, out_of_memory
from .nonfinite import (
    CONVERSIONS,
    LOG_TABLES,
    divides_by_a_given_zero,
    infinite_numbers,
    keeps_values,
    made_of_zeros_or_extremes,
    nonfinite_inputs,
    odd_data,
)
from .ops import arg_specs, schema_facts
from .plan import Planner, may_be_number, substitute_of
from .ranges import distinct_elements, index_ranges, integer_divisor
from .sidecar import load_sidecar, take_record
from .steps import (
    PlannedOp,
    Report,
    Step,
    TensorArg,
    TensorListArg,
    UnstridedArg,
    arg_refs,
    as_recorded,
    bound_call,
    filled_args,
    kept_positions,
    out_slots,
    read_slots,
    runs_without_grad,
)
from .straightline import StraightLine, straight_line
from .substitute import NO_EFFECT
from .tensors import TensorFactory
from .trace import ListValue, Node, Scalar, TensorRef, Trace, Unstrided, tensors_of
from .units import fmt_bytes

#: Ops whose output is drawn at random: it is not the original's data even when their inputs are.
_RANDOM_WORDS = ("rand", "bernoulli", "normal", "dropout", "uniform", "multinomial", "exponential", "cauchy",
                 "geometric", "poisson", "rrelu", "gamma", "binomial", "dirichlet")

#: Timed iterations between two re-seedings of the state a step writes in place (see
#: :meth:`Replay.between_iterations`).
RESEED_EVERY = 8

_AS_STRIDED = torch.ops.aten.as_strided.default
_TO_COPY = torch.ops.aten._to_copy.default


def resolve_device(spec: str | None) -> torch.device:
    """``auto`` (or None): the current CUDA device when there is one, else the CPU."""
    if spec in (None, "", "auto"):
        if torch.cuda.is_available():
            return torch.device("cuda", torch.cuda.current_device())
        return torch.device("cpu")
    try:
        dev = torch.device(spec)
    except (RuntimeError, TypeError):
        raise ReplayError(None, f"invalid device {spec!r}") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ReplayError(None, f"device {spec!r} asked for, but CUDA is not available")
        if dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
    return dev


#: When the replay frees an op's output: after its last read, or, where the trace shows the
#: original giving that memory to a later output, just before that output's op. By default (None)
#: the step decides: UNTIL_REUSE for an inference step, LAST_READ for one with a backward pass (see
#: Replay._liveness; ``benchmarks/liveness.py`` measures both against the live original).
LAST_READ, UNTIL_REUSE = "last-read", "until-reuse"
LIVENESS = (LAST_READ, UNTIL_REUSE)


class Replay:
    """A prepared replay of one trace on one device."""

    def __init__(self, trace: Trace, device: str | torch.device | None = "cpu", *, seed: int = 0,
                 max_memory: int | None = None, comms: Comms | None = None, liveness: str | None = None):  # fmt: skip
        if liveness is not None and liveness not in LIVENESS:
            raise ValueError(f"liveness must be one of {', '.join(LIVENESS)}, not {liveness!r}")
        self.trace = trace
        self.liveness = liveness  # when an op's output is freed (see _liveness; None: the step decides at the build)
        self.comms = comms  # the process groups collectives run on; None: collectives are skipped
        self.device = device if isinstance(device, torch.device) else resolve_device(device)
        self.seed = seed
        self.max_memory = max_memory if max_memory is not None else default_memory_limit(self.device)
        self.report = Report()
        self.steps: list[Step] = []
        self.env: list[Any] = []
        self.factory = TensorFactory(self.device, seed)
        self._produced: dict[tuple[int, int], _Produced] = {}  # key -> the latest tensor made with those ids
        self._generation: dict[int, int] = {}
        # the allocation a produced slot's tensor lies in: (storage id, generation). A trace writer
        # gives memory at an address the storage id of the last tensor there, so an op's output
        # that starts a new generation is where the original reused that memory (see _liveness)
        self._allocation: dict[int, tuple[int, int]] = {}
        self._externals: dict[tuple[TensorRef, int], int] = {}
        self.permanent: set[int] = set()
        self.prepared = False
        self.probe_s = 0.0  # time spent inside the ops during preparation (their first call)
        self.free_s = 0.0  # time spent freeing the ops' outputs during preparation (the allocator's work)
        self._mutated: set[int] = set()  # input slots that ops write in place (parameters, optimizer state)
        self._since_reseed = 0  # calls of between_iterations since the state was last re-seeded
        self.progress: int | None = None  # a file descriptor the build names each op on, before it calls it
        # what the plan found (:class:`.plan.Planner` says what each is). The build adds to _seeded the
        # tensors whose readers get seeded inputs instead of the replay's values (indices the original
        # computed from its own data, a divisor that could be 0), and takes out of _recording the ops
        # autograd refuses to record. _seeded holds (ids, the id of the op that made the tensor):
        # a writer gives a freed tensor's ids to a later one (see _seeded_now)
        self._seeded: set[tuple[tuple[int, int], int]] = set()
        # tensors the original computed whose readers get seeded inputs in their place (all the build
        # adds to _seeded, and the outputs of data-dependent shape): each in an allocation of its own
        self._stand_ins: set[tuple[int, int]] = set()
        self._called: set[int] = set()  # autograd nodes the replay calls itself (see _call_node)
        # (op id, ids) -> the slot of seeded indices that op reads in place of a stand-in written since
        self._fresh: dict[tuple[int, tuple[int, int]], int] = {}
        self._host_kept = False
        self._recording: set[int] = set()
        self._parameters: set[tuple[int, str]] = set()
        self._backward: set[int] = set()
        self._flagged: set[tuple[int, str]] = set()
        self._flag_paths: Counter = Counter()
        self._flag_given: set[tuple[int, str]] = set()  # the allocations of _flagged given the flag at the build
        self._first_nonfinite: str | None = None  # the first op whose output held NaN or inf, at the build
        self._infinite_made: set[int] = set()  # slots of outputs an op made from an infinity the trace gave
        self._first_subnormal: str | None = None  # the first whose output held subnormal numbers
        self._warned: Counter = Counter()  # (op, torch's warning) at the build (see _quiet)
        # slots holding the original's values: made by ops of recorded constants alone (arange, full, a
        # causal mask, a number whose value the capture recorded) or of such slots; NaN or inf there (a
        # mask's -inf, the log of a 0) was the original's.
        self._original: set[int] = set()
        # slots made by such ops of those and of 0-dim inputs without a recorded value (most often a
        # Python number the program passed, drawn here): NaN or inf there is the original's where an input
        # held 0 or a stand-in for infinity (the log of ``arange / 8`` at 0: see made_of_zeros_or_extremes),
        # else maybe not (``exp`` of ``arange`` scaled by a number drawn of the wrong sign)
        self._numbered: set[int] = set()
        self._original_in: dict[int, set[int]] = {}  # an allocation's address -> the slots of both sets in it
        self._nonfinite_numbered = False  # the first NaN or inf was in one of _numbered
        self._drawn_args: set[int] = set()  # ops (node ids) that take drawn numbers as numbers (see _rebuilt_with_numbers)
        self._input_storages: dict[int, int] = {}  # an input allocation's address -> the input that filled it
        self._unstrided: dict[int, int] = {}  # a planned op's output without storage -> the slot of the last op's output with it, at the build
        self._side: dict | None = None  # the trace's sidecar (see _sidecar)
        self._unstrided_records: list[dict] | None = None  # the sidecar's sparse inputs not yet matched (read when needed)
        self._unstrided_refused: dict[int, str] = {}  # inputs without storage not rebuilt -> why (their readers are skipped)
        # inputs that a recording op wrote in place (they got a grad_fn): let go of it where a backward
        # pass starts, with the forward's outputs
        self._grad_inputs: list[int] = []
        self._straight: StraightLine | None = None  # the steps as straight-line code (the timed iteration)
        self._anomaly = False  # whether the iterations run with autograd's anomaly detection (see _modes)
        self._copy_host: set[int] = set()  # ops that refused a host-kept tensor: they read a device copy
        self._limit: Limit | None = None  # the address space the build may use (memory.allocation_limit), while it runs

    # ---------------------------------------------------------------- plan
    def _plan(self) -> list[PlannedOp]:
        """Pass 1 (:mod:`.plan`): the planned ops; the seeded data's requirements are in the
        factory, and what else the build needs is taken from the planner."""
        planner = Planner(self.trace, self.device, self.factory, self.report, comms=self.comms, sidecar=self._sidecar,
                          max_memory=self.max_memory)  # fmt: skip
        planned = planner.plan()
        self._seeded, self._host_kept = planner.seeded, planner.host_kept
        self._recording, self._parameters, self._backward = planner.recording, planner.parameters, planner.backward
        self._flagged, self._flag_paths = planner.flagged, planner.flag_paths
        return planned

    # ---------------------------------------------------------------- build
    def _new_slot(self, value: Any = None) -> int:
        self.env.append(value)
        return len(self.env) - 1

    def _external(self, ref: TensorRef) -> int:
        # Trace writers reuse tensor and storage ids once the memory is freed: after a replayed op
        # outputs into a storage id, an input with an old tensor's ids is a different tensor (a
        # new generation gets its own slot).
        key = (ref, self._generation.get(ref.storage_id, 0))
        slot = self._externals.get(key)
        if slot is None:
            t = self.factory.make(ref, alone=ref.key in self._stand_ins)
            slot = self._new_slot(t)
            self._externals[key] = slot
            self.permanent.add(slot)
            if self._recorded_value(ref):  # (the original's values, as the capture recorded them)
                self._mark((slot,), self._original)
            elif ref.shape == ():  # most often a number the program passed
                self._mark((slot,), self._numbered)
            if (ref.storage_id, ref.dtype) in self._parameters:
                t.requires_grad_(True)
            elif (ref.storage_id, ref.dtype) in self._flagged and (t.dtype.is_floating_point or t.dtype.is_complex):
                t.requires_grad_(True)
                self._flag_given.add((ref.storage_id, ref.dtype))
            if t.untyped_storage().nbytes():
                self._input_storages.setdefault(t.untyped_storage().data_ptr(), slot)
        return slot

    def reset_state(self) -> None:
        """Give the inputs that the step writes in place (parameters, optimizer state, running
        statistics) fresh seeded data, so that every iteration starts from a state like the
        original step's. Without it, state drifts over many iterations of a replayed training
        step (its gradients come from random data) until values overflow and the kernels time
        NaN arithmetic. Called between timed iterations (:meth:`between_iterations`), never inside
        one."""
        if not self._mutated:
            return
        refs = {slot: ref for (ref, _), slot in self._externals.items()}
        with torch.no_grad():
            for slot in self._mutated:
                if slot in refs:  # (an input rebuilt without storage, sparse or MKL-DNN, keeps what ops wrote)
                    self.factory.fill(self.env[slot], refs[slot])

    def between_iterations(self) -> None:
        """What runs, untimed, before each timed iteration. Every ``RESEED_EVERY``-th call the
        inputs the step writes in place get fresh seeded data (:meth:`reset_state`) and one
        iteration runs, so that the timed iterations after it find that state as the original's
        steps found theirs: the step before had just read and written it, and it was in the
        caches. Re-seeded before every iteration instead, a recommender's 256 MB table was
        rewritten each time, and its training step took 1.25 times its original's on a host whose
        cache held the table (0.99 without the refill). Between two re-seedings the state drifts
        for ``RESEED_EVERY`` iterations at most, as a training run's does."""
        if not self._mutated:
            return
        if self._since_reseed % RESEED_EVERY == 0:
            self.reset_state()
            self.run()
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
        self._since_reseed += 1

    @property
    def nonfinite_at(self) -> str | None:
        """The first op whose output held NaN or inf at the build (``name (node id)``), or None."""
        return self._first_nonfinite

    def inputs(self) -> list[tuple[TensorRef, torch.Tensor]]:
        """The seeded input tensors: (the trace's tensor, the replay's tensor)."""
        return [(ref, self.env[slot]) for (ref, _), slot in self._externals.items()]

    def _slot_for(self, ref: TensorRef, p: PlannedOp | None = None) -> int:
        if self._fresh and p is not None and (fresh := self._fresh.get((p.node.id, ref.key))) is not None:
            return fresh
        slot = self._produced_slot(ref)
        if slot is None and p is not None and ref in p.views and not self._seeded_now(ref):
            slot = self._view_of(ref, p)
        return self._external(ref) if slot is None else slot

    def _view_of(self, ref: TensorRef, p: PlannedOp) -> int | None:
        """A step making ``ref`` as a view of the replayed output it lies in (:func:`.plan._viewed`), run
        before the op ``p`` that reads it; its slot, or None where that output was not made."""
        base = p.views[ref]
        bslot = self._produced_slot(base)
        b = None if bslot is None else self.env[bslot]
        if not isinstance(b, torch.Tensor) or b.layout != torch.strided or b.dtype != getattr(torch, ref.dtype):
            return None
        args = [None, list(ref.shape), list(ref.layout_strides()), b.storage_offset() + ref.offset - base.offset]
        grad = p.node.id in self._recording
        torch._C._set_grad_enabled(grad)
        try:
            view = _AS_STRIDED(b, *args[1:])
        except RuntimeError:  # (outside the output's memory here)
            return None
        finally:
            torch._C._set_grad_enabled(False)
        slot = self._new_slot(view)
        self.steps.append(Step(_AS_STRIDED._op, args, [(0, bslot)], [], len(args), (), [(0, slot)], True,
                               name="aten::as_strided", node_id=p.node.id, grad=grad,
                               op="aten::as_strided.default", view=True))  # fmt: skip
        self._record_produced(slot, ref, p.node.id)
        for known in (self._original, self._numbered):
            if bslot in known:
                self._mark((slot,), known)
        return slot

    def _record_produced(self, slot: int, ref: TensorRef, maker: int) -> None:
        """``slot`` holds the recorded tensor ``ref``, which the op of id ``maker`` made, in its
        storage's current allocation: later reads of ``ref`` find it there, and _liveness knows the
        allocation it lies in."""
        generation = self._generation.get(ref.storage_id, 0)
        self._produced[ref.key] = _Produced(slot, ref, generation, maker)
        self._allocation[slot] = (ref.storage_id, generation)

    def _seeded_now(self, ref: TensorRef) -> bool:
        """The tensor that ``ref``'s ids name now (the latest made with them) is one whose readers
        get seeded inputs. By the op that made it: a writer gives the ids of a freed tensor to a
        later one, and by ids alone, YOLO's targets, sliced for their classes and boxes, read a
        seeded slice, as a later tensor with that slice's ids (an ``empty_like`` of the boxes, read
        by the slices that fill it) was one: a class id drawn at random indexed past the classes."""
        hit = self._produced.get(ref.key)
        return hit is not None and (ref.key, hit.maker) in self._seeded

    def _seed(self, refs) -> None:
        """The tensors ``refs`` name now (produced ones) are read as seeded inputs from here on."""
        for ref in refs:
            hit = self._produced.get(ref.key)
            if hit is not None:
                self._seeded.add((ref.key, hit.maker))
            self._stand_ins.add(ref.key)

    def _mixes_host(self, fills: list[tuple[int, int]]) -> bool:
        """A CPU trace on a GPU: the op reads a tensor kept in host memory (not 0-dim) beside device
        tensors."""
        if self.device.type == "cpu" or self._host_kept:
            return False
        tensors = [self.env[s] for _, s in fills if isinstance(self.env[s], torch.Tensor)]
        return any(t.device.type == "cpu" and t.dim() for t in tensors) and any(t.device.type != "cpu" for t in tensors)

    def _host_copied(self, fills: list[tuple[int, int]], p: PlannedOp) -> list[tuple[int, int]]:
        """A CPU trace on a GPU keeps in host memory what a GPU kernel reads there (:data:`.plan.HOST_ARGS`,
        a packed sequence's lengths). Another op that refused such a tensor beside device tensors
        (a mask made from the lengths) reads a copy on the device instead, made before it in each
        iteration, as a GPU program copies it: ``fills`` with those slots replaced. (Ops that read
        it there, as the packed sequence's backward does, keep reading it there.)"""
        env = self.env
        if not self._mixes_host(fills):
            return fills
        on_host = sorted({s for _, s in fills if isinstance(env[s], torch.Tensor) and env[s].device.type == "cpu"
                          and env[s].dim()})  # fmt: skip
        copies = {}
        for slot in on_host:
            copies[slot] = self._new_slot(env[slot].to(self.device))
            self.steps.append(Step(_TO_COPY._op, [None, self.device], [(0, slot)], [], 1, ("device",),
                                   [(0, copies[slot])], True, name="aten::_to_copy", node_id=p.node.id,
                                   op="aten::_to_copy.default", view=True))  # fmt: skip
        self.report.notes[f"{p.node.name}: reads a tensor kept in host memory for a GPU kernel (a packed sequence's "
                          f"lengths) beside device tensors: copied to {self.device} before it, in each iteration, "
                          f"as a GPU program copies it"] += 1  # fmt: skip
        return [(pos, copies.get(slot, slot)) for pos, slot in fills]

    def _produced_slot(self, ref: TensorRef) -> int | None:
        """The slot of the replayed op's output that ``ref`` is (same ids and layout, made in the
        storage's current allocation: ids alone are reused once the memory is freed, a tensor's
        too), or None where ``ref`` reads seeded data."""
        if self._seeded_now(ref):
            return None
        hit = self._produced.get(ref.key)
        if hit is not None:
            # (released: its last reader has run, and the op that made what ``ref`` is now was skipped)
            if hit.generation == self._generation.get(ref.storage_id, 0) and hit.ref.laid_out_as(ref) \
                    and self.env[hit.slot] is not None:  # fmt: skip
                return hit.slot
        return None

    def _recorded_value(self, ref: TensorRef) -> bool:
        f = self.factory
        return ref in f.exact or ref in f.values or ref in f.float_values

    def _mark(self, slots, known: set[int]) -> None:
        """Add ``slots`` to ``known``: :attr:`_original` or :attr:`_numbered`."""
        for s in slots:
            known.add(s)
            ptr = _address(self.env[s])
            if ptr:
                self._original_in.setdefault(ptr, set()).add(s)

    def _forget_original(self, slot: int) -> set[int]:
        """An op wrote the replay's own values into ``slot``: neither it nor any view of its memory
        holds the original's any more. (Slots that an allocation at the same address held before are
        forgotten too: they are no longer read.)"""
        gone = {slot, *self._original_in.pop(_address(self.env[slot]), ())}
        self._original.difference_update(gone)
        self._numbered.difference_update(gone)
        return gone

    def _sidecar(self) -> dict:
        """The trace's sidecar (empty where it has none), read once; a malformed one is an error
        naming it, not an op's error, which would only skip that op."""
        if self._side is None:
            try:
                self._side = load_sidecar(self.trace.path) or {}
            except ValueError as e:
                raise ReplayError(None, str(e)) from None
        return self._side

    def _unstrided_input(self, u: Unstrided, p: PlannedOp) -> str | None:
        """Rebuild ``u``, an input of the step recorded without storage, in a slot of its own that
        its later readers share: as a sparse COO tensor of its shape, or as an MKL-DNN one (the
        opaque layout of a model converted with ``torch.utils.mkldnn.to_mkldnn`` or TorchScript's
        ``optimize_for_inference``: its weights). A trace records neither its layout nor how many
        elements it holds: the capture helper keeps both in the sidecar (``sparse_inputs``, taken in
        order among those of the same shape and type). Without them an input that an MKL-DNN
        operator reads is of that layout, and any other a sparse one holding 1% of its positions,
        with a note. A nested one is not rebuilt: the reason its readers are skipped is returned."""
        if u.tensor_id in self._unstrided_refused:  # (a reader before was refused: so are the others)
            return self._unstrided_refused[u.tensor_id]
        if self._unstrided_records is None:
            self._unstrided_records = list(self._sidecar().get("sparse_inputs", []))
        why = self._rebuilt_unstrided(u, p)
        if why:
            self._unstrided_refused[u.tensor_id] = why
        return why

    def _rebuilt_unstrided(self, u: Unstrided, p: PlannedOp) -> str | None:
        record = take_record(self._unstrided_records, u.shape, u.dtype)
        layout = record["layout"] if record is not None else "_mkldnn" if "mkldnn" in p.node.name else None
        if layout not in (None, "sparse_coo", "_mkldnn"):
            return f"reads an input of the step of layout {layout}, which is not rebuilt"
        if layout is None and "nested" in p.node.name:
            return "reads an input of the step without storage, of a layout (nested) that is not rebuilt"
        what = f"{p.node.name}: an input of the step without storage ({'x'.join(map(str, u.shape))} {u.dtype})"
        try:
            if layout == "_mkldnn":
                t = self.factory.make_mkldnn(u.shape, u.dtype)
                how = "as the capture recorded" if record is not None else "the layout its reader takes"
                note = f"{what} rebuilt as an MKL-DNN tensor of seeded values, {how}"
            else:
                if record is not None:
                    nnz, how = record["nnz"], "as the capture recorded"
                else:
                    nnz = max(1, math.prod(u.shape) // 100)
                    how = "1% of its positions: the trace does not record how many it held (the capture helper does)"
                t = self.factory.make_sparse_coo(u.shape, u.dtype, nnz, sparse_dim=(record or {}).get("sparse_dim"),
                                                 coalesced=(record or {}).get("coalesced", True))  # fmt: skip
                note = f"{what} rebuilt as a sparse COO tensor of {t._nnz():,} seeded elements, {how}"
        except (RuntimeError, ValueError, TypeError, MemoryError) as e:
            return f"cannot rebuild its {'MKL-DNN' if layout == '_mkldnn' else 'sparse'} input: {reason(e)}"
        self._unstrided[u.tensor_id] = slot = self._new_slot(t)
        self.permanent.add(slot)
        self.report.notes[note] += 1
        return None

    def _computed_indices(self, p: PlannedOp) -> list[TensorRef]:
        """The index inputs of ``p`` (inputs with a range it needs) that an earlier replayed op
        computed from the replay's data."""
        return [ref for v in p.values for ref in arg_refs(v)
                if ref in self.factory.ranges and ref.key in self._produced and not self._seeded_now(ref)]  # fmt: skip

    def _outside_ranges(self, p: PlannedOp, refs: list[TensorRef]) -> str | None:
        """"range" where some value of the computed index inputs ``refs`` of ``p`` lies outside the
        range ``p`` itself accepts: not the range the factory draws them in, which the ops reading
        their sources narrow too (a sort's indices, some of them divided into a smaller range for
        another op) and the trace's recorded ranges replace; "count" where a computed boolean mask
        selects other than as many elements as ``p`` puts there (more than its source holds, for
        ``masked_scatter``); else None."""
        if p.substitution is not None:  # (the recorded arguments are not the substitute's)
            return None
        names = [a.name for a in arg_specs(p.overload)]
        accepts = index_ranges(p.node, names, recorded=False)
        name = p.node.name.split("::")[-1]
        ignored = dict(zip(names, p.node.inputs)).get("ignore_index") if name in _LOSSES_IGNORING else None
        for ref in refs:
            slot = self._produced_slot(ref)
            t = self.env[slot] if slot is not None else None
            rng = accepts.get(ref)
            if t is not None and rng is not None and rng.kind == "trues":
                if name not in _PUTTING_BY_MASK:  # (a read by another count gives another shape: see _dynamic_here)
                    continue
                # (the count is of the mask's distinct elements as the trace laid it out: one without
                # strides, as torch 2.4 writes, counts them all, whatever the replay's mask expands)
                repeats = math.prod(ref.shape) // max(distinct_elements(ref), 1)
                chosen, want = int(t.count_nonzero()), rng.values[0] * repeats
                if chosen > want or (chosen != want and "masked_scatter" not in name):
                    return "count"
                continue
            if t is None or rng is None or rng.kind != "uniform" or t.numel() == 0 or t.is_floating_point() or t.is_complex():
                continue
            t = t.detach()
            if isinstance(ignored, Scalar) and isinstance(ignored.value, int):
                t = t[t != ignored.value]  # (a target equal to the ignored index is counted for nothing)
                if t.numel() == 0:
                    continue
            low, high = torch.aminmax(t)
            if int(low) < (-rng.high if name in _INDEXING_FROM_THE_END else rng.low) or int(high) >= rng.high:
                return "range"
        return None

    def _seed_indices(self, p: PlannedOp, computed: list[TensorRef], *, counts: bool = False) -> None:
        """Indices the original computed from its own data (a router's choice of experts): computed
        from the replay's data they fall outside ``p``'s range. It reads seeded indices, in its
        range, instead. ``counts``: a boolean mask computed so (``ids == image_token``) selected
        other than as many elements as the values ``p`` puts there (``x[mask] = v``), or counts
        (repeats, segment lengths) add up to another size than ``p`` needs: it reads a seeded mask
        or counts that add up as the original's did."""
        self._seed(computed)
        what = ("a mask or counts computed from the replay's data selected other than the original's count of "
                "elements: it reads seeded ones that select as many" if counts else
                "indices computed from the replay's data were out of its range (data-dependent in the original): "
                "it reads seeded indices")  # fmt: skip
        self.report.notes[f"{p.node.name}: {what}"] += 1
        self._build_step(p)

    def _written_stand_ins(self, p: PlannedOp) -> list[TensorRef]:
        """The index inputs of ``p`` read from a stand-in (seeded in place of what the original
        computed: the output of an op whose shape the data decide) that a replayed op has written
        in place since (an offset added to a neighbour list's pairs): the seeded values were in
        range, the written ones need not be."""
        found = []
        for ref in (ref for v in p.values for ref in arg_refs(v)):
            slot = self._externals.get((ref, self._generation.get(ref.storage_id, 0)))
            if ref in self.factory.ranges and self._seeded_now(ref) and slot in self._mutated \
                    and (p.node.id, ref.key) not in self._fresh:  # fmt: skip
                found.append(ref)
        return found

    def _fresh_indices(self, p: PlannedOp, refs: list[TensorRef]) -> None:
        """``p`` reads seeded indices of its own, in its range, for each of ``refs``
        (:meth:`_written_stand_ins`), and the op that wrote the stand-in keeps writing it."""
        for ref in refs:
            t = self.factory.make(ref, alone=True).clone()  # (its own memory, seeded anew: not the stand-in's)
            with torch.no_grad():
                self.factory.fill(t, ref)
            slot = self._new_slot(t)
            self.permanent.add(slot)
            self._fresh[(p.node.id, ref.key)] = slot
            self._externals[(ref, -1 - p.node.id)] = slot  # (an input of its own: not a generation's, which count from 0)
        self.report.notes[f"{p.node.name}: indices seeded in place of a tensor whose shape the data decide, then written "
                          f"in place by an op of the replay (an offset added), were out of its range: it reads seeded "
                          f"indices of its own"] += 1  # fmt: skip
        self._build_step(p)

    def _keep_node(self, p: PlannedOp, node_id: int, handles: dict[int, int]) -> None:
        """After the forward op ``p`` that made the autograd node ``node_id`` of a C++ Function
        (:func:`.graph.opaque_autograd_nodes`): a step that keeps the node its output holds, which
        the backward pass then calls (:meth:`_call_node`); its slot goes in ``handles``."""
        step = self.steps[-1] if self.steps and self.steps[-1].node_id == p.node.id else None
        name = self.trace.by_id[node_id].name
        for _, out in step.outs if step is not None else ():
            for slot in out if isinstance(out, tuple) else (out,):
                node = getattr(self.env[slot], "grad_fn", None) if slot >= 0 else None
                if node is not None and node.name() == name:
                    handles[node_id] = self._new_slot(node)
                    self.steps.append(Step(_grad_fn_of, [None], [(0, slot)], [], 1, (), [(0, handles[node_id])], True,
                                           name=f"{p.node.name} (its autograd node)", node_id=p.node.id,
                                           op="grad_fn"))  # fmt: skip
                    return

    def _call_node(self, node_id: int, handles: dict[int, int]) -> None:
        """Call the autograd node ``node_id`` that a forward op's output holds (see :meth:`_keep_node`)
        on the gradients the trace shows it given, where the original's engine ran it: its C++
        backward computes outside any operator, and the trace holds nothing of that work but the
        allocations of its gradients, which run inside the call (they are not replayed apart). Where
        the replay's forward op made no such node, those allocations are replayed as they are."""
        node = self.trace.by_id[node_id]
        handle = handles.get(node_id)
        if handle is None:
            self.report.notes[f"{node.name}: the replay's forward op made no such autograd node (its output was skipped, "
                              f"or required no grad here); the operators inside it are replayed apart, its C++ "
                              f"backward's own work is not"] += 1  # fmt: skip
            return
        grads = [self._slot_for(ref) for ref in tensors_of(node.inputs)]
        step = Step(_call_autograd_node, [None] * (1 + len(grads)), [(0, handle)] + [(i + 1, g) for i, g in enumerate(grads)],
                    [], 1 + len(grads), (), [], True, name=node.name, node_id=node_id, op=node.name)  # fmt: skip
        t0 = time.perf_counter()
        try:
            step.fn(*filled_args(step, self.env))
        except Exception as e:  # noqa: BLE001 - the allocations inside it are then replayed apart
            self.report.notes[f"{node.name}: the replay's call of this autograd node failed ({reason(e)[:80]}); the "
                              f"operators inside it are replayed apart, its C++ backward's own work is not"] += 1  # fmt: skip
            return
        finally:
            self.probe_s += time.perf_counter() - t0
        self.steps.append(step)
        self._backward.add(node_id)
        self._called.add(node_id)
        self.report.notes[f"{node.name}: an autograd node of a C++ extension's Function, whose backward computes outside "
                          f"any operator (the trace holds only its gradients' allocations), called as the original's "
                          f"engine ran it, on the output its forward op made"] += 1  # fmt: skip

    def _release(self, slot: int) -> None:
        if slot not in self.permanent and self.env[slot] is not None:
            t0 = time.perf_counter()
            self.env[slot] = None  # the allocator's work: an mmapped output is unmapped here
            self.free_s += time.perf_counter() - t0

    def _build_step(self, p: PlannedOp) -> None:
        divisor = p.values[1].ref if len(p.values) > 1 and isinstance(p.values[1], TensorArg) else None
        dividend = p.values[0].ref if p.values and isinstance(p.values[0], TensorArg) else (p.values or [None])[0]
        rounding = dict(zip(p.kwnames, p.values[len(p.values) - len(p.kwnames):])).get("rounding_mode")
        if (integer_divisor(p.node.name, dividend, divisor, rounding)
                and (made := self._produced_slot(divisor)) is not None and made not in self._original):  # fmt: skip
            # computed from the replay's data, an integer divisor may be 0 in some iteration (where
            # the data change: dropout, training; a quotient of seeded numbers): it reads seeded
            # values, never 0. (Computed from the original's values alone, it is the original's, which
            # was not 0: a grid's sizes that torchkbnufft takes its indices modulo.)
            self._seed([divisor])
            self.report.notes[f"{p.node.name}: an integer divisor computed from the replay's data reads seeded "
                              f"values (1 or 2), as it could be 0"] += 1  # fmt: skip
        args, fills, list_fills = [], [], []
        try:
            for i, v in enumerate(p.values):
                if isinstance(v, TensorArg):
                    fills.append((i, self._slot_for(v.ref, p)))
                    args.append(None)
                elif isinstance(v, TensorListArg):
                    list_fills.append((i, tuple(-1 if r is None else self._slot_for(r, p) for r in v.refs)))
                    args.append(None)
                elif isinstance(v, UnstridedArg):
                    if v.tensor_id not in self._unstrided:
                        why = ("reads a tensor without storage (sparse...) that the op making it did not give"
                               if v.rebuild is None else self._unstrided_input(v.rebuild, p))  # fmt: skip
                        if why:
                            self.report.skipped[(p.node.name, why)] += 1
                            return
                    fills.append((i, self._unstrided[v.tensor_id]))
                    args.append(None)
                else:
                    args.append(v)
        except (RuntimeError, ValueError, TypeError, OverflowError, MemoryError) as e:
            # A recorded layout torch refuses (sizes, strides, offsets out of range).
            self.report.skipped[(p.node.name, f"cannot build its input tensors: {self._why(e)}")] += 1
            return
        if p.node.id in self._copy_host:
            fills = self._host_copied(fills, p)
        npos, kwnames = len(args) - len(p.kwnames), p.kwnames
        fn = p.overload._op
        facts = schema_facts(p.overload)
        writes = facts.writes
        kept = kept_positions(args, npos, kwnames, {pos for pos, _ in (*fills, *list_fills)}, facts)
        if kept is not None:  # arguments equal to their default left out: the call is shorter
            moved = {old: new for new, old in enumerate(kept)}
            args, writes = [args[i] for i in kept], tuple(writes[i] if i < len(writes) else False for i in kept)
            fills = [(moved[pos], slot) for pos, slot in fills]
            list_fills = [(moved[pos], slots) for pos, slots in list_fills]
            kwnames = tuple(kwnames[i - npos] for i in kept if i >= npos)
            npos = len(args) - len(kwnames)
        step = Step(fn, args, fills, list_fills, npos, kwnames, [], True, name=p.node.name, node_id=p.node.id,
                    op=facts.qualname, grad=p.node.id in self._recording)  # fmt: skip
        env = self.env
        call = filled_args(step, env)
        if self.device.type not in RAISES_ON_BAD_INDICES:
            computed = self._computed_indices(p)
            outside = self._outside_ranges(p, computed) if computed else None
            if outside:
                del call
                self._seed_indices(p, computed, counts=outside == "count")
                return
        if self.progress is not None:  # a canary build (runner.build_canary): say which op runs now
            os.write(self.progress, f"{p.node.name} (node {p.node.id})\n".encode())
        t0 = time.perf_counter()
        try:
            torch._C._set_grad_enabled(step.grad)
            result = bound_call(step, facts, call, p.node.outputs)
        except Exception as e:  # noqa: BLE001 - the op's own error is the skip reason
            torch._C._set_grad_enabled(False)
            self.probe_s += time.perf_counter() - t0
            if p.node.id not in self._copy_host and self._mixes_host(step.fills):
                # it refused a tensor kept in host memory beside device tensors: it reads a copy
                self._copy_host.add(p.node.id)
                del call
                self._build_step(p)
                return
            if step.grad and runs_without_grad(step, call):
                # autograd refused to record it (an in-place write to a parameter...): it runs as is
                self._recording.discard(p.node.id)
                self.report.notes[f"{p.node.name}: run without autograd recording, which refused it "
                                  f"({reason(e)[:80]})"] += 1  # fmt: skip
                del call
                self._build_step(p)
                return
            computed = self._computed_indices(p)
            if computed and (_out_of_range(e) or _miscounted(e)):
                del call
                self._seed_indices(p, computed, counts=_miscounted(e))
                return
            written = self._written_stand_ins(p) if _out_of_range(e) else []
            if written:
                del call
                self._fresh_indices(p, written)
                return
            alt = substitute_of(p.node) if p.substitution is None else None
            if alt is not None and not alt.target:
                self.report.ops_replayed += 1
                self.report.substitutions[(p.node.name, NO_EFFECT)] += 1
                return
            why = self._why(e) if not p.refused else f"{p.refused}; its substitute {p.substitution} failed too: {reason(e)}"
            if alt is not None:
                try:
                    values = alt.map([a.name for a in arg_specs(p.overload)], list(p.values))
                    self._build_step(PlannedOp(p.node, alt.overload, values, alt.kwnames,
                                               substitution=alt.describe(list(p.values)),
                                               views=p.views, refused=reason(e)))  # fmt: skip
                    return
                except Exception as m:  # noqa: BLE001 - the substitute does not fit these arguments
                    why = f"{why}; its substitute {alt.target} does not fit: {reason(m)}"
            self.report.skipped[(p.node.name, why)] += 1
            return
        torch._C._set_grad_enabled(False)
        self.probe_s += time.perf_counter() - t0
        step.single = facts.returns <= 1
        results = (result,) if step.single else tuple(result)
        if not p.collective and self._rebuilt_with_numbers(p, results):
            return
        # its output holds the original's values where all its inputs do and it draws nothing at random
        # (numbered: some of its inputs are drawn numbers or were made of some, the rest the original's)
        unwritten = p.node.name in UNINITIALISED or p.node.name in RESIZES  # (its output may hold what its memory held)
        pure = p.substitution is None and not p.collective and not unwritten and not any(w in p.node.name for w in _RANDOM_WORDS)
        reads = read_slots(step) if pure else ()
        exact = pure and p.node.id not in self._drawn_args and all(s in self._original for s in reads)
        numbered = pure and not exact and all(s in self._original or s in self._numbered for s in reads)
        # (an allocation's memory holds whatever was there before: NaN bytes in it are not the replay's data)
        # (an infinity the trace gives, as a number, as a division by a number it gives as 0, or in a
        # tensor made from one and written in place here: a router's scores filled with -inf, then
        # scattered into, hold it in the original too)
        # (by slot: an allocation's address is another tensor's once it is freed)
        given_inf = self._first_nonfinite is None and (
            infinite_numbers(call) or divides_by_a_given_zero(p.node.name, call)
            or any(slot in self._infinite_made for pos, slot in step.fills if pos < len(writes) and writes[pos]))  # fmt: skip
        if (self._first_nonfinite is None or self._first_subnormal is None) and not unwritten and not exact and not keeps_values(p.node):
            # (subnormal numbers made of drawn numbers are not looked for: a drawn scale's, not the data's)
            nan, sub = odd_data(results[: LOG_TABLES.get(p.node.name)], nonfinite=self._first_nonfinite is None,
                                subnormal=self._first_subnormal is None and not numbered)  # fmt: skip
            read = [a for i, a in enumerate(call) if not (i < len(writes) and writes[i])] if nan and not given_inf else None
            if (read is not None and not nonfinite_inputs(read)
                    and not ((facts.pointwise or p.node.name in CONVERSIONS) and len(results) == 1
                             and made_of_zeros_or_extremes(read, results[0], zeros=numbered))):  # fmt: skip
                self._first_nonfinite = f"{p.node.name} (node {p.node.id})"
                self._nonfinite_numbered = numbered
            if sub:
                self._first_subnormal = f"{p.node.name} (node {p.node.id})"
        in_storages = {ref.storage_id for v in p.values for ref in arg_refs(v)}
        if facts.dynamic and not (exact or numbered) and _dynamic_here(p):
            # Its output's shape follows the replay's data, which differ from the original's and may
            # differ between iterations (dropout, a router's choice): its consumers read seeded
            # inputs of the recorded shapes, and their shapes stay the trace's.
            self._stand_ins.update(ref.key for ref in tensors_of(p.node.outputs))
            self.report.notes[f"{p.node.name}: its output's shape depends on the data (a mask, a router's choice); "
                              f"its consumers read seeded inputs of the recorded shape"] += 1  # fmt: skip
        else:
            for i, out in enumerate(p.node.outputs[: len(results)]):
                bound = self._bind(out, results[i], in_storages, p.node)
                if bound is not None:
                    step.outs.append((i, bound))
        for i, slot in step.outs:
            pairs = [(slot, results[i])] if isinstance(slot, int) else zip(slot, results[i])
            for s, value in pairs:
                if s >= 0:
                    env[s] = value
        self.steps.append(step)
        self.report.ops_replayed += 1
        if given_inf:
            self._infinite_made.update(out_slots(step.outs))
        written = [slot for pos, slot in [*step.fills, *((pos, s) for pos, slots in step.list_fills for s in slots)]
                   if p.collective or (pos < len(writes) and writes[pos])]  # fmt: skip
        for slot in written:
            if not exact:
                gone = self._forget_original(slot)
                if numbered:  # (its views, made before the write, hold what it does)
                    self._mark(gone, self._numbered)
            if slot in self.permanent:
                self._mutated.add(slot)
            elif (base := self._input_storages.get(_address(env[slot]))) is not None:
                # written through an op's output that lies in an input's memory (a parameter the
                # optimizer reaches through an alias autograd made of it)
                self._mutated.add(base)
        if exact:
            self._mark(out_slots(step.outs), self._original)
        elif numbered:
            self._mark([*out_slots(step.outs), *written], self._numbered)
        if p.substitution:
            self.report.substitutions[(p.node.name, p.substitution)] += 1
        t0 = time.perf_counter()
        del call, result, results  # frees the outputs that no later op reads
        self.free_s += time.perf_counter() - t0

    def _why(self, e: BaseException) -> str:
        """An op's error as its skip reason; an allocation refused under the build's limit says so."""
        if self._limit is not None and out_of_memory(e):
            asked = re.search(r"allocate (\d+) bytes", str(e))
            what = f"{fmt_bytes(int(asked.group(1)))} at once" if asked else "more"
            return f"out of memory: it asks for {what}, more than {self._limit.by} leaves"
        return reason(e)

    def _rebuilt_with_numbers(self, p: PlannedOp, results: tuple) -> bool:
        """A Python number passed where an op takes a tensor becomes a 0-dim float64 or int64
        tensor marked as a *wrapped number*: it does not promote the result's type (``x * 0.5``
        stays float32). The trace records it as a plain tensor, and a replayed plain float64
        tensor makes the result float64. When an output's type differs from the recorded one and
        the op has such inputs, the step is built again with them passed as numbers (their seeded
        values); returns whether it was."""
        wrapped = [i for i, v in enumerate(p.values)
                   if isinstance(v, TensorArg) and may_be_number(v.ref) and self._produced_slot(v.ref) is None]
        if not wrapped or not any(isinstance(out, TensorRef) and out.defined and isinstance(r, torch.Tensor)
                                  and str(r.dtype)[6:] != out.dtype for out, r in zip(p.node.outputs, results)):  # fmt: skip
            return False
        values = list(p.values)
        for i in wrapped:
            slot = self._slot_for(values[i].ref)
            values[i] = self.env[slot].item()
            if slot not in self._original:  # (a drawn number: the op's output is not the original's)
                self._drawn_args.add(p.node.id)
        self.report.notes["0-dim float64/int64 inputs that were Python numbers in the original (they did not promote "
                          "the result's type) are passed as numbers"] += 1  # fmt: skip
        self._build_step(PlannedOp(p.node, p.overload, values, p.kwnames, p.substitution, p.collective, p.views,
                                   p.refused))
        return True

    def _bind(self, out: Any, value: Any, in_storages: set[int], node: Node) -> int | tuple[int, ...] | None:
        """Give a slot to each recorded output tensor that the replay returned with the same
        layout; later ops read it from there. An output in a storage none of the op's inputs
        lives in is a new allocation: its storage id starts a new generation."""
        if isinstance(out, TensorRef):
            if not out.defined or not isinstance(value, torch.Tensor):
                return None
            if not as_recorded(out, value):
                # Its consumers read a seeded stand-in, in an allocation of its own: where the
                # original's allocator gave a later output the same block (and so the same storage
                # id), a stand-in for that one too shared the memory of this one, and the later
                # draw wrote over the earlier, whose readers needed another range (PointNet++'s
                # radius pairs, their centres' indices under 512, overwritten by a k-NN's pairs
                # drawn under 2,048: an index_select went out of range)
                self._stand_ins.add(out.key)
                self.report.notes[f"{node.name}: an output's shape or dtype differs from the trace (data-dependent?); "
                                  f"its consumers get fresh inputs"] += 1  # fmt: skip
                return None
            slot = self._new_slot()
            if out.storage_id not in in_storages and out.numel:  # (a tensor of no elements has no memory)
                self._generation[out.storage_id] = self._generation.get(out.storage_id, 0) + 1
                in_storages.add(out.storage_id)  # (the op's other outputs there are in this allocation too)
            self._record_produced(slot, out, node.id)
            return slot
        if isinstance(out, ListValue) and isinstance(value, (list, tuple)) and len(value) == len(out.items):
            slots = []
            for item, v in zip(out.items, value):
                s = self._bind(item, v, in_storages, node) if isinstance(item, TensorRef) else None
                slots.append(-1 if s is None else s)
            return tuple(slots) if any(s >= 0 for s in slots) else None
        if isinstance(out, Unstrided) and isinstance(value, torch.Tensor) and value.layout != torch.strided:
            slot = self._unstrided[out.tensor_id] = self._new_slot()
            return slot
        return None

    def _liveness(self) -> None:
        read = {s for step in self.steps for s in read_slots(step)}
        # (a view whose reader was skipped)
        self.steps = [step for step in self.steps if not (step.view and step.outs[0][1] not in read)]
        last_read: dict[int, int] = {}
        for i, step in enumerate(self.steps):
            for slot in read_slots(step):
                last_read[slot] = i
        free_at = {slot: i for slot, i in last_read.items() if slot not in self.permanent}
        if self.liveness is None:
            self.liveness = LAST_READ if self._backward else UNTIL_REUSE
        if self.liveness == UNTIL_REUSE:
            self._hold_until_reuse(free_at)
        frees: dict[int, list[int]] = {}
        for slot, i in free_at.items():
            frees.setdefault(i, []).append(slot)
        for step in self.steps:  # outputs nobody reads are not stored at all
            outs = []
            for idx, slot in step.outs:
                if isinstance(slot, int):
                    if slot in last_read:
                        outs.append((idx, slot))
                else:
                    kept = tuple(s if s in last_read else -1 for s in slot)
                    if any(s >= 0 for s in kept):
                        outs.append((idx, kept))
            step.outs = outs
            step.out = outs[0][1] if step.single and len(outs) == 1 and isinstance(outs[0][1], int) else None
        for i, step in enumerate(self.steps):
            step.frees = tuple(frees.get(i, ()))
        # Where a backward pass starts, the outputs of recording ops still held, and the inputs they
        # wrote, let go of their graphs (the saved tensors go with them, unless held otherwise); but
        # a backward pass whose own ops record (one with create_graph, which keeps the graph: MAML's
        # inner steps, whose adapted weights the next step reads; activation checkpointing's
        # recomputed forward) lets go of the inputs' alone
        recorded: set[int] = set()
        for i, step in enumerate(self.steps):
            if step.node_id in self._backward and (i == 0 or self.steps[i - 1].node_id not in self._backward):
                end = next((j for j in range(i, len(self.steps)) if self.steps[j].node_id not in self._backward), len(self.steps))
                keeps = any(later.grad for later in self.steps[i:end])
                alive = {s for s in recorded if free_at.get(s, -1) >= i} if not keeps else set()
                step.release = tuple(sorted(alive.union(self._grad_inputs)))
            if step.grad:
                recorded.update(out_slots(step.outs))

    def _hold_until_reuse(self, free_at: dict[int, int]) -> None:
        """UNTIL_REUSE: each slot of ``free_at`` (a step's position after which it is freed) is held
        until just before the step whose output the trace shows in its allocation's memory.

        Such an output starts the next generation of the storage id (see _allocation): the original
        had let go of the allocation before that op, and may have held it past its last read until
        then (a Python variable, a module's locals); this frees it there, the latest point the trace
        allows. Small inference steps' operators then ran closer to their original's (0.93 to 0.98
        of it, median of 75 models), but loops over positions (Mamba's and Jamba's training steps)
        overshot to 1.1-1.3, holding thousands of outputs for hundreds of ops: the likely cause is
        an allocator's queue of freed blocks of one size (glibc's unsorted bin hands out the first
        freed first), which delayed the original's reuse where the program had not, and which the
        replay's own queue then adds to. Their inference steps did not (0.91 and 1.03 of the
        original's operators freeing after the last read, 0.96 and 1.02 holding), so by default an
        inference step holds and a step with a backward pass frees after the last read."""
        started: dict[tuple[int, int], int] = {}  # where each allocation was made
        for i, step in enumerate(self.steps):
            for s in out_slots(step.outs):
                if s in self._allocation:
                    started.setdefault(self._allocation[s], i)
        for slot, i in free_at.items():
            storage, generation = self._allocation.get(slot, (None, 0))
            free_at[slot] = max(i, started.get((storage, generation + 1), 0) - 1)

    def prepare(self, *, timed: bool = True) -> Replay:
        """Plan, make the inputs and call every op once. ``timed=False`` where no iteration will
        run uninstrumented (a canary build, an export): the straight-line function of the timed
        iteration is then left out of the build (its first uninstrumented run makes it)."""
        if self.prepared:
            return self
        # The trace's nodes are hundreds of thousands of Python objects: with the cyclic collector
        # on, each of its passes walks them all (a quarter of a large trace's build time).
        with gc_paused():
            self._prepare()
            if timed:
                self._straight = straight_line(self.steps, self.permanent, self.env)
        self.prepared = True
        return self

    def _prepare(self) -> None:
        planned = self._plan()
        grad_was = torch.is_grad_enabled()
        # Outputs are released during the build too, after their last reader: the build calls every
        # op once, and holding all of a long trace's outputs at once would not fit. A trace's ids are
        # reused once the original freed a tensor, so a read is of the latest output of its ids made
        # before it (or of an input), and each such output is let go after its own last read. (Held
        # to the last read of its ids anywhere in the trace, an output of the DDP ResNet's first
        # step outlived it: the build held 8 GB of tensors, and 12.3 GB of memory at its peak, where
        # an iteration holds 2.9 GB and peaks at 3.8.)
        made: dict[tuple[int, int], int] = {}  # ids -> the position of the op that last made them
        last_read: dict[tuple[tuple[int, int], int], int] = {}  # (ids, where made) -> its last reader
        for i, p in enumerate(planned):
            keys = {ref.key for v in p.values for ref in arg_refs(v)}
            keys.update(base.key for base in p.views.values())  # (read through a view of it)
            for key in keys:
                last_read[(key, made.get(key, -1))] = i
            for ref in tensors_of(p.node.outputs):
                made[ref.key] = i
        dying: list[list[tuple[int, int]]] = [[] for _ in planned]  # the ids each op reads for the last time
        for (key, _), i in last_read.items():
            dying[i].append(key)
        opaque = opaque_autograd_nodes(self.trace)  # (C++ autograd nodes the replay calls itself)
        made_node = {forward: node for node, (forward, _) in opaque.items()}
        inner = {op: node for node, (_, ops) in opaque.items() for op in ops}
        waiting, handles = sorted(opaque), {}
        try:
            torch.set_grad_enabled(False)
            with allocation_limit(self.device, self.max_memory) as self._limit, warnings.catch_warnings(record=True) as warned:
                warnings.simplefilter("always")  # (see _quiet)
                for i, p in enumerate(planned):
                    # (their slots, found before the op's own outputs take their ids)
                    done = [hit.slot for key in dying[i] if (hit := self._produced.get(key)) is not None]
                    while waiting and waiting[0] < p.node.id:  # (an autograd node the trace ran before this op)
                        self._call_node(waiting.pop(0), handles)
                    if inner.get(p.node.id) in self._called:
                        self.report.ops_replayed += 1  # (it ran inside the node's call)
                    else:
                        self._build_step(p)
                        if p.node.id in made_node:
                            self._keep_node(p, made_node[p.node.id], handles)
                    if warned:
                        self._warned.update((p.node.name, _warning_text(w)) for w in warned)
                        warned.clear()
                    for ref in tensors_of(p.node.outputs):
                        if (ref.key, i) not in last_read and (hit := self._produced.get(ref.key)) is not None:
                            self._release(hit.slot)  # (read by no op)
                    for slot in done:
                        self._release(slot)
                for node in waiting:
                    self._call_node(node, handles)
        except MemoryError:  # (the replay's own work, not an op's, found no memory left)
            where = f": {self._limit.by} was reached" if self._limit is not None else ""
            raise ReplayError(self.trace.path, f"the build ran out of memory{where}") from None
        finally:
            self._limit = None
            torch.set_grad_enabled(grad_was)
        untouched = self.factory.untouched_bytes
        if untouched:
            self.report.notes[f"{len(untouched)} embedding table(s) read row by row ({fmt_bytes(sum(untouched.values()))}) "
                              f"left as zero pages, not filled: only the rows a lookup touches take memory"] += 1  # fmt: skip
        if self._flag_given:
            shown = "; ".join(f"{why} x{n}" for why, n in self._flag_paths.most_common())
            self.report.notes[f"{len(self._flag_given)} input allocation(s) require grad, as the original's did (its "
                              f"parameters): the paths its ops took show the flag ({shown}), and with autograd off "
                              f"the flag still decides those paths"] += 1  # fmt: skip
        if self._first_subnormal:
            self.report.notes[f"the replay's data became subnormal (numbers below the type's smallest normal one, which a "
                              f"CPU computes with many times slower), first in the output of {self._first_subnormal}: "
                              f"unless the original's did too, the ops after it take longer than the original's"] += 1  # fmt: skip
        if self._first_nonfinite:
            numbers = (", which was made of numbers the trace does not record (drawn here; whether the original's "
                       "was NaN or inf there too, the trace cannot tell)" if self._nonfinite_numbered else "")  # fmt: skip
            self.report.notes[f"the replay's data became NaN or inf, first in the output of {self._first_nonfinite}"
                              f"{numbers}: the ops after it may not take the original's time"] += 1  # fmt: skip
        for (op, text), n in self._warned.items():
            self.report.notes[f"{op}: torch warned as the replay built it, and the replay ran it on (the original's call "
                              f"warned too where it ran alike; the warnings filters do not make it an error): {text}"] += n  # fmt: skip
        self._grad_inputs = [s for s in sorted(self.permanent)
                             if isinstance(self.env[s], torch.Tensor) and self.env[s].grad_fn is not None]  # fmt: skip
        for s in self._grad_inputs:  # (the build's own graph)
            self.env[s] = self.env[s].detach()
        self._liveness()
        self._anomaly = self._sidecar().get("anomaly_mode") is True
        if self._anomaly and self._recording:
            self.report.notes["the original step ran with autograd's anomaly detection on, as the capture recorded (a "
                              "library may turn it on for the whole process: RecBole's import does); the iterations "
                              "run with it too, each autograd node its recording ops make saving a traceback"] += 1  # fmt: skip
        t0 = time.perf_counter()
        for i in range(len(self.env)):
            if i not in self.permanent:
                self.env[i] = None
        self.free_s += time.perf_counter() - t0

    # ---------------------------------------------------------------- run
    def run(self, after_step=None) -> None:
        """One iteration of the selected ops, in order. ``after_step(step, result)``, when given, is
        called after each op with what it returned (for instrumented runs, which the interpreted
        loop below serves); without it, the steps run as straight-line code
        (:mod:`.straightline`), made at the end of :meth:`prepare` (or here, at its first use).
        Whoever changes ``steps`` after that calls :meth:`invalidate`."""
        with self._quiet(), self._modes():
            if after_step is None and self.steps:
                self._run_straight()
            else:
                self._run_steps(after_step)

    def _quiet(self):
        """Where an op warned at the build (torch's ``TORCH_WARN``: a resized ``out=`` tensor, an
        operator in beta), the iterations run with warnings ignored: the warnings filters of the
        program that runs the replay (pytest's ``-W error``, a ``filterwarnings = error``) would
        make the op's warning an error, and the iteration would stop at an op the original ran
        through. The build recorded each such warning as a note (:meth:`_prepare`). Elsewhere the
        iteration runs as it is: no op warns, and entering the context would cost each iteration."""
        return _warnings_ignored() if self._warned else nullcontext()

    def _modes(self):
        """Autograd's anomaly detection as the original step had it (the sidecar's
        ``anomaly_mode``; off where it does not say: a trace captured elsewhere), whatever the
        process running the replay has (a library it imported may have turned it on). With it on,
        each autograd node saves a Python traceback where it is made: in RecBole's SASRec, whose
        import turns it on, a view of a tensor that requires grad took 17 us against 1.1. Where the
        process has it as the original had, the iteration runs as it is."""
        if torch.is_anomaly_enabled() is self._anomaly:
            return nullcontext()
        return _anomaly_mode(self._anomaly)

    def _run_steps(self, after_step) -> None:
        env = self.env
        step = None
        grad_was = torch.is_grad_enabled()
        grad = False  # the recorded backward ops are replayed as ops; a forward op may record (Step.grad)
        torch._C._set_grad_enabled(False)
        try:
            for step in self.steps:
                if step.grad is not grad:
                    grad = step.grad
                    torch._C._set_grad_enabled(grad)
                if step.release:
                    for s in step.release:
                        v = env[s]
                        if v.__class__ is torch.Tensor and v.grad_fn is not None:
                            env[s] = v.data  # (see Step.release)
                args, fills, list_fills, kwnames = step.args, step.fills, step.list_fills, step.kwnames
                if fills or list_fills:
                    args = args.copy()
                    for pos, slot in fills:
                        args[pos] = env[slot]
                    for pos, slots in list_fills:
                        args[pos] = [env[s] if s >= 0 else None for s in slots]
                if kwnames:
                    n = step.npos
                    result = step.fn(*args[:n], **dict(zip(kwnames, args[n:])))
                else:
                    result = step.fn(*args)
                if step.out is not None:
                    env[step.out] = result
                elif step.outs:
                    results = (result,) if step.single else result
                    for i, slot in step.outs:
                        if slot.__class__ is int:
                            env[slot] = results[i]
                        else:
                            for s, value in zip(slot, results[i]):
                                if s >= 0:
                                    env[s] = value
                for s in step.frees:
                    env[s] = None
                if after_step is not None:
                    after_step(step, result)
        except Exception as e:
            raise self._failed(step, e) from e
        finally:
            torch._C._set_grad_enabled(grad_was)

    def invalidate(self) -> None:
        """Forget the straight-line function: the steps changed (a benchmark swapping ops)."""
        self._straight = None

    def _run_straight(self) -> None:
        line = self._straight
        if line is None:
            line = self._straight = straight_line(self.steps, self.permanent, self.env)
        grad_was = torch.is_grad_enabled()
        torch._C._set_grad_enabled(False)
        try:
            line.fn()
        except Exception as e:
            i = line.failed_step(e.__traceback__)
            raise self._failed(self.steps[i] if i is not None else None, e) from e
        finally:
            torch._C._set_grad_enabled(grad_was)

    def _failed(self, step: Step | None, e: Exception) -> ReplayError:
        """The error of an iteration that ``e`` broke in ``step`` (None: outside any step)."""
        where = f"op {step.name} (node {step.node_id})" if step is not None else "replay"
        return ReplayError(self.trace.path, f"{where} failed during replay: {reason(e)}")


class _Produced(NamedTuple):
    """A replayed op's output, as the build finds it by its ids (:meth:`Replay._record_produced`)."""

    slot: int
    ref: TensorRef  # (its layout: ids alone are reused)
    generation: int  # of its storage's allocation
    maker: int  # the id of the op that made it (see Replay._seeded_now)


@contextmanager
def _anomaly_mode(on: bool):
    check_nan = torch.is_anomaly_check_nan_enabled()
    torch.set_anomaly_enabled(on, check_nan)
    try:
        yield
    finally:
        torch.set_anomaly_enabled(not on, check_nan)


@contextmanager
def _warnings_ignored():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def _warning_text(w: warnings.WarningMessage) -> str:
    """A warning's category and message, without torch's pointer into its C++ source."""
    return f"{w.category.__name__}: {str(w.message).split(' (Triggered internally at')[0].strip()}"


def _dynamic_here(p: PlannedOp) -> bool:
    """Whether an op tagged as of data-dependent output shape is so in this call: indexing only
    with a boolean mask, ``one_hot`` only without a class count, a CTC loss only with its lengths
    in tensors (given as lists of numbers, as the trace records them, they fix its table's size)."""
    name = p.node.name
    if name == "aten::_ctc_loss":
        return any(isinstance(v, TensorArg) for v in p.values[2:4])
    if name in ("aten::index", "aten::_unsafe_index"):
        return any(isinstance(v, TensorListArg) and any(r is not None and r.dtype in ("bool", "uint8") for r in v.refs)
                   for v in p.values)  # fmt: skip
    if name == "aten::one_hot":
        return not any(isinstance(v, int) and v > 0 for v in p.values[1:])
    return True


def _grad_fn_of(t: torch.Tensor) -> Any:
    """The autograd node ``t`` holds (a step of :meth:`Replay._keep_node`)."""
    return t.grad_fn


def _call_autograd_node(node, *grads: torch.Tensor) -> Any:
    """``node`` (an autograd node) called on the gradients of its outputs, as the engine calls it."""
    return node(*grads)


def _address(v: Any) -> int:
    """The address of ``v``'s allocation (0: not a strided tensor, or no memory: a zero tensor of
    forward-mode AD, ``_efficientzerotensor``, has a storage without any)."""
    if isinstance(v, torch.Tensor) and v.layout == torch.strided and not v._is_zerotensor():
        return v.untyped_storage().data_ptr()
    return 0


#: Ops that put values where a boolean mask is true, which must select as many as there are values
_PUTTING_BY_MASK = {"index_put", "index_put_", "_index_put_impl_", "masked_scatter", "masked_scatter_"}
#: Ops whose indices count from the end where negative, down to minus the size
_INDEXING_FROM_THE_END = {"index", "index_put", "index_put_", "_index_put_impl_"}
#: Losses whose target may hold the ``ignore_index`` (-100: padding), outside the classes' range
_LOSSES_IGNORING = {"nll_loss", "nll_loss_forward", "nll_loss_backward", "nll_loss2d", "nll_loss2d_forward",
                    "nll_loss2d_backward", "cross_entropy_loss", "nll_loss_nd"}  # fmt: skip

#: Devices whose ops raise an error for an index outside its range. Elsewhere (a GPU) it is a
#: device-side assertion, after which the process can use the device no more: there, indices an
#: earlier op computed are checked before the call that reads them. (Meta tensors hold no values.)
RAISES_ON_BAD_INDICES = {"cpu", "meta"}


#: An op's complaints that a mask or counts it read select other than as many elements as it
#: needs: values put by a mask (``index_put``, ``masked_scatter``), repeats that must sum to the
#: output's size, segment lengths to the data's
_MISCOUNTS = ("cannot be broadcast to indexing result", "number of ones in mask",
              "allocated size does not match required size", "rows of lengths along axis to sum")  # fmt: skip


def _miscounted(e: BaseException) -> bool:
    """``e`` is an op's complaint about what a mask or counts it read add up to (:data:`_MISCOUNTS`)."""
    text = str(e)
    return any(w in text for w in _MISCOUNTS)


def _out_of_range(e: BaseException) -> bool:
    """``e`` is an op's complaint about the values of an index or a divisor (``one_hot``'s about its
    classes: "Class values must be smaller than num_classes"), or of lengths (torchaudio's RNN-T
    loss: "input length mismatch", where the longest is not the logits' frames)."""
    text = str(e)
    return isinstance(e, IndexError) or any(w in text for w in ("out of bounds", "out of range", "ZeroDivisionError",
                                                                 "Class values must", "length mismatch"))
