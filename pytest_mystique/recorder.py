"""Capturing a user's step: an execution trace plus the original step's timing.

    from pytest_mystique import capture_step
    capture_step(train_step, "traces/my_model.json.gz", runs=20)

times ``train_step`` over ``runs`` calls (after a warm-up), then records one more call with
``torch.profiler.ExecutionTraceObserver`` and writes the trace (gzipped for ``.gz``) and the timing
sidecar ``my_model.meta.json`` beside it. ``capture(path)`` is the context-manager form for code
that is not a single callable. Files appear atomically; a failed capture leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import gzip
import math
import os
import shutil
import statistics
import tempfile
import time
import warnings
import weakref
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .ops import qualified_name
from .sidecar import INPUT_RECORDS, QUANTILE_LEVELS, _number, add_to_sidecar, differing, sidecar_path, write_sidecar


@dataclass
class Captured:
    path: Path
    sidecar_path: Path
    samples_s: list[float] = field(default_factory=list)
    # the trace's selected operators, parsed once for the capture helper's checks after the capture
    # (None once they are done, or where the parser refuses the trace)
    ops: list | None = field(default=None, repr=False)

    @property
    def median_s(self) -> float:
        return statistics.median(self.samples_s)


def _sync() -> None:
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def _all_agree(flag: bool) -> bool:
    """``flag`` where every rank of an initialised torch.distributed job says so (a collective:
    every rank must call it at the same point); ``flag`` itself in a single process."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return flag
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")
    t = torch.tensor([int(flag)], device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    return bool(t.item())


@contextmanager
def capture(path: str | os.PathLike, *, what: str = "", samples_s: list[float] | None = None,
            _keep_ops: bool = False):  # fmt: skip
    """Record an execution trace of the ``with`` block into ``path``. (``_keep_ops``: the capture
    helper's own checks read the parsed operators from the result.)"""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, raw_tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".json", dir=path.parent)
    os.close(fd)
    result = Captured(path, sidecar_path(path))
    # (autograd's anomaly detection, which a library may turn on for the whole process: RecBole's
    # import does; every node the step's autograd makes then saves a traceback, and the trace does
    # not show it)
    anomaly = torch.is_anomaly_enabled()
    observer = torch.profiler.ExecutionTraceObserver()
    observer.register_callback(raw_tmp)
    try:
        _sync()
        t0 = time.perf_counter()
        observer.start()
        try:
            yield result
            _sync()
        finally:
            observer.stop()
            elapsed = time.perf_counter() - t0
            observer.unregister_callback()
        final_tmp = raw_tmp
        if path.name.endswith(".gz"):
            final_tmp = raw_tmp + ".gz"
            with open(raw_tmp, "rb") as src, gzip.open(final_tmp, "wb", compresslevel=9) as dst:
                shutil.copyfileobj(src, dst)
        with open(final_tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(final_tmp, path)
        result.samples_s = list(samples_s) if samples_s else [elapsed]
        ops = _selected_ops(path)
        write_sidecar(path, result.samples_s, what=what, device=_recorded_device(ops), extra={"anomaly_mode": anomaly})
        result.ops = ops if _keep_ops else None
    finally:
        for leftover in (raw_tmp, raw_tmp + ".gz"):
            try:
                os.unlink(leftover)
            except FileNotFoundError:
                pass
        try:  # (the folder for compiled kernels' sources that torch 2.4's observer makes beside its file, at once)
            os.rmdir(os.path.splitext(raw_tmp)[0] + "_resources")
        except OSError:  # (none, or kernels' sources in it: left as they are)
            pass


def _selected_ops(path: Path) -> list | None:
    """The operators a replay of the trace at ``path`` selects (on a device this torch has a kernel of
    each for), None where the parser refuses it."""
    from .errors import TraceError
    from .graph import select_ops
    from .trace import load_trace

    try:
        return select_ops(load_trace(path))
    except (TraceError, ValueError, OSError):
        return None


def _recorded_device(ops: list | None) -> str:
    """``cuda`` where the trace's operators read or wrote a tensor on a GPU, else ``cpu``: what the
    step ran on, whatever else this process has on a GPU. (For a trace the parser refuses: whether
    the process used a GPU.)"""
    from .trace import tensors_of

    if ops is None:
        return "cuda" if torch.cuda.is_available() and torch.cuda.is_initialized() else "cpu"
    if any(ref.device.startswith("cuda") for node in ops for ref in tensors_of((*node.inputs, *node.outputs))):
        return "cuda"
    return "cpu"


def capture_step(step, path: str | os.PathLike, *, warmup: int = 3, runs: int = 20, what: str = "",
                 min_warmup_s: float = 1.0) -> Captured:  # fmt: skip
    """Time ``step()`` over ``runs`` calls, then record one more call as the trace at ``path``.

    Warm-up lasts ``warmup`` calls and at least ``min_warmup_s`` seconds: the first calls of a
    fresh model pay for cold caches and kernel selection, and would bias the original timing. In a
    distributed job the ranks agree after each call whether to go on, so that every rank makes
    the same number of calls (a step holds collectives: one extra call on one rank would pair its
    collectives with the next phase's on the others, and the job would fail or hang)."""
    t0 = time.perf_counter()
    done = 0
    while _all_agree(done < warmup or (done < 200 and time.perf_counter() - t0 < min_warmup_s)):
        step()
        done += 1
    samples = []
    for _ in range(runs):
        _sync()
        t0 = time.perf_counter()
        step()
        _sync()
        samples.append(time.perf_counter() - t0)
    with capture(path, what=what, samples_s=samples, _keep_ops=True) as result:
        step()
    if not _distributed():
        _check_runs_alike(step, result)
        _record_inputs(step, result)
        _time_inside_operators(step, result.path)
    result.ops = None  # (the parsed trace is not the caller's to keep alive)
    return result


def _distributed() -> bool:
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized()


def _check_runs_alike(step, result: Captured) -> None:
    """Record ``step()`` once more and compare its operators with the trace's. A step whose
    control flow is random (LayerDrop skips a layer now and then) or follows the data runs other
    operators from one call to the next: the trace holds one call, the timing covers others, and
    a replay of the trace cannot take the timed step's time. The sidecar then records both counts
    (``recorded_ops``), a replay's fidelity report names it, and a warning says so now. Not in a
    distributed job (every rank would have to take part)."""
    from .graph import select_ops
    from .trace import load_trace

    path = result.path
    with tempfile.TemporaryDirectory() as d:
        with capture(Path(d) / "again.json", _keep_ops=True) as second:
            step()
        # (a trace the parser refuses is loaded again here, for its error)
        ops = [[n.name for n in (c.ops if c.ops is not None else select_ops(load_trace(c.path)))]
               for c in (result, second)]  # fmt: skip
    if ops[0] != ops[1]:
        add_to_sidecar(path, recorded_ops=[len(ops[0]), len(ops[1])], recorded_ops_differ=True)
        warnings.warn(f"{path}: two recorded calls of the step ran different operators ({differing(*ops)}): its "
                      f"control flow is random or follows the data (LayerDrop, an early exit); the trace holds "
                      f"one call, the original's timing covers others", stacklevel=3)  # fmt: skip


def _record_inputs(step, result: Captured) -> None:
    """What a trace does not hold of the step's inputs, kept in the sidecar for the replay: call
    ``step()`` once more under a dispatch mode that looks at every tensor an operator reads and no
    operator made, and record, in the order they are first read,

    - each integer input's spread (``index_inputs``: shape, type, number of distinct values, the
      most frequent one's share, the hottest values' shares at ranks two to a doubling
      (:func:`_hot_shares`) and the first few of those values (:func:`_hot_values`), lowest and
      highest, and for a sorted one, bag boundaries, the smallest and largest step; for one of a
      few rows of coordinates, each row's spread too):
      a recommender's ids follow a power law, and a lookup over hot rows is several times faster
      than one over uniform rows; a GPU's embedding bag waits on its longest bag; a graph's
      destinations crowd on a few nodes where its sources do not;
    - each floating input's scale and spread (``float_inputs``: shape, type, mean, standard
      deviation, lowest and highest, and its values or its quantiles, :func:`_float_scale`), and
      whether it requires grad: in a step without an optimizer, a trace shows which inputs its
      autograd graph started from only by the ops that read them, which read the data with the
      weights (:meth:`.plan.Planner._record_forward`);
    - each boolean input's count of true elements, and where they stand if in few runs
      (``mask_inputs``, :func:`_mask`): a key padding mask given with the batch;
    - each input of another layout than strided (``sparse_inputs``: a graph network's adjacency
      matrix, which a trace records with its id, type and shape only): its layout and, for sparse
      COO, its element count, sparse dimensions and coalescing;
    - each 0-dim input's value (``scalar_inputs``, :func:`_scalar_records`): a number the program
      passed, a 0-dim parameter or buffer;
    - the values of each tensor the step made from its own numbers (``fresh_inputs``,
      :func:`_fresh_record`: ``torch.tensor([0.1, 0.5, 0.9])``, ``torch.tensor(float("-inf"))``),
      in the order it made them: a trace records an uninitialised allocation that the program
      then filled, and nothing of what it put there;
    - the packed weights each quantized linear, convolution or embedding op call received
      (``packed_weights``, :func:`.packed.packed_record`, a record per call): a trace records them as
      an opaque object, and a convolution's kernel size, stride, padding and groups, or an embedding
      table's rows, are nowhere else.

    Only where the trace's operators read such inputs; a step that fails under the mode (or a
    compiler that refuses it) leaves the sidecar as it was, with a warning."""
    from torch._ops import HigherOrderOperator
    from torch.overrides import TorchFunctionMode
    from torch.utils._pytree import tree_leaves

    from .measure import OperatorWatch
    from .packed import is_packed, packed_record, takes_packed
    from .trace import Unstrided, tensors_of

    path, ops = result.path, result.ops
    if ops is None:  # (a trace this parser refuses: nothing to rebuild it with)
        return
    made: set = set()
    wanted = False
    for node in ops:
        ins = [v.tensor_id for v in node.inputs if isinstance(v, Unstrided)]
        ins += [ref.key for ref in tensors_of(node.inputs) if ref.numel and ref.dtype != "bool"]
        wanted = wanted or any(i not in made for i in ins) or takes_packed(node.op_schema or "")
        made.update(v.tensor_id for v in node.outputs if isinstance(v, Unstrided))
        made.update(ref.key for ref in tensors_of(node.outputs))
    if not wanted:
        return
    found: dict[str, list[dict]] = {key: [] for key in INPUT_RECORDS}
    outputs: dict[int, object] = {}  # id -> a weak reference to a tensor an operator returned
    seen: set[int] = set()
    # integer inputs recorded, by their memory -> (record, storage offset, elements): views of one
    # that an op made and another reads (a split of several tables' ids) have spreads of their own
    viewed: dict[tuple[int, torch.dtype], tuple[dict, int, int]] = {}
    # the one-dimensional integer inputs recorded so far, with their place in index_inputs: a pair
    # of them that never agree element by element (a neighbour list's atoms i and j) say so
    lists: list[tuple[int, torch.Tensor]] = []

    def made_here(t) -> bool:
        return id(t) in outputs and outputs[id(t)]() is t

    # ``torch.tensor(...)`` inside the step: the new tensor reaches the ops through these, and the
    # trace counts it as made there
    fresh = {torch.ops.aten.lift_fresh.default, torch.ops.aten.lift_fresh_copy.default, torch.ops.aten.lift.default}
    fresh_values = [0]  # (the values recorded of such tensors so far)

    inside = [0]  # (how deep in extensions' operators the step is)

    def look(t: torch.Tensor) -> None:
        """Record ``t``, a tensor an operator reads and none made, at its first read."""
        if id(t) in seen:
            return
        seen.add(id(t))
        record = _input_record(t)
        if record is None:
            return
        kind = ("sparse_inputs" if "layout" in record else "float_inputs" if t.dtype.is_floating_point else
                "mask_inputs" if t.dtype == torch.bool else "index_inputs")  # fmt: skip
        if kind == "float_inputs":  # (a weight of an inference run with grad mode on, or data)
            record["requires_grad"] = t.requires_grad
        if kind == "index_inputs" and t.dim() == 1 and t.layout == torch.strided and "low" in record:
            partner = _differs_from(t, record, lists, found[kind])
            if partner is not None:
                record["differs_from"] = partner
            lists.append((len(found[kind]), t))
        found[kind].append(record)
        if kind == "index_inputs" and t.is_contiguous() and t.layout == torch.strided:
            viewed[(t.untyped_storage().data_ptr(), t.dtype)] = (record, t.storage_offset(), t.numel())

    def made(out, also=()) -> None:
        for t in [*tree_leaves(out), *also]:
            if isinstance(t, torch.Tensor):
                outputs[id(t)] = weakref.ref(t)

    class Inputs(OperatorWatch):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if inside[0]:  # (in an extension's operator, which Extensions looked at: its own tensors)
                out = func(*args, **(kwargs or {}))
                made(out)
                return out
            leaves = tree_leaves((args, kwargs or {}))
            scalars = []
            for t in leaves if func not in fresh else ():
                if viewed and isinstance(t, torch.Tensor) and made_here(t):
                    _record_run(t, viewed)
                if isinstance(t, torch.Tensor) and not made_here(t):
                    if t.dim() == 0 and type(t) in (torch.Tensor, torch.nn.Parameter):
                        scalars.append(t)  # (at every read: a writer may give another 0-dim tensor its ids)
                        continue
                    look(t)
            if func not in fresh and not isinstance(func, HigherOrderOperator):  # (no schema to place them by)
                found["scalar_inputs"].extend(_scalar_records(func, args, kwargs or {}, scalars))
            elif func in fresh:
                for t in leaves:
                    if isinstance(t, torch.Tensor):
                        record = _fresh_record(t, fresh_values[0] + t.numel() <= FRESH_TOTAL)
                        fresh_values[0] += len(record.get("values", ()))
                        found["fresh_inputs"].append(record)
            found["packed_weights"].extend(packed_record(func, x) for x in leaves
                                           if isinstance(x, torch.ScriptObject) and is_packed(x._type().qualified_name()))  # fmt: skip
            out = func(*args, **(kwargs or {}))
            made(out, leaves if func in fresh else ())
            return out

    class Extensions(TorchFunctionMode):
        """The operators of extensions (torch_cluster's, torch_spline_conv's) whose kernels run
        before any dispatch mode: registered whole for every key (``m.def(name, fn)``), they read
        their tensors' memory in C++, so the dispatch mode above sees nothing of what they read
        and takes what they return for inputs of the ops after them. Called from Python (through
        ``torch.ops``), they reach this mode first: their tensors are recorded here, at the point
        the trace reads them, and their outputs are known as made. (Those called from TorchScript
        reach neither: their rules by position stand in.)"""

        def __torch_function__(self, func, types, args=(), kwargs=None):
            if not _extension_op(func):
                return func(*args, **(kwargs or {}))
            for t in tree_leaves((args, kwargs or {})):
                if isinstance(t, torch.Tensor) and t.dim() and not made_here(t):
                    look(t)
            inside[0] += 1
            try:
                out = func(*args, **(kwargs or {}))
            finally:
                inside[0] -= 1
            made(out)
            return out

    # (only where the trace holds such operators: torch.compile'd code under a function mode may
    # be traced otherwise, or refused)
    extensions = Extensions() if any(node.name.partition("::")[0] not in _CORE for node in ops if "::" in node.name) \
        else contextlib.nullcontext()  # fmt: skip
    try:
        with extensions, Inputs():
            step()
        _sync()
    except Exception as e:  # noqa: BLE001 - the record is an aid: the capture stands without it
        warnings.warn(f"{path}: the step's inputs could not be looked at ({type(e).__name__}: {str(e)[:120]}); a "
                      f"replay draws its index inputs uniformly and its sparse inputs at a guessed density",
                      stacklevel=3)  # fmt: skip
        return
    found = {k: v for k, v in found.items() if v}
    if found:
        add_to_sidecar(path, **found)


#: Namespaces of operators that reach the dispatch modes (torch's own)
_CORE = frozenset({"aten", "prim", "prims", "c10d", "_c10d_functional", "profiler", "inductor", "quantized",
                   "_quantized", "fbgemm"})  # fmt: skip


def _extension_op(func) -> bool:
    """``func`` (what a function mode is given) is an operator of an extension's namespace, called
    through ``torch.ops``."""
    if isinstance(func, torch._ops.OpOverloadPacket):
        namespace = func._qualified_op_name.partition("::")[0]
    elif isinstance(func, torch._ops.OpOverload):
        namespace = func.namespace
    else:
        return False
    return namespace not in _CORE


def _differs_from(t: torch.Tensor, record: dict, lists: list[tuple[int, torch.Tensor]], records: list[dict]) -> int | None:
    """The place in ``records`` (the index inputs recorded so far) of the latest of ``lists`` (the
    one-dimensional ones among them, with their places) of ``t``'s shape and type that would
    agree with ``t`` (``record``) by chance (:func:`_chance_meets`) and never does: the other half of a
    list of pairs, a neighbour list's atoms ``i`` and ``j`` (no atom its own neighbour) or an edge
    list's sources and destinations (no self-loop). Drawn apart, a pair met itself by chance, and a
    distance between an atom and itself was 0, a direction divided by it NaN (see
    :meth:`.input_records.InputRecords.pairs_apart`). At most :data:`PAIR_LOOKS` are looked at."""
    looked = 0
    for place, other in reversed(lists):
        if other.shape != t.shape or other.dtype != t.dtype or other.device != t.device:
            continue
        mine = records[place]
        if _chance_meets(t.numel(), (mine["low"], mine["high"]), (record["low"], record["high"])) \
                and not bool((t == other).any()):  # fmt: skip
            return place
        looked += 1
        if looked >= PAIR_LOOKS:
            break
    return None


#: How many earlier integer inputs of its shape and type an integer input is compared with (:func:`_differs_from`).
PAIR_LOOKS = 4


def _chance_meets(n: int, one: tuple[int, int], other: tuple[int, int]) -> bool:
    """Whether two tensors of ``n`` integers each, between the lowest and highest of ``one`` and
    of ``other``, drawn at random, would agree somewhere by chance (an element or more on average):
    only then does their never agreeing say something of them (a neighbour list's 360 pairs over
    40 atoms; not two sequences of 32 token ids over a vocabulary of 1000)."""
    overlap = min(one[1], other[1]) - max(one[0], other[0]) + 1
    return 0 < overlap <= n


def _record_run(t: torch.Tensor, viewed: dict) -> None:
    """Where ``t``, a tensor an operator made, is a run of a recorded integer input's elements (a
    contiguous view of fewer of them: one table's ids split from a tensor of several tables'),
    add its spread to that input's record (``runs``: its start among the input's elements, its
    length, and its spread, :func:`_spread`). The input's own spread mixes the tables: a large
    table's ids are mostly distinct, a small one's repeat, and one share of distinct values for
    all of them gave the large table's lookup under half its original's distinct rows."""
    if t.layout != torch.strided or t.dim() != 1 or not t.is_contiguous() or t.numel() < 2 or t.device.type == "meta":
        return
    try:
        hit = viewed.get((t.untyped_storage().data_ptr(), t.dtype))
    except (RuntimeError, NotImplementedError):  # (a tensor without storage: a functional wrapper's)
        return
    if hit is None:
        return
    record, offset, n = hit
    start = t.storage_offset() - offset
    runs = record.setdefault("runs", [])
    if 0 <= start and start + t.numel() <= n and t.numel() < n and len(runs) < MAX_RUNS:
        if not any(r["start"] == start and r["length"] == t.numel() for r in runs):
            runs.append({"start": start, "length": t.numel(), **_spread(t.detach())})


#: Runs of one integer input recorded at most (the tables of a recommender's keyed batch)
MAX_RUNS = 256


def _scalar_records(func, args: tuple, kwargs: dict, scalars: list[torch.Tensor]) -> list[dict]:
    """The values of the 0-dim inputs of one call of ``func`` that no operator made: the numbers the
    program passed where the operator takes a tensor (``x * d ** -0.5``: a trace records a 0-dim
    tensor and no value; the dispatch mode is handed the number), and ``scalars``, 0-dim tensors
    (a learned temperature, an optimizer's step count). Where each was read (the operator, the
    argument's name, its place in a list, the shapes of the operator's tensor arguments, a
    number's as 0-dim) lets a replay find the same input in the trace. A replay that drew such a
    number (from 0.5 to 1 where a T5 scales its output by 0.088) made an LM head's logits ten
    times too large, its softmax's gradient subnormal, and the step five times slower than its
    original. A value is None where it is not finite (the record still keeps its place).
    Every read is recorded: a trace writer gives many numbers and 0-dim tensors one id (each is
    freed at once; a number the forward pass saved for the backward one is a 0-dim tensor there)."""
    schema = func._schema
    bound = [(a, args[i] if i < len(args) else kwargs.get(a.name)) for i, a in enumerate(schema.arguments)]
    wrapped = [_takes_tensor(a) and _number(v) for a, v in bound]
    shapes = [_replayed_shape(v) if isinstance(v, torch.Tensor) else []
              for (a, v), w in zip(bound, wrapped) if w or isinstance(v, torch.Tensor)]  # fmt: skip
    if None in shapes:  # (a tensor of sizes that are no numbers: nothing in the trace to place the values by)
        return []
    op = qualified_name(schema)
    out = []

    def record(name: str, index: int | None, dtype: str, value) -> None:
        if isinstance(value, float) and not math.isfinite(value):
            value = None
        out.append({"op": op, "arg": name, "index": index, "shapes": shapes, "dtype": dtype, "value": value})

    for (a, v), w in zip(bound, wrapped):
        if w:
            record(a.name, None, "float64" if isinstance(v, float) else "int64", v)
            continue
        places = [(None, v)] if isinstance(v, torch.Tensor) else list(enumerate(v)) if isinstance(v, (list, tuple)) else []
        for index, x in places:
            if any(x is t for t in scalars):
                record(a.name, index, str(x.dtype).removeprefix("torch."), _scalar_value(x))
    return out


def _replayed_shape(t: torch.Tensor) -> list[int] | None:
    """The sizes of ``t`` as the op a replay runs on it reads them: a nested jagged tensor's are
    those of its values (its ragged size is a symbolic ``j1``, which ``int()`` refuses; the trace
    records the wrapper's call without sizes and the call on the values, the one replayed, with
    theirs). None where a size is not a number."""
    if t.is_nested and isinstance(getattr(t, "_values", None), torch.Tensor):
        t = t._values
    try:
        return [int(d) for d in t.shape]
    except (AttributeError, TypeError, RuntimeError, ValueError):
        return None


def _takes_tensor(arg) -> bool:
    """A schema argument of type ``Tensor`` or ``Tensor?``."""
    t = arg.type
    if isinstance(t, torch.OptionalType):
        t = t.getElementType()
    return isinstance(t, torch.TensorType)


def _scalar_value(t: torch.Tensor) -> float | int | None:
    """A 0-dim tensor's value as a number (None for one that holds none: complex, bool, meta)."""
    if t.is_complex() or t.dtype == torch.bool or t.is_quantized or t.device.type == "meta":
        return None
    try:
        value = t.detach().item()
    except (RuntimeError, TypeError, ValueError, NotImplementedError):
        return None
    return value


def _fresh_record(t: torch.Tensor, with_values: bool = True) -> dict:
    """A tensor the step made from its own numbers (``torch.tensor(...)``): its shape, type and,
    for a real one of at most :data:`FRESH_VALUES` elements, its values (JSON numbers or booleans;
    a float's infinities and NaN as the strings ``"inf"``, ``"-inf"`` and ``"nan"``). A larger or
    complex one, or one past a step's :data:`FRESH_TOTAL` values (``with_values`` False), is
    recorded without values, so that the records still line up with the trace's tensors in order."""
    record = {"shape": [int(d) for d in t.shape], "dtype": str(t.dtype).removeprefix("torch.")}
    if (with_values and t.numel() <= FRESH_VALUES and type(t) in (torch.Tensor, torch.nn.Parameter)
            and t.layout == torch.strided
            and not (t.is_complex() or t.is_quantized or t.device.type == "meta")):  # fmt: skip
        flat = t.detach().reshape(-1).cpu()
        if t.is_floating_point():
            record["values"] = [v if math.isfinite(v) else str(v) for v in _json_floats(flat)]
        else:
            record["values"] = flat.tolist()
    return record


#: A tensor the step made from its own numbers is recorded with its values up to this many elements,
#: and a step's such tensors up to this many in all (a sidecar of a few megabytes at most).
FRESH_VALUES = 4096
FRESH_TOTAL = 1 << 18


def _input_record(t: torch.Tensor) -> dict | None:
    """What a replay needs to rebuild ``t``, an input of the step (see :func:`_record_inputs`):
    None for one this record cannot describe (nested, quantized, a tensor subclass other than a
    parameter, symbolic sizes) or need not (complex, fewer than two elements)."""
    if type(t) not in (torch.Tensor, torch.nn.Parameter) or t.is_nested or t.is_quantized:
        return None
    try:
        return _described(t)
    except (RuntimeError, TypeError, ValueError, NotImplementedError):
        return None


def _described(t: torch.Tensor) -> dict | None:
    record = {"shape": [int(d) for d in t.shape], "dtype": str(t.dtype).removeprefix("torch.")}
    if t.layout != torch.strided:
        record["layout"] = str(t.layout).removeprefix("torch.")
        if t.layout == torch.sparse_coo:
            record.update(nnz=int(t._nnz()), sparse_dim=int(t.sparse_dim()), coalesced=bool(t.is_coalesced()))
        return record
    if t.dtype.is_complex or not t.numel():
        return None
    if t.dtype == torch.bool:
        return record | _mask(t.detach())
    if t.dtype.is_floating_point:
        return record | _float_scale(t)
    record.update(_spread(t.detach()))
    if (t.dim() == 2 and t.shape[0] == 2 and t.shape[1] >= 2
            and _chance_meets(t.shape[1], *((int(row.min()), int(row.max())) for row in t.detach()))
            and not bool((t[0] == t[1]).any())):  # fmt: skip
        # (an edge list's two rows, no edge from a node to itself: see _differs_from)
        record["rows_differ"] = True
    if t.numel() <= EXACT_INTS:
        record["values"] = t.detach().reshape(-1).tolist()
    if t.dim() == 2 and 2 <= t.shape[1] <= INT_COLUMNS <= t.shape[0] and t.numel() <= COLUMN_ELEMENTS:
        # a batch of fields side by side (a recommender's categorical features): each column's
        # spread, which a replay draws a column with where the fields lie in ranges of their own
        record["columns"] = [_spread(col) for col in t.detach().t()]
    if t.dim() == 2 and 2 <= t.shape[0] <= COO_ROWS < t.shape[1]:
        # coordinates, a row each (a graph's edges: sources, then destinations; a sparse tensor's
        # indices): each row has a spread of its own, which one over the whole tensor mixes
        record["rows"] = [_spread(row) for row in t.detach()]
    if t.dim() == 1 and t.dtype.is_signed:  # (an unsigned difference wraps round)
        steps = t.detach().diff()
        if bool((steps >= 0).all()):  # bag boundaries (offsets): the smallest and largest bag
            record["steps"] = [int(steps.min()), int(steps.max())]
    return record


#: An integer input of at most this many elements is recorded with its values too (``values``),
#: which a replay gives it where a requirement passes through it: a row of offsets that moves each
#: field's ids into its own rows of one table (drawn from its spread alone, the fields' offsets
#: fell out of order and their sums past the table).
EXACT_INTS = 64
#: An integer input of two dimensions with at most this many columns, and at least as many rows,
#: is recorded column by column too (``columns``: each column's spread): a batch of a
#: recommender's fields, each field's ids in its own rows of one table (see
#: :meth:`.tensors.TensorFactory._pass_shift`). Drawn with the whole tensor's spread, a field of
#: 2000 ids held half the distinct rows of the original's.
INT_COLUMNS = 64
#: An integer input of this many rows at most, each longer than that, is a tensor of coordinates
#: (``edge_index``, COO indices), whose rows are recorded one by one too.
COO_ROWS = 4


def _spread(t: torch.Tensor) -> dict:
    """How an integer tensor's values spread: the number of distinct ones, the most frequent
    one's share, the lowest and highest, the hottest ones' shares (:func:`_hot_shares`), the
    hottest ones themselves (:func:`_hot_values`) and, where some of those stand together, where
    their runs lie in the flattened tensor (``hot_runs``, one list a hot value, :func:`_runs`)."""
    values, counts = torch.unique(t, return_counts=True)
    ranked = torch.sort(counts, descending=True, stable=True)  # (hottest first; ties by value)
    hot = _hot_values(values[ranked.indices], ranked.values)
    record = {"distinct": int(values.numel()), "top": round(float(ranked.values[0]) / t.numel(), 6),
              "low": int(values[0]), "high": int(values[-1]), "hot": _hot_shares(ranked.values, t.numel()),
              "hot_values": hot}  # fmt: skip
    runs = [_runs(t.reshape(-1) == v, HOT_RUNS) for v in hot]
    if any(runs):
        record["hot_runs"] = runs
    return record


def _float_scale(t: torch.Tensor) -> dict:
    """A floating input's scale and spread: its mean, standard deviation, lowest and highest value
    and, for one of at most :data:`EXACT_FLOATS` elements, its values (``values``), else its
    quantiles at :data:`.sidecar.QUANTILE_LEVELS`, from the lowest to the highest (``quantiles``;
    of a seeded sample of :data:`QUANTILE_SAMPLE` elements where it has more) and, for a table whose
    columns spread unlike each other, each column's (``columns``, see :data:`MAX_COLUMNS`); none of
    these where a value is NaN or infinite. A trained model's weights, or an untrained one's at its initialisation
    (normal with a deviation of 0.02 in many), set the magnitude of every activation after them;
    a replay that draws them by rule alone gets another. And the shape of their spread passes
    too: a gated-delta layer's ``A_log`` (the logs of a uniform draw, a value a head) sets how
    fast its decays fall into subnormal numbers, and drawn uniform at its mean and deviation it
    made the replay's triangular solves and batched products of one such model 6% slower than
    the original's (its ten inputs of 64 elements or fewer taking their values: 0.99)."""
    x = t.detach()
    x = x.float() if x.itemsize < 4 else x
    flat = x.reshape(-1)
    low, high = (float(v) for v in torch.aminmax(flat))
    fill = _mask_fill(flat, low) if x.dim() >= 2 else None
    if fill is not None:
        # an additive mask (-inf, or a stand-in such as float32's lowest, where a position is
        # masked): where it holds that value, and the scale of the rest
        rest = flat[flat != low]
        record = {"fill": fill}
        if rest.numel() >= 2:
            record |= {k: v for k, v in _float_scale(rest.reshape(-1, 1)).items() if k != "columns"}
        return record
    if not (math.isfinite(low) and math.isfinite(high)):
        return {}
    std, mean = torch.std_mean(x) if flat.numel() > 1 else (0.0, flat[0])
    record = {"mean": float(mean), "std": float(std), "low": low, "high": high}
    if flat.numel() <= EXACT_FLOATS:
        record["values"] = _json_floats(flat)
        return record
    record["quantiles"] = _quantiles(flat, low, high)
    if (x.dim() == 2 and 2 <= x.shape[1] <= MAX_COLUMNS and x.shape[0] >= 2 * len(QUANTILE_LEVELS)
            and x.numel() <= COLUMN_ELEMENTS):  # fmt: skip
        lows, highs = torch.aminmax(x, dim=0)
        spans = (highs - lows).tolist()
        if max(spans) > COLUMNS_DIFFER * max(min(spans), 1e-12 * max(spans)):
            # a table of features whose columns spread unlike each other (ids, a price, a count)
            record["columns"] = [_quantiles(col, float(lo), float(hi)) for col, lo, hi in zip(x.t(), lows, highs)]
    return record


def _mask_fill(flat: torch.Tensor, low: float) -> dict | None:
    """Where ``flat`` (a floating input, ``low`` its lowest value) holds a mask's fill: -inf, or
    a value at or below -:data:`MASK_FILL` (float32's lowest, -1e9), in runs as a boolean mask's
    are recorded (:func:`_mask`); None for another input. ``nn.Transformer``'s square subsequent
    mask is -inf above its diagonal: recorded with no scale (it holds infinities), it was drawn
    from -1 to 1, and the replay's attention masked nothing and turned NaN."""
    if not (low == -math.inf or -math.inf < low <= -MASK_FILL) or bool(torch.isnan(flat).any()):
        return None
    at = flat == low
    if bool(torch.isinf(flat[~at]).any()):
        return None
    record = _mask(at)
    return record | {"value": "-inf" if low == -math.inf else _json_floats(torch.tensor([low], dtype=flat.dtype))[0]}


#: A floating input's lowest value at or below minus this is a mask's fill (see :func:`_mask_fill`)
MASK_FILL = 1e4


def _quantiles(flat: torch.Tensor, low: float, high: float) -> list:
    """The quantiles of ``flat`` (a tensor's values, lowest ``low`` and highest ``high``) at
    :data:`.sidecar.QUANTILE_LEVELS`, of a seeded sample of :data:`QUANTILE_SAMPLE` where it has more."""
    flat = flat.reshape(-1)
    if flat.numel() > QUANTILE_SAMPLE:
        picks = torch.randint(flat.numel(), (QUANTILE_SAMPLE,), generator=torch.Generator().manual_seed(0))
        flat = flat[picks.to(flat.device)]
    ordered = flat.sort().values
    last = ordered.numel() - 1
    at = torch.tensor([round(level * last) for level in QUANTILE_LEVELS], device=ordered.device)
    picked = ordered[at]
    picked[0], picked[-1] = low, high  # (the sample's ends: the tensor's own)
    return _json_floats(picked)


#: A floating input of at most this many elements is recorded whole (a value a head or a channel:
#: a decay rate, a norm's weight); a larger one by its quantiles.
EXACT_FLOATS = 64
#: A floating input of two dimensions with at most this many columns, whose widest column spans
#: :data:`COLUMNS_DIFFER` times its narrowest or more, is recorded column by column too
#: (``columns``: each column's quantiles): a tabular model's features in one float tensor, ids,
#: counts and prices side by side, which one spread for all of them mixes (DeepCTR's DIN read its
#: price column as values up to 3000, its click probabilities saturated, and its backward pass's
#: gradients fell into subnormal numbers: the training step took four times its original's time).
MAX_COLUMNS = 256
COLUMNS_DIFFER = 16
#: and at most this many elements (a batch of features, not a parameter)
COLUMN_ELEMENTS = 1 << 20
#: Elements a larger input's quantiles are taken from (drawn with a fixed seed: a strided sample
#: could fall on one column of a table whose columns differ).
QUANTILE_SAMPLE = 1 << 16


def _json_floats(x: torch.Tensor) -> list[float]:
    """``x``'s elements as JSON numbers, as short as round-trips its type (nine digits for float32)."""
    if x.dtype == torch.float64:
        return x.tolist()
    return [float(f"{v:.9g}") for v in x.tolist()]


def _hot_shares(counts: torch.Tensor, n: int) -> list[list]:
    """The share of the ``n`` elements that the hottest values took (``counts``: each value's,
    hottest first), at ranks 1, 2, 3, 4, 6, 8, 11... (two to a doubling) and at the last: [rank,
    share] pairs, the curve of how the values spread. A hottest share and a distinct count fit a
    Zipf law; ids of another law (sums of uniform draws, a square's) have a curve of another shape,
    and which rows a lookup reads (how many sit in the cache) follows from it."""
    cum = counts.cumsum(0)
    k = int(counts.numel())
    ranks = sorted({min(round(2 ** (j / 2)), k) for j in range(2 * max(k, 1).bit_length() + 1)} | {k})
    return [[r, round(float(cum[r - 1]) / n, 6)] for r in ranks]


def _hot_values(values: torch.Tensor, counts: torch.Tensor) -> list[int]:
    """Of ``values`` and their ``counts``, hottest first, those at the first :data:`HOT_VALUES`
    ranks that repeat: the ranks whose shares :func:`_hot_shares` gives exactly. A program compares its
    ids with such values (``ids == image_token``, ``ids != pad``, ``labels == -100``) and the
    mask's count of true elements decides what follows (how many image features a model puts
    into the text, how many tokens a loss reads); drawn at random, the replay's ids hold none."""
    return [int(v) for v, c in zip(values[:HOT_VALUES], counts[:HOT_VALUES]) if int(c) > 1]


#: How many of an integer input's hottest values the capture records by value.
HOT_VALUES = 4
#: How many runs of a hot value the capture records where they stand at most (:func:`_runs`).
HOT_RUNS = 16


def _runs(at: torch.Tensor, most: int, together: int = 2) -> list[list[int]]:
    """Where the true elements of ``at`` (a 1-d mask: where a hot value stood, a boolean input)
    lie, as [start, length] runs, if they stand together: in ``most`` runs at most, ``together``
    elements a run or more on average; else none. Image tokens sit in one run an image (a
    vision-language model finds each image's tokens from where its runs begin), a padded batch's
    pad ids at each row's end; a hot id of a recommender, scattered, has no runs recorded."""
    edges = torch.diff(at.to(torch.int8), prepend=at.new_zeros(1, dtype=torch.int8), append=at.new_zeros(1, dtype=torch.int8))
    starts, ends = torch.nonzero(edges == 1).reshape(-1), torch.nonzero(edges == -1).reshape(-1)
    if not 0 < starts.numel() <= most or int(at.sum()) < together * starts.numel():
        return []
    return [[s, e - s] for s, e in zip(starts.tolist(), ends.tolist())]


def _mask(t: torch.Tensor) -> dict:
    """A boolean input's record: how many of its elements are true (``trues``) and, where they
    stand in :data:`MASK_RUNS` runs or fewer of the flattened tensor (or long runs, see
    :data:`MASK_LONG_RUNS`), those [start, length] runs (``runs``): a key padding mask's pads at
    each row's end, an image's valid pixels, a causal mask's rows. Drawn half true at random, a
    padding mask hid half of each row's keys, some rows' all of them."""
    flat = t.reshape(-1)
    record = {"trues": int(flat.sum())}
    runs = _runs(flat, MASK_RUNS, 1) or _runs(flat, MASK_LONG_RUNS, MASK_LONG_RUN)
    if runs:
        record["runs"] = runs
    return record


#: How many runs a boolean input's true elements may stand in for the capture to record them (:func:`_mask`),
MASK_RUNS = 64
#: or this many where they stand this many a run or more on average: a causal mask, a run a row
#: (drawn half true at random places, its ``where`` took four times the original's time, the
#: branches of its select and of the ``exp`` after it mispredicted, in xLSTM's decay matrix).
MASK_LONG_RUNS, MASK_LONG_RUN = 4096, 16


def _time_inside_operators(step, path: Path) -> None:
    """The original step's time inside operators over more profiled calls, three at least and more
    for a short step (:func:`.measure.inside_operators`, :func:`.measure.profiled_calls`), kept in the sidecar (``original_ops_s``,
    ``original_ops_share``): a replay sets its own against it, and its report says how much of
    the original step was its Python and the autograd engine's own work, which a trace does not
    hold. CPU steps only (on CUDA the GPU's time is not in it).

    Where those calls ran different numbers of operators, the step's work changes from call to
    call though two calls in a row ran alike (:func:`_check_runs_alike`): a neural ODE's adaptive
    solver takes more steps as training moves its vector field (torchdyn's training ran 60
    ``tanh`` in its traced call and 67 a call on average over twenty calls after the capture's).
    The sidecar then records the least and most (``profiled_ops``) and that the calls differ, and
    a warning says so. A change that comes after these calls is not seen here (torchdyn's came
    later: the model zoo's own profiled calls name it)."""
    from .measure import OPS_WARMUP, inside_operators, profiled_calls
    from .sidecar import load_sidecar

    side = load_sidecar(path) or {}
    if side.get("device") != "cpu":
        return
    calls = profiled_calls(side.get("original_median_s") or 1.0)
    got = inside_operators(step, calls=calls, warmup=OPS_WARMUP)
    if got is None:
        return
    found = {}
    if got.ops_s > 0:
        found.update(original_ops_s=got.ops_s, original_ops_share=got.share, original_outside=got.outside or {})
    low, high = (min(got.counts), max(got.counts)) if got.counts else (0, 0)
    if low != high:
        found.update(profiled_ops=[low, high], recorded_ops_differ=True)
    if found:
        add_to_sidecar(path, **found)  # (one write of the sidecar)
    if low != high:
        warnings.warn(f"{path}: the step's profiled calls after the traced one ran from {low} to "
                      f"{high} operators: its work changes from call to call (control flow that follows "
                      f"the data or the training's progress, as an adaptive solver's steps do); the trace holds one "
                      f"call, the original's timing covers others", stacklevel=3)  # fmt: skip
