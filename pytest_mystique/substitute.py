"""Substitutes for operators the replaying torch cannot run: device-specific ones, and removed ones.

A trace recorded on a GPU holds operators that only have kernels there (cuDNN batch norm and its
backward, cuDNN convolutions, fused dropout, the GPU kernels of scaled dot-product attention).
A trace recorded before a torch upgrade may hold operators the new torch no longer has
(:data:`REMOVED`). When such an operator cannot run on the replay device, or is not registered
at all, the replayer calls its equivalent with the arguments mapped across, and lists the
substitution in the report. Each entry maps the recorded argument values (schema order) to the
substitute's.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class Substitute:
    target: str  # qualified overload, e.g. "aten::native_batch_norm"; "" for an op with no effect here
    args: Callable[[list], list] | None = None  # recorded values (schema order) -> the target's
    # or else: the target's arguments taken by name from the recorded ones (target name -> recorded
    # name where they differ); recorded arguments the target lacks are dropped
    renames: dict[str, str] | None = None
    # with ``args``: the names of the keyword-only arguments its list ends with (an out= overload's
    # outputs); without, they are read from the target's schema
    kwonly: tuple[str, ...] = ()
    # a few ops around the target that make the arguments fit it and its results the recorded ones
    # (called with the target's arguments; see :class:`Composite`), and what they add to the
    # target's work for these recorded values ("" for none), which the report lists with it
    around: Callable[..., Any] | None = None
    adds: Callable[[list], str] | None = None

    @property
    def overload(self):
        if not self.target:
            return None
        ns, rest = self.target.split("::")
        name, _, overload = rest.partition(".")
        op = getattr(getattr(getattr(torch.ops, ns), name), overload or "default")
        return op if self.around is None else Composite(op, self.around)

    def describe(self, values: list) -> str:
        """The substitute as the report names it, for the recorded argument ``values``."""
        extra = self.adds(values) if self.adds is not None else ""
        return f"{self.target} ({extra})" if extra else self.target

    @property
    def kwnames(self) -> tuple[str, ...]:
        """The target's keyword-only arguments, which end the list :meth:`map` returns when it maps
        by name (a mapping function gives positional arguments only)."""
        if self.args is not None or not self.target:
            return self.kwonly
        return tuple(a.name for a in self.overload._schema.arguments if a.kwarg_only)

    def map(self, names: list[str], values: list) -> list:
        """The target's argument values from the recorded ones (``names``: the recorded schema's)."""
        if self.args is not None:
            return self.args(values)
        given = dict(zip(names, values))
        out = []
        for arg in self.overload._schema.arguments:
            src = (self.renames or {}).get(arg.name, arg.name)
            if src in given:
                out.append(given[src])
            elif arg.has_default_value():
                out.append(arg.default_value)
            else:
                raise ValueError(f"{self.target} needs {arg.name!r}, which the trace does not record")
        return out


class Composite:
    """A substitute that calls its target between a few ops of its own, with the target's schema
    (what the replay reads: the arguments it writes, its outputs). ``call(op, *args, **kwargs)``."""

    def __init__(self, op, call: Callable[..., Any]):
        self._schema = op._schema
        self._op = functools.partial(call, op)

    def __call__(self, *args, **kwargs):
        return self._op(*args, **kwargs)


def _conv_nd(v: list) -> list:
    # cudnn_convolution(self, weight, padding, stride, dilation, groups, benchmark, deterministic, allow_tf32)
    x, w, padding, stride, dilation, groups = v[:6]
    return [x, w, None, stride, padding, dilation, False, [0] * len(padding), groups]


def _conv_transpose_nd(v: list) -> list:
    # cudnn_convolution_transpose(self, weight, padding, output_padding, stride, dilation, groups, ...)
    x, w, padding, output_padding, stride, dilation, groups = v[:7]
    return [x, w, None, stride, padding, dilation, True, output_padding, groups]


def _bn_backward(v: list) -> list:
    # (input, grad_output, weight, running_mean, running_var, save_mean, save_var (an inverse std), eps[, reserve])
    x, gy, w, rm, rv, sm, sinv, eps = v[:8]
    return [gy, x, w, rm, rv, sm, sinv, True, eps, [True, True, True]]


_SDPA_CPU = "aten::_scaled_dot_product_flash_attention_for_cpu"
_SDPA_CPU_BACKWARD = "aten::_scaled_dot_product_flash_attention_for_cpu_backward"


def _shape(t) -> tuple[int, ...]:
    """A recorded tensor argument's shape (planning) or a tensor's (the call)."""
    return t.ref.shape if hasattr(t, "ref") else tuple(t.shape)


def _unpadded(query) -> None:
    """The memory-efficient kernel pads its log-sum-exp to a multiple of 32 positions: for other
    lengths it would not have the recorded shape, the forward's could not reach the backward, and
    the backward would read a seeded one. Such a length is refused (the op is skipped, with both
    reasons)."""
    shape = _shape(query)
    if len(shape) >= 2 and shape[-2] % 32:
        raise ValueError(f"the memory-efficient kernel pads the log-sum-exp of {shape[-2]} positions to a "
                         f"multiple of 32, unlike the recorded one")  # fmt: skip


def _groups(query, key) -> int:
    """Query heads per key head: more than 1 under grouped-query attention (Llama's 4 query
    heads sharing 2 key/value heads), which the CPU flash kernel takes and the memory-efficient
    kernel does not."""
    q, k = _shape(query), _shape(key)
    return q[-3] // k[-3] if len(q) >= 3 and len(k) >= 3 and k[-3] and q[-3] % k[-3] == 0 else 1


def _repeated_heads(query, key) -> str:
    g = _groups(query, key)
    return f"keys and values repeated to the query's heads, x{g}" if g > 1 else ""


def _gqa(op, q, k, v, *args, **kwargs):
    # the keys and values of each group repeated to its query heads (as SDPA's enable_gqa does)
    g = _groups(q, k)
    if g > 1:
        k, v = k.repeat_interleave(g, -3), v.repeat_interleave(g, -3)
    return op(q, k, v, *args, **kwargs)


def _gqa_backward(op, grad, q, k, v, *args, **kwargs):
    # the gradients of the repeated keys and values summed back over each group (the outputs after
    # them, the memory-efficient kernel's bias gradient, as they come)
    g = _groups(q, k)
    if g == 1:
        return op(grad, q, k, v, *args, **kwargs)
    gq, gk, gv, *rest = op(grad, q, k.repeat_interleave(g, -3), v.repeat_interleave(g, -3), *args, **kwargs)
    return gq, gk.unflatten(-3, (-1, g)).sum(-3), gv.unflatten(-3, (-1, g)).sum(-3), *rest


@functools.cache
def flash_takes_grouped_heads() -> bool:
    """Whether this torch's CPU flash-attention kernel takes fewer key and value heads than query
    heads (grouped-query attention), as torch 2.9's and later do. Torch 2.4's to 2.8's read as many key
    heads as query heads without a check: past the keys' memory, and the backward writes past the
    gradients' (a newer torch's trace of a Llama corrupted the heap). Asked of the kernel itself,
    with keys of one head that are the first half of a buffer of two: a kernel that reads a
    second head reads that buffer's, inside its memory, and its output differs from the one of
    the keys repeated."""
    op = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default
    g = torch.Generator().manual_seed(0)
    q, buffer = torch.randn(1, 2, 8, 8, generator=g), torch.randn(1, 2, 8, 8, generator=g)
    k = buffer[:, :1]
    try:
        return torch.allclose(op(q, k, k)[0], op(q, *[k.expand(1, 2, 8, 8).contiguous()] * 2)[0])
    except RuntimeError:  # (a kernel that checks the heads and refuses them)
        return False


def _heads_of_forward(v: list) -> str:
    return _repeated_heads(v[0], v[1])  # (query, key, ...)


def _heads_of_backward(v: list) -> str:
    return _repeated_heads(v[1], v[2])  # (grad, query, key, ...)


#: The CPU flash kernel and its backward: the repeat of keys and values around each, and what it
#: adds to the call, for the report ("" for one group)
_GROUPED = {_SDPA_CPU: (_gqa, _heads_of_forward), _SDPA_CPU_BACKWARD: (_gqa_backward, _heads_of_backward)}


def grouped_heads_here(op_name: str, values: list, device: torch.device) -> Substitute | None:
    """The CPU flash-attention kernel or its backward with keys and values repeated to the query's
    heads around it, where the recorded call groups query heads (a newer torch's trace) and this
    torch's kernel does not take them grouped (:func:`flash_takes_grouped_heads`); else None."""
    known = _GROUPED.get(op_name) if device.type == "cpu" else None
    if known is None or not known[1](values) or flash_takes_grouped_heads():
        return None
    around, adds = known
    return Substitute(op_name, around=around, adds=adds)


#: Arguments a torch release added to an operator, with a value whose effect a few ops around the
#: call have on a torch before it: a trace of the newer torch that gives the argument that value
#: replays on the older one as the call without it, between those ops (and what they add to its
#: work, for the report). SDPA's ``enable_gqa`` (2.5) repeats the keys and values of each group to
#: its query heads.
ADDED_ARGUMENTS: dict[tuple[str, str, Any], tuple[Callable[..., Any], Callable[[list], str]]] = {
    ("aten::scaled_dot_product_attention", "enable_gqa", True): (_gqa, _heads_of_forward),
}


def without_added_argument(op_name: str, arg: str, value: Any) -> Substitute | None:
    """The op called without the argument ``arg`` that this torch's schema lacks, between the ops
    that do what its ``value`` asks (:data:`ADDED_ARGUMENTS`); None where no such ops are known."""
    known = ADDED_ARGUMENTS.get((op_name, arg, value))
    if known is None:
        return None
    around, adds = known
    return Substitute(op_name, around=around,
                      adds=lambda v: f"{arg}={value!r}, which this torch lacks" + (f": {a}" if (a := adds(v)) else ""))


def _sdpa_on_gpu(v: list) -> list:
    # (query, key, value, dropout_p, is_causal, *, attn_mask, scale) -> the memory-efficient kernel's
    # (query, key, value, attn_bias, compute_log_sumexp, dropout_p, is_causal, *, scale)
    q, k, val, p, causal, mask, scale = v[:7]
    _unpadded(q)
    return [q, k, val, mask, True, p, causal, scale]


def _sdpa_backward_on_gpu(v: list) -> list:
    # (grad_out, query, key, value, out, logsumexp, dropout_p, is_causal, *, attn_mask, scale) ->
    # (grad_out_, query, key, value, attn_bias, out, logsumexp, philox_seed, philox_offset, dropout_p,
    #  grad_input_mask, is_causal, *, scale); the CPU kernel keeps no random state: the seed and
    # offset are zeros (read only where dropout_p > 0, then as another draw of the mask)
    g, q, k, val, out, lse, p, causal, mask, scale = v[:10]
    _unpadded(q)
    seed = torch.zeros((), dtype=torch.int64)
    return [g, q, k, val, mask, out, lse, seed, seed, p, [True, True, True, False], causal, scale]


def _histc_of_integers(op, x, *args, **kwargs):
    # the same bins over the same values, counted in float64 (exact for integers below 2**53) and
    # returned in the input's type, as the GPU kernel returns them
    if x.is_floating_point():
        return op(x, *args, **kwargs)
    return op(x.to(torch.float64), *args, **kwargs).to(x.dtype)


SUBSTITUTES: dict[str, Substitute] = {
    # The CPU's histogram counts floating-point data only, a GPU's integers too (a mixture of
    # experts' tokens per expert, before a grouped matrix product).
    "aten::histc": Substitute("aten::histc", around=_histc_of_integers,
                              adds=lambda v: "integers counted as float64, the counts converted back"),

    "aten::cudnn_batch_norm": Substitute("aten::native_batch_norm", lambda v: list(v[:8])),
    "aten::miopen_batch_norm": Substitute("aten::native_batch_norm", lambda v: list(v[:8])),
    "aten::cudnn_batch_norm_backward": Substitute("aten::native_batch_norm_backward", _bn_backward),
    "aten::miopen_batch_norm_backward": Substitute("aten::native_batch_norm_backward", _bn_backward),
    "aten::cudnn_convolution": Substitute("aten::convolution", _conv_nd),
    "aten::miopen_convolution": Substitute("aten::convolution", lambda v: [v[0], v[1], v[2], v[4], v[3], v[5], False,
                                                                        [0] * len(v[3]), v[6]]),  # fmt: skip
    "aten::cudnn_convolution_transpose": Substitute("aten::convolution", _conv_transpose_nd),
    # _fused_dropout's p is the probability to keep an element; native_dropout's is to drop it.
    "aten::_fused_dropout": Substitute("aten::native_dropout", lambda v: [v[0], 1.0 - v[1], True]),
    # Pinned (page-locked) host memory needs an accelerator; without one, pinning is a plain copy.
    "aten::pin_memory": Substitute("aten::clone", lambda v: [v[0]]),
    "aten::_pin_memory": Substitute("aten::clone", lambda v: [v[0]]),
    # An allocator hint for CUDA streams: there is no work to replay where there is no stream.
    "aten::record_stream": Substitute("", lambda v: []),
    # The GPU kernels of scaled dot-product attention (FlashAttention, memory-efficient, cuDNN):
    # the CPU's flash kernel computes the same attention, and its backward the same gradients.
    # Their random-number state and variable-length bookkeeping have no counterpart there.
    "aten::_scaled_dot_product_flash_attention": Substitute(_SDPA_CPU),
    "aten::_scaled_dot_product_flash_attention_backward": Substitute(_SDPA_CPU_BACKWARD),
    "aten::_scaled_dot_product_efficient_attention": Substitute(_SDPA_CPU, renames={"attn_mask": "attn_bias"}),
    "aten::_scaled_dot_product_efficient_attention_backward": Substitute(
        _SDPA_CPU_BACKWARD, renames={"grad_out": "grad_out_", "attn_mask": "attn_bias"}),
    "aten::_scaled_dot_product_cudnn_attention": Substitute(_SDPA_CPU, renames={"attn_mask": "attn_bias"}),
    "aten::_scaled_dot_product_cudnn_attention_backward": Substitute(_SDPA_CPU_BACKWARD,
                                                                     renames={"attn_mask": "attn_bias"}),
    # The other way, a CPU trace replayed on a GPU: the CPU's flash kernel has no GPU kernel, and
    # the GPU's FlashAttention takes half precision only; the memory-efficient kernel computes the
    # same attention in float32 too (and half precision), and its backward the same gradients.
    # Under grouped-query attention its keys and values are repeated to the query's heads around it.
    _SDPA_CPU: Substitute("aten::_scaled_dot_product_efficient_attention", _sdpa_on_gpu, kwonly=("scale",),
                          around=_gqa, adds=_heads_of_forward),
    _SDPA_CPU_BACKWARD: Substitute("aten::_scaled_dot_product_efficient_attention_backward", _sdpa_backward_on_gpu,
                                   kwonly=("scale",), around=_gqa_backward, adds=_heads_of_backward),
}


def _qr_mode(v: list) -> str:
    # qr(self, bool some=True): the reduced factorisation unless some=False
    return "complete" if len(v) > 1 and v[1] is False else "reduced"


#: Operators that a torch release removed, by the operator that replaced them (the same
#: factorisation, the same LAPACK kernels). A trace recorded before the removal holds the old one;
#: replayed through the new one after the upgrade, the gate still times the whole step, and the
#: report lists the substitution. Keyed by name, or by name and overload where the overloads map
#: to different targets. Torch 2.14 removed ``torch.cholesky`` and ``torch.qr`` (deprecated since
#: 1.9) with their operators: ``aten::cholesky`` and ``aten::qr`` with their ``out=`` overloads.
REMOVED: dict[str, Substitute] = {
    "aten::cholesky": Substitute("aten::linalg_cholesky"),  # (self, upper): by name
    "aten::cholesky.out": Substitute("aten::linalg_cholesky.out"),
    "aten::qr": Substitute("aten::linalg_qr", lambda v: [v[0], _qr_mode(v)]),
    "aten::qr.Q": Substitute("aten::linalg_qr.out", lambda v: [v[0], _qr_mode(v), v[2], v[3]], kwonly=("Q", "R")),
}

NO_EFFECT = "nothing (no kernel for this device; the op has no effect here)"


# FBGEMM's training lookups of table-batched embeddings (one per optimizer) keep their tables in
# device or unified memory; the CPU build has each as ``..._cpu``, with the tables in host memory.
_TBE_LOOKUP = re.compile(r"fbgemm::split_embedding_codegen_lookup_(\w+)_function")
_TBE_HOST = {f"{state}_host": f"{state}_dev" for state in ("momentum1", "momentum2")} | {"host_weights": "dev_weights"}


def substitute_for(op_name: str, overload: str = "default") -> Substitute | None:
    """The substitute for the operator ``op_name`` (``aten::cholesky``) of the recorded
    ``overload``, or None."""
    m = _TBE_LOOKUP.fullmatch(op_name)
    if m is not None and not m.group(1).endswith("_cpu"):
        return Substitute(f"{op_name}_cpu", renames=_TBE_HOST)
    if overload != "default" and f"{op_name}.{overload}" in REMOVED:
        return REMOVED[f"{op_name}.{overload}"]
    return SUBSTITUTES.get(op_name) or REMOVED.get(op_name)
