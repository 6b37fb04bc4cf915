"""Whether the replay's data went NaN or inf, or subnormal, and where first.

Seeded data that a step's arithmetic drives to NaN or inf (a log of a negative number, an
overflow) makes the ops after it take other paths than the original's; the build says where it
happened first. Each op's output is checked at the build, on a sample (NaN spreads to whatever
reads it), but for ops that only move their inputs' values (:data:`KEEPS_VALUES`); where an output
has some, its op's inputs are checked in full, so that the op named is the one that made them, not
one that read them.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from .errors import TraceError
from .trace import Node, tensors_of

#: Ops whose outputs from this position on are tables of log-probabilities in which ``-inf``
#: marks what cannot be reached (CTC's forward variables: the states an alignment cannot be in
#: yet), in the original's data too: NaN or inf is looked for only in the outputs before it.
LOG_TABLES = {"aten::_ctc_loss": 1}

#: Ops whose floating outputs hold only elements of their floating inputs, or zeros: where those
#: held no NaN, inf or subnormal number (each was an earlier op's output, checked, or seeded),
#: theirs hold none either. A third of the DDP ResNet's 5,088 checks at the build were of such
#: outputs (gradients copied into DDP's buckets, detached, its ReLUs and their backward). Between
#: types they convert, which can overflow or underflow: see :func:`keeps_values`.
KEEPS_VALUES = frozenset({
    "aten::detach", "aten::clone", "aten::contiguous", "aten::copy_", "aten::relu", "aten::relu_",
    "aten::threshold_backward", "aten::cat", "aten::stack", "aten::max_pool1d", "aten::max_pool2d",
    "aten::max_pool3d", "aten::max_pool2d_with_indices", "aten::max_pool3d_with_indices", "aten::index_select",
    "aten::gather", "aten::embedding",
})  # fmt: skip


#: Of :data:`KEEPS_VALUES`, the ops that read integer tensors as indices (or return them as such),
#: not as values.
_INDEXING = frozenset({"aten::max_pool2d_with_indices", "aten::max_pool3d_with_indices", "aten::index_select",
                       "aten::gather", "aten::embedding"})  # fmt: skip


def keeps_values(node: Node) -> bool:
    """``node``'s outputs hold only its inputs' values (or zeros): an op of :data:`KEEPS_VALUES`
    whose floating tensors are of one type and whose other tensors are indices. (A copy or a
    concatenation of integers into a half-precision tensor converts them: it can overflow.)"""
    if node.name not in KEEPS_VALUES:
        return False
    try:
        types = {r.dtype for r in tensors_of((*node.inputs, *node.outputs))}
    except (TraceError, RecursionError):  # (a malformed record shows nothing: its outputs are read)
        return False
    floating = {t for t in types if t.startswith(("float", "bfloat"))}
    return len(floating) <= 1 and (types <= floating or node.name in _INDEXING)


def odd_data(values: Any, *, nonfinite: bool = True, subnormal: bool = True) -> tuple[bool, bool]:
    """Whether a tensor, or any of a list of them, holds NaN or inf (``nonfinite``) and whether
    one is subnormal (``subnormal``), each looked for only where asked; one read of each tensor's
    elements serves both (a trace's outputs are checked op by op at the build).

    * NaN or inf: in 256 elements spread over a floating tensor (all of a smaller one), a sample,
      as NaN spreads to whatever reads it and a whole check would lengthen the build. Their sum in
      float64 (which no finite float32 values overflow) is finite exactly when they all are: one
      call, a few microseconds an op (``isfinite().all()`` takes three times as long).
    * Subnormal: a CPU tensor of float32 or float64 of which the same 256 elements are an
      eighth or more subnormal (not 0, below the type's smallest normal number; an optimizer's
      state for the rows of a vocabulary that no token read may be, and not its first rows): a
      CPU computes with those tens of times slower, and a replay whose data went there (a scale
      drawn ten times too large saturated a softmax, and its gradient underflowed) takes another
      time than its original, unless the original's data did too (an untrained model's shrinking
      activations). Half and bfloat16 kernels on a CPU compute in float32, where those values
      are normal or 0.

    A view's values are not read: they were where its base was made."""
    found_nan = found_sub = False
    for v in values if isinstance(values, (list, tuple)) else (values,):
        if isinstance(v, (list, tuple)):
            a, b = odd_data(v, nonfinite=nonfinite and not found_nan, subnormal=subnormal and not found_sub)
        elif (not isinstance(v, torch.Tensor) or not v.dtype.is_floating_point or v.layout is not torch.strided
                or v._is_view() or not v.numel() or not v.is_contiguous()):  # fmt: skip
            continue
        else:
            try:
                a, b = _odd(v, nonfinite and not found_nan, subnormal and not found_sub)
            except RuntimeError:  # (elements that cannot be read here: a wrapper of a transform run outside it)
                continue
        found_nan, found_sub = found_nan or a, found_sub or b
        if (found_nan or not nonfinite) and (found_sub or not subnormal):
            break
    return found_nan, found_sub


def _odd(v: torch.Tensor, nonfinite: bool, subnormal: bool) -> tuple[bool, bool]:
    slow = subnormal and v.dtype in _SLOW_SUBNORMALS and v.device.type == "cpu"
    if not (nonfinite or slow):
        return False, False
    a = _host_elements(v)
    if a is None:
        return nonfinite and not finite_sum(v.view(-1)[:256]), False
    # One sample serves both checks, in as few NumPy calls as can be: right after an op that wrote
    # tens of megabytes each distinct call costs 5-10 us more than warm (the caches hold the op's
    # data), and this took a check after a 32 MiB write from 90-100 us to 55-60 us.
    a = np.abs(a[:: max(1, a.size // 256)][:256])
    nan = nonfinite and not math.isfinite(a.sum(dtype=np.float64))
    if not slow:
        return nan, False
    return nan, bool(8 * np.count_nonzero((a < _TINY[a.dtype]) & (a > 0)) >= a.size)


#: Types whose subnormal numbers a CPU computes with many times slower than with normal ones.
_SLOW_SUBNORMALS = (torch.float32, torch.float64)


_TINY = {np.dtype(t): np.finfo(t).tiny for t in (np.float32, np.float64)}
#: Types NumPy has, whose CPU tensors it reads in place.
_NUMPY_FLOATS = (torch.float16, torch.float32, torch.float64)


def _host_elements(v: torch.Tensor) -> Any:
    """The elements of ``v``, a contiguous tensor, as a flat NumPy array over its memory, where it
    is in host memory and of a type NumPy has; else None. A check made of NumPy calls takes 9 us
    where one of torch calls took 22 (llama_train's build: 0.201 s against 0.212 s). Right after an
    op that wrote tens of megabytes any call pays for the caches the op emptied, and whatever runs
    next pays it: there a large trace's whole build did not move (2.47 s against 2.44 s)."""
    if v.device.type != "cpu" or v.dtype not in _NUMPY_FLOATS:
        return None
    try:
        return (v.detach() if v.requires_grad else v).numpy().reshape(-1)
    except (RuntimeError, TypeError):  # (a tensor with a negative or conjugate bit)
        return None


def infinite_numbers(args: list[Any]) -> bool:
    """Some number among an op's arguments (in lists too) is infinite or NaN: ``full_like(x,
    -inf)``, ``masked_fill(mask, -inf)``. No tensor is read."""
    return any((isinstance(a, float) and not math.isfinite(a)) or (isinstance(a, (list, tuple)) and infinite_numbers(a))
               for a in args)  # fmt: skip


#: Ops whose second argument divides the first (the foreach forms' one number per tensor too).
DIVISIONS = frozenset({"aten::div", "aten::div_", "aten::true_divide", "aten::true_divide_", "aten::floor_divide",
                       "aten::floor_divide_", "aten::remainder", "aten::remainder_", "aten::fmod", "aten::fmod_",
                       "aten::_foreach_div", "aten::_foreach_div_"})  # fmt: skip


def divides_by_a_given_zero(op: str, args: list[Any]) -> bool:
    """The op divides by a number the trace gives as 0 (one of a list of numbers, for the foreach
    forms): its inf or NaN is the original's too. RAdam's first steps divide each parameter's
    buffer by a rectified step size of -0.0 (``_foreach_div_(buffers, [-0.0, ...])``) and take the
    reciprocal of the infinities after. No tensor is read."""
    if op not in DIVISIONS or len(args) < 2:
        return False
    divisor = args[1]
    numbers = divisor if isinstance(divisor, (list, tuple)) else (divisor,)
    return any(isinstance(x, (int, float)) and not isinstance(x, bool) and x == 0 for x in numbers)


def nonfinite_inputs(args: list[Any]) -> bool:
    """An op's arguments hold NaN or inf (a number, or anywhere in a floating tensor): an output's
    NaN or inf came from them, not from the op. A whole check (:func:`finite_sum`), made only when
    an output had some. The arguments an op writes are not its inputs here: they hold its output."""
    for a in args:
        if isinstance(a, float) and not math.isfinite(a):
            return True
        if isinstance(a, (list, tuple)) and nonfinite_inputs(list(a)):
            return True
        if isinstance(a, torch.Tensor) and a.dtype.is_floating_point and a.numel() and not finite_sum(a):
            return True
    return False


#: Ops that convert their one tensor to another type, element for element (autocast's casts): a
#: value beyond the new type's range becomes an infinity there, as in the original.
CONVERSIONS = frozenset({"aten::to", "aten::_to_copy", "aten::type_as"})


def made_of_zeros_or_extremes(inputs: list[Any], out: Any, *, zeros: bool = True) -> bool:
    """Every NaN or inf of ``out``, a pointwise op's or a conversion's one output, stands where one
    of its tensor ``inputs`` (broadcast to its shape) holds 0 (``log(0)``, ``x / 0``) or its type's
    largest finite magnitude (a mask's stand-in for infinity, ``torch.finfo(torch.float32).min``,
    which a cast to bfloat16 or any growth turns into one). A zero scaled by any number stays
    one, and such an extreme grows into an infinity or stays one: where the inputs were made of
    the original's data and numbers drawn without a record (``log(relative_position.abs() /
    max_exact)``, a mask filled at places the drawn data chose), the original's output held the
    same NaN or inf; an overflow (``base ** (arange / dim)`` with a drawn ``dim``) is the drawn
    numbers'. A 0-dim input is such a number, not the data: a 0 there is no zero of the data's.
    ``zeros=False`` where the inputs hold drawn data, whose zeros are not the original's: a type's
    extreme is never drawn, it is a constant the program gave. Read in full, only where an output
    holds NaN or inf that its inputs did not."""
    if not isinstance(out, torch.Tensor) or not out.dtype.is_floating_point or out.device.type == "meta":
        return False
    tensors = [a for a in inputs if isinstance(a, torch.Tensor) and a.layout is torch.strided and a.dim()]
    try:
        if torch.broadcast_shapes(*(a.shape for a in tensors)) != out.shape:
            return False  # (not elementwise: a reduction, a matrix product)
        given = torch.zeros(out.shape, dtype=torch.bool, device=out.device)
        for a in tensors:
            a = a.to(out.device)
            if zeros:
                given |= a == 0
            if a.dtype.is_floating_point:
                given |= a.abs() == torch.finfo(a.dtype).max
    except RuntimeError:
        return False
    odd = ~torch.isfinite(out)
    return bool(odd.any()) and not bool((odd & ~given).any())


def finite_sum(t: torch.Tensor) -> bool:
    """``t``'s elements are all finite: their sum in float64 is (finite float32 values never overflow
    it), one kernel call and no tensor of ``t``'s size. (A meta tensor has no values.)"""
    return t.device.type == "meta" or math.isfinite(t.sum(dtype=torch.float64).item())
