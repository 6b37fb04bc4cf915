"""The replay engine: turns a trace's selected operators into a list of pre-bound calls.

Preparation runs in three passes:

1. *plan*: resolve every selected op to a ``torch.ops`` overload, convert its recorded arguments
   to the schema's types, and collect what the input data must look like (index ranges) and how
   large each storage is;
2. *build*: walk the ops in order, binding each tensor argument to the output of an earlier
   replayed op when there is one (same tensor id and layout), to a view of such an output (same
   storage), or else to a seeded input tensor; each op is called once here, so an op that cannot
   run is found now and skipped with its error as the reason;
3. *liveness*: an op's output is released right after its last consumer, as the original
   program's allocator would have released it.

:meth:`Replay.run` then executes one iteration: the steps as straight-line code, each a call of
the pre-bound op on its tensors' local variables and its constant arguments
(:mod:`.straightline`). Nothing else happens inside the iteration.
"""

from __future__ import annotations

import math
import os
import time
from collections import Counter
from typing import Any

import torch

from .collectives import Comms, tensor_refs
from .errors import ReplayError
from .fbgemm import drop_data_sizes, sparse_tables, tbe_ranges
from .grad_flags import required_grad
from .graph import backward_ops, compiled_regions, enclosing_ops, optimizer_step_ops, select_ops
from .measure import gc_paused
from .nonfinite import LOG_TABLES, nonfinite, nonfinite_inputs
from .ops import ArgSpec, Unsupported, arg_specs, enum_from_code, parse_op_name, resolve, schema_facts
from .packed import is_packed_linear, packed_linear
from .sidecar import load_sidecar
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
    runs_without_grad,
)
from .straightline import StraightLine, straight_line
from .substitute import NO_EFFECT, Substitute, substitute_for
from .tensors import (
    Bags,
    Skew,
    TensorFactory,
    definite_inputs,
    float_ranges,
    index_ranges,
    integer_divisor,
    value_sources,
)
from .trace import ListValue, Node, Scalar, TensorRef, Trace, Unstrided, storages_of, tensors_of
from .units import fmt_bytes

#: Ops whose output holds whatever the memory held: a program that reads it before an op writes it
#: filled it itself (``torch.tensor([...])`` records an ``aten::empty``, then copies the list in).
_UNINITIALISED = {"aten::empty", "aten::empty_like", "aten::empty_strided", "aten::new_empty", "aten::new_empty_strided",
                  "aten::empty_permuted"}

#: Ops whose output is drawn at random: it is not the original's data even when their inputs are.
_RANDOM_WORDS = ("rand", "bernoulli", "normal", "dropout", "uniform", "multinomial", "exponential", "cauchy",
                 "geometric", "poisson", "rrelu", "gamma", "binomial", "dirichlet")

_AS_STRIDED = torch.ops.aten.as_strided.default
_TO_COPY = torch.ops.aten._to_copy.default
_FLOAT_WORDS = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


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


class Replay:
    """A prepared replay of one trace on one device."""

    def __init__(self, trace: Trace, device: str | torch.device | None = "cpu", *, seed: int = 0,
                 max_memory: int | None = None, comms: Comms | None = None):  # fmt: skip
        self.trace = trace
        self.comms = comms  # the process groups collectives run on; None: collectives are skipped
        self.device = device if isinstance(device, torch.device) else resolve_device(device)
        self.seed = seed
        self.max_memory = max_memory if max_memory is not None else default_memory_limit(self.device)
        self.report = Report()
        self.steps: list[Step] = []
        self.env: list[Any] = []
        self.factory = TensorFactory(self.device, seed)
        self._produced: dict[tuple[int, int], tuple[int, TensorRef, int]] = {}  # key -> slot, tensor, generation
        self._generation: dict[int, int] = {}
        self._externals: dict[tuple[TensorRef, int], int] = {}
        self.permanent: set[int] = set()
        self.prepared = False
        self.probe_s = 0.0  # time spent inside the ops during preparation (their first call)
        self.free_s = 0.0  # time spent freeing the ops' outputs during preparation (the allocator's work)
        self._mutated: set[int] = set()  # input slots that ops write in place (parameters, optimizer state)
        self.progress: int | None = None  # a file descriptor the build names each op on, before it calls it
        # produced tensors whose readers get seeded inputs instead: the replay's values there would be
        # garbage (uninitialised memory) or out of the reader's range (indices the original computed
        # from its own data)
        self._seeded: set[tuple[int, int]] = set()
        self._first_nonfinite: str | None = None  # the first op whose output held NaN or inf, at the build
        # slots holding the original's values: made by ops of recorded constants alone (arange, full, a
        # causal mask) or of such slots; NaN or inf there (a mask's -inf, the log of a 0) was the original's.
        # A 0-dim input counts as such: most often a Python number the program passed, whose value the
        # trace does not hold (seeded, it keeps the zeros and signs of what it scales)
        self._original: set[int] = set()
        self._original_in: dict[int, set[int]] = {}  # an allocation's address -> the slots of _original in it
        self._input_storages: dict[int, int] = {}  # an input allocation's address -> the input that filled it
        self._unstrided_made: set[int] = set()  # ids of tensors without storage that planned ops output
        self._unstrided: dict[int, int] = {}  # such an id -> the slot of the last op's output with it, at the build
        self._side: dict | None = None  # the trace's sidecar (see _sidecar)
        self._sparse_records: list[dict] | None = None  # the sidecar's sparse inputs not yet matched (read when needed)
        self._sparse_refused: dict[int, str] = {}  # sparse inputs not rebuilt -> why (their readers are skipped)
        # a training step's forward: the ops that run with autograd recording their graph, and the
        # allocations of the parameters (they require grad)
        self._recording: set[int] = set()
        self._parameters: set[tuple[int, str]] = set()
        # allocations whose tensors required grad in the original, as the paths its ops took show
        # (grad_flags: an inference step's parameters), and those given the flag at the build
        self._flagged: set[tuple[int, str]] = set()
        self._flag_given: set[tuple[int, str]] = set()
        self._flag_paths: Counter = Counter()
        self._backward: set[int] = set()  # the backward pass's ops, where the forward recorded
        # inputs that a recording op wrote in place (they got a grad_fn): let go of it where a backward
        # pass starts, with the forward's outputs
        self._grad_inputs: list[int] = []
        self._straight: StraightLine | None = None  # the steps as straight-line code (the timed iteration)
        # on a GPU, for a trace recorded on one: its host tensors stay in host memory (set by _plan)
        self._host_kept = False
        self._copy_host: set[int] = set()  # ops that refused a host-kept tensor: they read a device copy

    # ---------------------------------------------------------------- plan
    def _plan(self) -> list[PlannedOp]:
        ops = select_ops(self.trace)
        self.report.ops_total = len(ops)
        # A trace recorded on a GPU replayed on one: the tensors it had in host memory (a batch
        # before its copy to the device, a count) stay there, and the copies between them stay
        # copies. A CPU trace replayed on a GPU has all of its tensors there.
        self._host_kept = self.device.type != "cpu" and any(
            ref.device not in ("cpu", "meta") for n in ops for ref in tensors_of((*n.inputs, *n.outputs)))
        planned = []
        made: set[tuple[int, int]] = set()
        placed: dict[tuple, TensorRef] = {}  # where a produced tensor lies -> the tensor
        lying_in: dict[int, list[TensorRef]] = {}  # a storage id -> the produced tensors in its allocation
        external_bytes: dict[tuple, int] = {}
        in_step = optimizer_step_ops(self.trace)
        stepped: set[TensorRef] = set()  # inputs the optimizer's step writes in place
        elsewhere: set[TensorRef] = set()  # inputs an op outside it reads
        producer: dict[tuple[int, int], int] = {}  # a produced tensor -> the planned op that made it
        unwritten: set[tuple[int, int]] = set()  # outputs of empty-like ops that no op has used yet
        made_at: dict[tuple[int, int], int] = {}  # a produced tensor -> the id of the node that made it
        fresh: set[int] = set()  # storages whose present allocation a planned op made (not an input's)
        inner: dict[tuple, list[tuple[int, int, list[TensorRef]]]] | None = None  # see _inner_placements
        planned_ids: set[int] = set()
        views = 0
        int_inputs: dict[TensorRef, None] = {}  # integer inputs of the step, in the order they are first read

        def allocated(outs: list[TensorRef], read: set[int], replayed: bool = True) -> None:
            # An output in a storage none of the op's inputs lies in is a new allocation: what lay
            # there before was freed (memory a saved tensor holds is never reused), so a later
            # input found there with an earlier tensor's ids or place is not that tensor (as
            # _bind starts a new generation of the storage). Tensors of no elements have no memory.
            for sid in {ref.storage_id for ref in outs if ref.numel}.difference(read):
                if replayed:
                    fresh.add(sid)
                else:
                    fresh.discard(sid)
                for old in lying_in.pop(sid, ()):
                    placed.pop(old.placement, None)
                    made.discard(old.key)
                    producer.pop(old.key, None)
                    unwritten.discard(old.key)

        for node in ops:
            try:
                p = self._plan_op(node)
            except (Unsupported, TypeError, ValueError, OverflowError, KeyError, IndexError, AttributeError) as e:
                why = str(e) if isinstance(e, Unsupported) else f"malformed arguments in the trace: {_reason(e)}"
                self.report.skipped[(node.name, why)] += 1
                # (its outputs' memory is still another allocation: what lay there is gone)
                allocated(tensors_of(node.outputs), storages_of(node.inputs), False)
                continue
            planned_ids.add(node.id)
            same = [_same_tensor(v, made, placed, p.values) for v in p.values]
            for before, after in zip(p.values, same):
                if after is not before:  # the op's requirement on it (an index range, a divisor) goes along
                    for old, new in zip(arg_refs(before), arg_refs(after)):
                        if old in self.factory.ranges and new is not old:
                            self.factory.constrain(new, self.factory.ranges[old])
            p.values = same
            planned.append(p)
            writes = () if p.collective else schema_facts(p.overload).writes
            read: set[tuple[int, int]] = set()
            for pos, v in enumerate(p.values):
                for ref in arg_refs(v):
                    read.add(ref.key)
                    self.factory.reserve(ref)
                    if ref.key in unwritten:
                        unwritten.discard(ref.key)
                        if ref.numel and not (p.collective or (pos < len(writes) and writes[pos])):
                            self._seeded.add(ref.key)  # the program filled it outside the ops
                    if (ref.key not in made and ref.key not in self._seeded and ref.storage_id in fresh
                            and lying_in.get(ref.storage_id) and _floating(ref)):  # fmt: skip
                        if inner is None:
                            inner = _inner_placements(self.trace)
                        base = _viewed(ref, lying_in[ref.storage_id], inner, made_at, planned_ids, node.id)
                        if base is not None:
                            p.views[ref] = base
                            views += 1
                            made.add(ref.key)
                            placed[ref.placement] = ref
                            lying_in[ref.storage_id].append(ref)
                            made_at[ref.key] = made_at[base.key]
                    if ref.key not in made:
                        if ref.numel > 1 and ref.dtype.startswith(("int", "uint")):
                            int_inputs.setdefault(ref)
                        key = (ref.storage_id, ref.dtype)
                        external_bytes[key] = max(external_bytes.get(key, 0), (ref.offset + ref.extent()) * ref.itemsize)
                        if node.id not in in_step:
                            elsewhere.add(ref)
                        elif pos < len(writes) and writes[pos]:
                            stepped.add(ref)
            derives = not p.collective and p.substitution is None  # its outputs' values follow from its inputs
            self._unstrided_made.update(v.tensor_id for v in node.outputs if _unstrided(v))
            outs = tensors_of(node.outputs)
            allocated(outs, {sid for _, sid in read})
            for ref in outs:
                made.add(ref.key)
                made_at[ref.key] = node.id
                placed[ref.placement] = ref
                if ref.numel:
                    lying_in.setdefault(ref.storage_id, []).append(ref)
                if node.name in _UNINITIALISED:
                    unwritten.add(ref.key)
                if derives and ref.key not in read:  # not the input itself (an in-place op's or out= result)
                    producer[ref.key] = len(planned) - 1
        if self.trace.orphans:
            self.report.notes[f"{self.trace.orphans} node(s) name a parent the trace does not hold (the writer lost it): "
                              f"read as top-level"] += 1  # fmt: skip
        if self.trace.opened:
            kinds = Counter(self.trace.by_id[i].name for i in self.trace.opened)
            self.report.notes[f"{len(self.trace.opened)} operator(s) replayed through their parts, as a later op reads a "
                              f"tensor one of their parts made and they do not return (saved for the backward pass): "
                              f"{', '.join(f'{n} x{c}' for n, c in kinds.most_common(4))}"] += 1  # fmt: skip
        compiled = compiled_regions(self.trace)
        if compiled:
            self.report.notes[f"{compiled} run(s) of torch.compile'd code: the kernels it generated for a CPU are not "
                              f"operators and are not in the trace; only the operators they call replay"] += 1  # fmt: skip
        if views:
            self.report.notes[f"{views} input(s) are views that an op inside a replayed one made of an earlier op's "
                              f"output (the flattened input aten::linear saves for the backward pass): they are read "
                              f"through a view of that output (aten::as_strided), as the original read that "
                              f"memory"] += 1  # fmt: skip
        if self._seeded:
            self.report.notes[f"{len(self._seeded)} tensor(s) that an op allocated uninitialised (aten::empty...) were read "
                              f"before any op wrote them (the program filled them itself, as torch.tensor(list) does): "
                              f"they read seeded data"] += 1  # fmt: skip
        derived: dict[tuple[int, int], tuple[list, int]] = {}

        def sources_of(key: tuple[int, int]) -> tuple[list, int] | None:
            i = producer.get(key)
            if i is not None and key not in derived:
                derived[key] = (_value_sources(planned[i], key), i)
            return derived.get(key)

        self.factory.pass_back(sources_of)
        self._skew_indices(list(int_inputs))
        self._zero_state({ref for ref in stepped - elsewhere if math.prod(ref.shape) > 1})
        self._record_forward(planned, in_step, elsewhere)
        self._flagged, self._flag_paths = required_grad(self.trace)
        if self.max_memory is not None:
            total = sum(external_bytes.values())
            if total > self.max_memory:
                raise ReplayError(
                    self.trace.path,
                    f"replay needs at least {fmt_bytes(total)} of input tensors, over the "
                    f"{fmt_bytes(self.max_memory)} memory limit (--mystique-max-memory); nothing was allocated",
                )
        return planned

    def _zero_state(self, refs: set[TensorRef]) -> None:
        """The optimizer's state (moments, momentum buffers: inputs only its step uses, and
        writes) starts at zero, as the optimizer makes it, and is reset to zero between
        iterations; the step's own gradients then give it the original's zero pattern: the rows of
        an embedding that no index touched stay zero, and a square root over them is several
        times slower than over seeded values (AdamW's on a 4000 x 128 table: 1.1 ms against
        0.2 ms). Step counters (0-dim) keep their seeded value: zero would divide by zero."""
        if refs:
            self.factory.zeros |= refs
            size = sum(math.prod(r.shape) * r.itemsize for r in refs)
            self.report.notes[f"{len(refs)} optimizer state tensor(s) ({fmt_bytes(size)}) start at zero, as the "
                              f"optimizer makes them"] += 1  # fmt: skip

    def _record_forward(self, planned: list[PlannedOp], in_step: set[int], elsewhere: set[TensorRef]) -> None:
        """In a training step, the original's forward ops ran with autograd recording the graph
        of every op that reads a parameter or what was computed from one: a node per op, the
        tensors it saves, version counters. That work is part of the step's time (on a CPU, 2-5%
        of a small transformer's training step) and is not an op of the trace. The parameters
        (inputs that ops outside the optimizer's step read, in allocations that the step writes)
        require grad, and the ops before the last backward op that ran neither in the backward
        pass nor in the optimizer's step run with grad mode on, as they did (what follows the last
        backward pass, such as an average of the weights, ran under ``torch.no_grad``). The
        backward pass is replayed from its own recorded ops, so the graphs are never used; they
        are released where it starts, as the original's backward frees what they saved. Without
        an optimizer's step the parameters are not known, and nothing records."""
        backward = backward_ops(self.trace)
        read = {(ref.storage_id, ref.dtype) for ref in elsewhere}
        params = set()
        for p in planned:
            if p.node.id in in_step and not p.collective:
                writes = schema_facts(p.overload).writes
                params.update((ref.storage_id, ref.dtype) for pos, v in enumerate(p.values[: len(writes)]) if writes[pos]
                              for ref in arg_refs(v) if ref.dtype.startswith(("float", "complex", "bfloat")))  # fmt: skip
        params &= read
        last = max((i for i, p in enumerate(planned) if p.node.id in backward), default=None)
        if last is None or not params:
            return
        self._parameters, self._backward = params, backward
        self._recording = {p.node.id for p in planned[:last]
                           if p.node.id not in backward and p.node.id not in in_step and not p.collective}  # fmt: skip
        self.report.notes[f"{len(self._recording)} forward op(s) run with autograd recording their graph, as in the "
                          f"original's training step ({len(params)} parameter allocation(s) require grad)"] += 1  # fmt: skip

    def _plan_op(self, node: Node) -> PlannedOp:
        if node.attrs.get("kernel_backend") == "triton" or node.name.startswith("triton_"):
            raise Unsupported(
                f"compiled Triton kernel ({node.attrs.get('kernel_file') or node.name}): GPU-only, and replaying "
                f"kernels from a trace's _resources folder is not supported (a trace is never code)"
            )
        if parse_op_name(node.op_schema).namespace == "c10d":
            return self._plan_collective(node)
        overload, schema_args, alt = self._resolve(node)
        if len(node.inputs) > len(schema_args):
            raise Unsupported(f"trace records {len(node.inputs)} inputs but the schema has {len(schema_args)}")
        values, kwnames = [], []
        names = [a.name for a in schema_args]
        for arg, val in zip(schema_args, node.inputs):
            if is_packed_linear(arg.type):
                values.append(packed_linear(node, self.device, self.factory.seed))
                self.report.notes[f"{node.name}: packed weights (an opaque object in a trace) rebuilt from the op's "
                                  f"shapes, seeded, with a bias"] += 1  # fmt: skip
            else:
                values.append(self._convert(arg, val))
            if arg.kwarg_only:
                kwnames.append(arg.name)
            elif kwnames:
                raise Unsupported("positional argument after keyword-only ones")
        if node.name in _EPSILON_ADDS:
            self._epsilon_below_resolution(node, names, values)
        if self.device.type != "cpu":
            self._place_on_host(node.name, names, values)
        for ref, rng in index_ranges(node, names).items():
            self.factory.constrain(ref, rng)
        self.factory.suggest_floats(float_ranges(node, names))
        self.factory.definite.update(definite_inputs(node))
        if node.name.startswith("fbgemm::"):
            name, args = node.name[8:], dict(zip(names, node.inputs))
            for ref, rng in tbe_ranges(name, args).items():
                self.factory.constrain(ref, rng)
            self.factory.sparse.update(sparse_tables(name, args))
            note = drop_data_sizes(name, names, values)
            if note:
                self.report.notes[note] += 1
        if alt is not None:
            return PlannedOp(node, alt.overload, alt.map(names, values), alt.kwnames, substitution=alt.describe(values))
        return PlannedOp(node, overload, values, tuple(kwnames))

    def _place_on_host(self, op: str, names: list[str], values: list) -> None:
        """On a GPU: the op's tensors that the trace had in host memory (where they are kept
        there), and its arguments that a GPU kernel reads in host memory (:data:`HOST_ARGS`), are
        made in host memory. (An op that reads such an argument beside device tensors, a mask made
        from a packed sequence's lengths, reads a copy on the device: :meth:`_host_copied`.)"""
        host_arg = HOST_ARGS.get(op)
        for name, v in zip(names, values):
            for ref in arg_refs(v):
                if (self._host_kept and ref.device == "cpu") or name == host_arg:
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
            alt = _substitute(node)
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
        """The trace writer prints a float scalar with six decimals: an optimizer's epsilon (1e-8),
        added to a denominator that is 0 where a parameter's gradient was, comes out 0.0, and 0/0 made
        the replay's parameters NaN. An addition's 0.0 adds a value below that resolution instead
        (the same to the trace, and no different in time)."""
        for i, (name, val) in enumerate(zip(names, node.inputs)):
            if name in ("other", "scalar") and isinstance(val, Scalar) and val.type == "Double" and val.value == 0.0:
                values[i] = _BELOW_RESOLUTION
                self.report.notes[f"{node.name}: a float recorded as 0.0 (the trace keeps six decimals: an epsilon "
                                  f"such as 1e-8 reads 0.0) adds {_BELOW_RESOLUTION:g}"] += 1  # fmt: skip

    def _convert(self, arg: ArgSpec, val) -> Any:
        """A recorded value as the schema argument ``arg`` wants it."""
        t = arg.type
        if isinstance(val, Scalar) and (val.type == "None" or val.value in (None, "<None>")):
            if not arg.optional and not arg.has_default:
                raise Unsupported(f"argument {arg.name!r} is None in the trace but required by the schema")
            return None
        if _unstrided(val):
            if t == "Tensor" and val.tensor_id in self._unstrided_made:
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
            if v == "cpu" and self._host_kept:
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
        if t in ("float", "Scalar", "number"):
            if isinstance(v, str):
                if v in _FLOAT_WORDS:
                    return _FLOAT_WORDS[v]
                raise Unsupported(f"argument {name!r} should be a number, trace has {v!r:.40}")
            return v
        if t == "str":
            if not isinstance(v, str):
                raise Unsupported(f"argument {name!r} should be a string, trace has {v!r:.40}")
            return v
        if t == "Generator":
            return None
        raise Unsupported(f"argument {name!r} has schema type {t}, which the replayer cannot rebuild")

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
            t = self.factory.make(ref)
            slot = self._new_slot(t)
            self._externals[key] = slot
            self.permanent.add(slot)
            if ref.shape == ():  # most often a number the program passed: its sign and scale pass
                self._mark_original((slot,))
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
        NaN arithmetic. Called between timed iterations, never inside one."""
        if not self._mutated:
            return
        refs = {slot: ref for (ref, _), slot in self._externals.items()}
        with torch.no_grad():
            for slot in self._mutated:
                self.factory.fill(self.env[slot], refs[slot])

    def inputs(self) -> list[tuple[TensorRef, torch.Tensor]]:
        """The seeded input tensors: (the trace's tensor, the replay's tensor)."""
        return [(ref, self.env[slot]) for (ref, _), slot in self._externals.items()]

    def _slot_for(self, ref: TensorRef, p: PlannedOp | None = None) -> int:
        slot = self._produced_slot(ref)
        if slot is None and p is not None and ref in p.views and ref.key not in self._seeded:
            slot = self._view_of(ref, p)
        return self._external(ref) if slot is None else slot

    def _view_of(self, ref: TensorRef, p: PlannedOp) -> int | None:
        """A step making ``ref`` as a view of the replayed output it lies in (:func:`_viewed`), run
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
        self._produced[ref.key] = (slot, ref, self._generation.get(ref.storage_id, 0))
        if bslot in self._original:
            self._mark_original((slot,))
        return slot

    def _mixes_host(self, fills: list[tuple[int, int]]) -> bool:
        """A CPU trace on a GPU: the op reads a tensor kept in host memory (not 0-dim) beside device
        tensors."""
        if self.device.type == "cpu" or self._host_kept:
            return False
        tensors = [self.env[s] for _, s in fills if isinstance(self.env[s], torch.Tensor)]
        return any(t.device.type == "cpu" and t.dim() for t in tensors) and any(t.device.type != "cpu" for t in tensors)

    def _host_copied(self, fills: list[tuple[int, int]], p: PlannedOp) -> list[tuple[int, int]]:
        """A CPU trace on a GPU keeps in host memory what a GPU kernel reads there (:data:`HOST_ARGS`,
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
        if ref.key in self._seeded:
            return None
        hit = self._produced.get(ref.key)
        if hit is not None:
            slot, made, generation = hit
            if (generation == self._generation.get(ref.storage_id, 0) and made.shape == ref.shape
                    and made.dtype == ref.dtype and made.layout_strides() == ref.layout_strides()):  # fmt: skip
                return slot
        return None

    def _mark_original(self, slots) -> None:
        for s in slots:
            self._original.add(s)
            ptr = _address(self.env[s])
            if ptr:
                self._original_in.setdefault(ptr, set()).add(s)

    def _forget_original(self, slot: int) -> None:
        """An op wrote the replay's own values into ``slot``: neither it nor any view of its memory
        holds the original's any more. (Slots that an allocation at the same address held before are
        forgotten too: they are no longer read.)"""
        self._original.discard(slot)
        self._original.difference_update(self._original_in.pop(_address(self.env[slot]), ()))

    def _sidecar(self) -> dict:
        """The trace's sidecar (empty where it has none), read once; a malformed one is an error
        naming it, not an op's error, which would only skip that op."""
        if self._side is None:
            try:
                self._side = load_sidecar(self.trace.path) or {}
            except ValueError as e:
                raise ReplayError(None, str(e)) from None
        return self._side

    def _skew_indices(self, int_inputs: list[TensorRef]) -> None:
        """Index inputs of the step (integers an op reads as rows or positions, whose range the
        replay knows) get values spread as the original's were, where the capture helper recorded
        them (the sidecar's ``index_inputs``, matched in the order the step first read them among
        those of the same shape and type): as many distinct values, the hottest as frequent
        (:class:`.tensors.Skew`). Without a record they are uniform in their range."""
        records = list(self._sidecar().get("index_inputs", [])) if int_inputs else []
        skewed = bagged = 0
        for ref in int_inputs:
            record = _take_record(records, ref.shape, ref.dtype)
            if record is None:
                continue
            rng = self.factory.ranges.get(ref)
            steps = record.get("steps")
            if (rng is not None and rng.kind == "offsets" and steps is not None
                    and 0 <= record.get("low", -1) and record.get("high", rng.high) < rng.high):  # fmt: skip
                # (checked by the sidecar's loader: two counts, the smallest first)
                self.factory.bags[ref] = Bags(steps[0], steps[1], int(record["high"]))
                bagged += 1
                continue
            if (rng is not None and rng.kind == "uniform" and rng.high - rng.low > 1
                    and rng.low <= record.get("low", rng.low) and record.get("high", rng.low) < rng.high):  # fmt: skip
                # (the original's values lie in the op's range: a record outside it is another tensor's)
                self.factory.skews[ref] = Skew(record["distinct"] / ref.numel, record["top"])
                skewed += 1
        if skewed:
            self.report.notes[f"{skewed} index input(s) spread as the original's were, as the capture recorded (as many "
                              f"distinct values, the most frequent as frequent)"] += 1  # fmt: skip
        if bagged:
            self.report.notes[f"{bagged} offsets input(s) cut bags between the original's smallest and largest, as the "
                              f"capture recorded, the last one beginning where the original's did"] += 1  # fmt: skip

    def _sparse_input(self, u: Unstrided, p: PlannedOp) -> str | None:
        """Rebuild ``u``, an input of the step recorded without storage, as a sparse COO tensor of
        its shape, in a slot of its own that its later readers share. A trace records neither its
        layout nor how many elements it holds: the capture helper keeps both in the sidecar
        (``sparse_inputs``, taken in order among those of the same shape and type); without them
        it holds 1% of its positions, with a note. A layout other than sparse COO (nested,
        MKL-DNN) is not rebuilt: the reason its readers are skipped is returned."""
        if u.tensor_id in self._sparse_refused:  # (a reader before was refused: so are the others)
            return self._sparse_refused[u.tensor_id]
        if self._sparse_records is None:
            self._sparse_records = list(self._sidecar().get("sparse_inputs", []))
        why = self._rebuilt_sparse(u, p)
        if why:
            self._sparse_refused[u.tensor_id] = why
        return why

    def _rebuilt_sparse(self, u: Unstrided, p: PlannedOp) -> str | None:
        shape = list(u.shape)
        record = _take_record(self._sparse_records, u.shape, u.dtype)
        what = f"{p.node.name}: an input of the step without storage ({'x'.join(map(str, shape))} {u.dtype})"
        if record is not None:
            if record["layout"] != "sparse_coo":
                return f"reads an input of the step of layout {record['layout']}, which is not rebuilt"
            nnz, how = record["nnz"], "as the capture recorded"
        elif any(w in p.node.name for w in ("mkldnn", "nested")):
            return "reads an input of the step without storage, of a layout (nested, MKL-DNN) that is not rebuilt"
        else:
            nnz = max(1, math.prod(shape) // 100)
            how = "1% of its positions: the trace does not record how many it held (the capture helper does)"
        try:
            t = self.factory.make_sparse_coo(tuple(shape), u.dtype, nnz, sparse_dim=(record or {}).get("sparse_dim"),
                                             coalesced=(record or {}).get("coalesced", True))  # fmt: skip
        except (RuntimeError, ValueError, TypeError, MemoryError) as e:
            return f"cannot rebuild its sparse input: {_reason(e)}"
        self._unstrided[u.tensor_id] = slot = self._new_slot(t)
        self.permanent.add(slot)
        self.report.notes[f"{what} rebuilt as a sparse COO tensor of {t._nnz():,} seeded elements, {how}"] += 1
        return None

    def _computed_indices(self, p: PlannedOp) -> list[TensorRef]:
        """The index inputs of ``p`` (inputs with a range it needs) that an earlier replayed op
        computed from the replay's data."""
        return [ref for v in p.values for ref in arg_refs(v)
                if ref in self.factory.ranges and ref.key in self._produced and ref.key not in self._seeded]  # fmt: skip

    def _outside_ranges(self, p: PlannedOp, refs: list[TensorRef]) -> bool:
        """Some value of the computed index inputs ``refs`` of ``p`` lies outside the range ``p``
        itself accepts: not the range the factory draws them in, which the ops reading their
        sources narrow too (a sort's indices, some of them divided into a smaller range for
        another op) and the trace's recorded ranges replace."""
        if p.substitution is not None:  # (the recorded arguments are not the substitute's)
            return False
        names = [a.name for a in arg_specs(p.overload)]
        accepts = index_ranges(p.node, names, recorded=False)
        name = p.node.name.split("::")[-1]
        ignored = dict(zip(names, p.node.inputs)).get("ignore_index") if name in _LOSSES_IGNORING else None
        for ref in refs:
            slot = self._produced_slot(ref)
            t = self.env[slot] if slot is not None else None
            rng = accepts.get(ref)
            if t is None or rng is None or rng.kind != "uniform" or t.numel() == 0 or t.is_floating_point() or t.is_complex():
                continue
            t = t.detach()
            if isinstance(ignored, Scalar) and isinstance(ignored.value, int):
                t = t[t != ignored.value]  # (a target equal to the ignored index is counted for nothing)
                if t.numel() == 0:
                    continue
            low, high = torch.aminmax(t)
            if int(low) < (-rng.high if name in _INDEXING_FROM_THE_END else rng.low) or int(high) >= rng.high:
                return True
        return False

    def _seed_indices(self, p: PlannedOp, computed: list[TensorRef]) -> None:
        """Indices the original computed from its own data (a router's choice of experts): computed
        from the replay's data they fall outside ``p``'s range. It reads seeded indices, in its
        range, instead."""
        self._seeded.update(ref.key for ref in computed)
        self.report.notes[f"{p.node.name}: indices computed from the replay's data were out of its range "
                          f"(data-dependent in the original): it reads seeded indices"] += 1  # fmt: skip
        self._build_step(p)

    def _release(self, key: tuple[int, int]) -> None:
        hit = self._produced.get(key)
        if hit is not None and hit[0] not in self.permanent and self.env[hit[0]] is not None:
            t0 = time.perf_counter()
            self.env[hit[0]] = None  # the allocator's work: an mmapped output is unmapped here
            self.free_s += time.perf_counter() - t0

    def _build_step(self, p: PlannedOp) -> None:
        divisor = p.values[1].ref if len(p.values) > 1 and isinstance(p.values[1], TensorArg) else None
        dividend = p.values[0].ref if p.values and isinstance(p.values[0], TensorArg) else (p.values or [None])[0]
        rounding = dict(zip(p.kwnames, p.values[len(p.values) - len(p.kwnames):])).get("rounding_mode")
        if integer_divisor(p.node.name, dividend, divisor, rounding) and self._produced_slot(divisor) is not None:
            # computed from the replay's data, an integer divisor may be 0 in some iteration (where
            # the data change: dropout, training; a quotient of seeded numbers): it reads seeded
            # values, never 0
            self._seeded.add(divisor.key)
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
                               if v.rebuild is None else self._sparse_input(v.rebuild, p))  # fmt: skip
                        if why:
                            self.report.skipped[(p.node.name, why)] += 1
                            return
                    fills.append((i, self._unstrided[v.tensor_id]))
                    args.append(None)
                else:
                    args.append(v)
        except (RuntimeError, ValueError, TypeError, OverflowError, MemoryError) as e:
            # A recorded layout torch refuses (sizes, strides, offsets out of range).
            self.report.skipped[(p.node.name, f"cannot build its input tensors: {_reason(e)}")] += 1
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
            if computed and self._outside_ranges(p, computed):
                del call
                self._seed_indices(p, computed)
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
                                  f"({_reason(e)[:80]})"] += 1  # fmt: skip
                del call
                self._build_step(p)
                return
            computed = self._computed_indices(p)
            if computed and _out_of_range(e):
                del call
                self._seed_indices(p, computed)
                return
            alt = _substitute(p.node) if p.substitution is None else None
            if alt is not None and not alt.target:
                self.report.ops_replayed += 1
                self.report.substitutions[(p.node.name, NO_EFFECT)] += 1
                return
            why = _reason(e) if not p.refused else f"{p.refused}; its substitute {p.substitution} failed too: {_reason(e)}"
            if alt is not None:
                try:
                    values = alt.map([a.name for a in arg_specs(p.overload)], list(p.values))
                    self._build_step(PlannedOp(p.node, alt.overload, values, alt.kwnames,
                                               substitution=alt.describe(list(p.values)),
                                               views=p.views, refused=_reason(e)))  # fmt: skip
                    return
                except Exception as m:  # noqa: BLE001 - the substitute does not fit these arguments
                    why = f"{why}; its substitute {alt.target} does not fit: {_reason(m)}"
            self.report.skipped[(p.node.name, why)] += 1
            return
        torch._C._set_grad_enabled(False)
        self.probe_s += time.perf_counter() - t0
        step.single = facts.returns <= 1
        results = (result,) if step.single else tuple(result)
        if not p.collective and self._rebuilt_with_numbers(p, results):
            return
        # its output holds the original's values where all its inputs do and it draws nothing at random
        inputs = [s for _, s in step.fills] + [s for _, slots in step.list_fills for s in slots if s >= 0]
        exact = (p.substitution is None and not p.collective and p.node.name not in _UNINITIALISED
                 and not any(w in p.node.name for w in _RANDOM_WORDS) and all(s in self._original for s in inputs))  # fmt: skip
        # (an allocation's memory holds whatever was there before: NaN bytes in it are not the replay's data)
        if (self._first_nonfinite is None and p.node.name not in _UNINITIALISED and not exact
                and nonfinite(results[: LOG_TABLES.get(p.node.name)])
                and not nonfinite_inputs([a for i, a in enumerate(call) if not (i < len(writes) and writes[i])])):  # fmt: skip
            self._first_nonfinite = f"{p.node.name} (node {p.node.id})"
        in_storages = {ref.storage_id for v in p.values for ref in arg_refs(v)}
        if facts.dynamic and not exact and _dynamic_here(p):
            # Its output's shape follows the replay's data, which differ from the original's and may
            # differ between iterations (dropout, a router's choice): its consumers read seeded
            # inputs of the recorded shapes, and their shapes stay the trace's.
            self.report.notes[f"{p.node.name}: its output's shape depends on the data (a mask, a router's choice); "
                              f"its consumers read seeded inputs of the recorded shape"] += 1  # fmt: skip
        else:
            for i, out in enumerate(p.node.outputs[: len(results)]):
                bound = self._bind(out, results[i], in_storages, p.node.name)
                if bound is not None:
                    step.outs.append((i, bound))
        for i, slot in step.outs:
            pairs = [(slot, results[i])] if isinstance(slot, int) else zip(slot, results[i])
            for s, value in pairs:
                if s >= 0:
                    env[s] = value
        self.steps.append(step)
        self.report.ops_replayed += 1
        if exact:
            self._mark_original(out_slots(step.outs))
        for pos, slot in [*step.fills, *((pos, s) for pos, slots in step.list_fills for s in slots)]:
            if not (p.collective or (pos < len(writes) and writes[pos])):
                continue
            if not exact:
                self._forget_original(slot)
            if slot in self.permanent:
                self._mutated.add(slot)
            elif (base := self._input_storages.get(_address(env[slot]))) is not None:
                # written through an op's output that lies in an input's memory (a parameter the
                # optimizer reaches through an alias autograd made of it)
                self._mutated.add(base)
        if p.substitution:
            self.report.substitutions[(p.node.name, p.substitution)] += 1
        t0 = time.perf_counter()
        del call, result, results  # frees the outputs that no later op reads
        self.free_s += time.perf_counter() - t0

    def _rebuilt_with_numbers(self, p: PlannedOp, results: tuple) -> bool:
        """A Python number passed where an op takes a tensor becomes a 0-dim float64 or int64
        tensor marked as a *wrapped number*: it does not promote the result's type (``x * 0.5``
        stays float32). The trace records it as a plain tensor, and a replayed plain float64
        tensor makes the result float64. When an output's type differs from the recorded one and
        the op has such inputs, the step is built again with them passed as numbers (their seeded
        values); returns whether it was."""
        wrapped = [i for i, v in enumerate(p.values)
                   if isinstance(v, TensorArg) and _may_be_number(v.ref) and self._produced_slot(v.ref) is None]
        if not wrapped or not any(isinstance(out, TensorRef) and out.defined and isinstance(r, torch.Tensor)
                                  and str(r.dtype)[6:] != out.dtype for out, r in zip(p.node.outputs, results)):  # fmt: skip
            return False
        values = list(p.values)
        for i in wrapped:
            values[i] = self.env[self._slot_for(values[i].ref)].item()
        self.report.notes["0-dim float64/int64 inputs that were Python numbers in the original (they did not promote "
                          "the result's type) are passed as numbers"] += 1  # fmt: skip
        self._build_step(PlannedOp(p.node, p.overload, values, p.kwnames, p.substitution, p.collective, p.views,
                                   p.refused))
        return True

    def _bind(self, out: Any, value: Any, in_storages: set[int], op: str) -> int | tuple[int, ...] | None:
        """Give a slot to each recorded output tensor that the replay returned with the same
        layout; later ops read it from there. An output in a storage none of the op's inputs
        lives in is a new allocation: its storage id starts a new generation."""
        if isinstance(out, TensorRef):
            if not out.defined or not isinstance(value, torch.Tensor):
                return None
            if not as_recorded(out, value):
                self.report.notes[f"{op}: an output's shape or dtype differs from the trace (data-dependent?); "
                                  f"its consumers get fresh inputs"] += 1  # fmt: skip
                return None
            slot = self._new_slot()
            if out.storage_id not in in_storages and out.numel:  # (a tensor of no elements has no memory)
                self._generation[out.storage_id] = self._generation.get(out.storage_id, 0) + 1
                in_storages.add(out.storage_id)  # (the op's other outputs there are in this allocation too)
            self._produced[out.key] = (slot, out, self._generation.get(out.storage_id, 0))
            return slot
        if isinstance(out, ListValue) and isinstance(value, (list, tuple)) and len(value) == len(out.items):
            slots = []
            for item, v in zip(out.items, value):
                s = self._bind(item, v, in_storages, op) if isinstance(item, TensorRef) else None
                slots.append(-1 if s is None else s)
            return tuple(slots) if any(s >= 0 for s in slots) else None
        if _unstrided(out) and isinstance(value, torch.Tensor) and value.layout != torch.strided:
            slot = self._unstrided[out.tensor_id] = self._new_slot()
            return slot
        return None

    def _liveness(self) -> None:
        read = {s for step in self.steps for _, s in step.fills}
        read.update(s for step in self.steps for _, slots in step.list_fills for s in slots)
        # (a view whose reader was skipped)
        self.steps = [step for step in self.steps if not (step.view and step.outs[0][1] not in read)]
        last_read: dict[int, int] = {}
        for i, step in enumerate(self.steps):
            for _, slot in step.fills:
                last_read[slot] = i
            for _, slots in step.list_fills:
                for s in slots:
                    if s >= 0:
                        last_read[s] = i
        frees: dict[int, list[int]] = {}
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
        for slot, i in last_read.items():
            if slot not in self.permanent:
                frees.setdefault(i, []).append(slot)
        for i, step in enumerate(self.steps):
            step.frees = tuple(frees.get(i, ()))
        # Where a backward pass starts, the outputs of recording ops still held, and the inputs they
        # wrote, let go of their graphs (the saved tensors go with them, unless held otherwise)
        recorded: set[int] = set()
        for i, step in enumerate(self.steps):
            if step.node_id in self._backward and (i == 0 or self.steps[i - 1].node_id not in self._backward):
                alive = {s for s in recorded if last_read.get(s, -1) >= i}
                step.release = tuple(sorted(alive.union(self._grad_inputs)))
            if step.grad:
                recorded.update(out_slots(step.outs))

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
        # Outputs are released during the build too, after their last consumer: the build calls
        # every op once, and holding all of a long trace's outputs at once would not fit.
        last_use: dict[tuple[int, int], int] = {}
        for i, p in enumerate(planned):
            for v in p.values:
                for ref in arg_refs(v):
                    last_use[ref.key] = i
            for base in p.views.values():  # (read through a view of it)
                last_use[base.key] = i
        try:
            torch.set_grad_enabled(False)
            for i, p in enumerate(planned):
                self._build_step(p)
                for ref in tensors_of(p.node.outputs):
                    if last_use.get(ref.key, -1) <= i:
                        self._release(ref.key)
                for ref in [r for v in p.values for r in arg_refs(v)] + list(p.views.values()):
                    if last_use.get(ref.key) == i:
                        self._release(ref.key)
        finally:
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
        if self._first_nonfinite:
            self.report.notes[f"the replay's data became NaN or inf, first in the output of {self._first_nonfinite}: "
                              f"the ops after it may not take the original's time"] += 1  # fmt: skip
        self._grad_inputs = [s for s in sorted(self.permanent)
                             if isinstance(self.env[s], torch.Tensor) and self.env[s].grad_fn is not None]  # fmt: skip
        for s in self._grad_inputs:  # (the build's own graph)
            self.env[s] = self.env[s].detach()
        self._liveness()
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
        if after_step is None and self.steps:
            self._run_straight()
            return
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
                            env[s] = v.detach()
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
        return ReplayError(self.trace.path, f"{where} failed during replay: {_reason(e)}")


def default_memory_limit(device: torch.device) -> int:
    """Without --mystique-max-memory: 80% of the device's memory (the machine's RAM for the CPU)."""
    try:
        if device.type == "cuda":
            return int(torch.cuda.get_device_properties(device).total_memory * 0.8)
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") * 0.8)
    except (ValueError, OSError, AttributeError, RuntimeError):
        return 64 << 30


def _substitute(node: Node) -> Substitute | None:
    """The substitute for ``node``'s operator, of its recorded overload (:mod:`.substitute`)."""
    return substitute_for(node.name, parse_op_name(node.op_schema).overload)


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


def _inner_placements(trace: Trace) -> dict[tuple, list[tuple[int, int, list[TensorRef]]]]:
    """Where the tensors that operators inside selected ones made lie -> (the inner operator's id,
    the selected operator's it ran inside, the tensors it read)."""
    by_id = trace.by_id
    inner: dict[tuple, list[tuple[int, int, list[TensorRef]]]] = {}
    for nid, outer in sorted(enclosing_ops(trace).items()):
        node = by_id[nid]
        for ref in tensors_of(node.outputs):
            inner.setdefault(ref.placement, []).append((nid, outer, tensors_of(node.inputs)))
    return inner


def _address(v: Any) -> int:
    """The address of ``v``'s allocation (0: not a strided tensor, or no memory)."""
    return v.untyped_storage().data_ptr() if isinstance(v, torch.Tensor) and v.layout == torch.strided else 0


def _floating(ref: TensorRef) -> bool:
    return bool(ref.numel) and isinstance(dt := getattr(torch, ref.dtype, None), torch.dtype) and dt.is_floating_point


def _viewed(ref: TensorRef, lying: list[TensorRef], inner: dict, made_at: dict, planned: set[int],
            reader: int) -> TensorRef | None:  # fmt: skip
    """The earlier output among ``lying`` (produced in ``ref``'s allocation, which a planned op
    made) that ``ref`` is a view of, where the trace records it: an operator inside a planned one
    (``inner``: :func:`_inner_placements`) made a tensor at exactly ``ref``'s place, after that
    output and before the ``reader``, reading that output, whose elements hold all of ``ref``'s
    (``aten::linear`` flattens a 3-D input with an ``aten::view`` of it and saves that for the
    backward pass, whose ``mm`` reads it). Memory that tensors made outside the traced ops took
    once an output was freed (numbers, ``torch.from_numpy``) has no such record. Only floating
    data (:func:`_floating`): the ranges the readers of indices and sizes need hold for seeded data
    and need not for whatever lies in memory."""
    end = ref.offset + ref.extent()
    for nid, outer, read in inner.get(ref.placement, ()):
        if outer not in planned or nid >= reader:
            continue
        for b in read:
            for t in lying:
                if (t.placement == b.placement and made_at[t.key] < nid and t.dtype == ref.dtype
                        and t.offset <= ref.offset and end <= t.offset + t.extent()):  # fmt: skip
                    return t
    return None


def _same_tensor(v: Any, made: set, placed: dict, values: list) -> Any:
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
    linked to the op that made it."""
    if isinstance(v, TensorArg):
        ref = v.ref
        if ref.key not in made and not _promotes_as_tensor(ref, values):
            hit = placed.get(ref.placement)
            if hit is not None:
                return TensorArg(hit)
    elif isinstance(v, TensorListArg):
        refs = [r if r is None or r.key in made else placed.get(r.placement, r) for r in v.refs]
        if refs != v.refs:
            return TensorListArg(refs)
    return v


def _may_be_number(ref: TensorRef) -> bool:
    """``ref`` may be a Python number the program passed where the op takes a tensor (wrapped into
    a 0-dim tensor of its type: float64, int64, complex128)."""
    return ref.shape == () and ref.dtype in ("float64", "int64", "complex128")


def _kind_rank(dtype: str) -> int:
    """Type promotion's order of kinds, by the dtype's name: bool < integer < floating < complex."""
    if dtype.startswith("complex"):
        return 3
    return 2 if dtype.startswith(("float", "bfloat")) else 0 if dtype == "bool" else 1


def _promotes_as_tensor(ref: TensorRef, values: list) -> bool:
    """``ref`` may be a Python number (:func:`_may_be_number`) that, read as a tensor instead,
    would change the op's result type: another tensor argument is of a lower kind (a 0-dim
    float64 tensor makes an int64 product float64; the number 2.5 makes it the default float)."""
    if not _may_be_number(ref):
        return False
    rank = _kind_rank(ref.dtype)
    return any(_kind_rank(r.dtype) < rank for v in values for r in arg_refs(v) if r is not ref)


#: Arguments that the ops' GPU kernels read in host memory: a packed sequence's lengths and batch
#: sizes (on a GPU, ``pack_padded_sequence`` needs its lengths on the CPU).
HOST_ARGS = {"aten::_pack_padded_sequence": "lengths", "aten::_pad_packed_sequence": "batch_sizes",
             "aten::_pack_padded_sequence_backward": "batch_sizes",
             **{f"aten::{rnn}": "batch_sizes" for rnn in ("lstm", "gru", "rnn_tanh", "rnn_relu")}}  # fmt: skip


def _take_record(records: list[dict], shape: tuple[int, ...], dtype: str) -> dict | None:
    """The first of the capture helper's ``records`` of an input of ``shape`` and ``dtype``, taken
    out of the list: records are matched to the trace's inputs in the order the step read them."""
    record = next((r for r in records if r["shape"] == list(shape) and r["dtype"] == dtype), None)
    if record is not None:
        records.remove(record)
    return record


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
    """The tensors the values of ``p``'s output ``key`` come from (see tensors.value_sources)."""
    names = [a.name for a in arg_specs(p.overload)]
    found = value_sources(p.node.name, [(n, arg_refs(v)) for n, v in zip(names, p.values)],
                          [tensors_of([out]) for out in p.node.outputs])  # fmt: skip
    return found.get(key, [])


#: Additions of a scalar that may be an epsilon the trace writer's six decimals printed as 0.0
_EPSILON_ADDS = {"aten::add", "aten::add_", "aten::_foreach_add", "aten::_foreach_add_"}
_BELOW_RESOLUTION = 1e-8

#: Ops whose indices count from the end where negative, down to minus the size
_INDEXING_FROM_THE_END = {"index", "index_put", "index_put_", "_index_put_impl_"}
#: Losses whose target may hold the ``ignore_index`` (-100: padding), outside the classes' range
_LOSSES_IGNORING = {"nll_loss", "nll_loss_forward", "nll_loss_backward", "nll_loss2d", "nll_loss2d_forward",
                    "nll_loss2d_backward", "cross_entropy_loss", "nll_loss_nd"}  # fmt: skip

#: Devices whose ops raise an error for an index outside its range. Elsewhere (a GPU) it is a
#: device-side assertion, after which the process can use the device no more: there, indices an
#: earlier op computed are checked before the call that reads them. (Meta tensors hold no values.)
RAISES_ON_BAD_INDICES = {"cpu", "meta"}


def _out_of_range(e: BaseException) -> bool:
    """``e`` is an op's complaint about the values of an index or a divisor."""
    text = str(e)
    return isinstance(e, IndexError) or any(w in text for w in ("out of bounds", "out of range", "ZeroDivisionError"))


def _reason(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    first = text[0] if text else type(e).__name__
    return f"{type(e).__name__}: {first[:200]}"
