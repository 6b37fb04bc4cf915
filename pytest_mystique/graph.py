"""Op selection: which nodes of a trace the replayer runs.

The replayer runs the *outermost operators*: nodes that carry an ``op_schema`` and have no
ancestor that does. Labels (``record_function`` ranges, ``ProfilerStep#N``,
``autograd::engine::evaluate_function: ...``, ``...Backward0``, optimizer ranges, the
thread/process roots) have no schema and are descended through. Operators nested inside a
selected operator are its implementation and run when it runs, so they are not selected again.
"""

from __future__ import annotations

from .trace import Node, Trace

#: Casts an automatic mixed precision wrapper makes before it calls the op again.
_CASTS = ("aten::to", "aten::_to_copy")


def _redispatching(trace: Trace) -> set[int]:
    """Operators that cast their inputs and call themselves again: under ``torch.autocast`` the
    recorded ``aten::linear`` takes float32 tensors, and its children cast them to bfloat16 and
    run the real ``aten::linear``. Replayed outside autocast, the wrapper would compute in float32
    (and fail where an input was already bfloat16); its children are replayed instead."""
    names: dict[int, set[str]] = {}
    for node in trace.nodes:
        if node.is_op:
            names.setdefault(node.parent, set()).add(node.name)
    by_id = trace.by_id
    return {pid for pid, kids in names.items()
            if pid in by_id and by_id[pid].is_op and by_id[pid].name in kids and kids.intersection(_CASTS)}  # fmt: skip


def select_ops(trace: Trace) -> list[Node]:
    """Outermost operator nodes in execution (id) order (computed once per trace), looking
    through operators that only cast their inputs and call themselves again (autocast)."""
    if trace.selected is not None:
        return list(trace.selected)
    by_id = trace.by_id
    wrappers = _redispatching(trace)
    # under_op[id]: some strict ancestor of the node is an operator.
    under_op: dict[int, bool] = {}
    for node in trace.nodes:  # parent links were checked acyclic at load time
        chain = []
        cur = node
        while cur.id not in under_op:
            chain.append(cur)
            parent = by_id.get(cur.parent)
            if parent is None or parent.id == cur.id:
                under_op[cur.id] = False
                chain.pop()
                break
            cur = parent
        # Fill in from the topmost known node down to ``node``.
        for child in reversed(chain):
            parent = by_id[child.parent]
            under_op[child.id] = under_op[parent.id] or (parent.is_op and parent.id not in wrappers)
    trace.selected = [n for n in trace.nodes if n.is_op and not under_op[n.id] and n.id not in wrappers]
    return list(trace.selected)


#: The ``record_function`` range PyTorch's optimizers wrap their ``step`` in.
OPTIMIZER_STEP = "Optimizer.step#"


def optimizer_step_ops(trace: Trace) -> set[int]:
    """Ids of the selected operators that ran inside an optimizer's ``step``."""
    by_id = trace.by_id
    inside: set[int] = set()
    for node in select_ops(trace):
        cur = by_id.get(node.parent)
        while cur is not None:
            if cur.name.startswith(OPTIMIZER_STEP):
                inside.add(node.id)
                break
            nxt = by_id.get(cur.parent)
            cur = nxt if nxt is not None and nxt.id != cur.id else None
    return inside


#: The ``record_function`` range around the code ``torch.compile`` generated.
COMPILED_REGION = "Torch-Compiled Region"


def compiled_regions(trace: Trace) -> int:
    """How many times the step ran code ``torch.compile`` generated for a CPU, whose fused
    kernels are plain C++ functions, not operators: the trace holds only the operators they call.
    (Its GPU kernels are recorded, as Triton kernels; then 0.)"""
    regions = sum(1 for n in trace.nodes if n.name.startswith(COMPILED_REGION))
    if regions and any(n.attrs.get("kernel_backend") == "triton" for n in trace.nodes):
        return 0
    return regions
