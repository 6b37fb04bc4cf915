"""Packed weights: the opaque objects that quantized linear layers pass to their ops.

A dynamically quantized ``nn.Linear`` (``torch.ao.quantization.quantize_dynamic``) calls
``quantized::linear_dynamic(X, W_prepack)``, where ``W_prepack`` is a
``LinearPackedParamsBase``: int8 (or float16) weights packed for FBGEMM or QNNPACK. A trace
records that argument as an opaque ``Object`` with neither shape nor data. Its shape follows from
the op's own tensors (in features: the input's last dimension; out features: the output's), so the
replay packs seeded weights of that shape, as the layer's constructor draws them, with a bias (the
trace does not say whether the layer had one; ``nn.Linear``'s default has), and reports that it
did. Quantized kernels of this kind run on the CPU only.
"""

from __future__ import annotations

import math
import warnings

import torch

from .ops import Unsupported
from .trace import Node, TensorRef

LINEAR_PACKED = "LinearPackedParamsBase"
#: The ops that take a ``LinearPackedParamsBase`` with a floating-point input (dynamic quantization),
#: and whether the packed weights are float16 rather than int8.
_DYNAMIC_LINEARS = {"linear_dynamic": False, "linear_relu_dynamic": False, "linear_dynamic_fp16": True,
                    "linear_relu_dynamic_fp16": True}  # fmt: skip


def is_packed_linear(arg_type: str) -> bool:
    return arg_type.rsplit(".", 1)[-1] == LINEAR_PACKED


def packed_linear(node: Node, device: torch.device, seed: int = 0):
    """Packed weights of the shape ``node`` (a dynamically quantized linear op) multiplies by."""
    ns, _, name = node.name.partition("::")
    fp16 = _DYNAMIC_LINEARS.get(name) if ns == "quantized" else None
    if fp16 is None:
        raise Unsupported(f"argument of type {LINEAR_PACKED} to {node.name}: only the dynamically quantized linear "
                          f"ops' packed weights are rebuilt")  # fmt: skip
    if device.type != "cpu":
        raise Unsupported(f"{node.name} has kernels for the CPU only")
    x = node.inputs[0] if node.inputs else None
    y = node.outputs[0] if node.outputs else None
    if not (isinstance(x, TensorRef) and isinstance(y, TensorRef) and x.shape and y.shape):
        raise Unsupported(f"{node.name}: the trace does not give its input's and output's shapes, from which its "
                          f"packed weights are rebuilt")  # fmt: skip
    n_in, n_out = x.shape[-1], y.shape[-1]
    bound = 1 / math.sqrt(max(n_in, 1))
    g = torch.Generator().manual_seed(seed)
    weight = (torch.rand(n_out, n_in, generator=g) * 2 - 1) * bound
    bias = (torch.rand(n_out, generator=g) * 2 - 1) * bound
    if fp16:
        return torch.ops.quantized.linear_prepack_fp16(weight, bias)
    with warnings.catch_warnings():  # quantized tensors' constructors are deprecated in favour of torchao's
        warnings.simplefilter("ignore")
        q = torch.quantize_per_tensor(weight, bound / 127, 0, torch.qint8)
    return torch.ops.quantized.linear_prepack(q, bias)
