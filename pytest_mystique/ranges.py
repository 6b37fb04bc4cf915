"""What values an op's inputs must hold, read from the trace: the requirements a replay's data meet.

* Floating ranges (:func:`float_ranges`): a weight's initialisation range, +-1/sqrt(fan_in), for
  linear layers, matrix products, einsums, convolutions and recurrent layers; normalisation scales
  around 1; positive values where a square root, a logarithm or a variance reads them; the domains
  of samplers, probabilities and fractional powers (:data:`_DOMAINS`); a spline basis's
  pseudo-coordinates in [0, 1].
* Integer ranges and layouts (:class:`IntRange`, :func:`index_ranges`): an index valid for its
  consumer (an embedding table's rows, the indexed dimension's size, a loss's classes, a divisor
  that is not zero, the trace's ``tensor_range``), offsets, cuts, parts, masks with a count of
  true elements; the indices and sparse layouts of extensions whose operators have no argument
  names (torch_scatter, torch_sparse, torch_cluster, torch_spline_conv, torchaudio: :data:`_EXTENSION_RANGES`),
  by position.
* Where a derived tensor's values come from (:func:`value_sources`): a view, a copy, a pick, a
  shift or a scale of an input, so that a requirement on the derived tensor is passed back to the
  input the program made it from (:meth:`.tensors.TensorFactory.pass_back`).
* Square matrices a factorisation needs positive-definite (:func:`definite_inputs`).
* Tables of boxes that torchvision's region operators pool (:func:`region_tables`): each row an
  image's index in the batch, then a box inside that image.

:mod:`.tensors` draws data that meet them; :mod:`.distributions` draws the spreads of integers.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from typing import Any

import torch

from .trace import ListValue, Node, TensorRef, contiguous_strides

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
        return v if isinstance(v, TensorRef) and v.defined and floating(v) else None

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
    if node.name == "torch_spline_conv::spline_basis" and node.inputs:
        # (pseudo-coordinates, by position: its kernel takes them in [0, 1], and a negative one
        # makes a negative weight index, which the weighting reads outside its weights by)
        pseudo = node.inputs[0]
        if isinstance(pseudo, TensorRef) and pseudo.defined and floating(pseudo):
            out[pseudo] = (0.0, 1.0)
    if node.name == "torch_cluster::fps" and len(node.inputs) > 2 and node.outputs:
        # (the share of each cloud's points it samples, a 0-dim tensor the program made of a number:
        # the share of the points its recorded output holds, as it took ceil(points * ratio) of each
        # cloud; drawn in [-1, 1), it had sampled 3,072 points of 4,096 where the original took 2,048)
        src, ratio, sampled = node.inputs[0], node.inputs[2], node.outputs[0]
        if (isinstance(src, TensorRef) and isinstance(ratio, TensorRef) and isinstance(sampled, TensorRef)
                and ratio.defined and floating(ratio) and not ratio.shape and src.shape and src.shape[0]):  # fmt: skip
            share = math.prod(sampled.shape) / src.shape[0]
            if 0 < share <= 1:
                out[ratio] = (share, share)
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


@dataclass(frozen=True)
class Regions:
    """A table of regions of interest, ``(K, 5)``: each row the index of an image among
    ``images``, then a box ``x1, y1, x2, y2`` inside the image (``width`` by ``height``, in its
    own coordinates: the features' times 1 / ``spatial_scale``)."""

    images: int
    height: float
    width: float


#: torchvision's region operators (``torchvision.ops.roi_align``, Faster R-CNN's box head) and
#: their backward ops: whether the images' count and size come from the features (``input``) or
#: from numbers (a backward op's ``batch_size``, ``height``, ``width``). Their kernels trust a
#: row's image index: one outside the batch reads or writes outside the features' memory (a CPU
#: replay's process ended by a segmentation fault where a step's table of regions, an input, was
#: drawn over its values' whole spread, coordinates and indices mixed).
_REGION_OPS = {"roi_align": "input", "ps_roi_align": "input", "roi_pool": "input", "ps_roi_pool": "input",
               "_roi_align_backward": "numbers", "_ps_roi_align_backward": "numbers",
               "_roi_pool_backward": "numbers", "_ps_roi_pool_backward": "numbers"}  # fmt: skip


def region_tables(node: Node, arg_names: list[str]) -> dict[TensorRef, Regions]:
    """The floating ``rois`` of a torchvision region op ``node``, and the images its rows must lie
    in (:class:`Regions`); ``arg_names`` are the schema's argument names."""
    namespace, _, name = node.name.partition("::")
    how = _REGION_OPS.get(name) if namespace == "torchvision" else None
    args = dict(zip(arg_names, node.inputs))
    rois = args.get("rois")
    if how is None or not (isinstance(rois, TensorRef) and rois.defined and floating(rois)
                           and len(rois.shape) == 2 and rois.shape[1] == 5):  # fmt: skip
        return {}

    def number(arg: str) -> float | None:
        v = getattr(args.get(arg), "value", None)
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    scale = number("spatial_scale")
    x = args.get("input")
    if how == "input":
        sizes = (x.shape[0], x.shape[-2], x.shape[-1]) if isinstance(x, TensorRef) and len(x.shape) == 4 else None
    else:
        sizes = (number("batch_size"), number("height"), number("width"))
    if sizes is None or None in sizes or not scale or scale <= 0 or min(sizes) < 1:
        return {}
    images, height, width = sizes
    return {rois: Regions(int(images), height / scale, width / scale)}


@dataclass
class IntRange:
    """Half-open ``[low, high)`` range for integer data; ``kind`` marks special layouts."""

    low: int = 0
    high: int = 2
    # or "offsets" (sorted, starting at 0), "cuts" (sorted, from 0 to ``high``; with ``values``, the
    # smallest and largest span the op takes), "parts" (summing to ``high``), "values" (exactly
    # ``values``, repeated to fill), "trues" (a boolean mask with exactly ``values[0]`` of its
    # distinct elements true, as many as an op it indexes selects)
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
#: An integer divisor's range where nothing says more: never 0, which raises (the capture's record of
#: an input's values, none 0, says more: see :meth:`.input_records.InputRecords.skew_indices`).
DIVISOR = IntRange(1, 3)

_RNNS = {"lstm", "gru", "rnn_tanh", "rnn_relu"}
_INT_DIVISIONS = {"floor_divide", "floor_divide_", "div", "div_", "remainder", "remainder_", "fmod", "fmod_"}


def integer_divisor(op: str, dividend: Any, divisor: Any, rounding_mode: Any = None) -> bool:
    """``divisor`` is the divisor of an integer division ``op``, which raises when it is 0: both
    operands are integral (a float operand makes it a float division, to inf), and ``div`` has a
    rounding mode (without one it is a true division, to inf)."""
    name = op.split("::")[-1]
    if name not in _INT_DIVISIONS or not (isinstance(divisor, TensorRef) and divisor.defined and integral(divisor)):
        return False
    if name in ("div", "div_") and rounding_mode is None:
        return False
    if isinstance(dividend, TensorRef):
        return dividend.defined and integral(dividend)
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

    if name in ("embedding", "embedding_bag", "_embedding_bag", "_embedding_bag_forward_only",
                "_embedding_bag_per_sample_weights_backward"):  # fmt: skip
        put("indices", rows("weight"))
        put("offsets", _offsets(args))
    elif name == "embedding_renorm_":  # (the rows a max_norm lookup renormalises first, in place)
        put("indices", rows("self"))
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
                  "index_copy_", "index_fill", "index_fill_", "index_reduce", "index_reduce_",
                  "take_along_dim"):  # fmt: skip
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
    elif name in ("index", "_index_put_impl_", "index_put", "index_put_", "_unsafe_index", "_unsafe_index_put",
                  "_unsafe_masked_index", "_unsafe_masked_index_put_accumulate"):  # fmt: skip
        idx = args.get("indices")
        base = args.get("self")
        if isinstance(idx, ListValue):
            dim = 0  # (the dimension of ``self`` the next index reads: a mask of k dimensions covers k)
            for ref in idx.items:
                mask = isinstance(ref, TensorRef) and ref.defined and ref.dtype in ("bool", "uint8")
                n = _dim_size(base, dim)
                if isinstance(ref, TensorRef) and ref.defined and n and not mask:
                    out[ref] = IntRange(0, n)
                dim += len(ref.shape) if mask else 1
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
    elif name in ("_jagged_to_padded_dense_forward", "_padded_dense_to_jagged_forward"):
        # a jagged batch's offsets (one ragged dimension) cut its rows (the values', or the jagged
        # output's, ``total_L``), each span at most the padded length: the unpadding kernel checks
        # both ("final offset should match total_L", "found batch item of length ...")
        offsets, most = args.get("offsets"), None
        offsets = offsets.items if isinstance(offsets, ListValue) else ()
        if name == "_padded_dense_to_jagged_forward":
            total = scalar("total_L") or _dim_size(node.outputs[0] if node.outputs else None, 0)
            most = _dim_size(args.get("dense"), 1)
        else:
            total, lengths = _dim_size(args.get("values"), 0), args.get("max_lengths")
            if isinstance(lengths, ListValue) and len(lengths.items) == 1:
                most = getattr(lengths.items[0], "value", None)
        if len(offsets) == 1 and isinstance(offsets[0], TensorRef) and offsets[0].defined and len(offsets[0].shape) == 1 and total:
            spans = (0, most) if _positive(most) else ()
            out[offsets[0]] = IntRange(0, total, "cuts", spans)
    elif name == "_convert_indices_from_coo_to_csr":
        # a sparse matrix's row indices (sorted: see plan._SORTED_READS), made its row pointers
        rows_count = scalar("size")
        if rows_count:
            put("self", IntRange(0, rows_count))
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
        if isinstance(other, TensorRef) and integral(other):
            true = name in ("div", "div_") and not integer_divisor(name, x, other, getattr(args.get("rounding_mode"), "value", None))
            # a Python integer a tensor is divided by (to floats) is most often a size (see SIZES); an
            # integer division by zero raises
            put("other", SIZES if true and not other.shape else DIVISOR)
    elif name in _CTC:
        for arg, rng in _ctc_ranges(args, scalar("blank") or 0).items():
            put(arg, rng)
    elif name in ("sparse_coo_tensor", "_sparse_coo_tensor_unsafe", "_sparse_coo_tensor_with_dims_and_tensors"):
        # a sparse tensor's indices, row i a position along its dimension i: within the least of the
        # sparse dimensions' sizes (one range holds for the whole tensor; torch checks each bound)
        idx, size = args.get("indices"), args.get("size")
        if isinstance(idx, TensorRef) and len(idx.shape) == 2 and isinstance(size, ListValue):
            sizes = [_positive(getattr(v, "value", None)) for v in size.items[: idx.shape[0]]]
            if sizes and all(sizes):
                put("indices", IntRange(0, min(sizes)))
    elif name in _PIVOTS:
        # a factorisation's pivots, LAPACK's rows from 1 to the matrix's, which these check
        # ("pivots ... must be between 1 and LU.size(-2)"): drawn as 0s and 1s, they were skipped
        matrix, pivots = _PIVOTS[name]
        n = _dim_size(args.get(matrix), -2)
        if n:
            put(pivots, IntRange(1, n + 1))
    elif name in ("take", "put", "put_"):  # (positions in the flattened tensor)
        x = args.get("self")
        if isinstance(x, TensorRef):
            put("index", IntRange(0, max(math.prod(x.shape), 1)))
    namespace = node.name.partition("::")[0]
    extension = _EXTENSION_RANGES[namespace](name, node.inputs, node.outputs) if namespace in _EXTENSION_RANGES else {}
    out.update(extension)
    for ref, rng in recorded.items():
        out[ref] = rng
    # (offsets an extension's kernel walks stay sorted whatever range the trace records of them)
    out.update({ref: rng for ref, rng in extension.items() if rng.kind != "uniform"})
    return out


def _torch_scatter_ranges(name: str, inputs: list, outputs: list) -> dict[TensorRef, IntRange]:
    """What torch_scatter's operators need of their index (its second argument; they are registered
    without argument names, so by position): positions along ``dim`` of the output
    (``scatter_max``...), offsets of each segment into the source (``segment_mean_csr``...) or into
    the output (``gather_csr``), sorted and from 0 to its length, the segment of each source row
    (``segment_sum_coo``...), a source row for each output row (``gather_coo``). Their kernels trust
    the index: ``gather_csr`` given offsets drawn as any integers read outside its memory."""
    src, index = (inputs[0], inputs[1]) if len(inputs) > 1 else (None, None)
    if not (isinstance(src, TensorRef) and isinstance(index, TensorRef) and index.defined and integral(index)
            and src.shape and index.shape):  # fmt: skip
        return {}
    result = outputs[0] if outputs and isinstance(outputs[0], TensorRef) else None
    if name.startswith("scatter_"):
        dim = getattr(inputs[2], "value", None) if len(inputs) > 2 else None
        size = _dim_size(result, dim % len(src.shape)) if isinstance(dim, int) else None
        return {index: IntRange(0, size)} if size else {}
    along = len(index.shape) - 1  # (the dimension its segments run along)
    if name.endswith("_csr"):
        total = _dim_size(result if name == "gather_csr" else src, along)
        return {index: IntRange(0, total, "cuts")} if total is not None and len(index.shape) == 1 else {}
    if name.endswith("_coo"):
        size = _dim_size(src if name == "gather_coo" else result, along)
        return {index: IntRange(0, size)} if size else {}
    return {}


def _positive(v: Any) -> int | None:
    """``v`` where it is a positive integer (a count or a size an operator was given), else None."""
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None


def _at(inputs: list, i: int | None) -> TensorRef | None:
    """The defined tensor of at least one dimension at position ``i`` of an operator's ``inputs``
    (an extension's operators, registered without argument names, are read by position), or None."""
    v = inputs[i] if i is not None and i < len(inputs) else None
    return v if isinstance(v, TensorRef) and v.defined and v.shape else None


#: torch_sparse's sparse-dense products (registered without argument names): the position of each
#: argument, (row, rowptr, col, colptr, csr2csc, mat)
_SPMM = {"spmm_sum": (0, 1, 2, 4, 5, 6), "spmm_mean": (0, 1, 2, 5, 6, 7), "spmm_min": (None, 0, 1, None, None, 3),
         "spmm_max": (None, 0, 1, None, None, 3)}  # fmt: skip


def _torch_sparse_ranges(name: str, inputs: list, outputs: list) -> dict[TensorRef, IntRange]:
    """What torch_sparse's operators need of a sparse matrix's layout (by position, as for
    :func:`_torch_scatter_ranges`): a product's row pointers (and its transpose's column pointers)
    sorted from 0 to the nonzeros, its columns within the dense matrix's rows, its rows within the
    row pointers' count, its transposing permutation within the nonzeros; ``ind2ptr``'s indices
    within its count, ``ptr2ind``'s pointers sorted up to its count. Drawn with the original's
    spread but unsorted, a graph network's row pointers made each product walk thousands of
    nonzeros for some rows and none for others: its training step took 12.8 times its original's."""

    def ref(i: int | None) -> TensorRef | None:
        t = _at(inputs, i)
        return t if t is not None and integral(t) else None

    def number(i: int) -> int | None:
        return _positive(getattr(inputs[i], "value", None)) if i < len(inputs) else None

    out: dict[TensorRef, IntRange] = {}
    if name in _SPMM:
        row, rowptr, col, colptr, csr2csc, mat = (ref(i) if k < 5 else inputs[i] for k, i in enumerate(_SPMM[name]))
        nonzeros = math.prod(col.shape) if col is not None else None
        if nonzeros is None:
            return out
        for pointers in (rowptr, colptr):
            if pointers is not None and len(pointers.shape) == 1:
                out[pointers] = IntRange(0, nonzeros, "cuts")
        if csr2csc is not None:
            out[csr2csc] = IntRange(0, max(nonzeros, 1))
        columns = _dim_size(mat, -2)
        if columns:
            out[col] = IntRange(0, columns)
        if row is not None and rowptr is not None and rowptr.shape[0] > 1:
            out[row] = IntRange(0, rowptr.shape[0] - 1)
    elif name in ("ind2ptr", "ptr2ind"):
        index, count = ref(0), number(1)
        if index is not None and count and (name == "ind2ptr" or len(index.shape) == 1):
            out[index] = IntRange(0, count) if name == "ind2ptr" else IntRange(0, count, "cuts")
    return out


#: torch_cluster's operators that take a batch's pointers: the positions of (points, pointers) pairs
_CLUSTER_POINTERS = {"fps": ((0, 1),), "knn": ((0, 2), (1, 3)), "radius": ((0, 2), (1, 3)), "nearest": ((0, 2), (1, 3))}


def _torch_cluster_ranges(name: str, inputs: list, outputs: list) -> dict[TensorRef, IntRange]:
    """What torch_cluster's operators need (by position, as for :func:`_torch_scatter_ranges`): a
    batch's pointers into its points (``fps``'s, and ``knn``'s, ``radius``'s and ``nearest``'s
    into each of their two sets) sorted from 0 to the points' count, as the graphs of a batch lie
    one after another; a graph's CSR layout for ``random_walk`` and ``graclus``, its row pointers
    sorted from 0 to the edges, its columns and ``random_walk``'s start nodes within its nodes;
    ``neighbor_sampler``'s start nodes within the nodes. Their kernels trust them: a pointer past
    its points reads outside them."""

    out: dict[TensorRef, IntRange] = {}
    for points, pointers in _CLUSTER_POINTERS.get(name, ()):
        x, ptr = _at(inputs, points), _at(inputs, pointers)
        if x is not None and ptr is not None and integral(ptr) and len(ptr.shape) == 1:
            out[ptr] = IntRange(0, x.shape[0], "cuts")
    if name in ("random_walk", "graclus"):
        rowptr, col = _at(inputs, 0), _at(inputs, 1)
        if rowptr is not None and col is not None and integral(rowptr) and integral(col) and len(rowptr.shape) == 1:
            nodes = rowptr.shape[0] - 1
            out[rowptr] = IntRange(0, math.prod(col.shape), "cuts")
            if nodes > 0:
                out[col] = IntRange(0, nodes)
                start = _at(inputs, 2) if name == "random_walk" else None
                if start is not None and integral(start):
                    out[start] = IntRange(0, nodes)
    elif name == "neighbor_sampler":
        start, rowptr = _at(inputs, 0), _at(inputs, 1)
        if start is not None and rowptr is not None and integral(start) and rowptr.shape[0] > 1:
            out[start] = IntRange(0, rowptr.shape[0] - 1)
    return out


def _torch_spline_conv_ranges(name: str, inputs: list, outputs: list) -> dict[TensorRef, IntRange]:
    """What torch_spline_conv's operators need (by position): ``spline_basis``'s kernel sizes,
    one a dimension, at least the B-splines' degree plus one (a size of 0 is a division by zero
    in its kernel: the process ended on SIGFPE), and whether each dimension is open, 0 or 1; drawn
    at that least, the weight indices it makes lie within any kernel's weights (which hold the
    product of the original's sizes, each above the degree); ``spline_weighting``'s weight indices
    within its weights' rows."""
    if name == "spline_basis" and len(inputs) > 3:
        size, is_open, degree = inputs[1], inputs[2], getattr(inputs[3], "value", None)
        out: dict[TensorRef, IntRange] = {}
        if isinstance(degree, int) and not isinstance(degree, bool) and degree >= 0:
            if isinstance(size, TensorRef) and size.defined and integral(size):
                # (a guess: the original's sizes where the capture recorded them, see InputRecords.skew_indices)
                out[size] = IntRange(degree + 1, degree + 2, derived=True)
            if isinstance(is_open, TensorRef) and is_open.defined and integral(is_open):
                out[is_open] = IntRange(0, 2)
        return out
    if name == "spline_weighting" and len(inputs) > 3:
        weight, index = inputs[1], inputs[3]
        if isinstance(weight, TensorRef) and isinstance(index, TensorRef) and index.defined and integral(index) \
                and weight.shape and weight.shape[0]:  # fmt: skip
            return {index: IntRange(0, weight.shape[0])}
    return {}


def _torchaudio_ranges(name: str, inputs: list, outputs: list) -> dict[TensorRef, IntRange]:
    """What torchaudio's alignment losses need (by position: ``rnnt_loss_forward`` is registered
    without argument names; ``rnnt_loss`` and ``forced_align`` have the same order), as a speech
    batch has them, and as CTC's (:func:`_ctc_ranges`): every input sequence as long as the padded
    time axis and every target as long as its padded length, which the RNN-T kernel checks (the
    longest must be the logits' frames, and their label positions less one: drawn as 0s and 1s,
    "input length mismatch" skipped the loss), and the targets' labels in the class range but the
    blank."""
    if name not in ("rnnt_loss", "rnnt_loss_forward", "forced_align") or len(inputs) < 5:
        return {}
    scores, targets, lengths, target_lengths = (_at(inputs, i) for i in range(4))
    blank = getattr(inputs[4], "value", None)
    if scores is None or targets is None or not integral(targets) or not isinstance(blank, int) or isinstance(blank, bool):
        return {}
    rnnt = name != "forced_align"
    if len(scores.shape) != (4 if rnnt else 3) or len(targets.shape) != 2:
        return {}
    classes, steps = scores.shape[-1], scores.shape[1]
    labelled = scores.shape[2] - 1 if rnnt else targets.shape[1]
    labels = _labels(blank, classes)
    out = {targets: labels} if labels.high > labels.low else {}
    for ref, size in ((lengths, steps), (target_lengths, labelled)):
        if ref is not None and integral(ref) and size >= 0:
            out[ref] = IntRange(size, size + 1)
    return out


#: Extensions whose operators :func:`index_ranges` knows, by namespace
_EXTENSION_RANGES = {"torch_scatter": _torch_scatter_ranges, "torch_sparse": _torch_sparse_ranges,
                     "torch_cluster": _torch_cluster_ranges, "torch_spline_conv": _torch_spline_conv_ranges,
                     "torchaudio": _torchaudio_ranges}  # fmt: skip


#: Operators that read an LU or LDL factorisation's pivots: (the factorisation's argument, the pivots')
_PIVOTS = {"linalg_lu_solve": ("LU", "pivots"), "lu_unpack": ("LU_data", "LU_pivots"), "lu_solve": ("LU_data", "LU_pivots"),
           "linalg_ldl_solve": ("LD", "pivots")}  # fmt: skip

_CTC = {"ctc_loss", "_ctc_loss", "_ctc_loss_backward", "_cudnn_ctc_loss", "_use_cudnn_ctc_loss"}


def distinct_elements(ref: TensorRef) -> int:
    """Elements of ``ref`` that are not repeats of another (an expanded dimension's are)."""
    return math.prod(n for n, s in zip(ref.shape, ref.layout_strides()) if s != 0)


def _trues(mask: TensorRef, selected: int) -> tuple[TensorRef, IntRange] | None:
    """A boolean ``mask`` that must select ``selected`` of its elements (as read, an expanded
    view's repeats counted), as a count of its distinct elements; None where none fits."""
    distinct = distinct_elements(mask)
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
    labels = _labels(blank, classes)
    if len(targets.shape) > 1:
        most = max(min(targets.shape[-1], steps // 2), 1)
        lengths = IntRange(most, most + 1)
    else:
        lengths = IntRange(0, targets.shape[0], "parts")
    return {"targets": labels, "input_lengths": IntRange(steps, steps + 1), "target_lengths": lengths}


def _labels(blank: int, classes: int) -> IntRange:
    """An alignment loss's target labels: in the class range but the blank (a blank in a target is
    no label), those above it, or below it where it is the last class."""
    return IntRange(blank + 1, classes) if blank + 1 < classes else IntRange(0, blank)


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
    "copy" (``_COPIES``), "pick" (``_PICKS``), "tail" (the rows of a concatenation after a first
    column: ``cat([zeros, lengths.cumsum(-1)], -1)``), "running" (a cumulative sum along the rows,
    ``RUNNING_SUMS``), a :class:`Shifted` (an integer plus a number or a row of offsets:
    ``lengths - 1``, ``ids + offsets``), "shift" (a floating addition of a number: ``var + eps``,
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
            elif op in ("aten::cat", "aten::concat") and (pieces := _after_one(named.get("tensors", ()), out, numbers)):
                found[out.key] = [(pieces[0], "pick"), (pieces[1], "tail")]
            elif op in RUNNING_SUMS and self_ref is not None and i == 0 and _running_rows(op, self_ref, out, numbers):
                found[out.key] = [(self_ref, "running")]
            elif i < len(picks) and named.get(picks[i]):
                found[out.key] = [(src, "pick") for src in named[picks[i]]]
            elif op in ("aten::add", "aten::sub") and integral(out) and (moved := _int_shift(op, named, out, numbers)):
                found[out.key] = [moved]
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


@dataclass(frozen=True)
class Shifted:
    """How an integer output comes from the input it adds something to (``lengths - 1`` into a
    gather, ``ids + offsets`` into one table of several fields' rows): ``by`` (a number: a
    subtraction's negated, an ``alpha`` multiplied in), or ``by`` times the values of the tensor
    ``addend``: a 0-dim one (the number Python wraps, ``x - 1``), or a row of offsets broadcast
    over the input's last dimension. An index range on the output holds for the input shifted
    back (see :meth:`.tensors.TensorFactory.pass_back`)."""

    by: int = 1
    addend: TensorRef | None = None


def _int_shift(op: str, named: dict[str, list[TensorRef]], out: TensorRef,
               numbers: dict[str, Any] | None) -> tuple[TensorRef, Shifted] | None:  # fmt: skip
    """The integer tensor that ``op`` (an addition or subtraction, ``self`` and ``other``) adds a
    number or a row of numbers to, into ``out``, and how (:class:`Shifted`); None for another sum."""
    numbers = numbers or {}
    alpha = numbers.get("alpha", 1)
    if not isinstance(alpha, int) or isinstance(alpha, bool):
        return None
    sign = -alpha if op == "aten::sub" else alpha
    this, that = named.get("self", ()), named.get("other", ())
    if op == "aten::add" and alpha == 1 and len(this) == len(that) == 1 and that[0].shape == out.shape != this[0].shape:
        this, that = that, this  # (the offsets first: ``offsets + ids``)
    if len(this) != 1 or len(that) > 1 or not integral(this[0]) or this[0].shape != out.shape:
        return None
    if not that:
        number = numbers.get("other")
        ok = isinstance(number, int) and not isinstance(number, bool)
        return (this[0], Shifted(sign * number)) if ok else None
    other = that[0]
    if not integral(other):
        return None
    if not other.shape:
        return this[0], Shifted(sign, other)
    # a row of offsets, one a column of the input (the fields of a factorization machine)
    width = out.shape[-1] if out.shape else 0
    if width > 1 and other.numel == width and other.shape[-1] == width and other.layout_strides() == contiguous_strides(other.shape):
        return this[0], Shifted(sign, other)
    return None


#: Cumulative sums: running totals of a tensor's rows (FBGEMM's complete one with a 0 before them)
RUNNING_SUMS = frozenset({"aten::cumsum", "fbgemm::asynchronous_complete_cumsum", "fbgemm::asynchronous_inclusive_cumsum",
                      "fbgemm::asynchronous_exclusive_cumsum"})  # fmt: skip


def _after_one(pieces: tuple | list, out: TensorRef, numbers: dict[str, Any]) -> tuple[TensorRef, TensorRef] | None:
    """The two pieces of a concatenation along the last dimension whose first is one column wide
    (a jagged batch's offsets: a 0 before the running totals of its lengths, row by row); None
    for another concatenation."""
    if len(pieces) != 2 or not out.shape or not isinstance(numbers.get("dim", 0), int):
        return None
    dim = numbers.get("dim", 0)
    if dim % len(out.shape) != len(out.shape) - 1:
        return None
    first, rest = pieces
    lead, width = out.shape[:-1], out.shape[-1]
    return (first, rest) if first.shape == (*lead, 1) and rest.shape == (*lead, width - 1) else None


def _running_rows(op: str, src: TensorRef, out: TensorRef, numbers: dict[str, Any]) -> bool:
    """``op`` (one of :data:`RUNNING_SUMS`) sums ``src`` along its rows (its last dimension) into ``out``."""
    if op == "fbgemm::asynchronous_complete_cumsum":
        return len(src.shape) == 1 and out.shape == (src.shape[0] + 1,)
    dim = numbers.get("dim", 0)
    return bool(src.shape) and out.shape == src.shape and isinstance(dim, int) and dim % len(src.shape) == len(src.shape) - 1


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


def integral(ref: TensorRef) -> bool:
    return ref.dtype.startswith(("int", "uint"))


def floating(ref: TensorRef) -> bool:
    return ref.dtype.startswith(("float", "bfloat", "complex"))


def real_floating(ref: TensorRef) -> bool:
    """A tensor of real floating-point elements, at least one (not :func:`floating`, which takes
    complex ones too and no count)."""
    return bool(ref.numel) and isinstance(dt := getattr(torch, ref.dtype, None), torch.dtype) and dt.is_floating_point


def same_elements(a: TensorRef, b: TensorRef, how: str) -> bool:
    """``a`` and ``b`` list the same elements in the same order: both dense and row-major, of the
    same count, and for a view from the same place in the storage."""
    return (math.prod(a.shape) == math.prod(b.shape) and (how != "view" or a.offset == b.offset)
            and a.layout_strides() == contiguous_strides(a.shape) and b.layout_strides() == contiguous_strides(b.shape))  # fmt: skip


def same_selection(a: TensorRef, b: TensorRef, how: str) -> bool:
    """The distinct elements of ``a`` (an expanded view's repeats once) are all of ``b``'s, in
    whatever order: a count of true ones is the same in both."""
    return distinct_elements(a) == math.prod(b.shape) and (how != "view" or a.offset == b.offset) and how != "pick"
