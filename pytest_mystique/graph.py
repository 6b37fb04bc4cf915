"""Op selection: which nodes of a trace the replayer runs.

The replayer runs the *outermost operators*: nodes that carry an ``op_schema`` and have no
ancestor that does. Labels (``record_function`` ranges, ``ProfilerStep#N``,
``autograd::engine::evaluate_function: ...``, ``...Backward0``, optimizer ranges, the
thread/process roots) have no schema and are descended through. Operators nested inside a
selected operator are its implementation and run when it runs, so they are not selected again,
with five exceptions, whose parts are selected in their place: an automatic mixed precision
wrapper (:func:`_redispatching`), an operator that ran a collective (:func:`_calling_collectives`),
an operator this torch does not have (a custom operator of the program's own,
:func:`_not_in_this_torch`) or has no kernel of for the replay's device (a GPU's alone, on the
CPU), a call on ``torch.func``'s wrapper tensors or a tensor subclass's
(:func:`_storageless`; one that ran nothing and returned its input, or a boolean about it, is not
selected at all, :func:`_idle`), and a composite whose parts made a tensor that a later operator
reads (:func:`_hidden_outputs`; a collective stays whole). An operator that the trace's writer
recorded inside a collective that did not run it (another collective, the next operators after
an asynchronous send) is selected on its own (:func:`_op_parents`).
"""

from __future__ import annotations

import re

import torch

from .errors import TraceError
from .ops import Unsupported, parse_op_name, resolve
from .substitute import substitute_for
from .trace import ListValue, Node, Scalar, TensorRef, Trace, Unstrided, storages_of, tensors_of

#: Casts an automatic mixed precision wrapper makes before it calls the op again.
CASTS = ("aten::to", "aten::_to_copy")


def child_op_names(trace: Trace) -> dict[int, set[str]]:
    """The names of the operators each node ran directly inside it, by the node's id: the path
    an operator took (an autocast wrapper's casts, a matmul's ``mm`` or ``bmm``)."""
    names: dict[int, set[str]] = {}
    for node in trace.nodes:
        if node.is_op:
            names.setdefault(node.parent, set()).add(node.name)
    return names


def _parts_of_ops(trace: Trace, above: dict[int, int | None]) -> dict[int, list[Node]]:
    """The operators each operator ran inside it with no operator between them, through labels (a
    nested jagged tensor's ``aten::sin`` runs its values' under a ``PythonSubclass`` label), by
    the outer operator's id."""
    parts: dict[int, list[Node]] = {}
    for node in trace.nodes:
        if node.is_op and (up := above.get(node.id)) is not None:
            parts.setdefault(up, []).append(node)
    return parts


def _redispatching(trace: Trace) -> set[int]:
    """Operators that cast their inputs and call themselves again: under ``torch.autocast`` the
    recorded ``aten::linear`` takes float32 tensors, and its children cast them to bfloat16 and
    run the real ``aten::linear``. Replayed outside autocast, the wrapper would compute in float32
    (and fail where an input was already bfloat16); its children are replayed instead. Autocast
    casts a parameter once in a forward pass and keeps the copy: where a layer's weights are
    shared (ALBERT), the wrapper's later calls have no cast among their children, only the real
    call, whose floating inputs are of another type than the wrapper's (an operator calling
    another overload of itself, ``mul.Scalar`` calling ``mul.Tensor``, passes the same types and
    stays whole)."""
    by_id = trace.by_id
    found, alone = set(), set()
    for pid, kids in child_op_names(trace).items():
        node = by_id.get(pid)
        if node is None or not node.is_op or node.name not in kids:
            continue
        if kids.intersection(CASTS):
            found.add(pid)
        elif len(kids) == 1:
            alone.add(pid)
    for inner in trace.nodes if alone else ():
        if inner.parent in alone and inner.is_op and inner.name == by_id[inner.parent].name:
            given, took = _floating_types(by_id[inner.parent]), _floating_types(inner)
            if given is not None and took is not None and len(given) == len(took) and given != took:
                found.add(inner.parent)
    return found


def _floating_types(node: Node, side: str = "inputs") -> list[str] | None:
    """The types of ``node``'s floating input (or output) tensors, in order (None where its values
    cannot be read: a malformed nested operator shows nothing, as in :mod:`.grad_flags`)."""
    try:
        return [r.dtype for r in tensors_of(getattr(node, side)) if r.dtype.startswith(("float", "bfloat"))]
    except (TraceError, RecursionError):
        return None


def _around_casts(trace: Trace, above: dict[int, int | None], through: set[int]) -> set[int]:
    """Operators with an autocast wrapper (of ``through``) among their parts: ``aten::einsum``
    is not one of the operators autocast casts for, but the ``bmm`` it calls is. Replayed whole
    outside autocast, it would compute in float32 what the original computed in bfloat16 (and
    fail where its inputs mix the two); its parts are replayed instead, down to the wrapper's.
    Such an operator gives a floating type none of its floating inputs has, or takes floating
    inputs of several types (:func:`_autocast_made`); it is opened with every operator between it
    and the wrapper. Above the outermost such one, an operator stays whole (an attention whose
    parts promote a number's type: a cast, but not autocast's). Each ancestor is looked at once."""
    made: dict[int, bool] = {}
    outer: dict[int | None, int | None] = {None: None}  # an operator -> the outermost qualifying one at or above it
    found: set[int] = set()
    for nid in through:
        chain, up = [], above.get(nid)
        while up not in outer:
            chain.append(up)
            up = above.get(up)
        for a in reversed(chain):  # from the top down
            if a not in made:
                made[a] = _autocast_made(trace.by_id[a])
            outer[a] = outer[above.get(a)] if outer[above.get(a)] is not None else (a if made[a] else None)
        top, up = outer[above.get(nid)], above.get(nid)
        while top is not None and up is not None and up not in found:
            found.add(up)
            if up == top:
                break
            up = above.get(up)
    return found - through


def _autocast_made(node: Node) -> bool:
    """``node``'s floating outputs have a type its floating inputs do not, or those inputs mix types."""
    given, made = _floating_types(node), _floating_types(node, "outputs")
    if given is None or made is None:
        return False
    return len(set(given)) > 1 or bool(given and set(made) - set(given))


def select_ops(trace: Trace, device_type: str | None = None) -> list[Node]:
    """Outermost operator nodes in execution (id) order (computed once per trace and kind of device), looking
    through operators that only cast their inputs and call themselves again (autocast), operators
    that ran a collective, operators this torch does not have, or has no kernel of for
    ``device_type`` (the replay's), that ran others, calls on ``torch.func``'s wrappers, and
    operators inside which a tensor was made that a later operator reads (:func:`_hidden_outputs`).
    Without ``device_type``, the selection made last."""
    if trace.selected is not None and (device_type is None or _same_kernels(trace, device_type)):
        return list(trace.selected)
    above = _op_parents(trace)
    through = _redispatching(trace)
    around = _around_casts(trace, above, through) if through else set()
    through |= around
    through |= (calling := _calling_collectives(trace, above))
    trace.around_collectives = sorted(calling)
    through |= (missing := _not_in_this_torch(trace, above, device_type))
    outermost = _outermost(trace, above, through)
    wrapped: set[int] = set()
    parts: dict[int, list[Node]] | None = None
    # (one level of torch.func's wrappers a pass: vmap over grad is two, each op's calls nested)
    while bare := [n for n in outermost if _storageless(n)]:
        if parts is None:  # (a tensor subclass's __torch_dispatch__ runs its parts under a label)
            parts = _parts_of_ops(trace, above)
        level = {n.id for n in bare if _wraps(n, parts.get(n.id), parts)}
        if not level:
            break
        wrapped |= level
        through |= level
        outermost = _outermost(trace, above, through)
    # (``bare``: the calls on wrapper tensors still selected, each replayed whole unless it did nothing)
    if idle := {n.id for n in bare if _idle(n, parts)}:
        through |= idle  # (nothing inside them: they leave the selection)
        outermost = [n for n in outermost if n.id not in idle]
    trace.unwrapped = sorted(wrapped)
    trace.idle_wrappers = sorted(idle)
    opened, kept = _hidden_outputs(trace, above, outermost, through, parts)
    trace.kept_collectives = sorted(kept)
    trace.selected = _outermost(trace, above, through | opened) if opened else outermost
    trace.opened = sorted(opened)
    open_above = _open_above(above, through | opened)
    trace.around_casts = sorted(a for a in around if open_above(a))  # (not inside one replayed whole)
    no_kernel = trace.kernel_gaps.get(device_type, frozenset())
    trace.not_in_torch = sorted(m for m in missing - no_kernel if open_above(m))
    trace.no_kernel = sorted(m for m in no_kernel if open_above(m))
    trace.selected_for = device_type
    return list(trace.selected)


def _same_kernels(trace: Trace, device_type: str) -> bool:
    """The selection made last holds for ``device_type`` too: the same operators lack a kernel."""
    gaps = trace.kernel_gaps
    return gaps.get(device_type, frozenset()) == gaps.get(trace.selected_for, frozenset())


def _calling_collectives(trace: Trace, above: dict[int, int | None]) -> set[int]:
    """Operators that ran a collective (``c10d::*``) inside them: torch's functional collectives
    (``_c10d_functional::all_reduce``, which DTensor's tensor parallelism and compiled code call),
    whose own call names its process group by a name that is the original job's, runs the
    communication as an async ``c10d::allreduce_`` of a clone, and returns before it ends. Their
    parts are replayed instead, the collective on the replay's groups (:mod:`.collectives`). Replayed
    whole on one rank and through its parts on another (a trace writer nests a rank's record of the
    clone's use differently from the other's), the ranks called different collectives and waited
    on each other for ever."""
    found: set[int] = set()
    for node in trace.nodes:
        if node.is_op and node.op_schema.startswith("c10d::"):
            up = above.get(node.id)
            while up is not None and up not in found:
                if not trace.by_id[up].op_schema.startswith("c10d::"):
                    found.add(up)
                up = above.get(up)
    return found


def _not_in_this_torch(trace: Trace, above: dict[int, int | None], device_type: str | None) -> set[int]:
    """Operators that this torch does not have (:func:`.ops.resolve` refuses their schema: a custom
    operator the program defined in its own code with ``torch.library``, the operator of a library
    not installed here, one a later torch removed), or has no kernel of for ``device_type``
    (torch 2.8's ``aten::_grouped_mm`` has only a GPU's: a GPU trace's mixture of experts
    replayed on the CPU), that ran operators inside them, and have no portable substitute
    (:mod:`.substitute`). Their parts are what they ran, as the trace recorded it: those are
    replayed in their place, where the operator alone would be skipped. Each distinct schema is
    resolved once. ``trace.kernel_gaps`` keeps, for each kind of device, the operators found
    lacking its kernel, so that a replay on another kind knows whether its selection differs."""
    lacks: dict[str, frozenset[str]] = {}
    candidates: dict[int, frozenset[str]] = {}
    kinds = ("cpu", "cuda") if torch.cuda.is_available() else ("cpu",)  # (the kinds a replay here can run on)
    for node in trace.nodes:
        if node.is_op:
            where = lacks.get(node.op_schema)
            if where is None:
                where = lacks[node.op_schema] = _lacking(node, kinds)
            if where == _NOWHERE:
                where = _recorded_elsewhere(node, kinds)
            if where:
                candidates[node.id] = where
    trace.kernel_gaps = {}
    if not candidates:
        return set()
    parts: dict[int, list[Node]] = {}
    for node in trace.nodes:
        if node.is_op and (up := above.get(node.id)) in candidates:
            parts.setdefault(up, []).append(node)
    through = set()
    for nid, inner in parts.items():
        if not _parts_made_its_results(trace.by_id[nid], inner):
            continue
        for kind in candidates[nid] - {_ANYWHERE}:
            trace.kernel_gaps[kind] = trace.kernel_gaps.get(kind, frozenset()) | {nid}
        if _ANYWHERE in candidates[nid] or device_type in candidates[nid]:
            through.add(nid)
    return through


def _parts_made_its_results(node: Node, parts: list[Node]) -> bool:
    """``node`` gives or writes a tensor, and each of those was last returned, inside it, by one
    of ``parts`` that computes (not an allocation nor a fill), and no part read memory (of
    more than a number) that neither ``node``'s inputs nor an earlier part held: the parts did its
    work, as a custom operator written in Python does. An extension's kernel that allocates its
    output, or zeroes a counter, through an operator and computes in its own code does not pass,
    nor one that computes into memory of its own and then reorders it through operators
    (torch_cluster's ``knn``: its pairs, found by a k-d tree, transposed and gathered by
    ``aten::t`` and ``index_select``): replayed through those parts, its work would be missing.
    (A 0-dim int64 of an optimizer's, in memory the writer had given one of ``knn``'s parts, made a
    DGCNN's first ``knn`` look opened for the backward pass, and its search left the replay.)"""
    try:
        results = tensors_of(node.outputs)
        if "!" in node.op_schema:
            schema = torch._C.parse_schema(node.op_schema)
            for arg, value in zip(schema.arguments, node.inputs):
                if arg.alias_info is not None and arg.alias_info.is_write:
                    results += tensors_of([value])
    except (RuntimeError, TraceError, RecursionError):  # (a schema torch cannot read: nothing known)
        return False
    last: dict[int, str] = {}  # storage id -> the last part that returned a tensor in it
    held = storages_of(node.inputs)  # (the memory the parts may read: the node's inputs', and what they made)
    for part in parts:
        try:
            if any(ref.shape and ref.storage_id not in held for ref in tensors_of(part.inputs)):
                return False  # (its own code made what the part read)
            outputs = tensors_of(part.outputs)
        except (TraceError, RecursionError):
            return False
        for ref in outputs:
            last[ref.storage_id] = part.name
            held.add(ref.storage_id)
    return bool(results) and all(last.get(ref.storage_id, _ALLOCATING) not in _NOT_COMPUTING for ref in results)


#: Ops whose output holds whatever the memory held: a program that reads it before an op writes it
#: filled it itself (``torch.tensor([...])`` records an ``aten::empty``, then copies the list in).
UNINITIALISED = {"aten::empty", "aten::empty_like", "aten::empty_strided", "aten::new_empty", "aten::new_empty_strided",
                 "aten::empty_permuted"}
#: Ops that may leave a tensor holding whatever its memory held: a resize that grows one (GPyTorch's
#: conjugate gradients resize a tensor of ``torch.empty(0)`` before writing it with ``out=``).
RESIZES = frozenset({"aten::resize_", "aten::resize_as_"})
_ALLOCATING = "aten::empty"
#: Operators that allocate or fill a tensor without computing its values from others.
_NOT_COMPUTING = frozenset(UNINITIALISED | {"aten::zeros", "aten::zeros_like", "aten::zero_", "aten::fill_", "aten::ones",
                                            "aten::ones_like", "aten::full", "aten::full_like", "aten::new_zeros",
                                            "aten::new_ones", "aten::new_full"})  # fmt: skip


_ANYWHERE = "*"  # (an operator this torch does not have)
_NOWHERE = frozenset({"-"})  # (an operator this torch has with a kernel for no kind of device)


# the dispatch keys of each kind of device's kernels: dense, quantized, sparse, MKL-DNN, nested
_KERNEL_KEYS = {
    "cpu": ("CPU", "QuantizedCPU", "SparseCPU", "SparseCsrCPU", "MkldnnCPU", "NestedTensorCPU"),
    "cuda": ("CUDA", "QuantizedCUDA", "SparseCUDA", "SparseCsrCUDA", "NestedTensorCUDA"),
}


def _has_kernel(name: str, kind: str) -> bool:
    """Whether the operator ``name`` has a kernel for a tensor of ``kind`` (its own, or a composite
    one)."""
    return any(torch._C._dispatch_has_computed_kernel_for_dispatch_key(name, key) for key in _KERNEL_KEYS[kind])


def _lacking(node: Node, kinds: tuple[str, ...]) -> frozenset[str]:
    """Where ``node``'s operator cannot run as it is, with no substitute: ``{_ANYWHERE}`` if this
    torch does not have it, else those of ``kinds`` of device it has no kernel for where it has
    one for another (a GPU's alone, or a CPU's alone), and ``_NOWHERE`` where it has a kernel
    for neither (see :func:`_recorded_elsewhere`)."""
    try:
        name = resolve(node.op_schema).name()
        where = frozenset(kind for kind in kinds if not _has_kernel(name, kind))
        if where and not any(_has_kernel(name, kind) for kind in _KERNEL_KEYS if kind not in where):
            where = _NOWHERE  # (the other kinds are asked only of an op that lacks a kernel here)
    except Unsupported:
        where = frozenset({_ANYWHERE})
    except RuntimeError:  # (an operator the dispatcher does not know by that name: nothing known)
        return frozenset()
    if not where:
        return where
    try:
        return where if substitute_for(node.name, parse_op_name(node.op_schema).overload) is None else frozenset()
    except Unsupported:  # (a malformed schema)
        return where


def _recorded_elsewhere(node: Node, kinds: tuple[str, ...]) -> frozenset[str]:
    """For an operator with a kernel for no kind of device here: those of ``kinds`` other than the
    one its tensors lay on. A build of torch without CUDA has no GPU kernel of any operator, so
    torch 2.8's ``aten::_grouped_mm``, a GPU's alone, has none at all there; a GPU trace's call of
    it cannot run on the CPU. An operator recorded on the CPU with a kernel for no kind ran
    otherwise (a tensor subclass's Python code: a nested jagged tensor's views): not counted."""
    try:
        recorded = {ref.device.split(":")[0] for ref in tensors_of(node.inputs) + tensors_of(node.outputs)}
    except (TraceError, RecursionError):
        return frozenset()
    return frozenset(kind for kind in kinds if recorded and kind not in recorded)


def _storageless(node: Node) -> bool:
    """``node`` reads or returns a tensor recorded without storage. Where it also ran operators
    inside it, those are its parts on the tensors it wraps: a ``torch.func`` transform (``vmap``,
    ``grad``) records each operator once at each of its levels, on wrapper tensors that have no
    storage (a batched or a gradient-tracking tensor), nested down to the call on plain tensors.
    Replayed whole, the outer call would read a sparse tensor rebuilt in the wrapper's place (and
    most ops refuse it: 8 of a per-sample-gradient step's 16 operators were skipped); its parts
    are replayed instead, level by level (:func:`_wraps` keeps a sparse operator whole)."""
    try:
        return _has_storageless(node.inputs) or _has_storageless(node.outputs)
    except (TraceError, RecursionError):  # (a malformed nested operator shows nothing)
        return False


def _idle(node: Node, parts: dict[int, list[Node]] | None) -> bool:
    """``node``, a call on tensors recorded without storage, ran no operator inside it, writes
    nothing, and returns only tensors it was given (``aten::to`` to the type a tensor has already
    returns the tensor itself) or only numbers and booleans about its tensors (the checks
    forward-mode AD makes, ``is_same_size`` and ``_has_same_storage_numel``): a call that did
    nothing at its level, as a ``torch.func`` transform records one on a wrapper tensor (an eager
    flex_attention's ``vmap`` over its score function, ``hessian``'s ``jacfwd``). Or it makes or
    takes apart a wrapper (:data:`WRAPPING`). There is nothing to replay (and
    the wrapper cannot be rebuilt): it is listed, not run."""
    if parts is not None and node.id in parts or "!" in node.op_schema or not node.outputs:
        return False
    if node.name in WRAPPING:
        return True
    if all(isinstance(v, Scalar) and v.type in ("Bool", "Int", "Double") for v in node.outputs):
        return True
    given = {v.tensor_id for v in _tensor_values(node.inputs)}
    return all(isinstance(v, (TensorRef, Unstrided)) and v.tensor_id in given for v in node.outputs)


#: The operators that wrap a tensor, or take a wrapper apart, running no kernel: those that make a
#: nested jagged tensor (a Python tensor subclass, recorded without storage) of its values and
#: offsets, or read its parts or cached lengths back; and those that add a batch dimension to a
#: tensor or remove it, as the legacy ``vmap`` that ``torch.autograd.functional.jacobian(...,
#: vectorize=True)`` runs does around its function. The replay has no such wrapper to give them
#: (run outside its ``vmap``, ``_add_batch_dim`` made one that no later op could read); the
#: operators on the wrapped values replay.
WRAPPING = frozenset({"aten::_nested_view_from_jagged", "aten::_nested_get_values", "aten::_nested_get_offsets",
                      "aten::_nested_get_lengths", "aten::_nested_get_ragged_idx", "aten::_nested_get_jagged_dummy",
                      "aten::_nested_get_min_seqlen", "aten::_nested_get_max_seqlen", "aten::_add_batch_dim",
                      "aten::_remove_batch_dim"})  # fmt: skip


def _tensor_values(values) -> list[TensorRef | Unstrided]:
    """The tensors among ``values``, with or without storage, those inside lists too."""
    found = []
    for v in values:
        if isinstance(v, (TensorRef, Unstrided)):
            found.append(v)
        elif isinstance(v, ListValue):
            found += _tensor_values(v.items)
    return found


def _wraps(node: Node, parts: list[Node] | None, all_parts: dict[int, list[Node]]) -> bool:
    """Operators ran inside ``node``, a call on tensors without storage, and they are its work on
    the tensors it wraps. Not so where one of them reads a sparse, nested or MKL-DNN tensor's own
    structure (its indices, values, element count...), as a sparse operator's parts do, or calls
    such operators on one of ``node``'s own tensors (a parameter's ``add_`` of its sparse gradient
    runs ``add`` on the same sparse tensor, inside which its values are read): replayed whole with
    its sparse input rebuilt, such an operator runs as it ran, where its parts on their own would
    read tensors the replay does not have, or not do what it did (``max_pool2d_with_indices`` is no
    such part). Nor where they only allocated its output (``empty``) and ``node`` is no allocation
    itself: its own kernel did the work, as an MKL-DNN convolution's on that layout's opaque tensors
    does. ``all_parts``: every operator's parts, by its id."""
    if not parts or any(_STRUCTURE.search(p.name) and p.name not in WRAPPING for p in parts):
        return False
    if any(_STRUCTURE.search(q.name) and q.name not in WRAPPING
           for p in _parts_reading_its_own(node, parts) for q in all_parts.get(p.id, ())):  # fmt: skip
        return False
    return not ({p.name for p in parts} <= UNINITIALISED and node.name not in UNINITIALISED)


def _parts_reading_its_own(node: Node, parts: list[Node]) -> list[Node]:
    """The parts of ``node`` that read one of ``node``'s tensors without storage."""
    own = {v.tensor_id for v in _tensor_values(node.inputs) if isinstance(v, Unstrided)}
    try:
        return [p for p in parts if any(isinstance(v, Unstrided) and v.tensor_id in own for v in _tensor_values(p.inputs))]
    except (TraceError, RecursionError):  # (a malformed part shows nothing)
        return []


_STRUCTURE = re.compile(r"sparse|nested|mkldnn|coalesce|_nnz|to_dense|dense_dim|"
                        r"::(_indices|_values|indices|values|crow_indices|col_indices|ccol_indices|row_indices)$")


def _has_storageless(values) -> bool:
    return any(isinstance(v, Unstrided) or (isinstance(v, ListValue) and _has_storageless(v.items)) for v in values)


def _op_parents(trace: Trace) -> dict[int, int | None]:
    """Each node's nearest ancestor that is an operator (None for a top-level one), through labels.
    A collective's is the nearest that is not a collective: no collective runs another, and one
    recorded inside another was nested there by the trace's writer (a pipeline stage's batch of
    sends and receives: each receive inside the send before it, though it ran beside it); so is
    that of an operator the writer nested in a collective that did not run it
    (:func:`_unnest_from_collective`)."""
    by_id = trace.by_id
    above: dict[int, int | None] = {}
    for node in trace.nodes:  # parent links were checked acyclic at load time
        chain, cur = [], node
        while cur.id not in above:
            chain.append(cur)
            parent = by_id.get(cur.parent)
            if parent is None or parent.id == cur.id:
                above[cur.id] = None
                chain.pop()
                break
            cur = parent
        for child in reversed(chain):
            parent = by_id[child.parent]
            above[child.id] = parent.id if parent.is_op else above[parent.id]
    inside: dict[int, list[Node]] = {}  # collective -> the other operators recorded directly inside it
    for node in trace.nodes:
        if node.is_op and node.op_schema.startswith("c10d::"):
            up = above[node.id]
            while up is not None and by_id[up].op_schema.startswith("c10d::"):
                up = above[up]
            above[node.id] = up
        elif node.is_op and (up := above[node.id]) is not None and by_id[up].op_schema.startswith("c10d::"):
            inside.setdefault(up, []).append(node)
    for cid, parts in inside.items():
        _unnest_from_collective(by_id[cid], parts, above)
    return above


def _unnest_from_collective(collective: Node, parts: list[Node], above: dict[int, int | None]) -> None:
    """Give the operators that the trace's writer recorded inside ``collective`` but that did not
    run in it the collective's own place (``above``). After an asynchronous send, torch's writer
    nests the next operators of the program (a pipeline stage's forward pass of its next
    microbatch) in it until it completes. A collective's own parts read its tensors or what its
    parts made, or read no tensor at all (an allocation of its buffer); an operator that reads
    tensors, none of them those, ran beside it, and so do the operators after it that read only
    what it made."""
    own = storages_of(collective.inputs) | storages_of(collective.outputs)
    for part in parts:
        read = storages_of(part.inputs)
        if not read or read & own:
            own |= storages_of(part.outputs)
        else:
            above[part.id] = above[collective.id]


def _outermost(trace: Trace, above: dict[int, int | None], through: set[int]) -> list[Node]:
    """Operators with no operator above them but ones in ``through`` (looked through), nor in it."""
    open_above = _open_above(above, through)
    return [n for n in trace.nodes if n.is_op and n.id not in through and open_above(n.id)]


def _open_above(above: dict[int, int | None], through: set[int]):
    """A test of an operator id: every operator above it is one of ``through`` (looked through).
    Each answer is kept, for the operators on the way up too."""
    clear: dict[int | None, bool] = {None: True}  # every operator above this one is looked through

    def open_above(nid: int) -> bool:
        chain, cur = [], nid
        while cur not in clear:
            chain.append(cur)
            up = above.get(cur)
            if up is not None and up not in through:
                clear[cur] = False
                chain.pop()
                break
            cur = up
        for c in reversed(chain):
            clear[c] = clear[above.get(c)]
        return clear[nid]

    return open_above


def _hidden_outputs(trace: Trace, above: dict[int, int | None], selected: list[Node], through: set[int],
                    parts: dict[int, list[Node]] | None) -> tuple[set[int], set[int]]:  # fmt: skip
    """Selected operators to look through because a later operator reads memory that only one of
    their inner operators made. A composite operator returns some of what its parts make and
    keeps the rest for the backward pass: ``cross_entropy_loss`` its ``log_softmax``'s
    log-probabilities, ``batch_norm`` the batch's mean and inverse deviation, ``dropout`` its mask,
    ``max_pool2d`` the indices of the maxima, ``layer_norm`` and attention their statistics.
    Replayed whole, the operator makes them internally and the backward op reads seeded data in
    their place (or, where the writer reused the ids, some other tensor: a ResNet's backward read
    the logits of the step before as log-probabilities, and its gradients overflowed). Its parts
    are replayed instead, down to the one that makes the memory read (each part is looked at the
    same way). Memory counts as made inside only where the operator does not read it itself: the
    transposed weight ``linear`` makes is a view of its own input, which the replay has anyway.
    A collective stays whole: its communication is no operator among its parts (gloo runs a
    reduce-scatter as a clone of its input and an all-reduce of it, and FSDP2 reads the clone),
    so opened, it would not communicate at all. Such collectives are returned beside the
    operators to open; the memory read is a seeded input of the replay. Neither is an operator
    whose parts do not make what it returns (:func:`_parts_made_its_results`): ``sub`` of a tensor and
    a number converts the number with ``aten::to`` and subtracts in its own kernel, so opened it
    would convert and never subtract (TabNet's sparsemax then compared against seeded values, and
    its indices went out of range). A later 0-dim number in the converted number's recycled
    memory had made it look read. Nor is one whose reader runs before the backward pass
    (:func:`_saved_readers`). ``parts``: :func:`_parts_of_ops`, where the caller made it."""
    chosen = {n.id for n in selected}
    by_id = trace.by_id
    reads_saved = _saved_readers(trace)
    last: dict[int, int] = {}  # storage id -> the operator that last output a tensor in it
    makers: dict[int, list[int]] = {}  # storage id -> the operators that output a tensor in it, in order
    tops: dict[int, int | None] = {}
    seen: dict[int, set[int]] = {}
    opens: set[int] = set()
    kept: set[int] = set()  # collectives that a later operator reads memory of that they made inside

    def exposed(nid: int) -> set[int]:  # the storages an operator reads or returns
        if nid not in seen:
            n = by_id[nid]
            seen[nid] = storages_of(n.outputs) | storages_of(n.inputs)
        return seen[nid]

    def top(nid: int) -> int | None:  # the selected operator ``nid`` runs inside (or is)
        return _selected_above(nid, above, chosen, tops)

    for node in trace.nodes:
        if not node.is_op or node.id in through:
            continue
        if node.id in chosen:
            for ref in tensors_of(node.inputs):
                maker = last.get(ref.storage_id)
                outer = top(maker) if maker is not None else None
                if outer is None or outer == maker or outer == node.id or ref.storage_id in exposed(outer):
                    continue
                if not reads_saved(node.id):
                    continue
                # the same place under another id is the same tensor (autograd unpacks what it
                # saved as a new one); another type or shape in that storage is another tensor
                # (ids are reused once the memory is freed), unless an operator inside the same
                # one made it before a view of it (native_batch_norm's mean of a batch of
                # sequences, and its as_strided for the broadcast)
                maker = _made_there(ref, maker, makers[ref.storage_id], by_id, top)
                if maker is None:
                    continue
                inner = [maker]  # the maker and the operators between it and ``outer``, innermost first
                while inner[-1] != outer:
                    inner.append(above[inner[-1]])
                if parts is None:
                    parts = _parts_of_ops(trace, above)
                for nid in reversed(inner):  # from ``outer`` in
                    if nid == maker or ref.storage_id in exposed(nid):
                        break
                    if by_id[nid].op_schema.startswith("c10d::"):
                        kept.add(nid)
                        break
                    if not _parts_made_its_results(by_id[nid], parts.get(nid, [])):
                        break
                    opens.add(nid)
        for sid in node.output_storages():
            last[sid] = node.id
            makers.setdefault(sid, []).append(node.id)
    return opens, kept


#: Forward-mode AD's operators: a dual tensor's tangent is made inside the operator that computes
#: its primal (its forward formula), and a later operator reads it outside the autograd engine.
FORWARD_AD = frozenset({"aten::_make_dual", "aten::_unpack_dual", "aten::_fw_primal"})


def _saved_readers(trace: Trace):
    """Whether the operator of an id could read memory made inside another operator, which that
    one neither read nor returned: what autograd saved for the backward pass (a composite's
    log-probabilities, its batch statistics, its dropout mask), which the backward pass reads, or
    what a collective made inside it that a hook of the backward pass reads (FSDP2 reads the clone
    that gloo's reduce-scatter all-reduces, in a callback the autograd engine runs after its
    functions, outside their ranges). Both come from the backward pass's start on: the trace's
    first ``autograd::engine::evaluate_function`` range. Before it, or in a step without one, an
    operator that reads such a place reads another tensor, one the program made there without an
    operator after the memory was freed: a Python number wrapped as a 0-dim tensor for
    ``torch.mul``, an array of ``torch.from_numpy``. (Equiformer's ``masked_select`` counts its mask
    into a 0-dim tensor; in one call of two, a multiplication by a number that the program got in
    that memory made the masked select look read from inside, and its parts were replayed
    instead.) Where the trace has forward-mode AD's operators, any reader may: see
    :data:`FORWARD_AD`."""
    if any(n.name in FORWARD_AD for n in trace.nodes if n.is_op):
        return lambda nid: True
    start = min((n.id for n in trace.nodes if n.name.startswith(BACKWARD)), default=None)
    if start is None:
        return lambda nid: False
    return lambda nid: nid > start


def _made_there(ref: TensorRef, maker: int, makers: list[int], by_id: dict, top) -> int | None:
    """The operator that made ``ref``'s placement: ``maker`` (the last to output a tensor in its
    storage), or the latest one before it that did where ``maker`` made another view of that
    memory inside the same selected operator (``top``); None where neither did."""
    if ref.placement in {r.placement for r in tensors_of(by_id[maker].outputs)}:
        return maker
    outer = top(maker)
    for at in range(len(makers) - 2, -1, -1):
        nid = makers[at]
        if top(nid) != outer:
            return None
        if ref.placement in {r.placement for r in tensors_of(by_id[nid].outputs)}:
            return nid
    return None


def enclosing_ops(trace: Trace) -> dict[int, int]:
    """Each operator nested inside a selected one (part of its implementation, which runs when it
    runs) -> the id of that selected operator."""
    chosen = {n.id for n in select_ops(trace)}
    above = _op_parents(trace)
    memo: dict[int, int | None] = {}
    found = {n.id: _selected_above(n.id, above, chosen, memo) for n in trace.nodes if n.is_op and n.id not in chosen}
    return {nid: o for nid, o in found.items() if o is not None}


def inner_ops(trace: Trace, names: frozenset[str]) -> dict[int, list[Node]]:
    """The operators named in ``names`` (without namespace) that ran nested inside each selected
    operator, by the selected operator's id, in execution order: the parts a composite calls
    (the ``mm`` inside ``_native_multi_head_attention`` that reads its projection weight)."""
    by_id = trace.by_id
    found: dict[int, list[Node]] = {}
    for nid, outer in enclosing_ops(trace).items():  # (in the trace's order)
        if by_id[nid].name.split("::")[-1] in names:
            found.setdefault(outer, []).append(by_id[nid])
    return found


def _selected_above(nid: int, above: dict[int, int | None], chosen: set[int], memo: dict[int, int | None]) -> int | None:
    """The selected operator that ``nid`` runs inside, or is (None: none), through the nearest
    operator ancestors ``above``; ``memo`` keeps what earlier calls found."""
    chain, cur = [], nid
    while cur is not None and cur not in memo and cur not in chosen:
        chain.append(cur)
        cur = above.get(cur)
    found = cur if cur is None or cur in chosen else memo[cur]
    for c in chain:
        memo[c] = found
    return found


#: The ``record_function`` range PyTorch's optimizers wrap their ``step`` in.
OPTIMIZER_STEP = "Optimizer.step#"


#: The range the autograd engine records around each backward function it runs.
BACKWARD = "autograd::engine::evaluate_function"


#: The name the profiler gives the autograd node of a C++ extension's ``torch::autograd::Function``
CPP_NODE = "torch::autograd::CppNode<"

#: Operators a C++ backward allocates its gradients with: where a node holds only these, its work
#: ran in C++ outside any operator
_ALLOCATING = frozenset({"aten::zeros", "aten::empty", "aten::zeros_like", "aten::empty_like", "aten::new_zeros",
                         "aten::new_empty", "aten::empty_strided", "aten::full", "aten::zero_", "aten::fill_"})  # fmt: skip


def opaque_autograd_nodes(trace: Trace) -> dict[int, tuple[int, list[int]]]:
    """The autograd nodes of C++ extensions' Functions whose backward pass computes outside any
    operator (torch_spline_conv's ``CppNode<SplineWeighting>`` loops over its edges in C++: the
    trace holds only the ``aten::zeros`` its gradients start as, and the node's time, half of a
    SplineCNN's training step, was missing from the replay): node id -> (the selected operator
    whose call made the node, found by the autograd sequence number both record; the selected
    operators inside the node, allocations only). The replay calls such a node itself
    (:meth:`.replay.Replay._call_node`)."""
    nodes = [n for n in trace.nodes if not n.is_op and n.name.startswith(CPP_NODE)]
    if not nodes:
        return {}
    selected = select_ops(trace)
    backward = backward_ops(trace)
    made_by: dict[int, int] = {}
    for op in selected:
        seq = op.attr("seq_id")
        if isinstance(seq, int) and seq >= 0 and op.id not in backward:
            # (the last forward op of the number: the ops before the one that made a node read the
            # same number without taking it, as an index of data that requires no grad does)
            made_by[seq] = op.id
    chosen = {op.id for op in selected}
    by_id = trace.by_id
    inside: dict[int, list[int]] = {n.id: [] for n in nodes}
    for op in selected:
        cur = by_id.get(op.parent)
        while cur is not None and cur.id not in inside:
            nxt = by_id.get(cur.parent)
            cur = nxt if nxt is not None and nxt.id != cur.id else None
        if cur is not None:
            inside[cur.id].append(op.id)
    found: dict[int, tuple[int, list[int]]] = {}
    for n in nodes:
        seq, ops = n.attr("seq_id"), inside[n.id]
        forward = made_by.get(seq) if isinstance(seq, int) else None
        if (forward is not None and forward < n.id and forward in chosen
                and all(by_id[i].name in _ALLOCATING for i in ops)):  # fmt: skip
            found[n.id] = (forward, ops)
    return found


def optimizer_step_ops(trace: Trace) -> set[int]:
    """Ids of the selected operators that ran inside an optimizer's ``step``."""
    return _inside(trace, OPTIMIZER_STEP)


def backward_ops(trace: Trace) -> set[int]:
    """Ids of the selected operators that the autograd engine ran: the backward pass."""
    return _inside(trace, BACKWARD)


def _inside(trace: Trace, label: str) -> set[int]:
    """Ids of the selected operators that ran inside a range whose name starts with ``label``."""
    by_id = trace.by_id
    inside: set[int] = set()
    for node in select_ops(trace):
        cur = by_id.get(node.parent)
        while cur is not None:
            if cur.name.startswith(label):
                inside.add(node.id)
                break
            nxt = by_id.get(cur.parent)
            cur = nxt if nxt is not None and nxt.id != cur.id else None
    return inside


#: The ``record_function`` range around the code ``torch.compile`` generated.
COMPILED_REGION = "Torch-Compiled Region"


#: The range ``torch.profiler.profile`` records around each of its steps (``prof.step()``).
PROFILER_STEP = re.compile(r"ProfilerStep#\d+")


def profiler_steps(trace: Trace) -> list[str]:
    """The names of the profiler's step ranges the trace holds (an execution trace taken through
    ``torch.profiler.profile`` with a schedule of several active steps holds each of them)."""
    return [n.name for n in trace.nodes if not n.is_op and PROFILER_STEP.fullmatch(n.name)]


def compiled_regions(trace: Trace) -> int:
    """How many times the step ran code ``torch.compile`` generated for a CPU, whose fused
    kernels are plain C++ functions, not operators: the trace holds only the operators they call.
    (Its GPU kernels are recorded, as Triton kernels; then 0.)"""
    regions = sum(1 for n in trace.nodes if n.name.startswith(COMPILED_REGION))
    if regions and any(n.attr("kernel_backend") == "triton" for n in trace.nodes):
        return 0
    return regions
