"""Tensor reconstruction: storages, views and their data.

Each ``storage_id`` of the trace becomes one allocation on the replay device, sized to hold every
tensor of the trace that lives in it; each tensor is a view of its storage at the recorded offset
(in elements), shape and strides, so views and in-place ops share memory as in the original.

Data is seeded. Floating tensors hold values in [-1, 1), except where the first op that consumes
them says otherwise: the weights of linear layers, matrix products, einsums and convolutions (read
as they are or through a view, as ``weight.t()`` in a linear layer replayed through its parts) get
the range of PyTorch's default initialisation, +-1/sqrt(fan_in), and a recurrent layer's
+-1/sqrt(hidden size), so activations keep the magnitude they had
in a real model (some kernels, GELU's among them, are slower on large inputs); normalisation
scales sit around 1 and their shifts and running means around 0 (a running mean drawn from
[-1, 1) pushes whole channels below zero, the ReLU after it zeroes them, and a max pooling after
that runs on constant data, faster than on real activations); a tensor that reaches a square
root or a logarithm, or is named like a variance, is positive (so no NaN appears that the
original did not have). A 0-dim floating tensor is most often a Python number the program
wrapped (an epsilon, an optimizer's beta, a bias correction) and gets a value in [0.5, 1):
positive, so no sign flips into a square root, and at most 1, so state multiplied by it every
step cannot grow without bound. One that divides (attention's sqrt(head size), a bias
correction) is 1: a divisor under 1 scaled attention scores up until the softmax's outputs
underflowed to subnormal numbers, which made the matrix products reading them twice as slow,
and a trace writer gives many wrapped numbers one id, so the same tensor may also multiply
state (weight decay's 1 - lr * wd), which a value over 1 would grow; one that an optimizer's
step multiplies parameters by in place (that weight decay) is 1 too, which a value under 1 would
shrink (``Planner._decay_factors``). A tensor that divides is
in [0.5, 1.5). A 0-dim integer tensor is most often a wrapped Python number too
(a size, a count: ``torch.tensor(x.size(-1))``) and is 1 or 2, never 0, which a division by it
would meet. The optimizer's state starts at zero (see
``Replay._zero_state``). Integer tensors that index something hold values valid for their
consumer: the ``tensor_range`` the trace recorded when it has one, otherwise a range derived
from the consuming op (the row count of an embedding table, the size of the indexed dimension,
the number of classes of a loss, a divisor that is not zero; FBGEMM's table metadata,
``fbgemm.py``). A requirement on a tensor the program derived from an input (a view, a type
conversion, a permutation; a positive one through a product by a number, a quotient or a mean
too) is passed back to that input (``TensorFactory.pass_back``).
"""

from __future__ import annotations

import heapq
import itertools
import json
import math
import warnings
from collections import defaultdict
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from .sidecar import QUANTILE_LEVELS
from .trace import UNKNOWN_DTYPE, ListValue, Node, TensorRef, contiguous_strides

#: Elements of random data drawn per block when filling large tensors.
TILE = 1 << 20
#: Floating tensors from this many elements on are filled from a pool of draws (see TensorFactory).
POOL_MIN = 1024
#: Embedding tables read row by row from this size on are not filled (see TensorFactory.make).
UNTOUCHED_MIN_BYTES = 64 << 20

_UNIT, _RATE = (0.0, 1.0), (0.5, 1.5)
#: Arguments that an op refuses, or turns NaN, outside a domain: op -> ((argument, (low, high)),
#: ...). A sampler's probabilities and rates, a binary cross-entropy's and a KL divergence's
#: probabilities, a quantile's levels; the base of a fractional power (a noise schedule's
#: ``alphas_cumprod[t] ** 0.5``) in [0, 1], so that ``1 - a`` stays positive too. Some hold only
#: for some calls (:func:`_domain_holds`).
_DOMAINS = {
    "multinomial": (("self", _UNIT),), "bernoulli": (("self", _UNIT), ("p", _UNIT)), "bernoulli_": (("p", _UNIT),),
    "binary_cross_entropy": (("self", _UNIT), ("target", _UNIT)),
    "binary_cross_entropy_backward": (("self", _UNIT), ("target", _UNIT)),
    "binomial": (("prob", _UNIT), ("count", _RATE)), "kl_div": (("target", _UNIT),), "logit": (("self", _UNIT),),
    "quantile": (("q", _UNIT),), "nanquantile": (("q", _UNIT),),
    "poisson": (("self", _RATE),), "_standard_gamma": (("self", _RATE),), "_sample_dirichlet": (("self", _RATE),),
    "igamma": (("self", _RATE), ("other", _RATE)), "igammac": (("self", _RATE), ("other", _RATE)),
    "poisson_nll_loss": (("input", _RATE),),
    "pow": (("self", _UNIT),), "pow_": (("self", _UNIT),), "float_power": (("self", _UNIT),),
    "acosh": (("self", (1.0, 2.0)),), "acosh_": (("self", (1.0, 2.0)),),
}  # fmt: skip


def _domain_holds(name: str, arg: str, args: dict) -> bool:
    """Whether ``name``'s domain for ``arg`` (:data:`_DOMAINS`) holds for a call of these ``args``."""

    def value(key, default=None):
        return getattr(args.get(key), "value", default)

    if name == "bernoulli" and arg == "self":
        return "p" not in args  # (bernoulli.p's self gives the shape only)
    if name == "kl_div":
        return value("log_target", False) is not True
    if name == "poisson_nll_loss":
        return value("log_input", True) is False  # (rates, whose logarithm is taken)
    if name == "logit":
        return value("eps") in (None, "<None>")  # (no eps clamps them)
    if name in ("pow", "pow_", "float_power"):
        e = value("exponent")
        return isinstance(e, float) and not e.is_integer()
    return True


# Arguments whose values must be positive for the op to see realistic data.
_POSITIVE_ARGS = {"running_var", "var", "exp_avg_sq", "save_var", "save_invstd", "invstd", "std"}
_POSITIVE_OPS = {"sqrt", "rsqrt", "log", "log2", "log10", "_foreach_sqrt", "_foreach_sqrt_", "_foreach_log",
                 "_foreach_log_", "sqrt_", "rsqrt_", "log_"}  # fmt: skip
# (op, argument) pairs holding a weight, and how to find its fan-in from its shape.
_FAN_IN = {
    ("linear", "weight"): lambda s: s[-1],
    ("linear", "bias"): None,  # same bound as the weight, set below
    ("addmm", "mat2"): lambda s: s[0],
    ("_addmm_activation", "mat2"): lambda s: s[0],  # a linear layer fused with its GELU or ReLU
    ("mm", "mat2"): lambda s: s[0],
    ("bmm", "mat2"): lambda s: s[-2],
    ("baddbmm", "batch2"): lambda s: s[-2],
    ("matmul", "other"): lambda s: s[-2] if len(s) > 1 else s[0],
}
_FAN_IN_OF: dict[str, list] = {}  # the same, by op
for (_op, _arg), _fan in _FAN_IN.items():
    _FAN_IN_OF.setdefault(_op, []).append((_arg, _fan))
_CONV_OPS = {"conv1d", "conv2d", "conv3d", "convolution", "_convolution", "conv_transpose1d", "conv_transpose2d",
             "conv_transpose3d", "mkldnn_convolution", "cudnn_convolution"}  # fmt: skip
_NORM_OPS = {"layer_norm", "native_layer_norm", "batch_norm", "native_batch_norm", "group_norm", "native_group_norm",
             "instance_norm", "rms_norm", "_fused_rms_norm", "_native_batch_norm_legit",
             "_native_batch_norm_legit_no_training", "cudnn_batch_norm"}  # fmt: skip


def float_ranges(node: Node, arg_names: list[str]) -> dict[TensorRef, tuple[float, float]]:
    """Value ranges for the floating-point inputs of ``node`` that need more than [-1, 1)."""
    args = dict(zip(arg_names, node.inputs))
    name = node.name.split("::")[-1]
    out: dict[TensorRef, tuple[float, float]] = {}

    def tensor(arg: str) -> TensorRef | None:
        v = args.get(arg)
        return v if isinstance(v, TensorRef) and v.defined and _floating(v) else None

    weight_bound = None
    if name in _CONV_OPS:
        w = tensor("weight")
        if w is not None and len(w.shape) >= 3:
            weight_bound = 1 / math.sqrt(max(math.prod(w.shape[1:]), 1))
            out[w] = (-weight_bound, weight_bound)
    for arg, fan in _FAN_IN_OF.get(name, ()):
        w = tensor(arg)
        if fan is not None and w is not None and w.shape:
            weight_bound = 1 / math.sqrt(max(fan(w.shape), 1))
            out[w] = (-weight_bound, weight_bound)
    if name == "einsum":
        out.update(_einsum_weights(node))
    if name in _RNN_OPS:
        out.update(_rnn_weights(args))
    b = tensor("bias")
    if b is not None and weight_bound is not None and (name in _CONV_OPS or name == "linear"):
        out[b] = (-weight_bound, weight_bound)
    if name in _NORM_OPS:
        w = tensor("weight")
        if w is not None and len(w.shape) == 1:
            out[w] = (0.5, 1.5)
        b = tensor("bias")
        if b is not None and len(b.shape) == 1:
            out[b] = (-0.1, 0.1)
        m = tensor("running_mean")
        if m is not None:
            out[m] = (-0.1, 0.1)
    if name in _POSITIVE_OPS:
        for v in node.inputs:
            refs = v.items if isinstance(v, ListValue) else (v,)
            for r in refs:
                if isinstance(r, TensorRef) and r.defined:
                    out[r] = (0.5, 1.5)
    if name in ("div", "div_"):
        d = tensor("other")
        if d is not None:  # a divisor away from 0 (see the module's docstring)
            out[d] = (1.0, 1.0) if not d.shape else (0.5, 1.5)
    for arg, domain in _DOMAINS.get(name, ()):
        r = tensor(arg)
        if r is not None and _domain_holds(name, arg, args):
            out[r] = domain
    for arg in _POSITIVE_ARGS:
        r = tensor(arg)
        if r is not None:
            out[r] = (0.5, 1.5)
    return out


#: Recurrent layers (whole, one layer, one cell) and where their weights are.
_RNN_OPS = {"lstm", "gru", "rnn_tanh", "rnn_relu", "lstm_cell", "gru_cell", "rnn_tanh_cell", "rnn_relu_cell",
            "mkldnn_rnn_layer", "_cudnn_rnn", "miopen_rnn"}  # fmt: skip

#: The ops (names without namespace) whose inputs :func:`float_ranges` may give a range by the
#: op alone (besides the arguments named like a variance, which any op's may be).
RANGED_OPS = frozenset({*(op for op, _ in _FAN_IN), *_CONV_OPS, *_NORM_OPS, *_RNN_OPS, *_POSITIVE_OPS, "einsum",
                        "div", "div_", *_DOMAINS})  # fmt: skip

_RNN_WEIGHTS = ("params", "weight", "weight0", "weight1", "weight2", "weight3", "w_ih", "w_hh", "b_ih", "b_hh")


def _rnn_weights(args: dict) -> dict[TensorRef, tuple[float, float]]:
    """PyTorch's initialisation of a recurrent layer: every weight and bias uniform in
    +-1/sqrt(hidden size). Drawn from [-1, 1) instead, an LSTM's gates saturate and a replayed
    training step's gradients grow its parameters twentyfold in ten iterations."""
    hidden = args.get("hidden_size")
    hidden = hidden.value if isinstance(getattr(hidden, "value", None), int) else None
    if hidden is None:  # the hidden state's last dimension, or the recurrent weight's
        hx = args.get("hx")
        first = hx.items[0] if isinstance(hx, ListValue) and hx.items else hx
        ref = first if isinstance(first, TensorRef) and first.defined and first.shape else args.get("w_hh")
        hidden = ref.shape[-1] if isinstance(ref, TensorRef) and ref.defined and ref.shape else None
    if not hidden:
        return {}
    bound = 1 / math.sqrt(hidden)
    out: dict[TensorRef, tuple[float, float]] = {}
    for arg in _RNN_WEIGHTS:
        v = args.get(arg)
        for ref in v.items if isinstance(v, ListValue) else (v,):
            if isinstance(ref, TensorRef) and ref.defined and ref.dtype.startswith(("float", "bfloat")):
                out[ref] = (-bound, bound)
    return out


def _einsum_weights(node: Node) -> dict[TensorRef, tuple[float, float]]:
    """The weight range of each operand of an ``einsum`` after its first (the convention of
    ``mm``'s ``mat2``; XLNet's projections are ``einsum("ibh,hnd->ibnd", h, weight)``): its
    fan-in is the product of its dimensions that the output does not keep."""
    equation = node.inputs[0] if node.inputs else None
    operands = node.inputs[1] if len(node.inputs) > 1 else None
    if not isinstance(getattr(equation, "value", None), str) or not isinstance(operands, ListValue):
        return {}
    spec = equation.value.replace(" ", "")
    if "." in spec:  # (an ellipsis: the broadcast dimensions are not named)
        return {}
    ins, arrow, kept = spec.partition("->")
    terms = ins.split(",")
    if not arrow or len(terms) != len(operands.items):  # (an implicit output: its dimensions are not named)
        return {}
    out: dict[TensorRef, tuple[float, float]] = {}
    for term, ref in list(zip(terms, operands.items))[1:]:
        if not (isinstance(ref, TensorRef) and ref.defined and ref.dtype.startswith(("float", "bfloat"))
                and len(term) == len(ref.shape)):  # fmt: skip
            continue
        fan = math.prod(size for letter, size in zip(term, ref.shape) if letter not in kept)
        if fan > 1:
            bound = 1 / math.sqrt(fan)
            out[ref] = (-bound, bound)
    return out


#: Ops that factorise their first argument as a Hermitian positive-definite matrix, or take the
#: logarithm of its determinant (NaN where it is negative: a covariance's, in a Gaussian's density).
_DEFINITE = {"cholesky", "linalg_cholesky", "linalg_cholesky_ex", "logdet"}


def definite_inputs(node: Node) -> list[TensorRef]:
    """The input of ``node`` that must be a Hermitian positive-definite matrix (a Cholesky
    factorisation fails, or reports failure, on anything else: uniform draws are not one)."""
    ref = node.inputs[0] if node.inputs and node.name.split("::")[-1] in _DEFINITE else None
    ok = isinstance(ref, TensorRef) and ref.defined and len(ref.shape) >= 2 and ref.shape[-1] == ref.shape[-2]
    return [ref] if ok else []


def make_definite(t: torch.Tensor) -> None:
    """``t`` (a batch of square matrices of seeded draws) made Hermitian and strictly diagonally
    dominant, hence positive-definite, in place: its mean with its conjugate transpose, plus its
    order and one times its largest magnitude on the diagonal (1 where it is all zeros)."""
    with torch.no_grad():
        t.copy_((t + t.mT.conj()) / 2)
        most = float(t.abs().amax()) if t.numel() else 0.0
        t.diagonal(dim1=-2, dim2=-1).add_((t.shape[-1] + 1) * most if most > 0 else 1.0)


#: Floating types that torch has no random kernels for (``uniform_``, ``rand``): the eight-bit
#: floats (float8 weights and activations, torchao's float8 quantization).
DRAWN_AS_FLOAT32 = frozenset(getattr(torch, n) for n in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz",
                                                         "float8_e5m2fnuz", "float8_e8m0fnu") if hasattr(torch, n))  # fmt: skip


#: Quantized types (statically quantized models' activations) -> the integers they hold and the
#: zero point their seeded values are drawn around; and their scale.
QUANTIZED = {torch.quint8: (torch.uint8, 128), torch.qint8: (torch.int8, 0), torch.qint32: (torch.int32, 0)}
QUANTIZED_SCALE = 0.05


def torch_dtype(name: str) -> torch.dtype:
    if name.startswith(UNKNOWN_DTYPE):
        raise ValueError(f"a tensor of an element type this replayer does not know ({name[len(UNKNOWN_DTYPE):]!r}: "
                         f"a newer torch's?)")  # fmt: skip
    dt = getattr(torch, name, None)
    if not isinstance(dt, torch.dtype):
        raise ValueError(f"unknown dtype {name!r}")
    return dt


@dataclass
class IntRange:
    """Half-open ``[low, high)`` range for integer data; ``kind`` marks special layouts."""

    low: int = 0
    high: int = 2
    # or "offsets" (sorted, starting at 0), "cuts" (sorted, from 0 to ``high``), "parts" (summing
    # to ``high``), "values" (exactly ``values``, repeated to fill), "trues" (a boolean mask with
    # exactly ``values[0]`` of its distinct elements true, as many as an op it indexes selects)
    kind: str = "uniform"
    values: tuple[int, ...] = ()
    # bounds the replay worked out where the trace records none (a table-batched lookup's tables,
    # taken as equal): the original's values may lie outside them, and their spread still holds
    derived: bool = False
    tables: int = 1  # (derived) the tables whose indices the tensor holds, one table's after another

    def narrow(self, other: IntRange) -> IntRange:
        if {self.kind, other.kind} == {"parts", "uniform"}:
            # counts that must sum to a size keep that layout, and no part lies below the other's
            # lowest: segment lengths a mean over each segment divides by are never 0
            parts, bound = (self, other) if self.kind == "parts" else (other, self)
            return replace(parts, low=max(parts.low, bound.low))
        if other.kind != "uniform":
            return other
        if self.kind != "uniform":
            return self
        low = max(self.low, other.low)
        high = max(min(self.high, other.high), low + 1)
        guess = next((r for r in (self, other) if r.derived and (r.low, r.high) == (low, high)), None)
        return IntRange(low, high) if guess is None else IntRange(low, high, derived=True, tables=guess.tables)


def _no_huge_pages(t: torch.Tensor) -> None:
    """Ask the kernel not to back ``t`` with transparent huge pages (where they are on for every
    mapping, touching one row of a table would commit 2 MiB around it). Best effort: Linux only."""
    try:
        import ctypes
        import mmap

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        page = mmap.PAGESIZE
        start = -(-t.data_ptr() // page) * page
        stop = (t.data_ptr() + t.numel() * t.element_size()) // page * page
        if stop > start:
            libc.madvise(ctypes.c_void_p(start), ctypes.c_size_t(stop - start), 15)  # MADV_NOHUGEPAGE
    except (OSError, AttributeError):
        pass


def _dim_size(ref: TensorRef | None, dim: int) -> int | None:
    if not isinstance(ref, TensorRef) or not ref.shape:
        return None
    nd = len(ref.shape)
    if -nd <= dim < nd:
        return ref.shape[dim]
    return None


#: The draw of a Python integer that a tensor is divided by into floats (a 0-dim integer tensor in
#: the trace, without its value): a head's or an embedding's width, a bucket count. In the zoo's 224
#: transformers models, such numbers were 8 to 2,048 in 14 of the 17 models that had any (1 or 2 in
#: three; I-BERT's integer emulation aside). Drawn 1 or 2, ``base ** (arange(0, dim, 2) / dim)`` of
#: a rotary or sinusoidal table overflowed (XLNet, Funnel, PhiMoE, DETR).
SIZES = IntRange(8, 65)

_RNNS = {"lstm", "gru", "rnn_tanh", "rnn_relu"}
_INT_DIVISIONS = {"floor_divide", "floor_divide_", "div", "div_", "remainder", "remainder_", "fmod", "fmod_"}


def integer_divisor(op: str, dividend: Any, divisor: Any, rounding_mode: Any = None) -> bool:
    """``divisor`` is the divisor of an integer division ``op``, which raises when it is 0: both
    operands are integral (a float operand makes it a float division, to inf), and ``div`` has a
    rounding mode (without one it is a true division, to inf)."""
    name = op.split("::")[-1]
    if name not in _INT_DIVISIONS or not (isinstance(divisor, TensorRef) and divisor.defined and _integral(divisor)):
        return False
    if name in ("div", "div_") and rounding_mode is None:
        return False
    if isinstance(dividend, TensorRef):
        return dividend.defined and _integral(dividend)
    return isinstance(dividend, int) and not isinstance(dividend, bool)


def index_ranges(node: Node, arg_names: list[str], *, recorded: bool = True) -> dict[TensorRef, IntRange]:
    """Value ranges the op ``node`` needs for its integer tensor inputs, and (``recorded``) the
    ranges the trace recorded for them, which replace those.

    ``arg_names`` are the schema's argument names, aligned with ``node.inputs``."""
    out: dict[TensorRef, IntRange] = {}
    recorded = _recorded_ranges(node) if recorded else {}
    args = dict(zip(arg_names, node.inputs))
    name = node.name.split("::")[-1]

    def put(arg: str, rng: IntRange | None) -> None:
        ref = args.get(arg)
        if isinstance(ref, TensorRef) and ref.defined and rng is not None and rng.high > rng.low:
            out[ref] = rng

    def rows(arg: str, dim: int = 0) -> IntRange | None:
        n = _dim_size(args.get(arg), dim)
        return IntRange(0, n) if n else None

    def scalar(arg: str) -> int | None:
        v = args.get(arg)
        return v.value if v is not None and hasattr(v, "value") and isinstance(v.value, int) else None

    if name in ("embedding", "embedding_bag", "_embedding_bag", "_embedding_bag_forward_only"):
        put("indices", rows("weight"))
        put("offsets", _offsets(args))
    elif name in ("embedding_bag_byte", "embedding_bag_4bit", "embedding_bag_2bit"):
        put("offsets", _offsets(args))  # (a quantized table's rows: its packed weights', see plan)
    elif name in ("embedding_backward", "embedding_dense_backward", "_embedding_bag_backward",
                  "_embedding_bag_dense_backward", "_embedding_bag_sparse_backward"):  # fmt: skip
        nw = scalar("num_weights")
        if nw:
            put("indices", IntRange(0, nw))
        put("offsets", _offsets(args))
    elif name in ("index_select", "gather", "scatter", "scatter_", "scatter_add", "scatter_add_",
                  "scatter_reduce", "scatter_reduce_", "index_add", "index_add_", "index_copy",
                  "index_copy_", "index_fill", "index_fill_", "take_along_dim"):  # fmt: skip
        dim = scalar("dim") or 0
        put("index", rows("self", dim))
    elif name in ("nll_loss", "nll_loss_forward", "nll_loss_backward", "nll_loss2d", "nll_loss2d_forward",
                  "nll_loss2d_backward", "cross_entropy_loss", "nll_loss_nd", "multi_margin_loss"):  # fmt: skip
        x = args.get("self")
        if isinstance(x, TensorRef) and x.shape:
            put("target", IntRange(0, x.shape[1] if len(x.shape) > 1 else x.shape[0]))
    elif name == "one_hot":
        nc = scalar("num_classes")
        put("self", IntRange(0, nc if nc and nc > 0 else 2))
    elif name in ("index", "_index_put_impl_", "index_put", "index_put_", "_unsafe_index"):
        idx = args.get("indices")
        base = args.get("self")
        if isinstance(idx, ListValue):
            for dim, ref in enumerate(idx.items):
                n = _dim_size(base, dim)
                if isinstance(ref, TensorRef) and ref.defined and n and ref.dtype != "bool":
                    out[ref] = IntRange(0, n)
            mask = _mask_selects(idx.items, base, args.get("values"), node.outputs, name in ("index", "_unsafe_index"))
            if mask is not None:
                out[mask[0]] = mask[1]
    elif name in ("segment_reduce", "_segment_reduce_backward"):
        # segments along ``axis``: lengths that sum to its size, or offsets from 0 to it
        size = _dim_size(args.get("data"), scalar("axis") or 0)
        if size is not None and isinstance(args.get("lengths"), TensorRef) and len(args["lengths"].shape) == 1:
            put("lengths", IntRange(0, size, "parts"))
        if size is not None and isinstance(args.get("offsets"), TensorRef) and len(args["offsets"].shape) == 1:
            put("offsets", IntRange(0, size, "cuts"))
    elif name == "repeat_interleave":
        # repeats that sum to the output's length (``output_size`` where given; else the one recorded)
        reps, x = args.get("repeats"), args.get("self")
        dim = scalar("dim")
        total = scalar("output_size")
        if total is None and node.outputs and isinstance(node.outputs[0], TensorRef):
            total = _dim_size(node.outputs[0], 0 if dim is None or not isinstance(x, TensorRef) else dim)
        if isinstance(reps, TensorRef) and len(reps.shape) == 1 and reps.shape[0] > 1 and total is not None:
            put("repeats", IntRange(0, total, "parts"))
    elif name in ("masked_select", "masked_scatter", "masked_scatter_", "nonzero"):
        mask = _masked_count(name, args, node.outputs)
        if mask is not None:
            out[mask[0]] = mask[1]
    elif name in _RNNS and isinstance(args.get("batch_sizes"), TensorRef):
        # a packed sequence: how many sequences are still running at each step (the kernels trust it)
        hx = args.get("hx")
        hx = hx.items[0] if isinstance(hx, ListValue) and hx.items else hx
        put("batch_sizes", _running(_dim_size(args.get("data"), 0), args.get("batch_sizes"), _dim_size(hx, 1)))
    elif name == "_pad_packed_sequence":
        outs = node.outputs
        batch = _dim_size(outs[1], 0) if len(outs) > 1 else None
        put("batch_sizes", _running(_dim_size(args.get("data"), 0), args.get("batch_sizes"), batch))
    elif name == "_pack_padded_sequence":  # sorted lengths, at most the padded length, summing to the packed rows
        steps = _dim_size(args.get("input"), 1 if scalar("batch_first") else 0)
        outs = node.outputs
        put("lengths", _running(_dim_size(outs[0], 0) if outs else None, args.get("lengths"), steps))
    elif name in _INT_DIVISIONS:
        other, x = args.get("other"), args.get("self")
        if isinstance(other, TensorRef) and _integral(other):
            true = name in ("div", "div_") and not integer_divisor(name, x, other, getattr(args.get("rounding_mode"), "value", None))
            # a Python integer a tensor is divided by (to floats) is most often a size (see SIZES); an
            # integer division by zero raises
            put("other", SIZES if true and not other.shape else IntRange(1, 3))
    elif name in _CTC:
        for arg, rng in _ctc_ranges(args, scalar("blank") or 0).items():
            put(arg, rng)
    elif name == "take":
        x = args.get("self")
        if isinstance(x, TensorRef):
            put("index", IntRange(0, max(math.prod(x.shape), 1)))
    for ref, rng in recorded.items():
        out[ref] = rng
    return out


_CTC = {"ctc_loss", "_ctc_loss", "_ctc_loss_backward", "_cudnn_ctc_loss", "_use_cudnn_ctc_loss"}


def distinct_view(t: torch.Tensor) -> torch.Tensor:
    """``t`` with each expanded dimension (stride 0) cut to one element: each element once.
    (Copied into exported scripts: torch alone.)"""
    return t.as_strided([n if s else 1 for n, s in zip(t.shape, t.stride())], t.stride())


def _distinct(ref: TensorRef) -> int:
    """Elements of ``ref`` that are not repeats of another (an expanded dimension's are)."""
    return math.prod(n for n, s in zip(ref.shape, ref.layout_strides()) if s != 0)


def _trues(mask: TensorRef, selected: int) -> tuple[TensorRef, IntRange] | None:
    """A boolean ``mask`` that must select ``selected`` of its elements (as read, an expanded
    view's repeats counted), as a count of its distinct elements; None where none fits."""
    distinct = _distinct(mask)
    repeats = math.prod(mask.shape) // max(distinct, 1)
    if mask.dtype != "bool" or selected < 0 or repeats == 0 or selected % repeats or selected // repeats > distinct:
        return None
    return mask, IntRange(0, 2, "trues", (selected // repeats,))


def _mask_selects(items: list, base: Any, values: Any, outputs: list, reads: bool) -> tuple[TensorRef, IntRange] | None:
    """Indexing by one boolean mask (``x[mask]``, ``x[mask] = v``): the mask must hold as many
    true elements as the rows the original selected, which the output (a read) or the values put
    (a write, where they do not broadcast along that dimension) show."""
    tensors = [(d, r) for d, r in enumerate(items) if isinstance(r, TensorRef) and r.defined]
    if len(tensors) != 1 or tensors[0][1].dtype != "bool" or not isinstance(base, TensorRef):
        return None
    dim, mask = tensors[0]
    result_dims = len(base.shape) - len(mask.shape) + 1  # the mask's dimensions become one of its count
    if reads:
        out = outputs[0] if outputs and isinstance(outputs[0], TensorRef) else None
        count = _dim_size(out, dim) if out is not None and len(out.shape) == result_dims else None
    else:
        at = dim - (result_dims - len(values.shape)) if isinstance(values, TensorRef) else -1
        count = values.shape[at] if 0 <= at < len(values.shape) and values.shape[at] != 1 else None
    return _trues(mask, count) if count is not None else None


def _masked_count(name: str, args: dict, outputs: list) -> tuple[TensorRef, IntRange] | None:
    """The true elements a boolean mask holds where ``masked_select`` (its output's length),
    ``nonzero`` (its rows) or ``masked_scatter`` (its source, which must hold one value for each,
    filled whole as a model's image features are into its image tokens) shows how many."""
    mask = args.get("self" if name == "nonzero" else "mask")
    out = outputs[0] if outputs and isinstance(outputs[0], TensorRef) else None
    if not isinstance(mask, TensorRef) or not mask.defined:
        return None
    if name == "nonzero":
        return _trues(mask, out.shape[0]) if out is not None and out.shape else None
    other = args.get("self")
    if not isinstance(other, TensorRef):
        return None
    try:
        spread = math.prod(torch.broadcast_shapes(tuple(other.shape), tuple(mask.shape))) // max(math.prod(mask.shape), 1)
    except RuntimeError:
        return None
    if name == "masked_select":
        selected = math.prod(out.shape) if out is not None else None
    else:
        source = args.get("source")
        selected = math.prod(source.shape) if isinstance(source, TensorRef) else None
    if selected is None or spread == 0 or selected % spread:
        return None
    count = selected // spread
    if name != "masked_select":
        count = min(count, math.prod(mask.shape))
    return _trues(mask, count)


def _ctc_ranges(args: dict, blank: int) -> dict[str, IntRange]:
    """A CTC loss's integer inputs as a speech or handwriting batch has them: the labels of the
    targets in the class range but the blank (a blank in a target is no label), every input
    sequence as long as the padded time axis, and every target as long as its padded length or
    (targets concatenated in one row) lengths that add up to their count. The loss's work grows
    with the target lengths (its table has 2 * length + 1 states a time step), which seeded at 0
    or 1 would leave it nearly none; kept to half the time axis, an alignment always exists."""
    lp, targets = args.get("log_probs"), args.get("targets")
    if not isinstance(lp, TensorRef) or not lp.shape or not isinstance(targets, TensorRef) or not targets.shape:
        return {}
    classes, steps = lp.shape[-1], lp.shape[0]
    labels = IntRange(blank + 1, classes) if blank + 1 < classes else IntRange(0, blank)
    if len(targets.shape) > 1:
        most = max(min(targets.shape[-1], steps // 2), 1)
        lengths = IntRange(most, most + 1)
    else:
        lengths = IntRange(0, targets.shape[0], "parts")
    return {"targets": labels, "input_lengths": IntRange(steps, steps + 1), "target_lengths": lengths}


def _running(total: int | None, ref, most: int | None) -> IntRange | None:
    """Exact values for ``ref``, a packed sequence's per-step batch sizes (or its sorted lengths):
    as many non-increasing counts as ``ref`` has elements, each from 1 to ``most``, summing to
    ``total``; None when no such counts exist."""
    steps = math.prod(ref.shape) if isinstance(ref, TensorRef) and ref.defined else 0
    if not (total and steps and most) or not steps <= total <= steps * most:
        return None
    first = min(most, total - (steps - 1))
    q, r = divmod(total - first, steps - 1) if steps > 1 else (0, 0)
    values = [first] + [q + 1] * r + [q] * (steps - 1 - r)
    return IntRange(0, first + 1, "values", tuple(values))


def _offsets(args: dict) -> IntRange | None:
    """Offsets into a bag of indices: monotone, from 0 up to the number of indices."""
    idx = args.get("indices")
    if not isinstance(idx, TensorRef) or not idx.defined:
        return None
    return IntRange(0, math.prod(idx.shape) + 1, "offsets")


def _recorded_ranges(node: Node) -> dict[TensorRef, IntRange]:
    """``tensor_range`` attribute: JSON mapping input index to ``[min, max]`` (inclusive)."""
    raw = node.attr("tensor_range")
    if not raw or not isinstance(raw, str):
        return {}
    try:
        table = json.loads(raw)
    except ValueError:
        return {}
    out = {}
    if isinstance(table, dict):
        for k, v in table.items():
            try:
                ref = node.inputs[int(k)]
                lo, hi = int(v[0]), int(v[1])
            except (ValueError, TypeError, IndexError, KeyError):
                continue
            if isinstance(ref, TensorRef) and ref.defined and hi >= lo:
                out[ref] = IntRange(lo, hi + 1)
    return out


#: Ops whose output holds an input's values element for element (the same count) in another
#: storage or type: any requirement on the output's values is one on that input's.
_COPIES = {"aten::to", "aten::_to_copy", "aten::clone", "aten::contiguous", "aten::type_as"}
#: Ops whose outputs hold values picked from inputs (a subset, a concatenation, a permutation):
#: a value range on an output (not a layout such as offsets) holds for the inputs it was picked
#: from. Output position -> the schema argument it is picked from.
_PICKS = {"aten::index_select": ("self",), "aten::cat": ("tensors",), "aten::concat": ("tensors",),
          "aten::stack": ("tensors",), "aten::index": ("self",), "aten::gather": ("self",), "aten::take": ("self",),
          "aten::masked_select": ("self",), "aten::flip": ("self",), "aten::roll": ("self",), "aten::repeat": ("self",),
          "aten::sort": ("self",), "aten::topk": ("self",), "aten::embedding": ("weight",),
          **dict.fromkeys(("fbgemm::permute_2D_sparse_data", "fbgemm::permute_1D_sparse_data",
                           "fbgemm::permute_sparse_data"), ("lengths", "values", "weights"))}  # fmt: skip


#: Reductions whose output is positive where every element of their input is (a mean, a sum, a
#: maximum): output -> "keep" from ``self``.
_KEEPS_SIGN = frozenset({"aten::mean", "aten::sum", "aten::nansum", "aten::nanmean", "aten::prod", "aten::amax",
                         "aten::amin", "aten::max", "aten::min", "aten::cumsum", "aten::cumprod"})  # fmt: skip


def value_sources(op: str, inputs: list[tuple[str, list[TensorRef]]], outputs: list[list[TensorRef]],
                  numbers: dict[str, Any] | None = None) -> dict[tuple[int, int], list[tuple[TensorRef, str]]]:  # fmt: skip
    """Where the values of the op ``op``'s outputs come from: output tensor key -> [(input, how)],
    ``how`` being "view" (the output lies in the input's storage: a reshape, a slice, a select),
    "copy" (``_COPIES``), "pick" (``_PICKS``), "shift" (an addition of a number: ``var + eps``,
    whose sum is positive where the tensor is), "scale" (a product by a number, ``x * 0.5``, or a
    quotient of the tensor, ``v / n``, ``wh / anchors``: a divisor is drawn positive, see
    :func:`float_ranges`, and so is a number without a record) or "keep" (``_KEEPS_SIGN``).
    ``inputs``: (schema argument name, its tensors); ``outputs``: the tensors of each recorded
    output; ``numbers``: the op's arguments that are plain numbers (a Scalar overload's), by name:
    a negative one scales nothing."""
    found: dict[tuple[int, int], list[tuple[TensorRef, str]]] = {}
    in_keys = {r.key for _, refs in inputs for r in refs}
    placed = {(r.storage_id, r.dtype): r for _, refs in inputs for r in refs}
    self_ref = inputs[0][1][0] if inputs and len(inputs[0][1]) == 1 else None
    named = dict(inputs)
    picks = _PICKS.get(op, ())
    for i, refs in enumerate(outputs):
        for out in refs:
            if out.key in in_keys:  # in place, or out=: the input tensor itself
                continue
            src = placed.get((out.storage_id, out.dtype))
            if src is not None:
                found[out.key] = [(src, "view")]
            elif op in _COPIES and self_ref is not None and math.prod(self_ref.shape) == math.prod(out.shape):
                found[out.key] = [(self_ref, "copy")]
            elif i < len(picks) and named.get(picks[i]):
                found[out.key] = [(src, "pick") for src in named[picks[i]]]
            elif op == "aten::add" and out.shape:
                # (a tensor plus a number, either way round: the number a 0-dim tensor or a Scalar)
                terms = [r for name in ("self", "other") for r in named.get(name, ())]
                shifted = [r for r in terms if r.shape == out.shape]
                if len(shifted) == 1 and all(r is shifted[0] or not r.shape for r in terms):
                    found[out.key] = [(shifted[0], "shift")]
            elif op in ("aten::mul", "aten::div") and out.shape:
                scaled = _scaled(op, named, numbers or {})
                if scaled is not None:
                    found[out.key] = [(scaled, "scale")]
            elif op in _KEEPS_SIGN and self_ref is not None and i == 0:
                found[out.key] = [(self_ref, "keep")]
    return found


def _scaled(op: str, named: dict[str, list[TensorRef]], numbers: dict[str, Any]) -> TensorRef | None:
    """The tensor whose sign the product or quotient ``op`` keeps: the dividend of a division, the
    one tensor of a product by a number (a 0-dim tensor: a number without a record is drawn
    positive). None where a plain number among the operands is not positive, or a product is of
    two tensors."""
    if any(isinstance(v, (int, float)) and not isinstance(v, bool) and v <= 0 for v in numbers.values()):
        return None
    this, that = named.get("self", ()), named.get("other", ())
    if len(this) != 1 or len(that) > 1:
        return None
    if op == "aten::div":
        return this[0]
    shaped = [r for r in (*this, *that) if r.shape]
    return shaped[0] if len(shaped) == 1 else None


def _integral(ref: TensorRef) -> bool:
    return ref.dtype.startswith(("int", "uint"))


def _floating(ref: TensorRef) -> bool:
    return ref.dtype.startswith(("float", "bfloat", "complex"))


def _same_elements(a: TensorRef, b: TensorRef, how: str) -> bool:
    """``a`` and ``b`` list the same elements in the same order: both dense and row-major, of the
    same count, and for a view from the same place in the storage."""
    return (math.prod(a.shape) == math.prod(b.shape) and (how != "view" or a.offset == b.offset)
            and a.layout_strides() == contiguous_strides(a.shape) and b.layout_strides() == contiguous_strides(b.shape))  # fmt: skip


def _same_selection(a: TensorRef, b: TensorRef, how: str) -> bool:
    """The distinct elements of ``a`` (an expanded view's repeats once) are all of ``b``'s, in
    whatever order: a count of true ones is the same in both."""
    return _distinct(a) == math.prod(b.shape) and (how != "view" or a.offset == b.offset) and how != "pick"


@dataclass(frozen=True)
class Skew:
    """How an integer input of the original step spread its values, from the capture helper's
    record: the share of its elements that were distinct values, and the share the most frequent
    one took. Recommender ids follow a power law (a few hot rows take most lookups), and which rows
    a lookup reads decides its cache misses: uniform ids over a large table made an embedding bag
    four to seven times slower than ids of a Zipf law. Where the record has it, ``curve`` is the
    shape of the spread: (share of the distinct values, ranked hottest first; share of the
    elements they took) pairs, which the draw follows instead of a Zipf law (ids of a square's
    law over 800 rows took 11% of the lookups with their 10 hottest, where a Zipf law of the same
    hottest share gives 23%: more hits in the cache, a lookup 25% faster than the original's).
    ``rows``: for a tensor of a few rows of coordinates (a graph's ``edge_index``), each row's own
    spread, which the draw follows row by row: a graph's destinations crowd on a few nodes where
    its sources do not. One spread for both rows moves the hubs' share into the sources: on a
    CPU, a sum at the destinations over 2 million edges of a 200,000-node graph then took 1-4%
    longer, and the gather at the sources 1-3% (on a GPU the hubs also decide how often atomic
    additions collide). ``values``: the hottest values themselves, hottest first, above the
    range's lowest (where the capture recorded them): the draw gives them those ranks, so that a
    mask the program computes by comparing with one (``ids == image_token``) selects as many
    elements as the original's did. ``runs``: for each of those, the (start, length) runs it
    stood in where the capture found it standing together (an image's tokens in one run, a padded
    row's pad ids at its end), which the draw puts it in: a model finds each image's tokens from
    where its runs begin, and drawn at random places they made one image of each token."""

    distinct: float
    top: float
    curve: tuple[tuple[float, float], ...] = ()
    rows: tuple[Skew, ...] = ()
    values: tuple[int, ...] = ()
    runs: tuple[tuple[tuple[int, int], ...], ...] = ()


@dataclass(frozen=True)
class Bags:
    """How the original step's bag boundaries (an embedding bag's offsets) cut its indices, from the
    capture helper's record: the smallest and largest bag, and where the last bag began. On a GPU
    a bag's lookups are one thread block's work, so bags of uneven sizes (sorted uniform cut points
    make an exponential spread, with empty bags and some many times the mean) leave the kernel
    waiting on its longest ones, where the original's sizes stayed in a band."""

    smallest: int
    largest: int
    last: int


def _repeat(flat: torch.Tensor, block: torch.Tensor) -> None:
    """Fill ``flat`` (a contiguous 1-d tensor) with ``block`` (TILE elements) again and again."""
    n = flat.numel()
    for start in range(0, n, TILE):
        stop = min(start + TILE, n)
        flat[start:stop].copy_(block[: stop - start])


#: Cells of equal width over [0, 1) that a draw from recorded quantiles is mapped through, a line
#: each: every level of :data:`.sidecar.QUANTILE_LEVELS` is a multiple of 1/QUANTILE_CELLS, so a
#: cell lies within one span between two levels and its line is that span's.
QUANTILE_CELLS = 4096


def _quantile_cells(points: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """For quantiles ``points`` at :data:`.sidecar.QUANTILE_LEVELS`, each cell's line (start, slope):
    a uniform draw ``u`` in the cell maps to ``start + slope * u``, the linear interpolation of
    the quantiles at ``u`` (the inverse of a distribution that is uniform within each span)."""
    levels = torch.tensor(QUANTILE_LEVELS, dtype=torch.float64)
    middles = (torch.arange(QUANTILE_CELLS, dtype=torch.float64) + 0.5) / QUANTILE_CELLS
    span = torch.searchsorted(levels, middles, right=True).sub_(1).clamp_(0, levels.numel() - 2)
    slope = (points.diff() / levels.diff())[span]
    return points[span] - levels[span] * slope, slope


@dataclass
class TensorFactory:
    """Makes the replay's input tensors: one allocation per storage, views into it."""

    device: torch.device
    seed: int = 0
    storage_bytes: dict[tuple[int, str], int] = field(default_factory=lambda: defaultdict(int))
    ranges: dict[TensorRef, IntRange] = field(default_factory=dict)
    float_bounds: dict[TensorRef, tuple[float, float]] = field(default_factory=dict)
    # floating inputs whose values the capture recorded (a small one: see recorder.EXACT_FLOATS), or
    # their quantiles (a larger one): drawn as the original's were spread, within float_bounds' scale
    float_values: dict[TensorRef, tuple[float, ...]] = field(default_factory=dict)
    float_quantiles: dict[TensorRef, tuple[float, ...]] = field(default_factory=dict)
    # tensors the program made from its own numbers (torch.tensor(list)): the original's values, as recorded
    values: dict[TensorRef, tuple] = field(default_factory=dict)
    _storages: dict[tuple, torch.Tensor] = field(default_factory=dict)  # (storage id, dtype[, "host"])
    _quantized: dict[tuple, torch.Tensor] = field(default_factory=dict)  # (storage id, dtype) -> a flat quantized tensor
    _constrained: dict[tuple, bool] = field(default_factory=dict)  # keyed as _storages
    # per allocation: the element spans that views with an index range were filled for, and the range
    _index_spans: dict[tuple, list[tuple[int, int, IntRange]]] = field(default_factory=dict)
    _generator: torch.Generator | None = None
    _pools: dict[torch.dtype, torch.Tensor] = field(default_factory=dict)
    _pool_at: int = 0
    sparse: set[TensorRef] = field(default_factory=set)  # tables that ops read and write only row by row
    zeros: set[TensorRef] = field(default_factory=set)  # tensors that start at zero (optimizer state)
    definite: set[TensorRef] = field(default_factory=set)  # matrices a Cholesky factorisation reads
    untouched_bytes: dict[tuple[int, str], int] = field(default_factory=dict)  # allocations left unfilled
    overwritten: set[tuple[int, str]] = field(default_factory=set)  # allocations an op writes whole before any read
    # tensors made in host memory although the replay runs on a GPU: a GPU trace's host tensors (a
    # batch before its copy to the device), arguments a GPU kernel reads on the host. Tensor by
    # tensor: a storage id is not one allocation's alone (a writer gives every empty tensor the same
    # one, and reuses freed ones), so host tensors get allocations of their own.
    host: set[TensorRef] = field(default_factory=set)
    skews: dict[TensorRef, Skew] = field(default_factory=dict)  # index inputs drawn with the original's spread
    bags: dict[TensorRef, Bags] = field(default_factory=dict)  # offsets drawn with the original's bag sizes
    # counts that must sum to a size ("parts": segment lengths, repeats) -> the original's smallest and largest
    parts: dict[TensorRef, tuple[int, int]] = field(default_factory=dict)
    # boolean inputs -> the original's count of true elements and the runs they stood in (see mask_of)
    masks: dict[TensorRef, tuple[int, tuple[tuple[int, int], ...]]] = field(default_factory=dict)
    # 0-dim inputs whose value the capture recorded (a number the program passed, a step count):
    # each in an allocation of its own, as a writer gives many of them one storage id
    exact: dict[TensorRef, float | int] = field(default_factory=dict)

    def reserve(self, ref: TensorRef) -> None:
        """Make the allocation ``ref`` will live in (see :meth:`make`) large enough to hold it."""
        if ref.defined:
            key = (ref.storage_id, ref.dtype)
            need = ref.reach_bytes()
            if need > self.storage_bytes[key]:
                self.storage_bytes[key] = need

    def constrain(self, ref: TensorRef, rng: IntRange) -> None:
        old = self.ranges.get(ref)
        self.ranges[ref] = rng if old is None else old.narrow(rng)

    def pass_back(self, sources_of) -> None:
        """Move each requirement (an integer range, a floating range) on a tensor that an op
        derived from other tensors back to the tensors it came from, back to the trace's inputs,
        which are the tensors the factory makes. ``sources_of(key)``: for a tensor an op
        produced, its (source, how) pairs (see :func:`value_sources`) and the op's position in
        the replay; None for an input. A program reshapes or converts its data before the
        consumer whose requirement it is (``labels.view(-1)`` into a loss, ``position_ids[:, :n]``
        into an embedding, a sparse feature's values permuted and widened to int64 into an FBGEMM
        lookup, ``weight.t()`` into a matrix product); left on the
        derived tensor, the requirement would never reach the data, and the input would hold 0s
        and 1s. A range of values passes through every derivation; a layout (offsets, parts,
        exact values) only where the elements are the same ones in the same order. Tensors are
        taken latest-made first, so that each has all its requirements before it passes them on."""
        heap = []
        order = itertools.count()  # ties (a writer's reused ids: two tensors of one key) never compare tensors
        for ref in [*(r for r, rng in self.ranges.items() if _integral(r) or rng.kind == "trues"),
                    *(r for r in self.float_bounds if _floating(r))]:  # fmt: skip
            found = sources_of(ref.key)
            if found is not None:
                heapq.heappush(heap, (-found[1], ref.key, next(order), ref))
        done: set[tuple] = set()
        while heap:
            _, key, _, ref = heapq.heappop(heap)
            if (key, _integral(ref)) in done:
                continue
            done.add((key, _integral(ref)))
            for src, how in sources_of(key)[0]:
                if not self._passed(ref, src, how):
                    continue
                found = sources_of(src.key)
                if found is not None and (src.key, _integral(src)) not in done:
                    heapq.heappush(heap, (-found[1], src.key, next(order), src))

    def _passed(self, ref: TensorRef, src: TensorRef, how: str) -> bool:
        """Give ``src``, a tensor the values of ``ref`` come from, ``ref``'s requirement; whether
        it took it. A floating range (a weight's, read through ``weight.t()`` by the matrix
        product of a linear layer replayed through its parts) is a suggestion, as from a
        consumer of ``src`` itself (:meth:`suggest_floats`)."""
        if ref in self.ranges and self.ranges[ref].kind == "trues":
            # a count of true elements holds for the tensor whose elements the mask's distinct
            # ones are, each once (``mask.unsqueeze(-1).expand_as(x)``, ``ids.bool()``)
            if not ((src.dtype == "bool" or _integral(src)) and _same_selection(ref, src, how)):
                return False
            if src in self.ranges and self.ranges[src].kind != "trues":  # (ids an embedding reads keep their range)
                return False
            self.constrain(src, self.ranges[ref])
            return True
        if how in ("shift", "scale", "keep"):
            # only a range that asks for positive values passes (an epsilon or a variance is
            # positive, a positive number scales it, a mean of positive values is one): not an
            # index range, nor one bounded at 1 (a probability plus a number, or times one)
            low, high = self.float_bounds.get(ref, (0.0, 0.0))
            if not (_floating(ref) and low > 0 and high > 1):
                return False
            if _floating(src):
                self.suggest_floats({src: (low, high)})
                return True
            if how != "scale" or not _integral(src):
                return False
            # integers divided into floats (a detector's anchor sizes, ``torch.tensor(sizes) / stride``)
            old = self.ranges.get(src)
            self.constrain(src, IntRange(1, max(old.high, 2) if old is not None else 3))
            return True
        if _integral(ref):
            rng = self.ranges[ref]
            if not _integral(src) or not (rng.kind == "uniform" or (how != "pick" and _same_elements(ref, src, how))):
                return False
            self.constrain(src, rng)
            return True
        if not _floating(src):
            return False
        low, high = self.float_bounds[ref]
        if low == high and low > 0 and src.numel > 1:
            # a number's exact value (a 0-dim divisor's 1), read from a tensor of them (``alphas[t]``
            # of a noise schedule): the tensor's values lie around it, not all at it
            low, high = low / 2, high * 1.5
        self.suggest_floats({src: (low, high)})
        return True

    def suggest_floats(self, bounds: dict[TensorRef, tuple[float, float]]) -> None:
        """The first op to consume a tensor sets its range (a weight is read first by its layer);
        a positivity requirement from any consumer wins over a signed range; two ranges of no
        negative values hold together where they overlap (probabilities whose logarithm is taken
        too: [0.5, 1])."""
        for ref, rng in bounds.items():
            old = self.float_bounds.get(ref)
            both = None if old is None else (max(old[0], rng[0]), min(old[1], rng[1]))
            if old is not None and old[0] >= 0 and rng[0] >= 0 and both[0] < both[1]:
                self.float_bounds[ref] = both
            elif old is None or (rng[0] > 0 and old[0] <= 0):
                self.float_bounds[ref] = rng

    def make(self, ref: TensorRef) -> torch.Tensor:
        """A view of ``ref``'s storage holding seeded data.

        Input tensors share an allocation when they have the same storage id and element type:
        views of one parameter do, and so do tensors that lived at different times in a block the
        original allocator reused (as they did then), but for numbers (0-dim tensors) alone there,
        each of which keeps its own value. Tensors of different element types never
        share one: a trace writer's recycled id must not make a float64 scalar overwrite a
        float32 one. An allocation is filled once, when it is
        made, with the data its first tensor needs; a later view refills its part only when it
        has a requirement (an index range, a weight's range) and the first one had none, so a
        view never re-randomises the parameter it looks at."""
        dtype = torch_dtype(ref.dtype)
        if dtype in QUANTIZED:
            return self._make_quantized(ref, dtype)
        if ref in self.exact:
            device = torch.device("cpu") if ref in self.host else self.device
            return torch.full((), self.exact[ref], dtype=dtype, device=device)
        key = (ref.storage_id, ref.dtype)
        nbytes = max(self.storage_bytes.get(key, 0), ref.reach_bytes())
        if not ref.shape and nbytes <= ref.itemsize:
            # Numbers alone in their storage (0-dim inputs: a program's Python numbers) under other
            # tensor ids are numbers made at different times at an address the writer recycled,
            # each read by its own ops. In one allocation, a later one's draw replaced the value
            # the ops built before it had read, and the iterations read that: LongT5's bucket
            # scale, 1 at the build, was a divisor's 38 there, and its indices went negative.
            key = (*key, ref.tensor_id)
        device = self.device
        if ref in self.host and device.type != "cpu":
            device, key = torch.device("cpu"), (*key, "host")
        base = self._storages.get(key)
        if base is None or base.numel() < nbytes:
            base = torch.empty(nbytes, dtype=torch.uint8, device=device)
            if ref in self.sparse and nbytes >= UNTOUCHED_MIN_BYTES and self.device.type == "cpu":
                # A large embedding table a lookup reads row by row: left as the OS gives a large
                # allocation (zero pages, committed only where a row is touched), not filled.
                self.untouched_bytes[key] = nbytes
                _no_huge_pages(base)
            whole = torch.empty(0, dtype=dtype, device=device)
            whole.set_(base.untyped_storage(), 0, (nbytes // ref.itemsize,), (1,))
            self.fill(whole, ref)
            self._storages[key] = base  # (once filled: a fill that failed leaves nothing half made)
            self._constrained[key] = self._has_requirement(ref)
            self._index_spans[key] = []
            made = True
        else:
            made = False
        t = torch.empty(0, dtype=dtype, device=device)
        t.set_(base.untyped_storage(), ref.offset, ref.shape, ref.layout_strides())
        rng = self.ranges.get(ref)
        if rng is not None and rng.kind == "uniform":
            # Index tensors in one allocation with ranges of their own (the row and the column
            # indices torch.where returns): each view gets values in its range, narrowed by those
            # of the views it overlaps so that their values stay valid too.
            start, stop = ref.offset, ref.offset + ref.extent()
            want = rng
            for s, e, other in self._index_spans[key]:
                if s < stop and start < e:
                    want = want.narrow(other)
            # (a view drawn row by row is drawn in its own order, whatever its place in the allocation)
            by_rows = ref in self.skews and bool(self.skews[ref].rows)
            # (a view whose values already lie in its range keeps them: ops built before it read
            # them, as a writer's reused ids give two numbers one allocation; ``a // k`` had
            # passed its index check with k = 2, and a later number of k's ids drew it again, 1)
            kept = not made and not by_rows and ref not in self.skews and _within(t, want)
            if (not made or by_rows) and not kept and torch._debug_has_internal_overlap(t) != 1:  # (an expanded view cannot be written; 2: unknown)
                self.fill(t, ref, want)
            self._index_spans[key].append((start, stop, want))
            self._constrained[key] = True
        elif rng is not None and rng.kind == "trues" and device.type != "meta":
            # a mask that selects what the original's did: its distinct elements (an expanded view's
            # repeats are one) hold exactly that many true ones, wherever in its allocation it lies
            distinct = distinct_view(t)
            if torch._debug_has_internal_overlap(distinct) != 1:
                self._seeded_generator()
                distinct.copy_(self._sample(torch.bool, ref, rng, distinct.numel()).view(distinct.shape))
            self._constrained[key] = True
        elif (not self._constrained[key] and self._has_requirement(ref)) or (
                (ref in self.float_values or ref in self.values) and (not made or t.numel() * ref.itemsize != nbytes)
                and torch._debug_has_internal_overlap(t) != 1):  # fmt: skip
            # (the original's values of a view are that memory's, whichever view was made first)
            self.fill(t, ref)
            self._constrained[key] = True
        if ref in self.definite and (t.dtype.is_floating_point or t.dtype.is_complex):
            make_definite(t)
        return t

    def _make_quantized(self, ref: TensorRef, dtype: torch.dtype) -> torch.Tensor:
        """A view of ``ref``'s storage as a quantized tensor (a statically quantized model's
        activations: quint8...), whose integers are drawn over their type's range (qint32's within
        +-2**15, as sums of int8 products) around a zero point in its middle, at a fixed scale (the
        trace records neither; the kernels' time does not follow them). Views of one allocation
        share it, as other inputs'. Per tensor, whatever the original's scheme; on the CPU (torch
        has no quantized meta tensors: an op reading one is skipped there, with torch's reason)."""
        ints, zero_point = QUANTIZED[dtype]
        key = (ref.storage_id, ref.dtype)
        n = max(self.storage_bytes.get(key, 0) // ref.itemsize, ref.offset + ref.extent())
        whole = self._quantized.get(key)
        if whole is None or whole.numel() < n:
            info = torch.iinfo(ints)
            low, high = max(info.min, -(2**15)), min(info.max, 2**15 - 1)  # (qint32 holds sums of int8 products)
            drawn = torch.randint(low, high + 1, (n,), dtype=ints, generator=self._seeded_generator(), device=self.device)
            with warnings.catch_warnings():  # (quantized tensors' constructors are deprecated in favour of torchao's)
                warnings.simplefilter("ignore")
                whole = torch._make_per_tensor_quantized_tensor(drawn, QUANTIZED_SCALE, zero_point)
            self._quantized[key] = whole
        return whole.as_strided(ref.shape, ref.layout_strides(), ref.offset)

    def _has_requirement(self, ref: TensorRef) -> bool:
        return ref in self.ranges or ref in self.float_bounds

    def fill(self, t: torch.Tensor, ref: TensorRef, rng: IntRange | None = None) -> None:
        """Seeded data for ``t`` (integers in ``rng``, else in ``ref``'s range). Large contiguous
        tensors repeat one random block of TILE elements: drawing gigabytes of random numbers
        would dominate the setup time and buys nothing for timing (values keep their range and
        are not degenerate)."""
        n = t.numel()
        key = (ref.storage_id, ref.dtype)
        if n == 0 or key in self.untouched_bytes or key in self.overwritten or t.device.type == "meta":
            return  # (a meta tensor has shapes and no data)
        if ref in self.zeros:
            t.zero_()
            return
        if ref in self.exact:
            t.fill_(self.exact[ref])
            return
        if t.device.type != self.device.type or t.dtype in DRAWN_AS_FLOAT32:
            # a host tensor (see ``host``): drawn as on the device, copied over; a type torch draws no
            # random numbers of: drawn in float32, converted
            drawn = torch.empty(t.shape, dtype=torch.float32 if t.dtype in DRAWN_AS_FLOAT32 else t.dtype,
                                device=self.device)  # fmt: skip
            self.fill(drawn, ref, rng)
            t.copy_(drawn)
            return
        values = self.values.get(ref)
        if values is not None and len(values) == n:
            t.copy_(torch.tensor(values, dtype=t.dtype).view(t.shape))
            return
        self._seeded_generator()
        if t.dtype.is_floating_point and (ref in self.float_values or ref in self.float_quantiles):
            with torch.no_grad():
                self._fill_recorded(t, ref)
            return
        if rng is None:
            rng = self.ranges.get(ref, IntRange(0, 2) if ref.shape else IntRange(1, 3))
        with torch.no_grad():
            if t.is_contiguous() and t.dtype.is_floating_point and n >= POOL_MIN:
                self._fill_from_pool(t.view(-1), *self._float_range(ref))
            elif t.is_contiguous() and n <= TILE and (t.dtype.is_floating_point or t.dtype.is_complex):
                t.uniform_(*self._float_range(ref), generator=self._generator)  # in place: the same draws
            elif n > TILE and t.is_contiguous() and rng.kind == "uniform" and ref not in self.skews:
                # (a skewed index is drawn whole: repeated blocks would cap its distinct values)
                _repeat(t.view(-1), self._sample(t.dtype, ref, rng, TILE))
            else:
                t.copy_(self._sample(t.dtype, ref, rng, n).view(t.shape))

    def _fill_recorded(self, t: torch.Tensor, ref: TensorRef) -> None:
        """``t`` with the original's values where the capture recorded them and ``t`` is ``ref``
        itself; else drawn from its quantiles (or from its values, for an allocation larger than
        ``ref``): uniform between two neighbouring quantiles, each span drawn as often as the
        share of the original's values it holds, its spread piece by piece. The draws are slices
        of the seeded pool of uniform ones, each mapped through the line of its cell
        (:func:`_quantile_cells`): two lookups and a multiply-add, 3 ms for a million
        elements where a search of the levels took 44. A tensor longer than TILE repeats one
        drawn block."""
        values = self.float_values.get(ref)
        if values is not None and len(values) == t.numel():
            t.copy_(torch.tensor(values, dtype=torch.float64).view(t.shape))  # (copy_ converts type and device)
            return
        kind = torch.float64 if t.dtype == torch.float64 else torch.float32
        if values is not None:
            points = torch.quantile(torch.tensor(values, dtype=torch.float64), torch.tensor(QUANTILE_LEVELS,
                                                                                            dtype=torch.float64))  # fmt: skip
        else:
            points = torch.tensor(self.float_quantiles[ref], dtype=torch.float64)
        start, slope = (x.to(device=t.device, dtype=kind) for x in _quantile_cells(points))
        n = t.numel()
        m = min(n, TILE) if t.is_contiguous() else n
        drawn = self._pool_draws(m, kind) if m <= TILE else torch.rand(m, generator=self._generator, device=t.device,
                                                                        dtype=kind)  # fmt: skip
        cell = drawn.mul(QUANTILE_CELLS).to(torch.int32).clamp_(max=QUANTILE_CELLS - 1)
        block = start.index_select(0, cell).addcmul_(slope.index_select(0, cell), drawn)
        if m == n:
            t.copy_(block.view(t.shape))
        else:
            _repeat(t.view(-1), block)

    def seeded_bytes(self, n: int) -> torch.Tensor:
        """``n`` seeded bytes (uninitialised on ``meta``, which has no values)."""
        if self.device.type == "meta":
            return torch.empty(n, dtype=torch.uint8, device=self.device)
        return torch.randint(0, 256, (n,), dtype=torch.uint8, device=self.device, generator=self._seeded_generator())

    def _seeded_generator(self) -> torch.Generator:
        if self._generator is None:
            self._generator = torch.Generator(device=self.device)
            self._generator.manual_seed(self.seed)
        return self._generator

    def make_mkldnn(self, shape: tuple[int, ...], dtype_name: str) -> torch.Tensor:
        """An MKL-DNN tensor of ``shape`` (an opaque layout of the CPU's oneDNN library, which
        only floating types of 32 bits or fewer and 8-bit integers have), values in [-1, 1)."""
        if self.device.type != "cpu":
            raise ValueError(f"MKL-DNN tensors exist on the CPU only, not on {self.device.type}")
        dense = torch.empty(shape, dtype=torch_dtype(dtype_name))
        if dense.is_floating_point():
            dense.uniform_(-1.0, 1.0, generator=self._seeded_generator())
        else:
            dense.random_(0, 2, generator=self._seeded_generator())
        return dense.to_mkldnn()

    def make_sparse_coo(self, shape: tuple[int, ...], dtype_name: str, nnz: int, *, sparse_dim: int | None = None,
                        coalesced: bool = True) -> torch.Tensor:  # fmt: skip
        """A sparse COO tensor of ``shape`` with ``nnz`` elements at seeded, distinct positions
        spread uniformly over its sparse dimensions (the first ``sparse_dim``, all by default),
        values as other tensors' (floats in [-1, 1), integers 0 or 1). Coalesced (positions sorted)
        unless told otherwise, as most sparse operators leave their result."""
        dtype = torch_dtype(dtype_name)
        sd = len(shape) if sparse_dim is None else sparse_dim
        if not 0 < sd <= len(shape):
            raise ValueError(f"{sd} sparse dimension(s) for a tensor of shape {list(shape)}")
        positions = math.prod(shape[:sd])
        if positions >= 2**62:
            raise ValueError(f"a sparse tensor of shape {list(shape)} has too many positions to draw from")
        nnz = max(0, min(nnz, positions))
        dev = self.device
        values = torch.empty((nnz, *shape[sd:]), dtype=dtype, device=dev)
        if dev.type == "meta":  # (shapes only: no positions to draw, and no generator for meta)
            indices = torch.empty((sd, nnz), dtype=torch.int64, device=dev)
        else:
            g = self._seeded_generator()
            flat = _distinct_draws(positions, nnz, g, dev)
            if coalesced:
                flat = torch.sort(flat).values
            rows = []
            for size in reversed(shape[:sd]):  # the flat position's index along each sparse dimension
                rows.append(flat % size)
                flat = flat // size
            indices = torch.stack(rows[::-1])
            if dtype.is_floating_point or dtype.is_complex:
                values.uniform_(-1.0, 1.0, generator=g)
            elif dtype == torch.bool:
                values.copy_(torch.rand(values.shape, generator=g, device=dev) < 0.5)
            else:
                values.copy_(torch.randint(0, 2, values.shape, generator=g, device=dev))
        t = torch.sparse_coo_tensor(indices, values, shape, dtype=dtype, device=dev, check_invariants=False)
        return t._coalesced_(True) if coalesced else t

    def _fill_from_pool(self, flat: torch.Tensor, low: float, high: float) -> None:
        """``flat`` uniform in [low, high): slices of one seeded pool of uniform draws per dtype,
        scaled in one pass (thirty times faster than drawing, which was most of a large trace's
        setup). Each slice starts where the last one ended, so tensors differ from each other;
        a tensor longer than TILE repeats blocks of it."""
        low_t = torch.tensor(low, dtype=flat.dtype, device=self.device)
        for start in range(0, flat.numel(), TILE):
            part = flat[start : start + TILE]
            torch.add(low_t, self._pool_draws(part.numel(), flat.dtype), alpha=high - low, out=part)

    def _pool_draws(self, m: int, dtype: torch.dtype) -> torch.Tensor:
        """The next ``m`` (TILE at most) of the seeded pool of uniform draws in [0, 1) of ``dtype``
        (made at its first use): read them, never write them."""
        pool = self._pools.get(dtype)
        if pool is None:
            pool = self._pools[dtype] = torch.rand(2 * TILE, generator=self._generator, device=self.device, dtype=dtype)
        at = self._pool_at % (pool.numel() - m + 1)
        self._pool_at = at + m
        return pool[at : at + m]

    def _float_range(self, ref: TensorRef) -> tuple[float, float]:
        return self.float_bounds.get(ref, (0.5, 1.0) if not ref.shape else (-1.0, 1.0))

    def _sample(self, dtype: torch.dtype, ref: TensorRef, rng: IntRange, n: int) -> torch.Tensor:
        g, dev = self._generator, self.device
        trues, runs = self.masks.get(ref, (None, ()))
        if rng.kind == "trues":  # (a mask, or the integers it is converted from: so many of them 1, the rest 0)
            # (in the recorded runs where they hold the count its op needs)
            return mask_of(n, rng.values[0], runs if trues == rng.values[0] else (), g, dev).to(dtype)
        if dtype == torch.bool:
            return mask_of(n, trues, runs, g, dev) if trues is not None else torch.rand(n, generator=g, device=dev) < 0.5
        if dtype.is_floating_point or dtype.is_complex:
            return torch.empty(n, dtype=dtype, device=dev).uniform_(*self._float_range(ref), generator=g)
        if rng.kind == "values":
            reps = -(-n // max(len(rng.values), 1))
            return torch.tensor(rng.values or (0,), dtype=torch.int64, device=dev).repeat(reps)[:n].to(dtype)
        if rng.kind == "parts" and ref in self.parts:
            return bounded_parts(n, *self.parts[ref], max(rng.high, 0), g, dev).to(dtype)
        if rng.kind in ("cuts", "parts"):
            # bag boundaries from 0 to high (n of them, or n + 1 whose differences are the parts);
            # parts of at least ``low`` (where they can be) are ``low`` each plus parts of the rest
            k = n if rng.kind == "cuts" else n + 1
            least = min(rng.low, rng.high // n) if rng.kind == "parts" and rng.low > 0 and n > 0 else 0
            top = max(rng.high - least * n, 0)
            inner = torch.sort(torch.randint(0, top + 1, (max(k - 2, 0),), generator=g, device=dev)).values
            cuts = torch.cat([torch.zeros(1, dtype=torch.int64, device=dev), inner,
                              torch.full((1,), top, dtype=torch.int64, device=dev)])[-k:]  # fmt: skip
            return (cuts if rng.kind == "cuts" else cuts.diff() + least).to(dtype)
        if rng.kind == "offsets" and ref in self.bags:
            return _bag_offsets(n, self.bags[ref], rng.high - 1, g, dev).to(dtype)
        if rng.kind == "offsets":
            # Monotone offsets into a bag of indices: 0, then sorted cut points.
            cuts = torch.sort(torch.randint(0, max(rng.high, 1), (n,), generator=g, device=dev)).values
            cuts[0] = 0
            return cuts.to(dtype)
        info = torch.iinfo(dtype)
        lo, hi = max(rng.low, info.min), min(rng.high, info.max)
        skew = self.skews.get(ref)
        if skew is not None:
            return lo + _skewed_rows(max(hi - lo, 1), n, skew, g, dev, rng.tables).to(dtype)
        return torch.randint(lo, max(hi, lo + 1), (n,), generator=g, device=dev).to(dtype)


def _within(t: torch.Tensor, rng: IntRange) -> bool:
    """Every value of ``t`` (an integer tensor, not on ``meta``) lies in the uniform range ``rng``."""
    if t.device.type == "meta" or t.dtype.is_floating_point or t.dtype.is_complex or t.dtype == torch.bool:
        return False
    if t.numel() == 0:
        return True
    low, high = torch.aminmax(t)
    return rng.low <= int(low) and int(high) < rng.high


def mask_of(n: int, trues: int, runs, g: torch.Generator, dev: torch.device) -> torch.Tensor:
    """``n`` booleans of which ``trues`` are true: those of ``runs`` ((start, length) pairs) where
    they hold that many and fit, else seeded random ones."""
    mask = torch.zeros(n, dtype=torch.bool, device=dev)
    if runs and sum(m for _, m in runs) == trues and all(s + m <= n for s, m in runs):
        for start, length in runs:
            mask[start : start + length] = True
    else:
        mask[torch.randperm(n, generator=g, device=dev)[:trues]] = True
    return mask


def bounded_parts(n: int, smallest: int, largest: int, total: int, g: torch.Generator, dev: torch.device) -> torch.Tensor:
    """``n`` counts from ``smallest`` to ``largest`` that sum to ``total`` (segment lengths the
    original's record bounds): drawn uniformly in those bounds, then moved one by one, at seeded
    places with room, until they sum to it. Sorted uniform cut points, as counts without a record
    are drawn, make empty segments and some many times the mean: a mean over a segment's rows then
    divided by zero. Bounds that cannot give ``total`` are widened to what can."""
    if n <= 0:
        return torch.zeros(0, dtype=torch.int64, device=dev)
    smallest = min(max(smallest, 0), total // n)
    largest = max(largest, smallest, -(-total // n))
    parts = torch.randint(smallest, largest + 1, (n,), generator=g, device=dev)
    left = total - int(parts.sum())
    while left:
        room = (largest - parts) if left > 0 else (parts - smallest)
        open_at = torch.nonzero(room > 0).reshape(-1)
        open_at = open_at[torch.randperm(open_at.numel(), generator=g, device=dev)]
        each = min(abs(left) // open_at.numel(), int(room[open_at].min()))
        step = torch.full_like(open_at, max(each, 1))
        if each == 0:  # fewer left than places with room: one more at the first ``left`` of them
            open_at, step = open_at[: abs(left)], step[: abs(left)]
        parts.index_add_(0, open_at, step if left > 0 else -step)
        left -= int(step.sum()) if left > 0 else -int(step.sum())
    return parts


def _bag_offsets(n: int, bags: Bags, limit: int, g: torch.Generator, dev: torch.device) -> torch.Tensor:
    """``n`` offsets from 0, each bag's size drawn uniformly between the original's smallest and
    largest, scaled so that the last bag begins where the original's did (at most ``limit``, the
    number of indices): bags of one size come out exactly as the original's."""
    sizes = torch.randint(max(bags.smallest, 0), max(bags.largest, bags.smallest, 0) + 1, (n,), generator=g, device=dev)
    starts = torch.cumsum(sizes, 0) - sizes
    end, last = int(starts[-1]), max(min(bags.last, limit), 0)
    return torch.div(starts * last, end, rounding_mode="floor") if end > 0 else torch.zeros_like(starts)


def _distinct_draws(span: int, k: int, g: torch.Generator, dev: torch.device) -> torch.Tensor:
    """``k`` distinct integers of ``[0, span)``, seeded, in random order. (Copied into exported
    scripts: torch alone.)"""
    if 4 * k >= span:  # dense enough to take a permutation's first k
        return torch.randperm(span, generator=g, device=dev)[:k]
    flat = torch.empty(0, dtype=torch.int64, device=dev)
    while flat.numel() < k:  # draws with few repeats, drawn again until k distinct ones
        more = torch.randint(0, span, (k - flat.numel() + k // 16 + 8,), generator=g, device=dev)
        flat = torch.unique(torch.cat([flat, more]))
    return flat[torch.randperm(flat.numel(), generator=g, device=dev)[:k]]


def _skewed(span: int, n: int, skew: Skew, g: torch.Generator, dev: torch.device, tables: int = 1) -> torch.Tensor:
    """``n`` integers of ``[0, span)`` spread as ``skew`` says: ``distinct * n`` distinct values
    (as many as fit), each at least once, as many times as its rank on the recorded curve gives
    (:func:`curve_counts`), or, without one, the rest drawn with Zipf weights ``1 / rank ** s``
    over them, ``s`` chosen so that the hottest value takes the ``top`` share of the elements.
    The hot values are random ones of the range (but for those ``skew.values`` names), the order
    random (but for the runs ``skew.runs`` gives those, :func:`_in_runs`). With ``tables`` over 1
    the ``n`` are that many tables' indices, one table's after another (equal parts): each value
    belongs to one table, where all of its repeats are. (Spread over all of them, a hot id read
    once per table was as many rows, and a table-batched lookup read four times as many distinct
    rows as its original.) (Copied into exported scripts: torch alone.)"""
    k = max(1, min(n, span, round(skew.distinct * n)))
    distinct = values = _distinct_draws(span, k, g, dev)  # (by rank, hottest first)
    ranked = []  # the recorded hottest values, up to the first outside the range (the next would take its rank)
    for v in skew.values[:k]:
        if not 0 <= v < span:
            break
        ranked.append(v)
    hot = torch.tensor(ranked, dtype=torch.int64, device=dev)
    if hot.numel():  # they take the first ranks
        distinct = values = torch.cat([hot, distinct[~torch.isin(distinct, hot)]])[:k]
    extra = n - k
    counts = None  # repeats of each rank
    if skew.curve:
        counts = curve_counts(k, n, skew.curve).to(dev)
        values = values.repeat_interleave(counts)
    elif extra > 0:
        hottest = min(1.0, max(1.0 / k, (skew.top * n - 1) / extra))  # its weight among the extra draws
        weights = torch.arange(1, k + 1, dtype=torch.float64, device=dev).pow_(-_zipf_exponent(k, hottest))
        cdf = weights.cumsum_(0)
        cdf /= cdf[-1].item()
        picks = torch.searchsorted(cdf, torch.rand(extra, generator=g, device=dev, dtype=torch.float64))
        picks.clamp_(max=k - 1)
        counts = torch.bincount(picks, minlength=k) + 1
        values = torch.cat([values, values[picks]])
    if tables <= 1 or counts is None:
        drawn = values[torch.randperm(n, generator=g, device=dev)]
        placed = [(v, runs) for v, runs in zip(ranked, skew.runs) if runs and all(s + m <= n for s, m in runs)]
        return _in_runs(drawn, placed, dev) if placed else drawn
    # each value's repeats together, the values in random order (hot ones in every table), cut into
    # the tables' parts, each part shuffled
    order = torch.randperm(k, generator=g, device=dev)
    grouped = distinct[order].repeat_interleave(counts[order])
    return torch.cat([part[torch.randperm(part.numel(), generator=g, device=dev)]
                      for part in torch.tensor_split(grouped, tables)])  # fmt: skip


def _in_runs(drawn: torch.Tensor, placed, dev: torch.device) -> torch.Tensor:
    """``drawn`` with each value of ``placed`` ((value, ((start, length), ...)) pairs) standing in
    those runs, and the other values drawn in the rest of the places, in their drawn order (as
    many of them as there is room for, again from the first where there is more room). (Copied
    into exported scripts: torch alone.)"""
    out, free = torch.empty_like(drawn), torch.ones(drawn.numel(), dtype=torch.bool, device=dev)
    for value, runs in placed:
        for start, length in runs:
            out[start : start + length] = value
            free[start : start + length] = False
    rest = drawn[~torch.isin(drawn, torch.tensor([v for v, _ in placed], dtype=drawn.dtype, device=dev))]
    room = int(free.sum())
    if room:
        rest = rest if rest.numel() else drawn
        out[free] = rest.repeat(-(-room // rest.numel()))[:room]
    return out


def _skewed_rows(span: int, n: int, skew: Skew, g: torch.Generator, dev: torch.device, tables: int = 1) -> torch.Tensor:
    """:func:`_skewed`, row by row where ``skew`` has the rows' spreads (the ``n`` elements are
    theirs, one row after another). (Copied into exported scripts: torch alone.)"""
    if not skew.rows or n % len(skew.rows):
        return _skewed(span, n, skew, g, dev, tables)
    return torch.cat([_skewed(span, n // len(skew.rows), row, g, dev, tables) for row in skew.rows])


def curve_counts(k: int, n: int, curve) -> torch.Tensor:
    """How many times each of ``k`` values, hottest first, occurs among ``n`` elements (each at
    least once) so that the hottest ones take the shares ``curve`` gives: (share of the ``k``
    values, share of the ``n`` elements) pairs, both rising. Between two points of the curve the
    values share their band's elements evenly. (Copied into exported scripts: torch alone.)"""
    knots, last = [(0, 0)], (0, 0)
    for frac, share in [*curve, (1.0, 1.0)]:
        r = min(max(round(frac * k), last[0]), k)
        c = min(max(round(share * n), last[1] + (r - last[0]), r), n - (k - r))
        if r > last[0]:
            knots.append((r, c))
            last = (r, c)
    counts = torch.empty(k, dtype=torch.int64)
    for (r0, c0), (r1, c1) in zip(knots, knots[1:]):
        each, more = divmod(c1 - c0, r1 - r0)
        counts[r0:r1] = each
        counts[r0:r0 + more] += 1
    return counts


def _zipf_exponent(k: int, hottest: float) -> float:
    """The exponent ``s`` of Zipf weights over ``k`` ranks whose first takes the ``hottest`` share:
    ``1 / sum(i ** -s)`` grows with ``s`` from ``1 / k`` (uniform) to 1; found by bisection.
    (Copied into exported scripts: torch alone.)"""
    if hottest <= 1.0 / k:
        return 0.0
    ranks = torch.arange(1, k + 1, dtype=torch.float64)
    low, high = 0.0, 64.0
    for _ in range(50):
        mid = (low + high) / 2
        if 1.0 / ranks.pow(-mid).sum().item() < hottest:
            low = mid
        else:
            high = mid
    return (low + high) / 2
