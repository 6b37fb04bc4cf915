"""Packed weights: the opaque objects that quantized linear, convolution and embedding layers pass to their ops.

A dynamically quantized ``nn.Linear`` (``torch.ao.quantization.quantize_dynamic``) calls
``quantized::linear_dynamic(X, W_prepack)``, where ``W_prepack`` is a
``LinearPackedParamsBase``: int8 (or float16) weights packed for FBGEMM or QNNPACK. A trace
records that argument as an opaque ``Object`` with neither shape nor data. Its shape follows from
the op's own tensors (in features: the input's last dimension; out features: the output's), so the
replay packs seeded weights of that shape, as the layer's constructor draws them, with a bias (the
trace does not say whether the layer had one; ``nn.Linear``'s default has), and reports that it
did. A statically quantized ``nn.Linear`` (``torch.ao.quantization.convert``) passes the same
object to ``quantized::linear``, whose input is a quantized tensor: its weights are rebuilt alike.

A quantized convolution's packed weights (``Conv2dPackedParamsBase``, ``Conv3dPackedParamsBase``)
hold its kernel size, stride, padding, dilation and groups, which the trace does not record, and
shapes alone fit many (a 3x3 kernel padded by 1 and a 1x1 kernel keep the size). The capture
helper records them (the sidecar's ``packed_weights``, one record per call of an op that takes
packed weights, in the order of the calls: the weights' shape and type, per channel or not, a bias
or not, and a convolution's geometry); with that record the replay packs seeded weights of that
geometry, and without it the convolution is skipped with that reason. A linear layer's record
gives its bias and quantization scheme too. A quantized embedding bag's packed table
(``EmbeddingPackedParamsBase``: rows of 8 or 4 bits a value, each with its scale and offset) is
rebuilt at the recorded shape, and the bag's ids are drawn within its rows. Quantized kernels of
this kind run on the CPU only.
"""

from __future__ import annotations

import math
import warnings

import torch

from .ops import Unsupported
from .trace import Node, TensorRef

LINEAR_PACKED = "LinearPackedParamsBase"
EMBEDDING_PACKED = "EmbeddingPackedParamsBase"
#: The ops that take a ``LinearPackedParamsBase`` and whether the packed weights are float16 rather
#: than int8: with a floating-point input (dynamic quantization) or a quantized one (static
#: quantization: ``quantized::linear`` reads a quint8 input and returns one at the scale it is given).
_DYNAMIC_LINEARS = {"linear_dynamic": False, "linear_relu_dynamic": False, "linear_dynamic_fp16": True,
                    "linear_relu_dynamic_fp16": True, "linear": False, "linear_relu": False}  # fmt: skip
_PER_CHANNEL = (torch.per_channel_affine, torch.per_channel_symmetric, torch.per_channel_affine_float_qparams)


def packed_kind(type_name: str) -> str:
    """The class of packed weights a schema's argument type or a ScriptObject's qualified name names
    (``__torch__.torch.classes.quantized.Conv2dPackedParamsBase`` -> ``Conv2dPackedParamsBase``)."""
    return type_name.rsplit(".", 1)[-1]


def is_packed(type_name: str) -> bool:
    """An argument of a packed-weights type (``LinearPackedParamsBase``, ``Conv2dPackedParamsBase``...)."""
    return packed_kind(type_name).endswith("PackedParamsBase")


def packed_record(func, obj) -> dict:
    """What the capture helper keeps of packed weights that an op call received (the sidecar's
    ``packed_weights``): the op, the packed type, and for a linear layer's, a convolution's or an
    embedding table's the weights' shape and type, whether they are quantized per channel, whether
    there is a bias, and a convolution's stride, padding, dilation, groups, output padding and
    whether it is transposed. Only the op and the type for other packed weights and where the
    object does not unpack."""
    kind = packed_kind(obj._type().qualified_name())
    record: dict = {"op": func._schema.name, "kind": kind}
    if kind not in (LINEAR_PACKED, EMBEDDING_PACKED) and not kind.startswith("Conv"):
        return record
    try:
        weight, bias = (obj.unpack(), None) if kind == EMBEDDING_PACKED else obj.unpack()
        record.update(weight=list(weight.shape), dtype=str(weight.dtype).removeprefix("torch."), bias=bias is not None,
                      per_channel=weight.is_quantized and weight.qscheme() in _PER_CHANNEL)  # fmt: skip
        if kind.startswith("Conv"):
            record.update(stride=list(obj.stride()), padding=list(obj.padding()), dilation=list(obj.dilation()),
                          output_padding=list(obj.output_padding()), groups=int(obj.groups()),
                          transpose=bool(obj.transpose()))  # fmt: skip
    except (RuntimeError, AttributeError, TypeError, ValueError):
        return {"op": record["op"], "kind": kind}
    return record


def takes_packed(schema: str) -> bool:
    """An op whose arguments (not only its results: a ``conv2d_prepack``) include packed weights: the
    calls the capture helper records packed weights of."""
    return "PackedParamsBase" in schema.split("->", 1)[0]


def packed_weights(node: Node, arg_type: str, record: dict | None, device: torch.device, *, seed: int = 0,
                   missing: str | None = None, sidecar: str = "the sidecar"):  # fmt: skip
    """The packed weights ``node`` takes (an argument of ``arg_type``), seeded, and whether they were
    made from ``record``: a convolution's from the capture's record of them, a linear op's from
    its shapes (and the record's bias and scheme, where there is one and it fits). ``missing``: why
    there is no record, where the sidecar has records that do not fit. Unsupported, with the
    reason, where they cannot be rebuilt (a record that makes no valid weights names ``sidecar``)."""
    name = packed_kind(arg_type)
    if device.type != "cpu":
        raise Unsupported(f"{node.name} has kernels for the CPU only")
    try:
        if name == LINEAR_PACKED:
            return _packed_linear(node, record, seed)
        if name.startswith("Conv"):
            if record is None or "weight" not in record:
                raise Unsupported(missing or f"its packed weights ({name}) hold the convolution's kernel size, stride, "
                                  f"padding, dilation and groups, which a trace does not record (a capture through "
                                  f"mystique capture records them)")  # fmt: skip
            return _packed_convolution(node, record, seed), True
        if name == EMBEDDING_PACKED:
            if record is None or "weight" not in record:
                raise Unsupported(missing or f"its packed table ({name}) holds the embedding's rows, which a trace does "
                                  f"not record (a capture through mystique capture records their shape)")  # fmt: skip
            return _packed_embedding(record, seed), True
    except (RuntimeError, ValueError, TypeError, KeyError, MemoryError, OverflowError) as e:
        raise Unsupported(f"the capture's record of its packed weights ({sidecar}) makes no valid weights: "
                          f"{type(e).__name__}: {str(e).strip().splitlines()[0][:160] if str(e).strip() else ''}") from None  # fmt: skip
    raise Unsupported(f"argument of type {name} to {node.name}: only quantized linear, convolution and embedding ops' "
                      f"packed weights are rebuilt")  # fmt: skip


def _seeded_weight(shape: list[int], fan_in: int, g: torch.Generator) -> tuple[torch.Tensor, float]:
    bound = 1 / math.sqrt(max(fan_in, 1))
    return (torch.rand(shape, generator=g) * 2 - 1) * bound, bound


def _quantized_weight(weight: torch.Tensor, bound: float, per_channel: bool) -> torch.Tensor:
    with warnings.catch_warnings():  # quantized tensors' constructors are deprecated in favour of torchao's
        warnings.simplefilter("ignore")
        if per_channel:
            scales = weight.abs().flatten(1).amax(1).clamp_min(1e-8).double() / 127
            return torch.quantize_per_channel(weight, scales, torch.zeros(len(scales), dtype=torch.long), 0, torch.qint8)
        return torch.quantize_per_tensor(weight, bound / 127, 0, torch.qint8)


def _packed_linear(node: Node, record: dict | None, seed: int):
    ns, _, name = node.name.partition("::")
    fp16 = _DYNAMIC_LINEARS.get(name) if ns == "quantized" else None
    if fp16 is None:
        raise Unsupported(f"argument of type {LINEAR_PACKED} to {node.name}: only the quantized linear ops' packed "
                          f"weights are rebuilt")  # fmt: skip
    x = node.inputs[0] if node.inputs else None
    y = node.outputs[0] if node.outputs else None
    if not (isinstance(x, TensorRef) and isinstance(y, TensorRef) and x.shape and y.shape):
        raise Unsupported(f"{node.name}: the trace does not give its input's and output's shapes, from which its "
                          f"packed weights are rebuilt")  # fmt: skip
    n_in, n_out = x.shape[-1], y.shape[-1]
    if record is not None and record.get("weight") != [n_out, n_in]:
        record = None  # (weights of other shapes than the op's tensors say, or none: the shapes decide)
    g = torch.Generator().manual_seed(seed)
    weight, bound = _seeded_weight([n_out, n_in], n_in, g)
    bias = (torch.rand(n_out, generator=g) * 2 - 1) * bound if record is None or record["bias"] else None
    if fp16:
        return torch.ops.quantized.linear_prepack_fp16(weight, bias), record is not None
    per_channel = bool(record and record["per_channel"])
    return torch.ops.quantized.linear_prepack(_quantized_weight(weight, bound, per_channel), bias), record is not None


def _packed_convolution(node: Node, record: dict, seed: int):
    shape, groups = record["weight"], record["groups"]
    x = node.inputs[0] if node.inputs else None
    y = node.outputs[0] if node.outputs else None
    transpose = record["transpose"]
    # (a transposed convolution's weights are [in, out / groups, ...], another's [out, in / groups, ...])
    channels_in, channels_out = (shape[0], shape[1] * groups) if transpose else (shape[1] * groups, shape[0])
    if not (isinstance(x, TensorRef) and isinstance(y, TensorRef) and len(x.shape) > 1 and len(y.shape) > 1
            and x.shape[1] == channels_in and y.shape[1] == channels_out):  # fmt: skip
        raise ValueError(f"weights {shape} in {groups} group(s) do not fit the op's input's and output's channels")
    g = torch.Generator().manual_seed(seed)
    weight, bound = _seeded_weight(shape, math.prod(shape[1:]), g)
    bias = (torch.rand(channels_out, generator=g) * 2 - 1) * bound if record["bias"] else None
    q = _quantized_weight(weight, bound, record["per_channel"])
    dims = len(record["stride"])
    ops = torch.ops.quantized
    if transpose:
        prepack = {1: ops.conv_transpose1d_prepack, 2: ops.conv_transpose2d_prepack, 3: ops.conv_transpose3d_prepack}
        return prepack[dims](q, bias, record["stride"], record["padding"], record["output_padding"],
                             record["dilation"], groups)  # fmt: skip
    prepack = {1: ops.conv1d_prepack, 2: ops.conv2d_prepack, 3: ops.conv3d_prepack}
    return prepack[dims](q, bias, record["stride"], record["padding"], record["dilation"], groups)


def _packed_embedding(record: dict, seed: int):
    """A quantized embedding table of the recorded shape and type (quint8, or quint4x2 for four
    bits a value), each row quantized over its own range (per-row scale and offset, as PyTorch's
    weight-only embedding quantization does), rows drawn normal as ``nn.Embedding``'s."""
    dtype = {"quint8": torch.quint8, "quint4x2": torch.quint4x2}.get(record["dtype"])
    if dtype is None or len(record["weight"]) != 2:
        raise ValueError(f"an embedding table of {record['dtype']} {record['weight']}: quint8 or quint4x2 rows only")
    g = torch.Generator().manual_seed(seed)
    weight = torch.randn(record["weight"], generator=g)
    low, high = weight.amin(1), weight.amax(1)
    scales = ((high - low) / (255 if dtype == torch.quint8 else 15)).clamp_min(1e-8)
    with warnings.catch_warnings():  # quantized tensors' constructors are deprecated in favour of torchao's
        warnings.simplefilter("ignore")
        q = torch.quantize_per_channel(weight, scales, -low / scales, 0, dtype)
    return torch.ops.quantized.embedding_bag_prepack(q)
