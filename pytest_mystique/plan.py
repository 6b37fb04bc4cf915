"""The replay's first pass, the plan: what each selected operator will be called with.

Every selected op is resolved to a ``torch.ops`` overload (or its portable substitute) and its
recorded arguments are converted to the schema's types: tensors become references to the trace's
tensors (:class:`.steps.TensorArg`), which the build (:mod:`.replay`) binds to an earlier op's
output or to a seeded input. On the way the plan collects what the seeded data must look like
(index ranges, float ranges, sizes of each allocation, the spread of index inputs, optimizer state
at zero), which inputs an op reads although an earlier op's output lies there (a tensor autograd
saved), and, for a training step, which forward ops record autograd's graph. An op that cannot be
planned is skipped here with the reason, its outputs' memory still counted as a new allocation.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from typing import Any

import torch

from .collectives import Comms, tensor_refs
from .errors import ReplayError, TraceError, reason
from .fbgemm import drop_data_sizes, sparse_tables, tbe_ranges
from .grad_flags import kept_casts, nodes_made, ran_with_grad_mode, required_grad
from .graph import (
    CASTS,
    UNINITIALISED,
    backward_ops,
    compiled_regions,
    enclosing_ops,
    inner_ops,
    optimizer_step_ops,
    profiler_steps,
    select_ops,
)
from .input_records import InputRecords
from .ops import ArgSpec, Unsupported, arg_specs, enum_from_code, parse_op_name, resolve, schema_facts
from .packed import EMBEDDING_PACKED, is_packed, packed_kind, packed_weights, takes_packed
from .ranges import (
    RANGED_OPS,
    RUNNING_SUMS,
    IntRange,
    definite_inputs,
    float_ranges,
    floating,
    index_ranges,
    integral,
    real_floating,
    region_tables,
    value_sources,
)
from .sidecar import sidecar_path
from .steps import PlannedOp, Report, TensorArg, TensorListArg, UnstridedArg, arg_refs
from .substitute import Substitute, grouped_heads_here, substitute_for, without_added_argument
from .tensors import PRECONDITIONER_START, TensorFactory
from .trace import ListValue, Node, Scalar, TensorRef, Trace, Unstrided, storages_of, tensors_of
from .units import fmt_bytes

_UNIT_COMPLEX = complex(0.6, 0.8)
_FLOAT_WORDS = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


class Planner:
    """Plans one trace's selected ops for a replay on ``device``. The seeded data's requirements
    go to ``factory``, skipped ops and notes to ``report``; after :meth:`plan`, the attributes
    below say what the build needs besides the planned ops."""

    def __init__(self, trace: Trace, device: torch.device, factory: TensorFactory, report: Report, *,
                 comms: Comms | None, sidecar: Callable[[], dict], max_memory: int | None):  # fmt: skip
        self.trace = trace
        self.device = device
        self.factory = factory
        self.report = report
        self.comms = comms
        self.sidecar = sidecar  # () -> the trace's sidecar (empty where it has none)
        self.max_memory = max_memory
        # produced tensors whose readers get seeded inputs: the replay's values there would be garbage
        # (memory an op allocated uninitialised, read before any op wrote it), as (ids, the id of the
        # op that made it): a writer gives the ids of a freed tensor to a later one, which is not seeded
        self.seeded: set[tuple[tuple[int, int], int]] = set()
        self.unstrided_made: set[int] = set()  # ids of tensors without storage that planned ops output
        self.host_kept = False  # on a GPU, for a trace recorded on one: its host tensors stay in host memory
        # a training step's forward: the ops that run with autograd recording their graph, the
        # allocations of the parameters (they require grad), and the backward pass's ops
        self.recording: set[int] = set()
        self.parameters: set[tuple[int, str]] = set()
        self.backward: set[int] = set()
        # allocations whose tensors required grad in the original, as the paths its ops took show
        self.flagged: set[tuple[int, str]] = set()
        self.flag_paths: Counter = Counter()
        # the capture's records of the step's inputs (the sidecar's), given to the factory
        self.records = InputRecords(trace, factory, report, sidecar)
        self._parts: dict[int, list[Node]] | None = None  # see _ranges_inside
        self._packed: dict[int, dict] | None = None  # see _packed_record
        self._generators: dict[torch.device, torch.Generator] = {}  # see _generator

    def _commonest(self, ids: list[int]) -> str:
        """The four commonest names among the trace's nodes ``ids``, with their counts (for a note)."""
        kinds = Counter(self.trace.by_id[i].name for i in ids)
        return ", ".join(f"{n} x{c}" for n, c in kinds.most_common(4))

    def plan(self) -> list[PlannedOp]:
        """The selected ops that can be called, in order, each with its overload and arguments;
        the others are in the report's skipped ops with their reason."""
        ops = select_ops(self.trace, self.device.type)
        self.report.ops_total = len(ops)
        # A trace recorded on a GPU replayed on one: the tensors it had in host memory (a batch
        # before its copy to the device, a count) stay there, and the copies between them stay
        # copies. A CPU trace replayed on a GPU has all of its tensors there.
        self.host_kept = self.device.type != "cpu" and any(
            ref.device not in ("cpu", "meta") for n in ops for ref in tensors_of((*n.inputs, *n.outputs)))
        planned = []
        made: dict[tuple[int, int], TensorRef] = {}  # a produced tensor's ids -> the tensor, as its op output it
        placed: dict[tuple, TensorRef] = {}  # where a produced tensor lies -> the tensor
        lying_in: dict[int, list[TensorRef]] = {}  # a storage id -> the produced tensors in its allocation
        external_bytes: dict[tuple, int] = {}
        in_step = optimizer_step_ops(self.trace)
        step_read: set[TensorRef] = set()  # inputs the optimizer's step reads
        step_wrote: set[int] = set()  # storages the optimizer's step writes in place, through any tensor
        elsewhere: set[TensorRef] = set()  # inputs an op outside it reads
        producer: dict[tuple[int, int], int] = {}  # a produced tensor -> the planned op that made it
        # a tensor read -> the planned op that had made it, as it was when read (``producer`` forgets a
        # tensor once a later op allocates in its storage again, and the ranges pass back at the end)
        read_from: dict[tuple[int, int], int] = {}
        # and the ops that made it before, where a writer gave a later tensor the same ids: a
        # floating range on the ids, which holds for every tensor of them, reaches theirs too
        read_before: dict[tuple[int, int], set[int]] = {}
        unwritten: set[tuple[int, int]] = set()  # outputs of empty-like ops that no op has used yet
        made_at: dict[tuple[int, int], int] = {}  # a produced tensor -> the id of the node that made it
        fresh: set[int] = set()  # storages whose present allocation a planned op made (not an input's)
        inner: _InnerPlacements | None = None
        planned_ids: set[int] = set()
        views = 0
        # integer inputs of the step, in the order they are first read -> the planned op that read it first
        int_inputs: dict[TensorRef, int] = {}
        float_inputs: dict[TensorRef, int] = {}  # and floating ones
        mask_inputs: dict[TensorRef, int] = {}  # and boolean ones
        sorted_reads: set[TensorRef] = set()  # inputs an op reads as a sorted sequence (bucketize's boundaries)
        fresh_reads: list[TensorRef] = []  # tensors the program filled itself, in the order they were first read
        lifted: set[tuple[int, int]] = set()  # of those, the inputs of lift_fresh (torch.tensor(number))
        outside: dict[tuple[int, int], tuple] = {}  # tensors read as inputs of the step -> where they lay
        scalar_reads: list[tuple[int, int, TensorRef]] = []  # and each read of a 0-dim one: (op, position, tensor)
        written: set[TensorRef] = set()  # inputs an op writes in place
        # an input allocation -> the spans of bytes that ops have written whole without reading them (out=
        # arguments, zero_...), or None once an op read bytes none of those had written (see _overwritten)
        first_write: dict[tuple[int, str], list[tuple[int, int]] | None] = {}

        def allocated(outs: list[TensorRef], read: set[int], replayed: bool = True) -> None:
            # An output in a storage none of the op's inputs lies in is a new allocation: what lay
            # there before was freed (memory a saved tensor holds is never reused), so a later
            # input found there with an earlier tensor's ids or place is not that tensor (as
            # the build (Replay._bind) starts a new generation of the storage). Tensors of no elements have no memory.
            for sid in {ref.storage_id for ref in outs if ref.numel}.difference(read):
                if replayed:
                    fresh.add(sid)
                else:
                    fresh.discard(sid)
                for old in lying_in.pop(sid, ()):
                    placed.pop(old.placement, None)
                    made.pop(old.key, None)
                    producer.pop(old.key, None)
                    unwritten.discard(old.key)

        for node in ops:
            try:
                p = self._plan_op(node)
            except (Unsupported, TypeError, ValueError, OverflowError, KeyError, IndexError, AttributeError) as e:
                why = str(e) if isinstance(e, Unsupported) else f"malformed arguments in the trace: {reason(e)}"
                self.report.skipped[(node.name, why)] += 1
                # (its outputs' memory is still another allocation: what lay there is gone)
                allocated(tensors_of(node.outputs), storages_of(node.inputs), False)
                continue
            planned_ids.add(node.id)
            same = [_same_tensor(v, made, placed, p.values, outside) for v in p.values]
            for before, after in zip(p.values, same):
                if after is not before:  # the op's requirement on it (an index range, a divisor) goes along
                    for old, new in zip(arg_refs(before), arg_refs(after)):
                        if old in self.factory.ranges and new is not old:
                            self.factory.constrain(new, self.factory.ranges[old])
            p.values = same
            planned.append(p)
            facts = None if p.collective else schema_facts(p.overload)
            writes, overwrites = ((), ()) if facts is None else (facts.writes, facts.overwrites)
            read: set[tuple[int, int]] = set()
            for pos, v in enumerate(p.values):
                for ref in arg_refs(v):
                    read.add(ref.key)
                    if ref.key in producer:
                        was = read_from.get(ref.key)
                        if was is not None and was != producer[ref.key]:
                            read_before.setdefault(ref.key, set()).add(was)
                        read_from[ref.key] = producer[ref.key]
                    else:
                        read_from.pop(ref.key, None)
                    self.factory.reserve(ref)
                    if ref.key in unwritten:
                        unwritten.discard(ref.key)
                        if ref.numel and not (p.collective or (pos < len(writes) and writes[pos])):
                            self.seeded.add((ref.key, made_at[ref.key]))  # the program filled it outside the ops
                            fresh_reads.append(ref)
                    if (not _made(ref, made) and (ref.key, made_at.get(ref.key)) not in self.seeded and ref.storage_id in fresh
                            and lying_in.get(ref.storage_id) and real_floating(ref)):  # fmt: skip
                        if inner is None:
                            inner = _InnerPlacements(self.trace)
                        base = _viewed(ref, lying_in[ref.storage_id], inner, made_at, planned_ids, node.id)
                        if base is not None:
                            p.views[ref] = base
                            views += 1
                            made[ref.key] = ref
                            placed[ref.placement] = ref
                            lying_in[ref.storage_id].append(ref)
                            made_at[ref.key] = made_at[base.key]
                    if not _made(ref, made):
                        if node.name in _LIFTS and ref.key not in lifted:
                            # (``torch.tensor(3)``: a number becomes a tensor with no op recorded, and
                            # reaches the ops through lift_fresh, where the capture saw it)
                            lifted.add(ref.key)
                            fresh_reads.append(ref)
                        outside.setdefault(ref.key, ref.placement)
                        if ref.shape == () and not p.collective:
                            scalar_reads.append((len(planned) - 1, pos, ref))
                        if pos < len(writes) and writes[pos]:
                            written.add(ref)
                        if ref.shape and _reads_sorted(node.name, pos, p.values):
                            sorted_reads.add(ref)
                        if ref.shape and ref.dtype.startswith(("int", "uint")):
                            int_inputs.setdefault(ref, len(planned) - 1)
                        elif ref.shape and real_floating(ref):
                            float_inputs.setdefault(ref, len(planned) - 1)
                        elif ref.shape and ref.dtype == "bool":
                            mask_inputs.setdefault(ref, len(planned) - 1)
                        key = (ref.storage_id, ref.dtype)
                        start, stop = ref.offset * ref.itemsize, ref.reach_bytes()
                        spans = first_write.setdefault(key, [])
                        if spans is not None:
                            dense = ref.shape and ref.extent() == math.prod(ref.shape)
                            if pos < len(overwrites) and overwrites[pos] and dense:
                                _add_span(spans, start, stop)
                            elif not _covers(spans, start, stop):
                                first_write[key] = None  # it reads seeded data
                        external_bytes[key] = max(external_bytes.get(key, 0), stop)
                        if node.id not in in_step:
                            elsewhere.add(ref)
                        else:
                            step_read.add(ref)
                    if node.id in in_step and pos < len(writes) and writes[pos]:
                        step_wrote.add(ref.storage_id)
            derives = not p.collective and p.substitution is None  # its outputs' values follow from its inputs
            self.unstrided_made.update(v.tensor_id for v in node.outputs if _unstrided(v))
            outs = tensors_of(node.outputs)
            allocated(outs, {sid for _, sid in read})
            for ref in outs:
                made[ref.key] = ref
                made_at[ref.key] = node.id
                placed[ref.placement] = ref
                if ref.numel:
                    lying_in.setdefault(ref.storage_id, []).append(ref)
                if node.name in UNINITIALISED:
                    unwritten.add(ref.key)
                if derives and ref.key not in read:  # not the input itself (an in-place op's or out= result)
                    producer[ref.key] = len(planned) - 1
        if self.trace.orphans:
            self.report.notes[f"{self.trace.orphans} node(s) name a parent the trace does not hold (the writer lost it): "
                              f"read as top-level"] += 1  # fmt: skip
        t = self.trace  # the operators op selection looked through or left out (graph.select_ops), by why
        for ids, what in (
            (t.opened, "operator(s) replayed through their parts, as a later op reads a tensor one of their parts "
                       "made and they do not return (saved for the backward pass)"),
            (t.unwrapped, "operator call(s) on tensors recorded without storage replayed through the calls they made "
                          "(a torch.func transform, vmap or grad, records each operator at each of its levels on "
                          "wrapper tensors, down to the call on the tensors they wrap; a tensor subclass, a nested jagged "
                          "tensor, calls it again on the plain tensors it holds)"),
            (t.around_collectives, "operator(s) that ran a collective inside them (torch's functional collectives) "
                                   "replayed through their parts, the collective on the replay's process groups"),
            (t.kept_collectives, "collective(s) replayed whole though a later op reads a tensor made inside them (gloo "
                                 "runs a reduce-scatter as a clone of its input and an all-reduce of the clone, which "
                                 "FSDP2 reads): that tensor is a seeded input, as its communication is no operator to "
                                 "replay it through"),
            (t.idle_wrappers, "operator call(s) on tensors recorded without storage not replayed: each returned the "
                              "tensor it was given, or only a number or boolean about its tensors, and ran nothing "
                              "inside it (a call that did nothing at its level of a torch.func transform), or made or "
                              "took apart a wrapper (a nested jagged tensor, a batch of the legacy vmap)"),
            (t.around_casts, "operator(s) replayed through their parts, as parts of them ran under torch.autocast "
                             "(their inputs cast to a lower precision, which a call outside autocast would not do)"),
            (t.not_in_torch, "operator(s) this torch does not have (a custom operator defined in the program's own "
                             "code, or one of a library not installed here) replayed through the operators they ran "
                             "inside them, as the trace recorded them (work of theirs that called no operator is not "
                             "replayed)"),
            (t.no_kernel, f"operator(s) that this torch has no kernel of on {self.device.type} (torch 2.8's "
                          f"aten::_grouped_mm on the CPU) replayed through the operators they ran inside them, as the "
                          f"trace recorded them"),
        ):  # fmt: skip
            if ids:
                self.report.notes[f"{len(ids)} {what}: {self._commonest(ids)}"] += 1
        steps = profiler_steps(self.trace)
        if len(steps) > 1:
            self.report.notes[f"the trace holds {len(steps)} of the profiler's steps ({', '.join(steps[:3])}"
                              f"{', ...' if len(steps) > 3 else ''}): an iteration replays them all, and its time is "
                              f"theirs together"] += 1  # fmt: skip
        compiled = compiled_regions(self.trace)
        if compiled:
            self.report.notes[f"{compiled} run(s) of torch.compile'd code: the kernels it generated for a CPU are not "
                              f"operators and are not in the trace; only the operators they call replay"] += 1  # fmt: skip
        if views:
            self.report.notes[f"{views} input(s) are views that an op inside a replayed one made of an earlier op's "
                              f"output (the flattened input aten::linear saves for the backward pass): they are read "
                              f"through a view of that output (aten::as_strided), as the original read that "
                              f"memory"] += 1  # fmt: skip
        if self.seeded:
            self.report.notes[f"{len(self.seeded)} tensor(s) that an op allocated uninitialised (aten::empty...) were read "
                              f"before any op wrote them (the program filled them itself, as torch.tensor(list) does): "
                              f"they read seeded data"] += 1  # fmt: skip
        derived: dict[tuple, tuple[list, int]] = {}

        def sources_of(ref: TensorRef) -> tuple[list, int] | None:
            key = ref.key
            i = read_from.get(key)
            if i is not None and (key, planned[i].node.id) in self.seeded and planned[i].node.name in UNINITIALISED:
                return None  # (the program filled it outside the ops: the factory makes it, as an input)
            if i is not None and integral(ref) and ref not in tensors_of(planned[i].node.outputs):
                # integers under ids a writer reused (each row of a jagged batch's offsets, read by its
                # own lookup, a view at its own place): the op that made this very tensor, where one did
                j = next((j for j in sorted(read_before.get(key, ()), reverse=True)
                          if ref in tensors_of(planned[j].node.outputs)), None)  # fmt: skip
                if j is not None:
                    if (key, j) not in derived:
                        derived[(key, j)] = (_value_sources(planned[j], key), j)
                    return derived[(key, j)]
            if i is not None and key not in derived:
                earlier = [src for j in sorted(read_before.get(key, ())) for src in _value_sources(planned[j], key)
                           if real_floating(src[0])]  # fmt: skip
                derived[key] = (_value_sources(planned[i], key) + earlier, i)
            return derived.get(key)

        records = self.records
        self._overwritten(first_write)  # (before the records are matched: see InputRecords.scale_floats)
        # (the program's own numbers before the pass: an index range passes back through ``x - 1``
        # and ``ids + offsets`` by the number and offsets the capture recorded)
        records.fresh_values(fresh_reads)
        records.exact_scalars(planned, scalar_reads, written)
        int_records = records.matched(records.as_the_capture_read(int_inputs, planned, "index_inputs"), "index_inputs")
        records.small_ints(int_records)
        records.pairs_apart(int_records)
        self.factory.pass_back(sources_of)
        by_runs = sum(1 for ref in int_inputs if self.factory.own_runs(ref))
        if by_runs:
            self.report.notes[f"{by_runs} integer input(s) drawn run by run, each run as the op that reads it needs (a "
                              f"jagged batch's lengths: each key's row sums to the ids of its lookup's bags; one tensor "
                              f"of several tables' ids: each table's in its own range)"] += 1  # fmt: skip
        summed = {ref.storage_id for p in planned if p.node.name in _SUMS for ref in tensors_of(p.node.inputs[:1])}
        records.skew_indices(int_records, summed)
        self._hold_sorted(sorted_reads)
        records.scale_floats(records.as_the_capture_read(float_inputs, planned, "float_inputs"))
        records.place_masks(records.as_the_capture_read(mask_inputs, planned, "mask_inputs"))
        # inputs the optimizer's step writes in place, themselves or through a view (Adam's complex
        # moments, through view_as_real)
        stepped = {ref for ref in step_read if ref.storage_id in step_wrote}
        state = {ref for ref in stepped - elsewhere if math.prod(ref.shape) > 1}
        self._zero_state(state, _reaching_factorisations(planned, in_step, state))
        self._decay_factors(planned, in_step, stepped & elsewhere)
        backward = backward_ops(self.trace)
        self._record_forward(planned, in_step, elsewhere, backward)
        if not backward:
            # A step without a backward pass (inference) never writes its tables. Left unfilled,
            # every row a lookup read would be the kernel's one page of zeros, always in the caches:
            # a TBE inference over two 1M-row tables took 0.44 of its original's time. Filled.
            self.factory.sparse.clear()
        self.flagged, self.flag_paths, folded = required_grad(self.trace)
        self.recording |= kept_casts(self.trace, folded, self.flagged, self.flag_paths)
        if self.max_memory is not None:
            total = sum(external_bytes.values())
            if total > self.max_memory:
                raise ReplayError(
                    self.trace.path,
                    f"replay needs at least {fmt_bytes(total)} of input tensors, over the "
                    f"{fmt_bytes(self.max_memory)} memory limit (--mystique-max-memory); nothing was allocated",
                )
        return planned

    def _packed_record(self, node: Node, arg_type: str) -> tuple[dict | None, str | None]:
        """The capture's record of the packed weights ``node`` takes (the sidecar's
        ``packed_weights``), and why there is none where the sidecar has records that do not fit:
        the records are of the step's calls that passed packed weights, in order, and the trace's
        selected ops whose schema takes them are those calls (each record's op and type checked)."""
        records = self.sidecar().get("packed_weights", [])
        if not records:
            return None, None
        where = sidecar_path(self.trace.path)
        if self._packed is None:
            takers = [n.id for n in select_ops(self.trace) if takes_packed(n.op_schema or "")]
            self._packed = dict(zip(takers, records)) if len(takers) == len(records) else {}
            if len(takers) != len(records):
                self.report.notes[f"{where}: the capture's {len(records)} record(s) of packed weights do not line up "
                                  f"with the trace's {len(takers)} call(s) that take them: none is used"] += 1  # fmt: skip
        record = self._packed.get(node.id)
        kind = packed_kind(arg_type)
        if record is None:
            return None, (f"the capture's records of packed weights ({where}) do not line up with the trace's calls "
                          f"that take them")  # fmt: skip
        if record["op"] != node.name or record["kind"] != kind:
            return None, (f"the capture's record of its packed weights ({where}) is of {record['op']}'s "
                          f"{record['kind']}, not of a {node.name}'s {kind}")  # fmt: skip
        return record, None

    def _hold_sorted(self, refs: set[TensorRef]) -> None:
        """Inputs an op reads as a sorted sequence (:data:`_SORTED_READS`) are drawn sorted along
        their last dimension, whatever the capture recorded (the op takes them so). A trace captured
        elsewhere says nothing of its inputs' order: a batch vector, which torch_cluster cuts into
        clouds by ``bucketize``, was drawn in random order, and DGCNN's k-NN searched clouds of
        25 to 1,312 points where the original's held 256 each (2.4 times its time)."""
        held = {ref for ref in refs if ref not in self.factory.apart and ref not in self.factory.ordered}
        self.factory.ordered.update(held)
        if held:
            self.report.notes[f"{len(held)} input(s) that an op reads as a sorted sequence (bucketize's boundaries, "
                              f"searchsorted's, a sparse matrix's row indices made pointers, torch_scatter's "
                              f"segments) drawn sorted along their last dimension, as the op takes them"] += 1  # fmt: skip

    def _zero_state(self, refs: set[TensorRef], factorised: set[TensorRef]) -> None:
        """The optimizer's state (moments, momentum buffers: inputs only its step uses, and
        writes) starts at zero, as the optimizer makes it, and is reset to zero between
        iterations; the step's own gradients then give it the original's zero pattern: the rows of
        an embedding that no index touched stay zero, and a square root over them is several
        times slower than over seeded values (AdamW's on a 4000 x 128 table: 1.1 ms against
        0.2 ms). Step counters (0-dim) keep their seeded value: zero would divide by zero. State
        whose values reach a matrix that the step factorises or solves against (``factorised``:
        see :func:`_reaching_factorisations`) is a preconditioner, which an optimizer starts
        nonsingular (Shampoo's at ``eps * I``): a square matrix starts, and is reset, at
        :data:`.tensors.PRECONDITIONER_START` times the identity, and state of another shape
        (PSGD's triangular factor kept as a line of its upper triangle, unpacked into a matrix in
        the step) at that value in every element, which unpacks into a triangular matrix with that
        diagonal. From zero, Shampoo's ``svd`` found zero singular values, raised them to -1/4,
        and its parameters went infinite; PSGD took the log of its factor's largest element, 0;
        made positive-definite by a dominant diagonal over seeded values, Shampoo's ``svd`` ran
        1.34 times as long as the original's (a spectrum of distinct values, where the original's
        repeats its small ones)."""
        roots = refs & factorised
        refs = refs - roots
        if refs:
            self.factory.zeros |= refs
            size = sum(math.prod(r.shape) * r.itemsize for r in refs)
            self.report.notes[f"{len(refs)} optimizer state tensor(s) ({fmt_bytes(size)}) start at zero, as the "
                              f"optimizer makes them"] += 1  # fmt: skip
        square = {r for r in roots if len(r.shape) >= 2 and r.shape[-1] == r.shape[-2]}  # (or a batch of them: see fill)
        if square:
            self.report.notes[f"{len(square)} optimizer state matri(ces) that its step factorises or solves against "
                              f"(preconditioners) start at {PRECONDITIONER_START:g} times the identity, not at zero, "
                              f"as an optimizer makes them nonsingular (Shampoo's at eps * I)"] += 1  # fmt: skip
        if roots - square:
            self.report.notes[f"{len(roots - square)} optimizer state tensor(s) whose values reach a matrix its step "
                              f"factorises or solves against (a preconditioner kept packed, as PSGD keeps its "
                              f"triangular factors) start at {PRECONDITIONER_START:g} in every element, not at "
                              f"zero"] += 1  # fmt: skip
        self.factory.preconditioners |= roots

    def _decay_factors(self, planned: list[PlannedOp], in_step: set[int], params: set[TensorRef]) -> None:
        """A number the optimizer's step multiplies parameters by in place (AdamW's weight decay,
        ``param.mul_(1 - lr * wd)``: a Python number, which the trace records without its value)
        is 1, as it is within a hair in the original. Drawn from [0.5, 1) as other numbers are, it
        shrank the bundled transformer's weights by a third every iteration. A recorded value
        (:meth:`.input_records.InputRecords.exact_scalars`) stands before it."""
        for p in planned:
            if p.node.id not in in_step or p.node.name not in _DECAYS:
                continue
            args = dict(zip((a.name for a in arg_specs(p.overload)), p.values))
            if any(ref in params for ref in arg_refs(args.get("self"))):
                for ref in arg_refs(args.get("other")):
                    if not ref.shape and real_floating(ref):
                        self.factory.float_bounds[ref] = (1.0, 1.0)

    def _overwritten(self, first_write: dict[tuple[int, str], list[tuple[int, int]] | None]) -> None:
        """Input allocations whose every element ops write without reading it (``out=`` arguments:
        DDP's gradient buckets, filled piece by piece) before any op reads it are not filled: seeded
        data there would never be read, and writing it was a third of the DDP ResNet's filling
        (102 of 326 MB). ``first_write``: per allocation, the spans of bytes written so (None: an op
        read seeded elements of it)."""
        sizes = self.factory.storage_bytes
        keys = {key for key, spans in first_write.items()
                if spans and _covers(spans, 0, sizes.get(key, 0))}  # fmt: skip
        if keys:
            self.factory.overwritten |= keys
            size = sum(sizes.get(key, 0) for key in keys)
            self.report.notes[f"{len(keys)} input allocation(s) ({fmt_bytes(size)}) that an op writes whole before any op "
                              f"reads them (out= arguments, zero_, copy_...) are left unfilled"] += 1  # fmt: skip

    def _record_forward(self, planned: list[PlannedOp], in_step: set[int], elsewhere: set[TensorRef],
                        backward: set[int]) -> None:  # fmt: skip
        """In a training step, the original's forward ops ran with autograd recording the graph
        of every op that reads a parameter or what was computed from one: a node per op, the
        tensors it saves, version counters. That work is part of the step's time (on a CPU, 2-5%
        of a small transformer's training step) and is not an op of the trace. The parameters
        (inputs that ops outside the optimizer's step read, in allocations that the step writes)
        require grad, and the ops that ran neither in the backward pass nor in the optimizer's
        step run with grad mode on where their autograd sequence number shows it was on
        (:func:`.grad_flags.ran_with_grad_mode`: not in a ``no_grad`` block, the forward of an
        ``autograd.Function`` or a reentrant activation checkpoint's first pass), before the
        backward pass or after it; the ops of the backward pass that ran with grad mode on record
        too (the checkpoint's recomputed forward, a backward with ``create_graph``). A trace
        whose writer left every number -1 does not show the mode: there the ops before the last
        backward op record (what follows it, such as an average of the weights, most often ran
        under ``torch.no_grad``). The backward pass is replayed from its own recorded ops, so the
        graphs are never used; they are released where it starts, as the original's backward
        frees what they saved. Without an optimizer's step, in a step with a backward pass whose
        trace shows the mode, the parameters are the allocations that ops with grad mode on read
        (:meth:`_read_with_grad_mode`). So they are in a step without a backward pass whose ops
        made a graph (an inference run with grad mode on, for parameters that require grad), read
        by the ops that made a node (:func:`.grad_flags.nodes_made`); replayed without, a small
        BERT's took 0.91 of the original's time inside operators. Those ops read the data with the
        weights: a floating input that the capture recorded without ``requires_grad`` (the sidecar's
        ``float_inputs``) stays without it. Otherwise nothing records there.
        ``backward``: the backward pass's ops (:func:`.graph.backward_ops`)."""
        read = {(ref.storage_id, ref.dtype) for ref in elsewhere}
        params = set()
        for p in planned:
            if p.node.id in in_step and not p.collective:
                writes = schema_facts(p.overload).writes
                params.update((ref.storage_id, ref.dtype) for pos, v in enumerate(p.values[: len(writes)]) if writes[pos]
                              for ref in arg_refs(v) if floating(ref))  # fmt: skip
        params &= read
        last = max((i for i, p in enumerate(planned) if p.node.id in backward), default=None)
        forward = [p for p in planned if p.node.id not in backward and p.node.id not in in_step and not p.collective]
        modes = {p.node.id: ran_with_grad_mode(p.node) for p in forward}
        # (where no op shows grad mode on, the trace does not show it: a writer that leaves every number -1)
        shown = any(modes.values())
        made = nodes_made([p.node for p in forward if modes[p.node.id]]) if last is None else None
        if last is None and not {p.node.id for p in forward if p.node.name not in CASTS} & made:
            return  # (no graph, or autocast's kept copies alone, made with autograd on under no_grad: kept_casts)
        found = ""
        if not params and shown:
            # (without a backward pass, the ops that made a node alone show the parameters: a
            # frozen backbone's ops ran with grad mode on and made none)
            params = self._read_with_grad_mode([p for p in forward if modes[p.node.id] and (made is None or p.node.id in made)])
            data = params & self.records.without_grad
            params -= data
            why = ("the step has a backward pass and no optimizer's step to show its parameters (a manual update, "
                   "MAML's inner steps, gradients of the inputs)" if last is not None else
                   "the step has no backward pass, and its ops' autograd sequence numbers advance, as where autograd "
                   "makes a node (an inference run with grad mode on, its parameters requiring grad)")  # fmt: skip
            found = f"{len(params)} input allocation(s) that ops with grad mode on read require grad: {why}"
            if data:
                found += f"; {len(data)} more that the capture recorded without the flag (data) stay without"
        if not params:
            return
        self.parameters, self.backward = params, backward
        if shown:  # (the grad mode of each op, wherever it ran: what follows the backward pass too)
            off = {i for i, on in modes.items() if on is False}
            recorded = set(modes) - off
        else:  # (what follows the last backward pass, such as an average of the weights, ran under no_grad)
            off = set()
            recorded = {p.node.id for p in planned[:last] if p.node.id in modes}
        # (the backward pass's ops that ran with grad mode on: activation checkpointing's recomputed
        # forward, a backward with create_graph)
        again = [p.node for p in planned if p.node.id in backward and not p.collective and ran_with_grad_mode(p.node)] if shown else []  # fmt: skip
        self.recording = recorded | {node.id for node in again}
        without = (f"; {len(off)} that ran with grad mode off, as their autograd sequence numbers show (torch.no_grad, "
                   f"an autograd.Function's forward), run without: {self._commonest(sorted(off))}") if off else ""  # fmt: skip
        if again:
            without += (f"; {len(again)} op(s) of the backward pass that ran with grad mode on (activation checkpointing's "
                        f"recomputed forward, a backward that makes a graph) record too: "
                        f"{self._commonest([node.id for node in again])}")  # fmt: skip
        counted = f"{len(params)} parameter allocation(s) require grad" if not found else found
        self.report.notes[f"{len(recorded)} forward op(s) run with autograd recording their graph, as in the "
                          f"original's step ({counted}){without}"] += 1  # fmt: skip

    @staticmethod
    def _read_with_grad_mode(recording: list[PlannedOp]) -> set[tuple[int, str]]:
        """The leaves a step's autograd graph may have started from, where no optimizer's step
        shows its parameters: the floating allocations that ops run with grad mode on read, but
        for those such an op writes in place (autograd refuses that write to a leaf that requires
        grad: a module's buffers, a cache), a batch norm's running statistics (which it updates
        inside, where autograd refuses them a flag) and 0-dim ones (most often a number the
        program passed). The inputs of the step among them are given the flag, but for those the
        capture recorded without it (:meth:`_record_forward`; elsewhere a data input that did not
        have it in the original adds the graph of the ops that read it alone)."""
        read, written = set(), set()
        for p in recording:
            writes, specs = schema_facts(p.overload).writes, arg_specs(p.overload)
            for pos, v in enumerate(p.values):
                refs = [(ref.storage_id, ref.dtype) for ref in arg_refs(v) if floating(ref) and ref.shape]
                kept = (pos < len(writes) and writes[pos]) or (pos < len(specs) and specs[pos].name.startswith("running_"))
                (written if kept else read).update(refs)
        return read - written

    def _plan_op(self, node: Node) -> PlannedOp:
        if node.attr("kernel_backend") == "triton" or node.name.startswith("triton_"):
            raise Unsupported(
                f"compiled Triton kernel ({node.attr('kernel_file') or node.name}): GPU-only, and replaying "
                f"kernels from a trace's _resources folder is not supported (a trace is never code)"
            )
        if parse_op_name(node.op_schema).namespace == "c10d":
            return self._plan_collective(node)
        overload, schema_args, alt = self._resolve(node)
        inputs = node.inputs
        if len(inputs) > len(schema_args):
            inputs, composed = self._inputs_this_torch_takes(node, schema_args)
            alt = alt or composed
        missing = [a.name for a in schema_args[len(inputs):] if not (a.has_default or a.optional)]
        if missing:
            # (torch's observer writes a node without inputs where it failed on one: a nested tensor's sizes)
            raise Unsupported(f"the trace records {len(inputs)} of its inputs and no value for its required "
                              f"{', '.join(repr(m) for m in missing)}: the trace's writer left them out")  # fmt: skip
        values, kwnames = [], []
        names = [a.name for a in schema_args]
        for arg, val in zip(schema_args, inputs):
            if is_packed(arg.type):
                record, missing = self._packed_record(node, arg.type)
                packed, recorded = packed_weights(node, arg.type, record, self.device, seed=self.factory.seed,
                                                  missing=missing, sidecar=str(sidecar_path(self.trace.path)))  # fmt: skip
                values.append(packed)
                if recorded and arg.type.endswith(EMBEDDING_PACKED) and isinstance(ids := node.inputs[1], TensorRef):
                    self.factory.constrain(ids, IntRange(0, record["weight"][0]))  # (the table's rows)
                how = "the capture's record of them" if recorded else "the op's shapes, with a bias"
                self.report.notes[f"{node.name}: packed weights (an opaque object in a trace) rebuilt from {how}, "
                                  f"seeded"] += 1  # fmt: skip
            elif arg.type == "Storage" and node.name == "aten::set_":
                values.append(self._fresh_storage(node))
            elif arg.type == "Generator" and isinstance(val, Scalar) and val.type == "Generator":
                values.append(self._generator(node))
            else:
                values.append(self._convert(arg, val))
            if arg.kwarg_only:
                kwnames.append(arg.name)
            elif kwnames:
                raise Unsupported("positional argument after keyword-only ones")
        if node.name in _EPSILON_ADDS or node.name in _EPSILON_MINS or not _EPSILON_ARGS.isdisjoint(names):
            self._epsilon_below_resolution(node, names, values)
        if self.device.type != "cpu":
            self._place_on_host(node.name, names, values)
        for ref, rng in index_ranges(node, names).items():
            self.factory.constrain(ref, rng)
        self.factory.suggest_floats(float_ranges(node, names))
        self._ranges_inside(node)
        self.factory.definite.update(definite_inputs(node))
        self.factory.regions.update(region_tables(node, names))
        if node.name.startswith("fbgemm::"):
            name, args = node.name[8:], dict(zip(names, node.inputs))
            for ref, rng in tbe_ranges(name, args).items():
                self.factory.constrain(ref, rng)
            self.factory.sparse.update(sparse_tables(name, args))
            note = drop_data_sizes(name, names, values)
            if note:
                self.report.notes[note] += 1
        if alt is None:
            alt = grouped_heads_here(node.name, values, self.device)
        if alt is not None:
            return PlannedOp(node, alt.overload, alt.map(names, values), alt.kwnames, substitution=alt.describe(values))
        return PlannedOp(node, overload, values, tuple(kwnames))

    def _inputs_this_torch_takes(self, node: Node, schema_args: tuple[ArgSpec, ...]) -> tuple[tuple, Any]:
        """The recorded inputs of an op whose schema, in the torch that wrote the trace, ends with
        arguments this torch's lacks (a newer release added them: SDPA's ``enable_gqa`` in 2.5),
        less those arguments, where each holds its default value there: the call is the one this
        torch makes without them. Read from the schema the trace records (``op_schema``), whose
        other arguments must be this torch's, in its order. An argument given another value asks
        for what this torch cannot do, unless a few ops around the call do it (the substitute
        returned with the inputs, else None: :data:`.substitute.ADDED_ARGUMENTS`); otherwise the
        op is skipped, with the argument and its value."""
        n, composed, dropped = len(schema_args), None, []
        try:
            recorded = torch._C.parse_schema(node.op_schema).arguments
        except RuntimeError:
            recorded = None
        if recorded is None or len(recorded) != len(node.inputs) or [a.name for a in recorded[:n]] != [a.name for a in schema_args]:
            raise Unsupported(f"trace records {len(node.inputs)} inputs but the schema has {n}")
        for arg, val in zip(recorded[n:], node.inputs[n:]):
            try:
                value = self._convert(ArgSpec.of(arg), val)
            except Unsupported:
                value = val
            plain = value is None or isinstance(value, (bool, int, float, str, list))
            if plain and arg.has_default_value() and value == arg.default_value:
                dropped.append(arg.name)
                continue
            if plain and composed is None:
                composed = without_added_argument(node.name, arg.name, value)
                if composed is not None:
                    continue
            given = f"{arg.name}={value!r}" if plain else f"{_kind(val)} as {arg.name}"
            raise Unsupported(f"the torch that wrote the trace passes {given}, an argument this torch's schema of the "
                              f"op does not have (torch {torch.__version__})")  # fmt: skip
        if dropped:
            self.report.notes[f"{node.name}: argument(s) of the trace's torch that this torch lacks, each at its "
                              f"default there, left out ({', '.join(dropped)})"] += 1  # fmt: skip
        return node.inputs[:n], composed

    def _fresh_storage(self, node: Node) -> Any:
        """The storage that ``set_`` points its tensor at, which a trace records as an opaque
        object: the bytes a program made in Python (``all_gather_object`` pickles each object into
        one, ``torch.ByteTensor(storage)``). A storage of the size the op's output spans stands in,
        allocated once and seeded; the work that made the bytes is the program's Python, not an
        operator."""
        out = next(iter(tensors_of(node.outputs)), None)
        if out is None:
            raise Unsupported("argument 'source' is a storage and the op's output is not recorded: its size is unknown")
        storage = self.factory.seeded_bytes(out.reach_bytes() if out.numel else 0).untyped_storage()
        self.report.notes[f"{node.name}: a storage the program made in Python (a pickled object's bytes) is an opaque "
                          f"object in a trace: a seeded one of the size its output spans stands in"] += 1  # fmt: skip
        return storage

    def _generator(self, node: Node) -> torch.Generator | None:
        """The random number generator an op draws from where the program gave it one
        (``torch.randn(..., generator=g)``, a sampler's ``randperm``, a diffusion pipeline's
        noise), which a trace records as an opaque object: one generator of the replay's own on
        the op's device, seeded with the replay's seed, stands in for all of them (what an op draws
        changes none of its time). ``meta`` has none: there the op draws from no generator."""
        device = self.device
        if self.host_kept and _on_host(node):
            device = torch.device("cpu")
        if device.type == "meta":
            return None
        gen = self._generators.get(device)
        if gen is None:
            gen = self._generators[device] = torch.Generator(device=device)
            gen.manual_seed(self.factory.seed)
        self.report.notes["op(s) drawing from a generator the program made (an opaque object in a trace) draw "
                          "from one of the replay's, seeded"] += 1  # fmt: skip
        return gen

    def _ranges_inside(self, node: Node) -> None:
        """Floating ranges that the parts of ``node`` ask of its inputs: a composite that reads a
        weight itself has no rule of its own, but the matrix product inside it that reads the weight
        (or a view of it, ``weight.t()``, a slice of a packed projection) has. Attention's fast path,
        ``_native_multi_head_attention``, reads its projection weights through an inner ``mm`` and
        ``addmm``; drawn from [-1, 1) instead of +-1/sqrt(embedding size), its scores saturated the
        softmax into subnormal outputs, and the matrix product reading them took twelve times the
        original's time. Parts are taken in execution order after the op's own rule, each a later
        consumer (:meth:`.tensors.TensorFactory.suggest_floats`)."""
        if self._parts is None:
            self._parts = inner_ops(self.trace, RANGED_OPS)
        parts = self._parts.get(node.id)
        if not parts:
            return
        mine = [r for r in tensors_of(node.inputs) if real_floating(r)]
        for part in parts:
            try:
                asked = float_ranges(part, [a.name for a in arg_specs(resolve(part.op_schema))])
            except Unsupported:
                continue
            except (TraceError, RecursionError, LookupError, TypeError, ValueError, ArithmeticError) as e:
                # (its values were parsed for the first time here, and read by its rule)
                self.report.notes[f"{part.name} inside {node.name}: malformed record ({type(e).__name__}), so what "
                                  f"it reads gets no value range from it"] += 1  # fmt: skip
                continue
            self.factory.suggest_floats({r: rng for ref, rng in asked.items() for r in mine if _within(ref, r)})

    def _place_on_host(self, op: str, names: list[str], values: list) -> None:
        """On a GPU: the op's tensors that the trace had in host memory (where they are kept
        there), and its arguments that a GPU kernel reads in host memory (:data:`HOST_ARGS`), are
        made in host memory. (An op that reads such an argument beside device tensors, a mask made
        from a packed sequence's lengths, reads a copy on the device: :meth:`.replay.Replay._host_copied`.)"""
        host_arg = HOST_ARGS.get(op)
        for name, v in zip(names, values):
            for ref in arg_refs(v):
                if (self.host_kept and ref.device == "cpu") or name == host_arg:
                    self.factory.host.add(ref)

    @staticmethod
    def _resolve(node: Node) -> tuple[Any, tuple[ArgSpec, ...], Any]:
        """The op's overload and argument specs; for an op this torch lacks that has a portable
        substitute (FBGEMM's device-memory lookups), the recorded schema's arguments and the
        substitute, whose arguments are mapped from them."""
        try:
            overload = resolve(node.op_schema)
            return overload, arg_specs(overload), None
        except Unsupported as missing:
            alt = substitute_of(node)
            if alt is None or not alt.target:
                raise
            try:
                resolve(alt.target + "(")
                recorded = torch._C.parse_schema(node.op_schema)
            except (Unsupported, RuntimeError):
                raise missing from None
            return None, tuple(ArgSpec.of(a) for a in recorded.arguments), alt

    def _plan_collective(self, node: Node) -> PlannedOp:
        if self.comms is None:
            raise Unsupported("collective: no process group to replay it on (torch.distributed is not available "
                              "or another world is initialised in this process)")  # fmt: skip
        call, args = self.comms.bind(node)
        values = []
        for arg, kind, val in args:
            if kind == "skip":
                values.append(None)
            elif kind == "value":
                values.append(self._convert(ArgSpec.of(arg), val))
            elif kind == "tensor":
                refs = tensor_refs(kind, val)
                values.append(TensorArg(refs[0]) if refs[0] is not None else None)
            else:
                values.append(TensorListArg(tensor_refs(kind, val)))
        return PlannedOp(node, call, values, (), collective=True)

    def _epsilon_below_resolution(self, node: Node, names: list[str], values: list) -> None:
        """The trace writer prints a float scalar with six decimals, so an epsilon below 5e-7 comes
        out 0.0, and 0/0 makes the replay's data NaN where the original's was finite:
        an optimizer's epsilon (1e-8), added to a denominator that is 0 where a parameter's gradient
        was, made the replay's parameters NaN; a layer norm's (1e-12, BERT's and DeiT's) divides a
        row of equal values (a class token and a position embedding initialised to zeros) by the
        square root of its variance, 0; a router's top-2 weights, each divided by their sum clamped
        at float32's epsilon, where the replay's capacity dropped both of a token's experts. An
        op's ``eps`` (``epsilon``) recorded as 0.0, an addition's 0.0 and a clamp's ``min`` of
        0.0 take a value below that resolution instead (the same to the trace, and no different
        in time; a clamp at 0 that was one holds that value where it held 0)."""
        adds, mins = node.name in _EPSILON_ADDS, node.name in _EPSILON_MINS
        for i, (name, val) in enumerate(zip(names, node.inputs)):
            if (name in _EPSILON_ARGS or (adds and name in ("other", "scalar")) or (mins and name == "min")) \
                    and isinstance(val, Scalar) and val.type == "Double" and val.value == 0.0:  # fmt: skip
                values[i] = _BELOW_RESOLUTION
                what = f"its {name}" if name in _EPSILON_ARGS or name == "min" else "a float"
                self.report.notes[f"{node.name}: {what} recorded as 0.0 (the trace keeps six decimals: an epsilon "
                                  f"such as 1e-8 reads 0.0) is taken as {_BELOW_RESOLUTION:g}"] += 1  # fmt: skip

    def _convert(self, arg: ArgSpec, val) -> Any:
        """A recorded value as the schema argument ``arg`` wants it."""
        t = arg.type
        if isinstance(val, Scalar) and (val.type == "None" or val.value in (None, "<None>")):
            if not arg.optional and not arg.has_default:
                raise Unsupported(f"argument {arg.name!r} is None in the trace but required by the schema")
            return None
        if _unstrided(val):
            if t == "Tensor" and val.tensor_id in self.unstrided_made:
                return UnstridedArg(val.tensor_id)
            if t == "Tensor" and val.shape:
                return UnstridedArg(val.tensor_id, val)
            raise Unsupported(f"argument {arg.name!r} is a tensor the trace recorded without storage (a sparse or "
                              f"other non-strided layout) and no replayed op made: it cannot be rebuilt")  # fmt: skip
        if t == "Tensor":
            if isinstance(val, TensorRef):
                return TensorArg(val) if val.defined else None
            raise Unsupported(f"argument {arg.name!r} should be a tensor, trace has {_kind(val)}")
        if t in ("List[Tensor]", "List[Optional[Tensor]]"):
            if not isinstance(val, ListValue):
                raise Unsupported(f"argument {arg.name!r} should be a tensor list, trace has {_kind(val)}")
            refs = []
            for item in val.items:
                if isinstance(item, TensorRef):
                    refs.append(item if item.defined else None)
                elif isinstance(item, Scalar) and item.type == "None":
                    refs.append(None)
                else:
                    raise Unsupported(f"argument {arg.name!r}: tensor list holds {_kind(item)}")
            return TensorListArg(refs)
        if isinstance(val, (TensorRef, ListValue)) and t not in ("List[int]", "List[float]", "List[bool]",
                                                                "List[SymInt]", "List[Optional[int]]",
                                                                "List[str]", "List[Scalar]", "List[number]"):  # fmt: skip
            raise Unsupported(f"argument {arg.name!r} of type {t} cannot take {_kind(val)} from the trace")
        if isinstance(val, ListValue):
            return [self._scalar(t[5:-1], x, arg.name) for x in val.items]
        return self._scalar(t, val, arg.name)

    def _scalar(self, t: str, val: Any, name: str) -> Any:
        if not isinstance(val, Scalar):
            raise Unsupported(f"argument {name!r} of type {t} cannot take {_kind(val)} from the trace")
        v = val.value
        if t == "Stream":
            # The replay runs on one stream: the current stream of the replay device.
            if self.device.type == "cuda":
                return torch.cuda.current_stream(self.device)
            return torch.Stream(self.device.type)
        if val.type in ("Object", "Storage", "Generator") or t == "Storage":
            raise Unsupported(f"argument {name!r} of type {val.type}/{t} cannot be rebuilt from a trace")
        if v is None or v == "<None>":
            return None
        if t.startswith("Optional["):
            t = t[9:-1]
        if t in ("ScalarType", "Layout", "MemoryFormat"):
            return enum_from_code(t, v)
        if t == "Device":
            if v == "cpu" and self.host_kept:
                return torch.device("cpu")
            return self.device if isinstance(v, str) else v
        if t in ("int", "SymInt"):
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise Unsupported(f"argument {name!r} should be an integer, trace has {v!r:.40}")
            return int(v)
        if t == "bool":
            if name == "pin_memory" and v and not torch.cuda.is_available():
                self.report.notes["pin_memory=True dropped: no CUDA on this machine"] += 1
                return False
            return bool(v)
        if val.type == "ComplexDouble" and t in ("Scalar", "number", "complex"):
            # (the writer keeps a complex number's type, not its value; a kernel's time does not follow it)
            self.report.notes[f"a complex number argument, recorded without its value, is taken as {_UNIT_COMPLEX} "
                              f"(of magnitude 1)"] += 1  # fmt: skip
            return _UNIT_COMPLEX
        if t in ("float", "Scalar", "number"):
            if isinstance(v, str):
                if v in _FLOAT_WORDS:
                    return _FLOAT_WORDS[v]
                raise Unsupported(f"argument {name!r} should be a number, trace has {v!r:.40}")
            return v
        if t == "str":
            if not isinstance(v, str):
                raise Unsupported(f"argument {name!r} should be a string, trace has {v!r:.40}")
            if name == "group_name" and self.comms is not None:
                return self.comms.local_name(v)
            return v
        if t == "Generator":
            return None
        raise Unsupported(f"argument {name!r} has schema type {t}, which the replayer cannot rebuild")


def substitute_of(node: Node) -> Substitute | None:
    """The substitute for ``node``'s operator, of its recorded overload (:mod:`.substitute`)."""
    return substitute_for(node.name, parse_op_name(node.op_schema).overload)

class _InnerPlacements:
    """Where the floating tensors that operators inside selected ones made lie -> (the inner
    operator's id, the selected operator's it ran inside, the inner operator), looked up by
    :func:`_viewed`. Built a storage at a time, as it asks: an inner operator's outputs are parsed
    only where their storage ids (read without parsing them) hold the place asked about, and its
    inputs only where :func:`_viewed` reads them. A trace of grouped convolutions on a CPU holds
    300,000 inner operators: parsing all their outputs and inputs took most of its 9 s plan."""

    def __init__(self, trace: Trace):
        by_id = trace.by_id
        self._by_storage: dict[int, list[tuple[int, int, Node]]] = {}
        for nid, outer in sorted(enclosing_ops(trace).items()):
            node = by_id[nid]
            for sid in node.output_storages():
                self._by_storage.setdefault(sid, []).append((nid, outer, node))
        self._placed: dict[int, dict[tuple, list[tuple[int, int, Node]]]] = {}

    def get(self, ref: TensorRef) -> list[tuple[int, int, Node]]:
        placed = self._placed.get(ref.storage_id)
        if placed is None:
            placed = self._placed[ref.storage_id] = {}
            for nid, outer, node in self._by_storage.get(ref.storage_id, ()):
                for out in tensors_of(node.outputs):
                    if out.storage_id == ref.storage_id and real_floating(out):  # (the only ones _viewed looks for)
                        placed.setdefault(out.placement, []).append((nid, outer, node))
        return placed.get(ref.placement, [])


def _within(part: TensorRef, whole: TensorRef) -> bool:
    """``part`` reads only elements of ``whole``'s (a view of it, or of a slice of it)."""
    return (part.storage_id == whole.storage_id and part.dtype == whole.dtype and whole.offset <= part.offset
            and part.offset + part.extent() <= whole.offset + whole.extent())  # fmt: skip


#: Operators that read an argument as a sequence sorted along its last dimension, and the position of
#: that argument and of the permutation that sorts it instead, where they take one (searchsorted's
#: ``sorter``): their results are positions within that order, and out of order they are not the
#: positions the original's ops went on with (a batch vector's pointers, ``bucketize(arange(n + 1),
#: batch)`` in torch_cluster, cut its points into clouds of other sizes), or their kernels walk
#: it as runs (a sparse matrix's row indices made row pointers; torch_scatter's segments by index).
_SORTED_READS = {
    "aten::bucketize": (1, None), "aten::searchsorted": (0, 5), "aten::_convert_indices_from_coo_to_csr": (0, None),
    "torch_sparse::ind2ptr": (0, None), "torch_scatter::gather_coo": (1, None),
    **{f"torch_scatter::segment_{r}_coo": (1, None) for r in ("sum", "mean", "min", "max")},
}  # fmt: skip


def _reads_sorted(op: str, pos: int, values: list) -> bool:
    """The op reads its argument at ``pos`` as a sorted sequence (:data:`_SORTED_READS`)."""
    at, sorter = _SORTED_READS.get(op, (None, None))
    return pos == at and not (sorter is not None and sorter < len(values) and isinstance(values[sorter], TensorArg))


#: Operators that sum a tensor of counts (into a total, or into offsets that cut a jagged batch).
_SUMS = RUNNING_SUMS | {"aten::sum", "aten::cumsum_", "aten::_cumsum"}

#: Operators through which a tensor that the program made from a number (``torch.tensor(3)``:
#: no op records its making) reaches the ops; the capture helper records what it holds (the
#: sidecar's ``fresh_inputs``), as it does a ``torch.tensor(list)``.
_LIFTS = frozenset({"aten::lift_fresh", "aten::lift_fresh_copy", "aten::lift"})

#: Ops whose outputs hold their inputs' values moved, not computed from them (copies, casts,
#: gathers and scatters, a triangle unpacked by ``index_put_``): what a preconditioner's state is
#: made of passes through them (:func:`_reaching_factorisations`).
_MOVES_VALUES = frozenset({
    "aten::copy_", "aten::clone", "aten::contiguous", "aten::detach", "aten::to", "aten::_to_copy", "aten::reshape",
    "aten::flatten", "aten::index_put_", "aten::index_put", "aten::_index_put_impl_", "aten::index_copy_",
    "aten::index_copy", "aten::index_select", "aten::gather", "aten::scatter_", "aten::scatter", "aten::cat",
    "aten::stack", "aten::triu", "aten::tril", "aten::triu_", "aten::tril_", "aten::diag", "aten::diag_embed",
    "aten::masked_scatter_", "aten::slice_scatter", "aten::select_scatter", "aten::view_as_real",
    "aten::view_as_complex",
})  # fmt: skip

#: Ops that factorise or invert their first argument, a square matrix (a preconditioner's root by
#: its singular values or eigenvalues, a Cholesky factor, an inverse), or solve a system of it (a
#: triangular factor's, as PSGD's step does).
_FACTORISATIONS = frozenset({"aten::svd", "aten::linalg_svd", "aten::_linalg_svd", "aten::linalg_eigh", "aten::_linalg_eigh",
                             "aten::linalg_eig", "aten::linalg_eigvalsh", "aten::cholesky", "aten::linalg_cholesky",
                             "aten::linalg_cholesky_ex", "aten::inverse", "aten::linalg_inv", "aten::linalg_inv_ex",
                             "aten::linalg_pinv", "aten::pinverse", "aten::linalg_solve_triangular",
                             "aten::triangular_solve", "aten::linalg_solve", "aten::linalg_solve_ex",
                             "aten::_linalg_solve_ex", "aten::linalg_lu_factor", "aten::linalg_lu_factor_ex",
                             "aten::linalg_lu"})  # fmt: skip


def _reaching_factorisations(planned: list[PlannedOp], in_step: set[int], state: set[TensorRef]) -> set[TensorRef]:
    """The tensors of ``state`` whose values make up, through the optimizer's step (the ops of
    ``in_step``, in order), the matrix that an op of :data:`_FACTORISATIONS` factorises or solves
    against (its first argument): the state itself (Shampoo's preconditioner, however the step
    adds to it in place), or what ops that only move values (:data:`_MOVES_VALUES`) make of it
    (PSGD's triangular factor, kept as a line of its upper triangle and unpacked by ``index_put_``
    into a matrix for ``linalg_solve_triangular``). Arithmetic passes nothing on: a momentum that
    a product carries into a preconditioner's update, or Shampoo's inverse root that preconditions
    the gradient the next factor accumulates, is no preconditioner. An op's output in an
    allocation none of its inputs lie in holds only what they pass (a writer reuses the ids of
    freed memory)."""
    steps = [p for p in planned if p.node.id in in_step and not p.collective]
    if not state or not any(p.node.name in _FACTORISATIONS for p in steps):
        return set()
    holds: dict[int, set[TensorRef]] = {}
    for ref in state:
        holds.setdefault(ref.storage_id, set()).add(ref)
    reached: set[TensorRef] = set()
    for p in steps:
        inputs = tensors_of(p.node.inputs)
        if p.node.name in _FACTORISATIONS and inputs:
            reached |= holds.get(inputs[0].storage_id, set())
        moved = p.node.name in _MOVES_VALUES
        passed = set().union(*(holds.get(r.storage_id, ()) for r in inputs)) if moved else set()
        read = {r.storage_id for r in inputs}
        for out in tensors_of(p.node.outputs):
            if out.storage_id in read:  # (written in place, or a view: what it held stays)
                holds.setdefault(out.storage_id, set()).update(passed)
            elif passed:
                holds[out.storage_id] = set(passed)
            else:
                holds.pop(out.storage_id, None)
    return reached


def _viewed(ref: TensorRef, lying: list[TensorRef], inner: _InnerPlacements, made_at: dict, planned: set[int],
            reader: int) -> TensorRef | None:  # fmt: skip
    """The earlier output among ``lying`` (produced in ``ref``'s allocation, which a planned op
    made) that ``ref`` is a view of, where the trace records it: an operator inside a planned one
    (``inner``: :class:`_InnerPlacements`) made a tensor at exactly ``ref``'s place, after that
    output and before the ``reader``, reading that output, whose elements hold all of ``ref``'s
    (``aten::linear`` flattens a 3-D input with an ``aten::view`` of it and saves that for the
    backward pass, whose ``mm`` reads it). Memory that tensors made outside the traced ops took
    once an output was freed (numbers, ``torch.from_numpy``) has no such record. Only floating
    data (:func:`real_floating`): the ranges the readers of indices and sizes need hold for seeded data
    and need not for whatever lies in memory."""
    for nid, outer, node in inner.get(ref):
        if outer not in planned or nid >= reader:
            continue
        for b in tensors_of(node.inputs):
            for t in lying:
                if t.placement == b.placement and made_at[t.key] < nid and _within(ref, t):
                    return t
    return None


def _made(ref: TensorRef, made: dict[tuple[int, int], TensorRef]) -> bool:
    """``ref`` reads an earlier op's output: one with its ids, type and layout. Ids alone say
    little: a trace writer gives a tensor made outside the ops (a number the program passed, 8
    bytes where a freed activation lay) the ids of the last one at its address, and the build
    (:meth:`.replay.Replay._produced_slot`) reads seeded data where the layout differs."""
    hit = made.get(ref.key)
    return hit is not None and hit.laid_out_as(ref)


def _same_tensor(v: Any, made: dict, placed: dict, values: list, outside: dict) -> Any:
    """``v`` with each input tensor that no earlier op produced, but that lies exactly where an
    earlier op's output lies (same storage, offset, shape, strides and type), replaced by that
    output. The original program read the output itself through another tensor object: autograd
    unpacks a tensor saved for the backward pass (a ReLU's or softmax's result) as a new tensor
    with an id of its own. Bound to the output, the backward op reads the memory the forward op
    wrote and keeps it alive until then, as in the original; bound to a fresh input, it would
    read other memory, and the replay would hold a permanent copy of every such activation. A 0-dim
    tensor that may be a Python number the program passed (``idx * 2.5``), beside a tensor of a
    lower kind (integer beside floating), is left alone: wrapped outside the ops, a number often
    lies where a freed 0-dim output of its type lay, with its storage id, and read as that output
    it would no longer be passed as a number (the product turned float64). Elsewhere a tensor and
    a number give the same type, and a saved 0-dim result (a float64 loss's square root) stays
    linked to the op that made it.

    A tensor the step read before as one of its inputs, with its ids and at its place
    (``outside``), is that input again, whatever view of it an op made since: a parameter read by
    a second iteration's forward pass (or a second micro-batch's) lies where the first backward
    pass's ``t(t(weight))`` lay, and bound to that view, made with autograd off, the forward op
    could not record its graph once the optimizer had written the parameter."""
    if isinstance(v, TensorArg):
        ref = v.ref
        if not _made(ref, made) and not _promotes_as_tensor(ref, values) and outside.get(ref.key) != ref.placement:
            hit = placed.get(ref.placement)
            if hit is not None:
                return TensorArg(hit)
    elif isinstance(v, TensorListArg):
        refs = [r if r is None or _made(r, made) or outside.get(r.key) == r.placement else placed.get(r.placement, r)
                for r in v.refs]  # fmt: skip
        if refs != v.refs:
            return TensorListArg(refs)
    return v


def may_be_number(ref: TensorRef) -> bool:
    """``ref`` may be a Python number the program passed where the op takes a tensor (wrapped into
    a 0-dim tensor of its type: float64, int64, complex128)."""
    return ref.shape == () and ref.dtype in ("float64", "int64", "complex128")


def _kind_rank(dtype: str) -> int:
    """Type promotion's order of kinds, by the dtype's name: bool < integer < floating < complex."""
    if dtype.startswith("complex"):
        return 3
    return 2 if dtype.startswith(("float", "bfloat")) else 0 if dtype == "bool" else 1


def _promotes_as_tensor(ref: TensorRef, values: list) -> bool:
    """``ref`` may be a Python number (:func:`may_be_number`) that, read as a tensor instead,
    would change the op's result type: another tensor argument is of a lower kind (a 0-dim
    float64 tensor makes an int64 product float64; the number 2.5 makes it the default float)."""
    if not may_be_number(ref):
        return False
    rank = _kind_rank(ref.dtype)
    return any(_kind_rank(r.dtype) < rank for v in values for r in arg_refs(v) if r is not ref)


#: Arguments that the ops' GPU kernels read in host memory: a packed sequence's lengths and batch
#: sizes (on a GPU, ``pack_padded_sequence`` needs its lengths on the CPU).
HOST_ARGS = {"aten::_pack_padded_sequence": "lengths", "aten::_pad_packed_sequence": "batch_sizes",
             "aten::_pack_padded_sequence_backward": "batch_sizes",
             **{f"aten::{rnn}": "batch_sizes" for rnn in ("lstm", "gru", "rnn_tanh", "rnn_relu")}}  # fmt: skip


def _on_host(node: Node) -> bool:
    """``node`` ran in host memory: its tensors lay there, or, where it has none, the device it
    was given (``randperm(n, device="cpu")``) is the CPU."""
    refs = tensors_of((*node.inputs, *node.outputs))
    if refs:
        return all(ref.device == "cpu" for ref in refs)
    return any(isinstance(v, Scalar) and v.type == "Device" and v.value == "cpu" for v in node.inputs)


def _unstrided(v: Any) -> bool:
    return isinstance(v, Unstrided)


def _kind(v: Any) -> str:
    if isinstance(v, TensorRef):
        return "a tensor"
    if isinstance(v, ListValue):
        return "a list"
    if isinstance(v, Scalar):
        return f"a {v.type}"
    return type(v).__name__


def _value_sources(p: PlannedOp, key: tuple[int, int]) -> list:
    """The tensors the values of ``p``'s output ``key`` come from (see ranges.value_sources)."""
    names = [a.name for a in arg_specs(p.overload)]
    numbers = {n: v for n, v in zip(names, p.values) if isinstance(v, (int, float))}
    found = value_sources(p.node.name, [(n, arg_refs(v)) for n, v in zip(names, p.values)],
                          [tensors_of([out]) for out in p.node.outputs], numbers)  # fmt: skip
    return found.get(key, [])


#: In-place products by which an optimizer's step decays parameters (see Planner._decay_factors)
_DECAYS = {"aten::mul_", "aten::_foreach_mul_"}
#: Additions of a scalar that may be an epsilon the trace writer's six decimals printed as 0.0
_EPSILON_ADDS = {"aten::add", "aten::add_", "aten::_foreach_add", "aten::_foreach_add_"}
#: Clamps whose ``min`` recorded as 0.0 may be an epsilon that keeps a denominator from 0
#: (NLLB-MoE's router: ``clamp(p1 + p2, min=torch.finfo(torch.float32).eps)``, then ``p1 / denom``)
_EPSILON_MINS = {"aten::clamp", "aten::clamp_", "aten::clamp_min", "aten::clamp_min_"}
#: Schema arguments that are an epsilon wherever they appear (norms, optimizers, distances)
_EPSILON_ARGS = frozenset({"eps", "epsilon"})
_BELOW_RESOLUTION = 1e-8


def _add_span(spans: list[tuple[int, int]], start: int, stop: int) -> None:
    """Add ``[start, stop)`` to ``spans``, sorted disjoint spans, merging what it touches."""
    kept = []
    for a, b in spans:
        if b < start or a > stop:
            kept.append((a, b))
        else:
            start, stop = min(a, start), max(b, stop)
    kept.append((start, stop))
    spans[:] = sorted(kept)


def _covers(spans: list[tuple[int, int]], start: int, stop: int) -> bool:
    """``spans`` (as :func:`_add_span` keeps them) hold all of ``[start, stop)``."""
    return stop <= start or any(a <= start and stop <= b for a, b in spans)
