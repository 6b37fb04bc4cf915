"""Operator resolution: from a trace's ``op_schema`` string to a ``torch.ops`` overload.

Only ``torch.ops.<namespace>.<op>.<overload>`` can come out of here. Names are checked against a
strict identifier pattern, attribute lookups never touch attributes that the namespace or packet
classes define themselves (so ``__class__``, ``__dict__`` and friends are unreachable), and the
result must be a real ``OpOverload``. A trace therefore cannot make the replayer import or call
anything else.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
from dataclasses import dataclass
from functools import lru_cache

import torch

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_QUALIFIED_RE = re.compile(rf"^({_NAME})::({_NAME})(?:\.({_NAME}))?\(")


class Unsupported(Exception):
    """This op cannot be replayed; the message is the reason shown to the user."""


@dataclass(frozen=True)
class OpName:
    namespace: str
    name: str
    overload: str

    def __str__(self) -> str:
        base = f"{self.namespace}::{self.name}"
        return base if self.overload == "default" else f"{base}.{self.overload}"


@lru_cache(maxsize=4096)  # (a trace names a few dozen schemas thousands of times)
def parse_op_name(op_schema: str) -> OpName:
    m = _QUALIFIED_RE.match(op_schema)
    if not m:
        raise Unsupported(f"op schema is not of the form 'namespace::op.overload(...)': {op_schema[:80]!r}")
    ns, name, overload = m.group(1), m.group(2), m.group(3) or "default"
    for part in (ns, name, overload):
        if part.startswith("__") and part.endswith("__") and part not in DUNDER_OPS:
            raise Unsupported(f"refusing special name {part!r} in op schema")
    return OpName(ns, name, overload)


# aten has a few real operators with dunder names.
DUNDER_OPS = frozenset(
    f"__{n}__" for n in ("and", "or", "xor", "lshift", "rshift", "iand", "ior", "ixor", "ilshift", "irshift")
)


@lru_cache(maxsize=4096)
def resolve(op_schema: str) -> torch._ops.OpOverload:
    """The ``torch.ops`` overload that ``op_schema`` names, or :class:`Unsupported` (raised again at
    each call: an operator registered later is found then)."""
    op = parse_op_name(op_schema)
    if hasattr(torch._ops._OpNamespace, op.namespace) or hasattr(torch._ops._Ops, op.namespace):
        raise Unsupported(f"refusing namespace {op.namespace!r}")
    namespace = getattr(torch.ops, op.namespace)
    if not isinstance(namespace, torch._ops._OpNamespace):
        raise Unsupported(f"{op.namespace!r} is not an operator namespace")
    if any(op.name in vars(cls) for cls in type(namespace).__mro__):
        # the namespace object's own attributes (its methods, ``__dict__``...), not operators; not
        # ``hasattr`` on the class, which also sees its metaclass's (``type.__or__`` would hide
        # ``aten::__or__``)
        raise Unsupported(f"refusing operator name {op.name!r}")
    try:
        packet = getattr(namespace, op.name)
    except (AttributeError, RuntimeError):
        loaded = load_op_library(op.namespace)
        try:
            packet = getattr(namespace, op.name) if loaded is not None else None  # a partial load may have it
        except (AttributeError, RuntimeError):
            packet = None
        if packet is None:
            why = (loaded if isinstance(loaded, str) else
                   f"torch {torch.__version__} does not have it: removed or renamed in this release?"
                   if op.namespace == "aten" else "is the library that defines it installed and loaded?")  # fmt: skip
            raise Unsupported(f"operator {op.namespace}::{op.name} is not registered in this torch ({why})") from None
    if not isinstance(packet, torch._ops.OpOverloadPacket):
        raise Unsupported(f"{op.namespace}::{op.name} is not an operator")
    if op.overload not in packet.overloads():
        raise Unsupported(f"operator {op} has no overload {op.overload!r} in this torch")
    overload = getattr(packet, op.overload)
    if not isinstance(overload, torch._ops.OpOverload):
        raise Unsupported(f"{op} is not an operator overload")
    return overload


#: Python packages that register the operators of a namespace when imported. Only these fixed
#: names are ever imported, and only when a trace uses their namespace and the package is installed.
#: (``quantized_decomposed``: the quantize and dequantize ops of a model quantized through export,
#: PT2E, which torch defines in a module it imports only for that; ``fsdp``: FSDP2's copies in and
#: out of its collectives' buffers, defined by torch's own fully_shard; ``_c10d_functional``: the
#: functional collectives' ``_wrap_tensor_autograd``, defined in Python beside the ones in C++.)
OP_LIBRARIES = {"fbgemm": "fbgemm_gpu", "torchvision": "torchvision", "torchaudio": "torchaudio",
                "torchrec": "torchrec", "torch_scatter": "torch_scatter", "torch_sparse": "torch_sparse",
                "torch_cluster": "torch_cluster", "torch_spline_conv": "torch_spline_conv", "torchao": "torchao",
                "quantized_decomposed": "torch.ao.quantization.fx._decomposed", "fsdp": "torch.distributed.fsdp",
                "_c10d_functional": "torch.distributed._functional_collectives"}  # fmt: skip
_loaded: dict[str, bool | str | None] = {}


def load_op_library(namespace: str) -> bool | str | None:
    """Import the package that defines ``namespace``'s operators: True when it loaded, None when
    there is none (or it is not installed), else why it failed to load (said in the skip reason)."""
    if namespace not in _loaded:
        module = OP_LIBRARIES.get(namespace)
        result: bool | str | None = None
        if module is not None and importlib.util.find_spec(module) is not None:
            try:
                importlib.import_module(module)
                result = True
            except Exception as e:  # noqa: BLE001 - an installed library that does not load: say why
                first = (str(e).strip().splitlines() or [type(e).__name__])[0]
                result = f"{module} is installed but does not load with this torch: {first[:160]}"
        _loaded[namespace] = result
    return _loaded[namespace]


# --------------------------------------------------------------------------------------------
# Enum codes the trace records as integers.

# c10::ScalarType order (c10/core/ScalarType.h: a dtype's code is its position here), None where this
# torch lacks the type. The bit types and the 1- to 7-bit integers have no kernels; they keep positions.
SCALAR_TYPES = [getattr(torch, name, None) for name in (
    "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64", "complex32", "complex64", "complex128",
    "bool", "qint8", "quint8", "qint32", "bfloat16", "quint4x2", "quint2x4", "bits1x8", "bits2x4", "bits4x2", "bits8",
    "bits16", "float8_e5m2", "float8_e4m3fn", "float8_e5m2fnuz", "float8_e4m3fnuz", "uint16", "uint32", "uint64",
    *(f"uint{bits}" for bits in range(1, 8)), *(f"int{bits}" for bits in range(1, 8)), "float8_e8m0fnu",
    "float4_e2m1fn_x2")]  # fmt: skip
# c10::Layout order (c10/core/Layout.h).
LAYOUTS = [getattr(torch, name, None) for name in ("strided", "sparse_coo", "sparse_csr", "_mkldnn", "sparse_csc",
                                                   "sparse_bsr", "sparse_bsc", "jagged")]  # fmt: skip
MEMORY_FORMATS = [torch.contiguous_format, torch.preserve_format, torch.channels_last, torch.channels_last_3d]


def enum_from_code(kind: str, code: int):
    table = {"ScalarType": SCALAR_TYPES, "Layout": LAYOUTS, "MemoryFormat": MEMORY_FORMATS}[kind]
    if not isinstance(code, int) or not 0 <= code < len(table):
        raise Unsupported(f"invalid {kind} code {code!r}")
    if table[code] is None:
        raise Unsupported(f"{kind} code {code}: a type this torch does not have")
    return table[code]


@dataclass(frozen=True, slots=True)
class ArgSpec:
    """What the replayer needs of one schema argument, read once per schema (reading a type's
    name from torch costs tens of microseconds, and a large trace has thousands of calls of a few
    dozen schemas)."""

    name: str
    type: str  # base_type: Optional stripped
    optional: bool
    has_default: bool
    kwarg_only: bool

    @classmethod
    def of(cls, arg) -> ArgSpec:
        return cls(arg.name, base_type(arg.real_type), is_optional(arg.real_type), arg.has_default_value(),
                   arg.kwarg_only)  # fmt: skip


_specs: dict = {}


def arg_specs(overload) -> tuple[ArgSpec, ...]:
    """The :class:`ArgSpec` of each argument of a resolved ``OpOverload``, cached per overload."""
    specs = _specs.get(overload)
    if specs is None:
        specs = _specs[overload] = tuple(ArgSpec.of(a) for a in overload._schema.arguments)
    return specs


#: An argument without a default value (in :attr:`SchemaFacts.defaults`).
NO_DEFAULT = object()

#: Where torch's generated Python bindings of aten ops live: ``torch.add``, ``torch._C._nn.linear``,
#: ``torch._C._linalg.linalg_norm``..., and the tensor methods (``Tensor.add_``).
_BINDING_MODULES = (torch._C._VariableFunctions, torch._C._nn, torch._C._linalg, torch._C._special, torch._C._fft,
                    torch._C.TensorBase)  # fmt: skip


@dataclass(frozen=True, slots=True)
class SchemaFacts:
    """What the build needs of a schema besides its arguments, read once per overload."""

    qualname: str  # namespace::name.overload
    returns: int
    writes: tuple[bool, ...]  # per argument: the op writes it in place (its alias annotation says so)
    defaults: tuple = ()  # per argument: its default value, or NO_DEFAULT
    binding: object = None  # the op's Python binding (see python_binding), or None
    dynamic: bool = False  # its output's shape depends on its input's values (see dynamic_shape)
    overwrites: tuple[bool, ...] = ()  # per argument: the op writes all of it without reading it (see overwritten)
    pointwise: bool = False  # each output element is a function of the inputs' elements at its place (torch's tag)


_facts: dict = {}


def qualified_name(schema) -> str:
    """A schema's ``namespace::name.overload`` (``.default`` for the unnamed overload), as the
    reports and the capture helper's records name an operator."""
    return f"{schema.name}.{schema.overload_name or 'default'}"


def schema_facts(overload) -> SchemaFacts:
    """The :class:`SchemaFacts` of a resolved ``OpOverload`` (cached), or of any object with a
    ``_schema`` (a collective's call: not cached, there is one per node)."""
    op = isinstance(overload, torch._ops.OpOverload)
    facts = _facts.get(overload) if op else None
    if facts is None:
        schema = overload._schema
        qualname = qualified_name(schema)
        facts = SchemaFacts(qualname, len(schema.returns),
                            tuple(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments),
                            tuple(a.default_value if a.has_default_value() else NO_DEFAULT for a in schema.arguments),
                            python_binding(schema.name) if op else None,
                            op and dynamic_shape(overload, qualname), overwritten(schema),
                            op and torch.Tag.pointwise in overload.tags)  # fmt: skip
        if op:
            _facts[overload] = facts
    return facts


#: In-place ops that write every element of their first argument and read none of it
_FILLING = {"aten::zero_", "aten::fill_", "aten::copy_", "aten::uniform_", "aten::normal_", "aten::random_",
            "aten::bernoulli_", "aten::exponential_", "aten::geometric_", "aten::log_normal_", "aten::cauchy_"}  # fmt: skip


def overwritten(schema) -> tuple[bool, ...]:
    """Per argument of ``schema``: the op writes all of that tensor and reads none of it before: an
    ``out=`` argument (keyword-only and written), or the tensor a fill, a copy or a random draw in
    place writes. An input that such an op is the first to use needs no seeded data."""
    return tuple(a.alias_info is not None and a.alias_info.is_write and not str(a.type).endswith("[]")
                 and (a.kwarg_only or (i == 0 and schema.name in _FILLING))
                 for i, a in enumerate(schema.arguments))  # fmt: skip


#: Composite ops whose output's shape depends on the data through the op they call (they lack the tag).
_DYNAMIC_COMPOSITES = {"aten::where.default", "aten::nonzero_numpy.default", "aten::argwhere.default",
                       "aten::repeat_interleave.self_Tensor"}  # fmt: skip


def dynamic_shape(overload, qualname: str) -> bool:
    """The op's output's shape depends on its input's values (torch tags such ops
    ``dynamic_output_shape``: ``nonzero``, ``masked_select``, ``unique``, indexing, which is dynamic
    only with a boolean mask, ``one_hot`` without a class count...), or it calls one that does
    (``torch.where(mask)``, ``argwhere``). ``qualname``: ``namespace::name.overload``."""
    return torch.Tag.dynamic_output_shape in overload.tags or qualname in _DYNAMIC_COMPOSITES


def python_binding(name: str):
    """The generated Python binding of the aten op ``name`` (``aten::add``: ``torch.add``), the
    function a program calls; None for other namespaces and ops without one. Called with the
    same arguments, it runs the same kernels as the ``OpOverload``, whose boxed call converts
    every argument through the schema and takes 0.3-2 us more (most with keyword arguments:
    ``aten::zeros`` 4.5 us against ``torch.zeros``'s 2.1 us): on a step of many small ops that
    makes the replay slower than the original. The binding picks its overload by the arguments'
    types, which are the recorded overload's."""
    namespace, _, short = name.partition("::")
    if namespace != "aten":
        return None
    for module in _BINDING_MODULES:
        f = getattr(module, short, None)
        if f is not None:
            # a generated function or method (not a property such as Tensor.real or Tensor.name)
            return f if type(f).__name__ in ("builtin_function_or_method", "method_descriptor") else None
    return None


def base_type(arg_type) -> str:
    """The schema type of an argument with Optional stripped, as a string: ``Tensor``,
    ``List[Tensor]``, ``ScalarType``, ``int``..."""
    t = arg_type
    while isinstance(t, torch._C.OptionalType):
        t = t.getElementType()
    return str(t)


def is_optional(arg_type) -> bool:
    return isinstance(arg_type, torch._C.OptionalType)
