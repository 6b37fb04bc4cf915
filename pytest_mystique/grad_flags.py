"""Which inputs of a step required grad in the original, read from the paths its ops took.

A model's parameters carry ``requires_grad`` in an inference step too, where autograd is off
(``torch.no_grad``, ``torch.inference_mode``). A few ATen implementations branch on that flag
whatever autograd's switch says, and their two paths differ in speed:

* ``aten::matmul`` of a batch (3-D or more) by a matrix folds the batch into one matrix
  product (``mm``) when the matrix requires grad, copying the batch first when its layout cannot
  be folded as a view (a transposed sequence: ``nn.MultiheadAttention`` with ``batch_first``, the
  input of a recurrent layer). Without the flag such a batch goes to ``bmm`` against the matrix
  expanded to a batch, and so does any batch on the right of a matrix. Measured on this project's CPU host, one thread, ``F.linear`` over a
  batch-first input transposed to sequence-first: (4, 64, 128) by a 384 x 128 weight took
  0.56 ms without the flag and 0.28 ms with it; (8, 128, 512) by 1536 x 512, 28.7 and 18.0 ms.
  The inference step of an ``nn.MultiheadAttention(256, 4, batch_first=True)`` replayed at
  1.16-1.20x its original's time with weights that did not require grad, 0.97-1.00x with the
  flag.
* ``aten::embedding_bag`` calls ``_embedding_bag``, which also makes what a backward pass needs,
  when its weight requires grad, and ``_embedding_bag_forward_only`` otherwise.

The trace records the operators each op ran inside it, so the path the original took shows
there, and with it which inputs required grad. The replay gives those inputs the flag (a
training step's replay already gives it to the parameters its optimizer updates); with autograd
off, the flag changes nothing else.
"""

from __future__ import annotations

from collections import Counter

from .errors import TraceError
from .graph import CASTS, child_op_names
from .trace import Node, TensorRef, Trace, storages_of, tensors_of

#: Children of ``aten::matmul`` that show it folded its batch into one matrix product.
_FOLDED = {"aten::mm", "aten::mv"}


def required_grad(trace: Trace) -> tuple[set[tuple[int, str]], Counter, list[tuple[int, TensorRef]]]:
    """The allocations (storage id, element type) whose tensors the recorded paths show required
    grad, how many ops showed it, by the path (for the report), and the ``matmul``s among them
    with the operand each showed it of (id, operand: for :func:`kept_casts`)."""
    children = child_op_names(trace)
    by_id = trace.by_id
    found: set[tuple[int, str]] = set()
    why: Counter = Counter()
    folded: list[tuple[int, TensorRef]] = []
    for node in trace.nodes:
        try:  # (the values of an op inside a selected one are parsed here, first: a malformed one shows nothing)
            if node.name == "aten::_embedding_bag" and node.is_op:
                parent = by_id.get(node.parent)
                refs = tensors_of(node.inputs)
                if parent is not None and parent.name == "aten::embedding_bag" and refs:
                    found.add((refs[0].storage_id, refs[0].dtype))  # its weight
                    why["aten::embedding_bag ran _embedding_bag, not its forward-only path"] += 1
            elif node.name == "aten::matmul" and node.is_op and "out)" not in node.op_schema:
                small = _folded_for_flag(node, children.get(node.id, set()))
                if small is not None:
                    found.add((small.storage_id, small.dtype))
                    folded.append((node.id, small))
                    why["aten::matmul folded a batch into one mm, as it does here only for a matrix that requires grad"] += 1
        except (TraceError, RecursionError):
            continue
    return found, why, folded


def kept_casts(trace: Trace, folded: list[tuple[int, TensorRef]], flagged: set[tuple[int, str]], why: Counter) -> set[int]:
    """The casts that made an operand the recorded paths show required grad, from another type:
    ``torch.autocast`` keeps its bfloat16 copy of a parameter for the rest of the forward pass,
    and makes it with autograd on (so that a later use under either grad mode may share it), so
    the copy requires grad in an inference step too, and a ``matmul`` by it folds its batch. For
    each such ``matmul`` of ``folded`` (:func:`required_grad`), the operator that last allocated its
    operand's memory before it (not a view of it), where that is a cast: its source is added to
    ``flagged``, and the casts are counted in ``why``. The replay runs them with autograd
    recording, as the original did. Their ids are returned."""
    wanted = {small.storage_id for _, small in folded}
    makers: dict[int, list[Node]] = {}  # storage id -> the operators that output into it, in order
    for node in trace.nodes if wanted else ():
        if node.is_op:
            try:
                hit = node.output_storages() & wanted
                hit -= storages_of(node.inputs) if hit else set()  # (a view outputs into its input's memory)
            except (TraceError, RecursionError):
                continue
            for sid in hit:
                makers.setdefault(sid, []).append(node)
    found: set[int] = set()
    for mid, small in folded:
        before = [n for n in makers.get(small.storage_id, ()) if n.id < mid]
        cast = before[-1] if before else None
        while cast is not None and (up := trace.by_id.get(cast.parent)) is not None and up.name in CASTS:
            cast = up  # (``to`` calls ``_to_copy``: the outer one is replayed)
        if cast is None or cast.name not in CASTS or cast.id in found:
            continue
        try:
            ins, outs = tensors_of(cast.inputs), tensors_of(cast.outputs)
        except (TraceError, RecursionError):
            continue
        if ins and outs and (outs[0].storage_id, outs[0].dtype) == (small.storage_id, small.dtype) and ins[0].dtype != outs[0].dtype:
            flagged.add((ins[0].storage_id, ins[0].dtype))
            found.add(cast.id)
    if found:
        why["its kept copy cast by torch.autocast, made with autograd on, is read by such a matmul"] += len(found)
    return found


def ran_with_grad_mode(node: Node) -> bool | None:
    """Whether grad mode was on when ``node`` ran, as its autograd sequence number says: torch's
    dispatcher gives an op one (the ``seq_id`` attribute, 0 or more) where it runs the op at its
    autograd key with grad mode on, and -1 otherwise (under ``torch.no_grad`` or
    ``inference_mode``, inside an ``autograd.Function``'s forward, in the backward pass). None
    where the trace records no number."""
    seq = sequence_number(node)
    return None if seq is None else seq >= 0


def sequence_number(node: Node) -> int | None:
    """``node``'s autograd sequence number (the ``seq_id`` attribute); None where the trace records none."""
    try:
        seq = node.attr("seq_id")
    except (TraceError, RecursionError):
        return None
    return seq if isinstance(seq, int) and not isinstance(seq, bool) else None


def nodes_made(nodes: list[Node]) -> set[int]:
    """The ids of those of ``nodes`` (ops that ran with grad mode on, in the order they ran) for
    which autograd made a node: the sequence number each records is the one the next node made
    will take, so it advances past an op that made one and stands still past one that made none
    (no input that requires grad: a frozen model's). The last op made one where any before it did
    (a step's closing sum of what the others recorded); empty where none did."""
    seqs = [(node.id, seq) for node in nodes if (seq := sequence_number(node)) is not None]
    made = {a for (a, seq), (_, after) in zip(seqs, seqs[1:]) if after > seq}
    if made:
        made.add(seqs[-1][0])
    return made


def _folded_for_flag(node: Node, kids: set[str]) -> TensorRef | None:
    """The matrix operand of a recorded ``matmul`` of a batch by a matrix that folded the batch
    (``mm`` among its children) although, without the flag, torch would not have: a batch
    whose layout cannot be folded as a view, or any batch on the right of a matrix (``should_fold``
    in ATen's LinearAlgebra.cpp folds for a matrix that requires grad first, reading the flag, not
    the grad mode). None where the path shows nothing about the flag."""
    refs = tensors_of(node.inputs)
    if len(refs) < 2 or not kids & _FOLDED or "aten::bmm" in kids:
        return None
    a, b = refs[0], refs[1]
    if len(a.shape) >= 3 and len(b.shape) <= 2:
        batch, small, transposed = a, b, False
    elif len(b.shape) >= 3 and len(a.shape) <= 2:
        batch, small, transposed = b, a, True  # (torch folds the batch's transpose)
    else:
        return None
    if transposed and len(small.shape) == 2:
        return small  # (without the flag torch never folds a matrix by a batch, whatever the layout)
    if batch.strides is None or batch.numel == 0:
        return None  # (no recorded layout: contiguous, and a contiguous batch folds anyway)
    shape, strides = list(batch.shape), list(batch.strides)
    if transposed:
        shape[-2:], strides[-2:] = shape[:-3:-1], strides[:-3:-1]
    viewable = all(strides[i] == strides[i + 1] * shape[i + 1] for i in range(len(shape) - 2))
    return None if viewable else small
