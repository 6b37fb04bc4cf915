"""Loading and validating PyTorch execution traces (ETs) into one typed model.

Two layouts exist in the wild:

* schema ``1.0.1``: the flat layout, where each node carries ``parent``, ``inputs``,
  ``input_shapes``, ``input_types`` (and the same for outputs) and its attributes as keys;
* schema ``1.0.2``...``1.1.1`` (``-chakra.0.0.4`` suffixed): ``ctrl_deps`` names the parent,
  ``inputs``/``outputs`` are objects of ``values``/``shapes``/``types`` (``strides`` from 1.1.1
  on) and attributes are a list of ``{name, type, value}``.

Both load into :class:`Trace`, made of :class:`Node` objects whose inputs and outputs are parsed
values (:class:`TensorRef`, :class:`ListValue`, :class:`Scalar`). A trace is data: nothing in it
is imported, evaluated or used as a path.
"""

from __future__ import annotations

import gc
import gzip
import hashlib
import io
import json
import os
import re
import zlib
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, ClassVar

import msgspec

from .errors import TraceError

# Versions this loader understands (inclusive range) and the layout each uses.
MIN_SCHEMA = (1, 0, 1)
MAX_SCHEMA = (1, 1, 1)
_SCHEMA_RE = re.compile(r"^(\d+)\.(\d+)\.(\d+)(?:-chakra\.0\.0\.4)?$")

#: Refuse to inflate a trace past this many bytes (a gzip bomb guard).
DEFAULT_MAX_TRACE_BYTES = 2 * 1024**3
#: How deeply nested a value (lists of lists ...) may be.
MAX_VALUE_DEPTH = 32
#: How many bytes of a file collection reads to decide whether it is an ET (writers put the
#: schema first; a JSON object without it in the first HEAD_BYTES is looked at up to MAX_HEAD_BYTES).
HEAD_BYTES = 4 * 1024
MAX_HEAD_BYTES = 64 * 1024

# ET spells element types the way c10 prints them.
DTYPE_NAMES = {
    "float": "float32",
    "double": "float64",
    "c10::Half": "float16",
    "c10::BFloat16": "bfloat16",
    "long int": "int64",
    "long": "int64",
    "int": "int32",
    "short int": "int16",
    "short": "int16",
    "signed char": "int8",
    "unsigned char": "uint8",
    "bool": "bool",
    "c10::complex<float>": "complex64",
    "c10::complex<double>": "complex128",
    "c10::complex<c10::Half>": "complex32",
    "c10::Float8_e4m3fn": "float8_e4m3fn",
    "c10::Float8_e5m2": "float8_e5m2",
    "c10::Float8_e4m3fnuz": "float8_e4m3fnuz",
    "c10::Float8_e5m2fnuz": "float8_e5m2fnuz",
    "c10::Float8_e8m0fnu": "float8_e8m0fnu",
    "c10::Float4_e2m1fn_x2": "float4_e2m1fn_x2",
    "short unsigned int": "uint16",  # (as GCC names them; "unsigned short" as others may)
    "unsigned short": "uint16",
    "unsigned int": "uint32",
    "long unsigned int": "uint64",
    "unsigned long": "uint64",
    "c10::quint8": "quint8",
    "c10::qint8": "qint8",
    "c10::qint32": "qint32",
    "c10::quint4x2": "quint4x2",
    "c10::quint2x4": "quint2x4",
    **{f"c10::bits{kind}": f"bits{kind}" for kind in ("1x8", "2x4", "4x2", "8", "16")},
    **{f"c10::dummy_{kind}1_7_t<{bits}>": f"{kind}{bits}" for kind in ("uint", "int") for bits in range(1, 8)},
}
UNINITIALIZED = "nullptr (uninitialized)"
#: The prefix of a tensor's dtype whose element type the trace names and :data:`DTYPE_NAMES` lacks.
UNKNOWN_DTYPE = "unknown element type "


# The values of a trace are frozen msgspec structs, not dataclasses: a large trace's load makes
# tens of thousands of them, and a struct is made in a tenth of the time (0.1 us against 1.3 us for
# a frozen dataclass, whose __init__ sets each field through object.__setattr__), and hashed and
# compared in C. None can hold a reference cycle (numbers, strings, tuples of values): the cyclic
# collector does not track them (gc=False).
class TensorRef(msgspec.Struct, frozen=True, gc=False):
    """A tensor as the trace recorded it: identity, storage placement, layout."""

    tensor_id: int
    storage_id: int
    offset: int  # storage offset, in elements
    numel: int
    itemsize: int
    device: str
    dtype: str  # torch dtype name (``float32``...) or ``undefined``
    shape: tuple[int, ...]
    strides: tuple[int, ...] | None  # None when the trace has no strides (contiguous assumed)

    @property
    def defined(self) -> bool:
        return self.dtype != "undefined"

    @property
    def key(self) -> tuple[int, int]:
        return (self.tensor_id, self.storage_id)

    @property
    def placement(self) -> tuple:
        """Where the tensor lies: storage, type, offset, shape and strides (two tensor objects
        with the same placement are views of the same elements)."""
        return (self.storage_id, self.dtype, self.offset, self.shape, self.layout_strides())

    def layout_strides(self) -> tuple[int, ...]:
        if self.strides is not None and len(self.strides) == len(self.shape):
            return self.strides
        return contiguous_strides(self.shape)

    def laid_out_as(self, other: TensorRef) -> bool:
        """``other`` has this tensor's shape, type and strides: it can be this tensor read again
        (same ids alone say little: a trace writer gives a new tensor the ids of the last one at
        its address)."""
        return self.shape == other.shape and self.dtype == other.dtype and self.layout_strides() == other.layout_strides()

    def extent(self) -> int:
        """Elements of storage this tensor reaches, counted from its offset."""
        return _extent(self.shape, self.strides)

    def reach_bytes(self) -> int:
        """Bytes of storage this tensor reaches, counted from the storage's start."""
        return (self.offset + self.extent()) * self.itemsize


class ListValue(msgspec.Struct, frozen=True, gc=False):
    """``GenericList[...]`` or ``Tuple[...]`` of values."""

    items: tuple[Value, ...]
    is_tuple: bool = False


class Scalar(msgspec.Struct, frozen=True, gc=False):
    """Any non-tensor, non-list value: ``Int``, ``Double``, ``Bool``, ``String``, ``Device``,
    ``None``, and the opaque ``Object``/``Stream``/``Storage`` (kept with their type so the
    replayer can say why it cannot rebuild them)."""

    type: str
    value: Any


class Unstrided(msgspec.Struct, frozen=True, gc=False):
    """A tensor without a strided storage (sparse COO, nested, MKL-DNN): the writer records its
    id, element type and shape, and neither its memory nor its device (nor, for a sparse one, how
    many elements it holds)."""

    tensor_id: int
    dtype: str
    shape: tuple[int, ...]


Value = TensorRef | ListValue | Scalar | Unstrided


def tensors_of(values) -> list[TensorRef]:
    """The defined tensors among ``values``, in order, those inside lists too, however nested (a
    collective's list of each rank's list of tensors)."""
    out: list[TensorRef] = []
    for v in values:
        if isinstance(v, TensorRef):
            if v.defined:
                out.append(v)
        elif isinstance(v, ListValue):
            out.extend(tensors_of(v.items))
    return out


def storages_of(values: list[Value]) -> set[int]:
    """The storage ids of :func:`tensors_of`."""
    return {ref.storage_id for ref in tensors_of(values)}


class Node(msgspec.Struct, gc=False, eq=False):
    """One trace node. Its input and output values are parsed on first access: a large trace
    has many nested operators whose values the replayer never looks at (the operators it selects
    are parsed, and so validated, when the trace is loaded). Where they come from is ``_parts``:
    an object whose ``source(side)`` gives a side's values, ``source(side, storages=True)`` its
    storage ids unparsed, and ``attrs()`` the attributes.

    A struct the cyclic collector does not track (``gc=False``), as none of what a node holds
    refers back to it: a large trace's tens of thousands of nodes are not walked by the
    collector's passes, and dropping the trace frees them by reference counting. Two nodes are
    equal only where they are the same node (``eq=False``), and hash so."""

    id: int
    name: str
    parent: int
    op_schema: str
    _inputs: list | None = None
    _outputs: list | None = None
    _attrs: dict | None = None
    _parts: Any = None
    is_op: bool = False  # an operator (it has a schema), not a label

    def __post_init__(self) -> None:
        self.is_op = bool(self.op_schema)

    @property
    def attrs(self) -> dict[str, Any]:
        if self._attrs is None:
            self._attrs = self._parts.attrs() if self._parts is not None else {}
        return self._attrs

    def attr(self, name: str) -> Any:
        """The attribute ``name`` (None where the node has none), decoded alone where the others are
        not decoded yet (the replayer reads two or three of a node's ten or so)."""
        if self._attrs is None and self._parts is not None:
            return self._parts.attr(name)
        return self.attrs.get(name)

    @property
    def inputs(self) -> list[Value]:
        if self._inputs is None:
            self._inputs = self._parts.source("inputs") if self._parts is not None else []
        return self._inputs

    @property
    def outputs(self) -> list[Value]:
        if self._outputs is None:
            self._outputs = self._parts.source("outputs") if self._parts is not None else []
        return self._outputs

    def output_storages(self) -> set[int]:
        """Storage ids of the tensors among the outputs, read without parsing them when they are
        not parsed yet (op selection looks at every operator's; a hint only: what it leads to
        is checked on the parsed values)."""
        if self._outputs is not None or self._parts is None:
            return storages_of(self.outputs)
        return self._parts.source("outputs", storages=True)

    def __repr__(self) -> str:
        return f"Node(id={self.id}, name={self.name!r})"


@dataclass(slots=True)
class Trace:
    path: Path
    schema: str
    nodes: list[Node]  # in id (execution) order
    meta: dict[str, Any] = field(default_factory=dict)
    by_id: dict[int, Node] = field(init=False, repr=False)
    selected: list[Node] | None = field(default=None, init=False, repr=False)  # cache of graph.select_ops
    opened: list[int] = field(default_factory=list, init=False, repr=False)  # operators graph.select_ops looked into
    around_casts: list[int] = field(default_factory=list, init=False, repr=False)  # ... as autocast cast their parts' inputs
    unwrapped: list[int] = field(default_factory=list, init=False, repr=False)  # ... as they ran on torch.func's wrappers
    idle_wrappers: list[int] = field(default_factory=list, init=False, repr=False)  # calls on wrappers that did nothing
    around_collectives: list[int] = field(default_factory=list, init=False, repr=False)  # ... as they ran a collective
    kept_collectives: list[int] = field(default_factory=list, init=False, repr=False)  # ... whose inner outputs are read
    not_in_torch: list[int] = field(default_factory=list, init=False, repr=False)  # ... as this torch lacks them
    no_kernel: list[int] = field(default_factory=list, init=False, repr=False)  # ... as it has no kernel of them here
    selected_for: str | None = field(default=None, init=False, repr=False)  # the device type of the selection made
    # the operators graph.select_ops looks into for each kind of device, as this torch has no kernel of them there
    kernel_gaps: dict[str, frozenset[int]] = field(default_factory=dict, init=False, repr=False)
    orphans: int = field(default=0, init=False)  # nodes whose parent is not in the trace (read as roots)
    sha256: str | None = field(default=None, init=False)  # of the file's bytes, as load_trace read them
    _children: dict[int, list[Node]] | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.by_id = {n.id: n for n in self.nodes}

    def children_ops(self, node_id: int) -> list[Node]:
        """The operators recorded directly inside the node ``node_id``, in the order they ran."""
        if self._children is None:
            self._children = {}
            for n in self.nodes:
                if n.is_op:
                    self._children.setdefault(n.parent, []).append(n)
        return self._children.get(node_id, [])

    @property
    def name(self) -> str:
        return trace_stem(self.path)


def trace_stem(path: str | os.PathLike) -> str:
    name = Path(path).name
    for suffix in (".json.gz", ".json"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


@lru_cache(maxsize=65536)
def _extent(shape: tuple[int, ...], strides: tuple[int, ...] | None) -> int:
    if any(n == 0 for n in shape):
        return 0
    if strides is None or len(strides) != len(shape):
        strides = contiguous_strides(shape)
    return 1 + sum((n - 1) * abs(s) for n, s in zip(shape, strides))


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, acc = [], 1
    for n in reversed(shape):
        strides.append(acc)
        acc *= max(n, 1)
    return tuple(reversed(strides))


def parse_schema_version(schema: Any, path: Path) -> tuple[int, int, int]:
    if not isinstance(schema, str):
        raise TraceError(path, f"'schema' must be a string, got {type(schema).__name__}")
    m = _SCHEMA_RE.match(schema)
    if not m:
        raise TraceError(path, f"unknown execution trace schema {schema!r}")
    version = tuple(int(g) for g in m.groups())
    if not (MIN_SCHEMA <= version <= MAX_SCHEMA):
        raise TraceError(
            path,
            f"unsupported execution trace schema {schema!r} (supported: 1.0.1 to 1.1.1-chakra.0.0.4)",
        )
    return version  # type: ignore[return-value]


# --------------------------------------------------------------------------------------------
# Reading bytes


_GZIP_MAGIC = b"\x1f\x8b"


def _is_gzip(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(2) == _GZIP_MAGIC


def read_head(path: str | os.PathLike, limit: int = HEAD_BYTES) -> bytes:
    """The first ``limit`` bytes of the (decompressed) file."""
    path = Path(path)
    if _is_gzip(path):
        with open(path, "rb") as raw:
            d = zlib.decompressobj(wbits=31)
            out = bytearray()
            while len(out) < limit:
                chunk = raw.read(16384)
                if not chunk:
                    break
                out += d.decompress(chunk, limit - len(out))
            return bytes(out)
    with open(path, "rb") as f:
        return f.read(limit)


def read_bytes(path: Path, max_bytes: int = DEFAULT_MAX_TRACE_BYTES) -> tuple[bytes, str]:
    """The whole (decompressed) file, refusing to inflate past ``max_bytes``, and the SHA-256 of
    the file's bytes as read (what identifies the trace: :func:`.runner.build_identity`). A gzip
    file larger than ``max_bytes`` is refused as it is: it inflates past the limit anyway."""
    try:
        size = path.stat().st_size
    except OSError as e:
        raise TraceError(path, f"cannot read file: {e.strerror or e}") from None
    if size == 0:
        raise TraceError(path, "empty file")
    if size > max_bytes:
        raise TraceError(path, f"file is {size} bytes, over the {max_bytes}-byte limit")
    try:
        data = path.read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        if not data.startswith(_GZIP_MAGIC):
            return data, digest
        out = io.BytesIO()
        with gzip.GzipFile(fileobj=io.BytesIO(data), mode="rb") as f:
            while True:
                chunk = f.read(1 << 20)
                if not chunk:
                    break
                out.write(chunk)
                if out.tell() > max_bytes:
                    raise TraceError(
                        path, f"gzip content inflates past the {max_bytes}-byte limit (a gzip bomb?)"
                    )
        return out.getvalue(), digest
    except EOFError:
        raise TraceError(path, "truncated gzip file (compressed stream ended early)") from None
    except (gzip.BadGzipFile, zlib.error) as e:
        raise TraceError(path, f"corrupt gzip file: {e}") from None
    except OSError as e:
        raise TraceError(path, f"cannot read file: {e.strerror or e}") from None


_HEAD_SCHEMA_RE = re.compile(rb'"schema"\s*:\s*("((?:[^"\\]|\\.){0,200})")?')


def sniff(path: str | os.PathLike) -> tuple[str, str]:
    """Decide from the head of a file whether it is an execution trace.

    Returns ``("et", schema)``, ``("other", why)`` for JSON that is not an ET (to be ignored), or
    ``("broken", why)`` for a file that cannot be read as JSON at all (to be reported)."""
    path = Path(path)
    try:
        head = read_head(path)
        if not _HEAD_SCHEMA_RE.search(head) and len(head) == HEAD_BYTES:
            head = read_head(path, MAX_HEAD_BYTES)
    except (OSError, EOFError, zlib.error) as e:
        return "broken", f"cannot read the file head: {e}"
    stripped = head.lstrip()
    if not stripped:
        return "broken", "empty file"
    m = _HEAD_SCHEMA_RE.search(head)
    if m:  # the loader reports a schema value of the wrong type
        return "et", (m.group(2) or b"").decode("utf-8", "replace")
    if stripped[:1] not in (b"{", b"["):
        return "broken", "not JSON (does not start with '{' or '[')"
    return "other", "JSON without a 'schema' key in its head: not an execution trace"


# --------------------------------------------------------------------------------------------
# Parsing values


def _split_type_list(inner: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for i, c in enumerate(inner):
        if c in "[(":
            depth += 1
        elif c in "])":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(inner[start:i])
            start = i + 1
    if inner[start:]:
        parts.append(inner[start:])
    return parts


@lru_cache(maxsize=64)
def _well_formed_device(device: str) -> bool:
    """``device`` looks like ``cpu`` or ``cuda:0`` (a trace has a handful: each checked once)."""
    return re.fullmatch(r"[a-z]+(:\d+)?", device) is not None


class _ValueParser:
    def __init__(self, path: Path, node_id: int, has_strides: bool):
        self.path = path
        self.node_id = node_id
        self.has_strides = has_strides

    def fail(self, problem: str) -> TraceError:
        return TraceError(self.path, f"node {self.node_id}: {problem}")

    def parse(self, typ: Any, value: Any, shape: Any, strides: Any, depth: int = 0) -> Value:
        if depth > MAX_VALUE_DEPTH:
            raise self.fail(f"value nested deeper than {MAX_VALUE_DEPTH} levels")
        if not isinstance(typ, str):
            raise self.fail(f"type must be a string, got {type(typ).__name__}")
        if typ.startswith("Tensor(") and typ.endswith(")"):
            return self.tensor(typ[7:-1], value, shape, strides)
        for prefix, is_tuple in (("GenericList[", False), ("Tuple[", True)):
            if typ.startswith(prefix) and typ.endswith("]"):
                return self.list(typ[len(prefix) : -1], is_tuple, value, shape, strides, depth)
        return Scalar(typ, value)

    def list(self, inner, is_tuple, value, shape, strides, depth) -> ListValue:
        if not isinstance(value, list):
            raise self.fail(f"list value expected, got {type(value).__name__}")
        types = _split_type_list(inner)
        if len(types) != len(value):
            # Some writers record a single element type for the whole list.
            if len(types) == 1:
                types = types * len(value)
            elif not value:
                types = []
            else:
                raise self.fail(f"list of {len(value)} values but {len(types)} types")
        shapes = shape if isinstance(shape, list) and len(shape) == len(value) else [[]] * len(value)
        stridesl = (
            strides if isinstance(strides, list) and len(strides) == len(value) else [None] * len(value)
        )
        items = tuple(
            self.parse(t, v, s, st, depth + 1) for t, v, s, st in zip(types, value, shapes, stridesl)
        )
        return ListValue(items, is_tuple)

    def tensor(self, elem: str, value, shape, strides) -> Value:
        if elem == UNINITIALIZED or value in (None, [], "<None>"):
            return TensorRef(0, 0, 0, 0, 0, "cpu", "undefined", (), None)
        dtype = DTYPE_NAMES.get(elem)
        if dtype is None:
            # (a type of a newer torch: the ops that read such a tensor as an input of the step are
            # skipped with the reason, :func:`.tensors.torch_dtype`, not the whole trace)
            if len(elem) > 80:
                raise self.fail(f"unknown tensor element type {elem!r:.80}")
            dtype = f"{UNKNOWN_DTYPE}{elem}"
        if not isinstance(value, list) or len(value) < 5:
            raise self.fail(f"tensor value must be [id, storage, offset, numel, itemsize, device], got {value!r:.80}")
        tid, sid, offset, numel, itemsize = value[:5]
        device = value[5] if len(value) > 5 else "cpu"
        if not (type(tid) is type(sid) is type(offset) is type(numel) is type(itemsize) is int
                and min(tid, sid, offset, numel, itemsize) >= 0):  # fmt: skip
            for label, x in (("id", tid), ("storage id", sid), ("offset", offset), ("numel", numel),
                             ("itemsize", itemsize)):  # fmt: skip
                if not isinstance(x, int) or isinstance(x, bool) or x < 0:
                    raise self.fail(f"tensor {label} must be a non-negative integer, got {x!r:.40}")
        if device == "" and sid == itemsize == 0:
            # A tensor without a strided storage (sparse, nested, MKL-DNN): an op that reads what a
            # replayed op made reads that; an input of the step is rebuilt where it can be (from
            # its shape, which a nested tensor's writer may leave out).
            ok = isinstance(shape, list) and all(type(d) is int and d >= 0 for d in shape)
            return Unstrided(tid, dtype, tuple(shape) if ok else ())
        if not isinstance(device, str) or not _well_formed_device(device):
            raise self.fail(f"tensor device must look like 'cpu' or 'cuda:0', got {device!r:.40}")
        shp = self.dims(shape, "shape")
        strd = self.dims(strides, "strides") if self.has_strides and strides is not None else None
        if strd is not None and len(strd) != len(shp):
            strd = None
        return TensorRef(tid, sid, offset, numel, itemsize, device, dtype, shp, strd)

    def dims(self, dims, what: str) -> tuple[int, ...]:
        if type(dims) is list and all(type(d) is int and d >= 0 for d in dims):
            return tuple(dims)  # (the common case, checked at once; what is wrong is found below)
        if not isinstance(dims, list):
            raise self.fail(f"tensor {what} must be a list, got {type(dims).__name__}")
        for d in dims:
            if not isinstance(d, int) or isinstance(d, bool):
                raise self.fail(f"tensor {what} must hold integers, got {d!r:.40}")
            if what == "shape" and d < 0:
                raise self.fail(f"negative tensor size {d} in shape {dims}")
        return tuple(dims)


def _raw_storages(values, types) -> set[int]:
    """The storage ids (second field) of the tensor values of one side, unparsed and unchecked."""
    out: set[int] = set()
    if not isinstance(values, list) or not isinstance(types, list):
        return out
    for v, t in zip(values, types):
        if not isinstance(t, str) or not isinstance(v, list):
            continue
        for x in (v,) if t.startswith("Tensor") else v if t.startswith("GenericList[Tensor") else ():
            if isinstance(x, list) and len(x) > 1 and type(x[1]) is int:
                out.add(x[1])
    return out


def _values(p: _ValueParser, values, shapes, types, strides, side: str) -> list[Value]:
    if not isinstance(values, list) or not isinstance(types, list):
        raise p.fail(f"{side} values and types must be lists")
    if len(types) != len(values):
        raise p.fail(f"{side}: {len(values)} values but {len(types)} types")
    if not isinstance(shapes, list) or len(shapes) != len(values):
        shapes = [[]] * len(values)
    if not isinstance(strides, list) or len(strides) != len(values):
        strides = [None] * len(values)
    return [p.parse(t, v, s, st) for t, v, s, st in zip(types, values, shapes, strides)]


class _FlatParts(msgspec.Struct, gc=False):
    """A flat-layout node's dict, its values parsed when first asked for."""

    raw: dict
    path: Path

    def attrs(self) -> dict[str, Any]:
        return {k: v for k, v in self.raw.items() if not k.startswith(("input", "output"))}

    def attr(self, name: str) -> Any:
        return None if name.startswith(("input", "output")) else self.raw.get(name)

    def source(self, side: str, storages: bool = False):
        raw, one = self.raw, side[:-1]  # input, output
        if storages:
            return _raw_storages(raw.get(side, []), raw.get(f"{one}_types", []))
        p = _ValueParser(self.path, raw["id"], has_strides=False)
        return _values(p, raw.get(side, []), raw.get(f"{one}_shapes"), raw.get(f"{one}_types", []), None, side)


def _node_flat(raw: dict, path: Path) -> Node:
    nid = raw["id"]
    schema = raw.get("op_schema") or ""
    if not isinstance(schema, str):
        raise _ValueParser(path, nid, has_strides=False).fail("'op_schema' must be a string")
    return Node(nid, raw["name"], raw.get("parent", nid), schema, _parts=_FlatParts(raw, path))


def _node_nested(raw: dict, path: Path, has_strides: bool) -> Node:
    """A node of the nested layout from the whole-document decoder's dict."""
    nid = raw["id"]
    raw_attrs = raw.get("attrs", [])
    if not isinstance(raw_attrs, list):
        raise TraceError(path, f"node {nid}: 'attrs' must be a list")
    for side in ("inputs", "outputs"):
        if not isinstance(raw.get(side, {}), dict):
            raise TraceError(path, f"node {nid}: '{side}' must be an object with values/shapes/types")
    schema = next((a.get("value") for a in reversed(raw_attrs) if type(a) is dict and a.get("name") == "op_schema"),
                  None)  # fmt: skip
    return _nested_node(_DictParts(raw, nid, path, has_strides), raw["name"], raw.get("ctrl_deps", nid), schema)


def _nested_node(parts: _NestedParts, name: str, parent: int, schema: Any) -> Node:
    """The :class:`Node` of the nested layout whose stored pieces ``parts`` holds, as either decoder
    gives them; ``schema`` is the stored value of its last ``op_schema`` attribute (None: there is
    none). The attributes and values are decoded when first asked for: most nodes' are never read."""
    schema = (parts.part(schema) if schema is not None else None) or ""
    if not isinstance(schema, str):
        raise parts.fail("'op_schema' must be a string")
    return Node(parts.nid, name, parent, schema, _parts=parts)


class _NestedParts(msgspec.Struct, gc=False):
    """A nested-layout node's stored pieces, decoded when first asked for: the node's ``_parts``
    (one object a node, not a closure or bound method for each source: a large trace has tens of
    thousands of nodes, and closures made for each took a sixth of its load). Subclasses say where
    the pieces lie: ``side_parts(side)`` gives a side's stored (values, shapes, types, strides),
    ``named()`` the attributes as (name, stored value) pairs, and ``decode`` turns a stored piece
    into Python (None: the pieces are Python already)."""

    raw: Any
    nid: int
    path: Path
    has_strides: bool
    decode: ClassVar[Any] = None

    def part(self, stored: Any) -> Any:
        if self.decode is None:
            return stored
        try:
            return self.decode(stored)
        except _DECODE_ERRORS:  # (JSON that is valid but nested past the decoder's limit)
            raise self.fail("value nested too deeply to decode") from None

    def fail(self, problem: str) -> TraceError:
        return _ValueParser(self.path, self.nid, self.has_strides).fail(problem)

    def attrs(self) -> dict[str, Any]:
        return {key: self.part(value) for key, value in self.named()}

    def attr(self, name: str) -> Any:
        found = None
        for key, value in self.named():
            if key == name:
                found = value  # (the last one of the name, as in attrs())
        return None if found is None else self.part(found)

    def source(self, side: str, storages: bool = False):
        values, shapes, types, strides = self.side_parts(side)
        values, types = self.part(values), self.part(types)
        if storages:
            return _raw_storages(values, types)
        p = _ValueParser(self.path, self.nid, self.has_strides)
        return _values(p, values, self.part(shapes), types, self.part(strides), side)


class _DictParts(_NestedParts, gc=False):
    """A node's pieces in the whole-document decoder's dict."""

    def side_parts(self, side: str) -> tuple:
        block = self.raw.get(side, {})
        return block.get("values", []), block.get("shapes"), block.get("types", []), block.get("strides")

    def named(self):
        return ((a["name"], a.get("value")) for a in self.raw.get("attrs", [])
                if type(a) is dict and type(a.get("name")) is str)  # fmt: skip


class _StructParts(_NestedParts, gc=False):
    """A node's pieces in the typed decoder's struct, still JSON text."""

    decode: ClassVar[Any] = staticmethod(msgspec.json.decode)

    def side_parts(self, side: str) -> tuple:
        block = self.raw.inputs if side == "inputs" else self.raw.outputs
        return block.values, block.shapes, block.types, block.strides

    def named(self):
        return ((a.name, a.value) for a in self.raw.attrs if type(a.name) is str)


_NULL, _NO_LIST = msgspec.Raw(b"null"), msgspec.Raw(b"[]")


# The stored pieces below hold JSON text, numbers and strings (an attribute's name may be any JSON
# value, which cannot refer back): untracked by the cyclic collector, as the nodes are.
class _RawSide(msgspec.Struct, gc=False):
    """One side of a node, its fields left as JSON text until a replay asks for them."""

    values: msgspec.Raw = _NO_LIST
    shapes: msgspec.Raw = _NULL
    types: msgspec.Raw = _NO_LIST
    strides: msgspec.Raw = _NULL


class _RawAttr(msgspec.Struct, gc=False):
    name: Any = None
    value: msgspec.Raw = _NULL


class _RawNode(msgspec.Struct, gc=False):
    """A node of the nested layout as it is stored; other keys are ignored, as they are by
    :func:`_node_nested`."""

    id: int
    name: str
    ctrl_deps: int | msgspec.UnsetType = msgspec.UNSET
    inputs: _RawSide = msgspec.field(default_factory=_RawSide)
    outputs: _RawSide = msgspec.field(default_factory=_RawSide)
    attrs: tuple[_RawAttr, ...] = ()


_TOP_DECODER = msgspec.json.Decoder(dict[str, msgspec.Raw])
_NODES_DECODER = msgspec.json.Decoder(list[_RawNode])
_DECODE_ERRORS: tuple[type[Exception], ...] = (msgspec.DecodeError, RecursionError)


def _parse_lazily(raw: bytes, path: Path) -> Trace | None:
    """The :class:`Trace` of a well-formed trace of the nested layout, decoded into typed nodes
    whose values stay JSON text until first asked for (a node's are decoded with it): the values
    of the nested operators a replay never reads (most of a large trace's bytes) are checked as
    JSON and skipped, not built into Python lists. Where anything is irregular (not JSON, a
    field of another type, the flat layout), None: :func:`parse_trace` reads the whole document
    and names the problem."""
    try:
        top = _TOP_DECODER.decode(raw)
        if "schema" not in top or "nodes" not in top:
            return None
        schema = msgspec.json.decode(top["schema"])
        version = parse_schema_version(schema, path)
        if version == (1, 0, 1):
            return None
        raw_nodes = _NODES_DECODER.decode(top["nodes"])
        meta = {k: v for k, r in top.items() if k != "nodes" and isinstance(v := msgspec.json.decode(r), (str, int, float))}
    except (msgspec.DecodeError, TraceError, RecursionError):
        return None
    has_strides = version >= (1, 1, 1)
    nodes: list[Node] = []
    seen: set[int] = set()
    for rn in raw_nodes:
        if rn.id in seen:
            return None
        seen.add(rn.id)
        try:
            nodes.append(_node_lazy(rn, path, has_strides))
        except TraceError:  # (a schema that is not a string: the whole-document decoder says so)
            return None
    return _assemble(path, schema, nodes, meta)


def _node_lazy(raw: _RawNode, path: Path, has_strides: bool) -> Node:
    """A node of the nested layout from the typed decoder's struct (its pieces still JSON text)."""
    schema = None
    for a in reversed(raw.attrs):
        if a.name == "op_schema":
            schema = a.value
            break
    parent = raw.id if raw.ctrl_deps is msgspec.UNSET else raw.ctrl_deps
    return _nested_node(_StructParts(raw, raw.id, path, has_strides), raw.name, parent, schema)


def parse_trace(data: Any, path: str | os.PathLike) -> Trace:
    """Validate a decoded ET document and build the :class:`Trace`."""
    path = Path(path)
    if not isinstance(data, dict):
        raise TraceError(path, f"top level must be a JSON object, got {type(data).__name__}")
    if "schema" not in data:
        raise TraceError(path, "no 'schema' key: not an execution trace")
    version = parse_schema_version(data["schema"], path)
    raw_nodes = data.get("nodes")
    if not isinstance(raw_nodes, list):
        raise TraceError(path, "missing 'nodes' list")
    flat = version == (1, 0, 1)
    has_strides = version >= (1, 1, 1)
    nodes: list[Node] = []
    seen: set[int] = set()
    for i, raw in enumerate(raw_nodes):
        if not isinstance(raw, dict):
            raise TraceError(path, f"nodes[{i}] is not an object")
        nid, name = raw.get("id"), raw.get("name")
        if not isinstance(nid, int) or isinstance(nid, bool):
            raise TraceError(path, f"nodes[{i}] has no integer 'id'")
        if not isinstance(name, str):
            raise TraceError(path, f"node {nid} has no string 'name'")
        if nid in seen:
            raise TraceError(path, f"duplicate node id {nid}")
        seen.add(nid)
        parent = raw.get("parent" if flat else "ctrl_deps", nid)
        if not isinstance(parent, int) or isinstance(parent, bool):
            raise TraceError(path, f"node {nid}: parent id must be an integer")
        nodes.append(_node_flat(raw, path) if flat else _node_nested(raw, path, has_strides))
    meta = {k: v for k, v in data.items() if k != "nodes" and isinstance(v, (str, int, float))}
    return _assemble(path, data["schema"], nodes, meta)


def _assemble(path: Path, schema: str, nodes: list[Node], meta: dict[str, Any]) -> Trace:
    """The trace of validated nodes: parent links checked, the operators to replay parsed."""
    nodes.sort(key=lambda n: n.id)
    trace = Trace(path=path, schema=schema, nodes=nodes, meta=meta)
    _check_parents(trace)
    from .graph import select_ops

    for node in select_ops(trace):  # validate what will be replayed now, the rest on demand
        try:
            node.inputs, node.outputs  # noqa: B018 - parses
        except RecursionError:
            raise TraceError(path, f"node {node.id}: value nested too deeply") from None
    return trace


def _check_parents(trace: Trace) -> None:
    """Parent links have no cycle. A node whose parent is not in the trace is read as a root and
    counted in ``trace.orphans``: torch's own writer loses parents (the backward ops of a
    checkpointed layer, recomputed under an autograd node it did not record)."""
    by_id = trace.by_id
    state: dict[int, int] = {}  # 1 = on the current path, 2 = known good
    for node in trace.nodes:
        walk = []
        cur = node
        while True:
            s = state.get(cur.id)
            if s == 2:
                break
            if s == 1:
                raise TraceError(trace.path, f"parent links form a cycle through node {cur.id}")
            state[cur.id] = 1
            walk.append(cur.id)
            if cur.parent == cur.id or cur.parent == 0:
                break
            nxt = by_id.get(cur.parent)
            if nxt is None:
                trace.orphans += 1
                break
            cur = nxt
        for nid in walk:
            state[nid] = 2


def load_trace(path: str | os.PathLike, *, max_bytes: int = DEFAULT_MAX_TRACE_BYTES) -> Trace:
    """Read, decompress, decode and validate the trace at ``path``."""
    path = Path(path)
    raw, digest = read_bytes(path, max_bytes)
    # Decoding makes tens of thousands of containers (a shape's tuple, a side's list), which would
    # set off the cyclic collector's young passes over and over for nothing: it is paused while
    # loading. The nodes and values themselves are structs it does not track (none refers back to
    # what holds it), so its later passes do not walk a loaded trace, and neither it nor the rest
    # of the process needs freezing out of them (which needs a full collection first: 0.1 s in a
    # process that imported torch).
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        trace = _parse_lazily(raw, path) or parse_trace(decode_json(raw, path), path)
    finally:
        if was_enabled:
            gc.enable()
    trace.sha256 = digest
    return trace


def decode_json(raw: bytes, path: Path) -> Any:
    """Decode with msgspec (several times faster on multi-MB traces); what it refuses, json decodes or names
    the problem of."""
    try:
        return msgspec.json.decode(raw)
    except RecursionError:
        raise TraceError(path, "JSON nested too deeply") from None
    except msgspec.DecodeError:
        pass  # the stdlib decoder gives the clearer message and position (or reads NaN, which this refuses)
    try:
        return json.loads(raw)
    except RecursionError:
        raise TraceError(path, "JSON nested too deeply") from None
    except UnicodeDecodeError as e:
        raise TraceError(path, f"not JSON: not UTF-8 text ({e.reason})") from None
    except json.JSONDecodeError as e:
        where = "the file ends early: truncated?" if e.pos >= len(raw) - 1 else f"line {e.lineno}, column {e.colno}"
        raise TraceError(path, f"invalid JSON: {e.msg} ({where})") from None
