"""Collectives: a trace's ``c10d::`` operators, replayed through ``torch.distributed``.

A trace records each collective twice: the ``c10d::`` operator (its tensors, in the trace's own
schema) and, inside it, a ``record_param_comms`` node naming the process group and the
collective. The process groups themselves are described by the ``## process_group:init ##`` node
(name, backend, ranks, size of every group the job created). This module rebuilds those groups in
an initialised ``torch.distributed`` world and turns each ``c10d::`` operator into a call of the
matching ``torch.distributed`` function on the tensors the replay engine binds for it, with the
recorded sizes, dtypes, split sizes, roots and peers.

The arguments are read by the names of the trace's own schema (collective signatures changed
across torch versions: ``allreduce_`` gained ``sparse_indices``, for example), so a trace replays
on a torch whose ``c10d`` operators look different. Nothing from the trace is executed: the
``op_schema`` string is parsed by torch's schema parser and its names pick one of the functions
below, or the op is skipped with the reason.

The reduction operator is recorded as an opaque object; the replay uses SUM (what gradient
averaging in DDP and FSDP runs) and re-seeds the tensors it writes between timed iterations, so
repeated sums never overflow.
"""

from __future__ import annotations

import atexit
import datetime
import functools
import json
from dataclasses import dataclass, field
from typing import Any

import torch

from .graph import select_ops
from .ops import Unsupported
from .trace import ListValue, Node, Scalar, TensorRef, Trace

PG_INIT = "## process_group:init ##"
COMMS = "record_param_comms"


@dataclass
class GroupSpec:
    name: str
    ranks: list[int]  # global ranks, empty for the whole world
    size: int
    backend_id: int | None = None
    desc: str = ""


@dataclass
class Topology:
    """The process groups a trace's job had, from its ``process_group:init`` node."""

    groups: list[GroupSpec] = field(default_factory=list)
    #: how many groups the job had, as the writer counts them: a rank lists only those it is a member of
    count: int = 0

    @property
    def world_size(self) -> int | None:
        sizes = [g.size for g in self.groups if not g.ranks]
        sizes += [max(g.ranks) + 1 for g in self.groups if g.ranks]
        return max(sizes) if sizes else None


def topology(trace: Trace) -> Topology:
    """The trace's process groups (none when it has no ``process_group:init`` node)."""
    for node in trace.nodes:
        if node.name == PG_INIT:
            return _parse_pg_init(node)
    return Topology()


def _parse_pg_init(node: Node) -> Topology:
    groups, count = [], 0
    for value in node.inputs:
        if not (isinstance(value, Scalar) and isinstance(value.value, str)):
            continue
        try:
            entries = json.loads(value.value)
        except ValueError:
            continue
        for e in entries if isinstance(entries, list) else []:
            if not isinstance(e, dict):
                continue
            ranks = e.get("ranks")
            ranks = [r for r in ranks if type(r) is int and r >= 0] if isinstance(ranks, list) else []
            size = e.get("group_size")
            size = size if type(size) is int and size > 0 else (len(ranks) or 1)
            backend_id = e.get("backend_id")
            if type(e.get("group_count")) is int:
                count = max(count, e["group_count"])
            groups.append(GroupSpec(str(e.get("pg_name", len(groups))), ranks, size,
                                    backend_id if type(backend_id) is int else None, str(e.get("pg_desc", ""))))  # fmt: skip
    return Topology(groups, count)


def _made_order(spec: GroupSpec) -> tuple[bool, int]:
    """Where a group was made among the original's: its name counts the groups made before it."""
    return (not spec.name.isdigit(), int(spec.name) if spec.name.isdigit() else 0)


def has_collectives(trace: Trace) -> bool:
    return any(n.op_schema.startswith("c10d::") for n in trace.nodes if n.op_schema)


def _group_key(comms: Node | None) -> Any:
    """What a collective's ``record_param_comms`` node says about its group: a (name,
    description) tuple in newer traces, a backend id or a pointer in older ones; None when not
    recorded."""
    if comms is None or len(comms.inputs) < 3:
        return None
    v = comms.inputs[2]
    if isinstance(v, ListValue) and v.items and isinstance(v.items[0], Scalar):
        return str(v.items[0].value)
    if isinstance(v, Scalar) and type(v.value) is int:
        return v.value
    return None


class Comms:
    """The collectives of one rank's trace, bound to the process groups of the current
    ``torch.distributed`` world. Create it on every rank: building a group is collective among
    its members."""

    def __init__(self, trace: Trace, rank: int, world_size: int):
        import torch.distributed as dist

        self.dist = dist
        self.trace = trace
        self.rank = rank
        self.world_size = world_size
        self.topology = topology(trace)
        self.groups: dict[str, Any] = {}
        self.by_backend: dict[int, Any] = {}
        self.comms_of: dict[int, Node] = {}  # collective node id -> its record_param_comms child
        for n in trace.nodes:
            if n.name == COMMS:
                self.comms_of.setdefault(n.parent, n)
        # the ranks of each of the job's groups, () for all of them: where there are several, a
        # collective whose group is not recorded is ambiguous (see group_for). A group this rank is
        # no member of is not listed, only counted: its ranks are not all of them, nor known (None)
        everyone = list(range(self.topology.world_size or world_size))
        self.member_sets = {tuple(r) if (r := sorted(set(spec.ranks))) and r != everyone else ()
                            for spec in self.topology.groups}  # fmt: skip
        if self.topology.count > len(self.topology.groups):
            self.member_sets.add(None)
        self._p2p_marks: tuple[set[int], int | None] | None = None  # (see _p2p)
        self.sends: list[Any] = []  # point-to-point sends not yet waited on
        self.recvs: list[Any] = []  # ... and receives
        # A rank's trace lists only the groups it is a member of. Each rank makes those, in the
        # original's order (its names count them), and waits on their members only: made as
        # collectives of the whole world, as before, ranks that list different groups paired one
        # rank's group with another's and waited on each other (a 2x2 mesh's four groups of 2).
        for spec in sorted(self.topology.groups, key=_made_order):
            if not spec.ranks or sorted(spec.ranks) == list(range(world_size)):
                group = dist.group.WORLD
            elif max(spec.ranks) >= world_size:
                continue  # a group the replayed world is too small for; its collectives are skipped
            elif rank not in spec.ranks:
                group = dist.GroupMember.NON_GROUP_MEMBER  # (a trace that lists a group this rank is not in)
            else:
                group = dist.new_group(sorted(set(spec.ranks)), use_local_synchronization=True)
            self.groups[spec.name] = group
            if spec.backend_id is not None:
                self.by_backend[spec.backend_id] = group

    def group_for(self, node: Node):
        key = _group_key(self.comms_of.get(node.id))
        if key is None and len(self.member_sets) > 1:
            # (every rank sees several sets of ranks, so every rank skips the same collectives)
            raise Unsupported("collective whose process group the trace does not record (no record_param_comms, as "
                              "with gloo in this torch), in a job whose process groups hold different ranks: which "
                              "one it ran on is not guessed (on a wrong one the ranks wait on each other)")  # fmt: skip
        if key is None or (isinstance(key, int) and not self.by_backend):
            return self.dist.group.WORLD  # not recorded, or an old trace without its group table
        group = self._recorded_group(key) if isinstance(key, str) else self.by_backend.get(key)
        if group is None:
            raise Unsupported(f"collective on process group {key!r}, which the trace's process_group:init node "
                              f"does not describe for a world of {self.world_size}")  # fmt: skip
        if group is not self.dist.group.WORLD and self.dist.get_rank(group) < 0:
            raise Unsupported(f"collective on process group {key!r}, which rank {self.rank} is not a member of")
        return group

    def local_name(self, recorded: str) -> str:
        """This process's name of the group that an op other than a collective names by the
        original job's name (its argument ``group_name``: torch 2.8's ``fsdp::all_gather_copy_in``
        looks its group up by name to allocate the all-gather's buffer). The replay makes the
        original's groups in their order, but a group of every rank is the world's, so the names
        of the others differ from the trace's (an HSDP job's row group "4" was no group's name
        here, and its all-gathers' copies were skipped)."""
        group = self._recorded_group(recorded)
        if group is None:
            raise Unsupported(f"argument 'group_name' names process group {recorded!r}, which the trace's "
                              f"process_group:init node does not describe for a world of {self.world_size}")  # fmt: skip
        if group is self.dist.GroupMember.NON_GROUP_MEMBER:
            raise Unsupported(f"argument 'group_name' names process group {recorded!r}, which rank {self.rank} is "
                              f"not a member of")  # fmt: skip
        return group.group_name

    def _recorded_group(self, name: str):
        """The replay's group made for the one the trace names ``name`` (its first, "0", is the
        world's), or None."""
        group = self.groups.get(name)
        return self.dist.group.WORLD if group is None and name == "0" else group

    def bind(self, node: Node) -> tuple[Collective, list[tuple[Any, str, Any]]]:
        """The callable for ``node`` and its arguments as (schema argument, kind, recorded value),
        kind being 'tensor', 'tensors', 'tensors2' (a list of one tensor list), 'skip' (group,
        reduce op: opaque in the trace) or 'value'."""
        try:
            schema = torch._C.parse_schema(node.op_schema)
        except RuntimeError as e:
            raise Unsupported(f"cannot parse the collective's schema: {str(e).splitlines()[0][:120]}") from None
        name = schema.name.split("::", 1)[1]
        impl = _IMPLS.get(name)
        if impl is None and name not in P2P:
            raise Unsupported(f"collective c10d::{name} is not supported by the replayer")
        group = self.group_for(node)
        args = []
        for arg, val in zip(schema.arguments, node.inputs):
            t = str(arg.type)
            if "ProcessGroup" in t or "ReduceOp" in t:
                kind = "skip"
            elif t in ("Tensor", "Optional[Tensor]"):
                kind = "tensor"
            elif t == "List[Tensor]":
                kind = "tensors"
            elif t == "List[List[Tensor]]":
                if not (isinstance(val, ListValue) and len(val.items) == 1 and isinstance(val.items[0], ListValue)):
                    raise Unsupported(f"{arg.name}: nested tensor lists of several devices are not supported")
                kind = "tensors2"
            else:
                kind = "value"
            args.append((arg, kind, val))
        names = [a[0].name for a in args]
        if name in P2P:
            peer = self._peer(node, group, dict(zip(names, (val for _, _, val in args))))
            impl = self._p2p_call(node, name == "send", global_rank(self.dist, group, peer))
        nested = [i for i, a in enumerate(args) if a[1] == "tensors2"]
        dist = self.dist

        def call(*values):
            if nested:
                values = list(values)
                for i in nested:
                    values[i] = [values[i]]
            return impl(dist, group, dict(zip(names, values)))

        return Collective(call, schema), args

    def settle(self) -> None:
        """Wait on the sends and receives still pending at the end of an iteration: the step's
        last point-to-point op waits on them (:func:`_p2p`), but where that op was skipped none
        does, and a rank's handles would pile up iteration after iteration."""
        pending, self.recvs, self.sends = self.recvs + self.sends, [], []
        for work in pending:
            work.wait()

    def _peer(self, node: Node, group, recorded: dict) -> int:
        """A send's or receive's recorded peer: a rank of its group other than this one."""
        peer = next((recorded[k] for k in _PEER_NAMES if k in recorded), None)
        peer = peer.value if isinstance(peer, Scalar) else None
        size = self.dist.get_world_size(group)
        if type(peer) is not int or not 0 <= peer < size or peer == self.dist.get_rank(group):
            raise Unsupported(f"{node.name}: its peer rank ({peer!r}) is not another rank of its group of {size}")
        return peer

    def _p2p_call(self, node: Node, sending: bool, peer: int):
        """The call of a send or receive of ``node`` with ``peer`` (a global rank): see
        :func:`_p2p`. The selection's runs of adjacent sends and receives, and its last one, are
        found at the first."""
        if self._p2p_marks is None:
            selected = select_ops(self.trace)
            p2p = [n.name in _P2P_OPS for n in selected]
            ends = {n.id for i, n in enumerate(selected) if p2p[i] and (i + 1 == len(selected) or not p2p[i + 1])}
            last = max((i for i, is_p2p in enumerate(p2p) if is_p2p), default=None)
            self._p2p_marks = (ends, selected[last].id if last is not None else None)
        ends, last = self._p2p_marks
        return functools.partial(_p2p, self, sending, peer, node.id in ends, node.id == last)


class Collective:
    """A bound collective, shaped like an ``OpOverload`` for the replay engine (``_op`` to call,
    ``_schema`` for names, returns and aliasing: the trace's own schema)."""

    def __init__(self, call, schema):
        self._op = call
        self._schema = schema


def global_rank(dist, group, rank: int) -> int:
    return rank if group is dist.group.WORLD else dist.get_global_rank(group, rank)


def _sum(dist):
    return dist.ReduceOp.SUM


def _allreduce(dist, g, a):
    for t in a["tensors"]:
        dist.all_reduce(t, op=_sum(dist), group=g)
    return a["tensors"], None


def _broadcast(dist, g, a):
    src = global_rank(dist, g, a.get("root_rank", 0))
    for t in a["tensors"]:
        dist.broadcast(t, src=src, group=g)
    return a["tensors"], None


def _reduce(dist, g, a):
    dst = global_rank(dist, g, a.get("root_rank", 0))
    for t in a["tensors"]:
        dist.reduce(t, dst=dst, op=_sum(dist), group=g)
    return a["tensors"], None


def _allgather(dist, g, a):
    dist.all_gather(a["output_tensors"][0], a["input_tensors"][0], group=g)
    return [a["output_tensors"][0]], None


def _gather_single(dist):
    """torch 2.13 renamed ``all_gather_into_tensor`` to ``all_gather_single`` (the old name warns)."""
    return getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


def _scatter_single(dist):
    """torch 2.13 renamed ``reduce_scatter_tensor`` to ``reduce_scatter_single`` (the old name warns)."""
    return getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


def _allgather_base(dist, g, a):
    _gather_single(dist)(a["output_tensor"], a["input_tensor"], group=g)
    return a["output_tensor"], None


def _allgather_coalesced(dist, g, a):
    outs = a.get("output_lists") or a.get("output_tensors")
    for out, inp in zip(outs if isinstance(outs[0], list) else [outs], a.get("input_list") or a["input_tensors"]):
        dist.all_gather(out, inp, group=g)
    return None


def _allgather_into_tensor_coalesced(dist, g, a):
    for out, inp in zip(a["outputs"], a["inputs"]):
        _gather_single(dist)(out, inp, group=g)
    return None


def _reduce_scatter(dist, g, a):
    dist.reduce_scatter(a["output_tensors"][0], a["input_tensors"][0], op=_sum(dist), group=g)
    return a["output_tensors"], None


def _reduce_scatter_base(dist, g, a):
    _scatter_single(dist)(a["output_tensor"], a["input_tensor"], op=_sum(dist), group=g)
    return a["output_tensor"], None


def _reduce_scatter_tensor_coalesced(dist, g, a):
    for out, inp in zip(a["outputs"], a["inputs"]):
        _scatter_single(dist)(out, inp, op=_sum(dist), group=g)
    return None


def _alltoall_base(dist, g, a):
    dist.all_to_all_single(a["output"], a["input"], a.get("output_split_sizes") or None,
                           a.get("input_split_sizes") or None, group=g)  # fmt: skip
    return None


def _alltoall(dist, g, a):
    dist.all_to_all(a["output_tensors"], a["input_tensors"], group=g)
    return a["output_tensors"], None


def _gather(dist, g, a):
    dst = global_rank(dist, g, a.get("root_rank", 0))
    mine = dist.get_rank() == dst
    dist.gather(a["input_tensors"][0], a["output_tensors"][0] if mine else None, dst=dst, group=g)
    return a["output_tensors"], None


def _scatter(dist, g, a):
    src = global_rank(dist, g, a.get("root_rank", 0))
    mine = dist.get_rank() == src
    dist.scatter(a["output_tensors"][0], a["input_tensors"][0] if mine else None, src=src, group=g)
    return a["output_tensors"], None


def _barrier(dist, g, a):
    dist.barrier(group=g)
    return None


#: Point-to-point operators (pipeline parallelism's activations and gradients between stages).
P2P = ("send", "recv_")
_P2P_OPS = frozenset(f"c10d::{name}" for name in P2P)
#: The names their peer's rank had in the schemas of torch's releases.
_PEER_NAMES = ("dst", "src", "dstRank", "srcRank", "dst_rank", "src_rank")


def _p2p(comms: Comms, sending: bool, peer: int, ends_run: bool, last: bool, dist, g, a):
    """A send or a receive, started without waiting (``isend``, ``irecv``), as a program's batch
    of them is (``batch_isend_irecv``: a pipeline stage's schedule sends one microbatch's
    activations and receives another's gradients at once). Gloo completes a send only once its
    peer posted the receive: replayed one by one, two stages that each send before they receive
    would wait on each other for ever. The receives are waited on where the run of adjacent sends
    and receives they are in ends (``ends_run``: the ops after it read what they received); the
    sends at the last one of the step (``last``), as a schedule waits on its sends by the end of
    its step. ``peer`` is the global rank of the recorded one, found at the plan."""
    tag = a.get("tag", 0)
    for t in a["tensors"]:
        if sending:
            comms.sends.append(dist.isend(t, peer, group=g, tag=tag))
        else:
            comms.recvs.append(dist.irecv(t, peer, group=g, tag=tag))
    if ends_run or last:
        pending, comms.recvs = comms.recvs, []
        for work in pending:
            work.wait()
    if last:
        pending, comms.sends = comms.sends, []
        for work in pending:
            work.wait()
    return None


_IMPLS = {
    "allreduce_": _allreduce, "allreduce_coalesced_": _allreduce, "broadcast_": _broadcast, "reduce_": _reduce,
    "allgather_": _allgather, "_allgather_base_": _allgather_base, "allgather_coalesced_": _allgather_coalesced,
    "allgather_into_tensor_coalesced_": _allgather_into_tensor_coalesced, "reduce_scatter_": _reduce_scatter,
    "_reduce_scatter_base_": _reduce_scatter_base, "reduce_scatter_tensor_coalesced_": _reduce_scatter_tensor_coalesced,
    "alltoall_base_": _alltoall_base, "alltoall_": _alltoall, "gather_": _gather, "scatter_": _scatter,
    "barrier": _barrier, "monitored_barrier_": _barrier,
}  # fmt: skip

def backend_for(device: torch.device, shared_gpu: bool = False) -> str:
    """The process-group backend for ranks on ``device``: NCCL for CUDA tensors, unless ranks
    share a GPU (``shared_gpu``), which NCCL refuses ("invalid usage": one rank per GPU); gloo
    then runs their collectives, through host memory."""
    if device.type != "cuda":
        return "gloo"
    return "cpu:gloo,cuda:gloo" if shared_gpu else "cpu:gloo,cuda:nccl"


def local_world(device: torch.device) -> bool:
    """Make sure a ``torch.distributed`` world exists in this process for a single-rank trace:
    a one-process group on an in-memory store (no sockets, no files). Returns False when one
    could not be made."""
    import torch.distributed as dist

    if not dist.is_available():
        return False
    if dist.is_initialized():
        return dist.get_world_size() == 1
    dist.init_process_group(backend_for(device), store=dist.HashStore(), rank=0, world_size=1,
                            timeout=datetime.timedelta(seconds=60))  # fmt: skip
    atexit.register(end_world)  # (NCCL warns of leaked resources otherwise: seen on an H200 after the DDP ResNet)
    return True


def end_world() -> None:
    """Destroy this process's ``torch.distributed`` group, if there is one: at the exit of a
    process that :func:`local_world` gave a group, and at a rank worker's end. The process is
    ending, so a failure (a broken NCCL) is let go."""
    import torch.distributed as dist

    try:
        if dist.is_initialized():
            dist.destroy_process_group()
    except Exception:  # noqa: BLE001 - the process is ending anyway
        pass


def tensor_refs(kind: str, val: Any) -> list[TensorRef | None]:
    """The recorded tensors of a collective argument, flattened (see :meth:`Comms.bind`)."""
    if kind == "tensor":
        return [val if isinstance(val, TensorRef) and val.defined else None]
    items = val.items if isinstance(val, ListValue) else []
    if kind == "tensors2":
        items = items[0].items
    out = []
    for item in items:
        if not isinstance(item, TensorRef):
            raise Unsupported("tensor list holds something else than tensors")
        out.append(item if item.defined else None)
    return out
