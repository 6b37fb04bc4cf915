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
too) is passed back to that input (``TensorFactory.pass_back``). Those requirements are read
from the trace in :mod:`.ranges`; the spreads that integer inputs are drawn with, where the
capture recorded the original's, are in :mod:`.distributions`.
"""

from __future__ import annotations

import heapq
import itertools
import math
import warnings
from collections import defaultdict
from dataclasses import dataclass, field, replace

import torch

from .distributions import Bags, Skew, bag_offsets, bounded_parts, distinct_draws, mask_of, skewed_rows
from .ranges import IntRange, Regions, Shifted, floating, integral, same_elements, same_selection
from .sidecar import QUANTILE_LEVELS
from .trace import UNKNOWN_DTYPE, TensorRef, contiguous_strides

#: Elements of random data drawn per block when filling large tensors.
TILE = 1 << 20
#: Floating tensors from this many elements on are filled from a pool of draws (see TensorFactory).
POOL_MIN = 1024
#: Embedding tables read row by row from this size on are not filled (see TensorFactory.make).
UNTOUCHED_MIN_BYTES = 64 << 20


#: Where an optimizer's state matrix that its step factorises or solves against starts: this times
#: the identity (state of another shape whose values reach such a matrix: this in every element).
PRECONDITIONER_START = 1e-4


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


def distinct_view(t: torch.Tensor) -> torch.Tensor:
    """``t`` with each expanded dimension (stride 0) cut to one element: each element once.
    (Copied into exported scripts: torch alone.)"""
    return t.as_strided([n if s else 1 for n, s in zip(t.shape, t.stride())], t.stride())


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
    # and of a table's columns that spread unlike each other, each column's (a tabular model's features)
    float_columns: dict[TensorRef, tuple[tuple[float, ...], ...]] = field(default_factory=dict)
    # tensors the program made from its own numbers (torch.tensor(list)): the original's values, as recorded
    values: dict[TensorRef, tuple] = field(default_factory=dict)
    _storages: dict[tuple, torch.Tensor] = field(default_factory=dict)  # (storage id, dtype[, "host"])
    _alone: int = 0  # stand-ins made (see make's ``alone``)
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
    regions: dict[TensorRef, Regions] = field(default_factory=dict)  # tables of boxes a region op pools (see make)
    preconditioners: set[TensorRef] = field(default_factory=set)  # optimizer state reaching a factorisation (see fill)
    untouched_bytes: dict[tuple[int, str], int] = field(default_factory=dict)  # allocations left unfilled
    overwritten: set[tuple[int, str]] = field(default_factory=set)  # allocations an op writes whole before any read
    # tensors made in host memory although the replay runs on a GPU: a GPU trace's host tensors (a
    # batch before its copy to the device), arguments a GPU kernel reads on the host. Tensor by
    # tensor: a storage id is not one allocation's alone (a writer gives every empty tensor the same
    # one, and reuses freed ones), so host tensors get allocations of their own.
    host: set[TensorRef] = field(default_factory=set)
    skews: dict[TensorRef, Skew] = field(default_factory=dict)  # index inputs drawn with the original's spread
    ordered: set[TensorRef] = field(default_factory=set)  # inputs drawn in order (sorted along the last dim)
    bags: dict[TensorRef, Bags] = field(default_factory=dict)  # offsets drawn with the original's bag sizes
    # counts that must sum to a size ("parts": segment lengths, repeats), or pointers whose spans must ("cuts": a
    # sparse matrix's row pointers) -> the original's smallest and largest count or span
    parts: dict[TensorRef, tuple[int, int]] = field(default_factory=dict)
    # integer tensors whose runs of elements have layouts of their own: (start, stop) of the
    # flattened elements -> its layout (a jagged batch's lengths, each key's summing to its ids)
    pieces: dict[TensorRef, dict[tuple[int, int], IntRange]] = field(default_factory=dict)
    # and the spreads the capture recorded for some of those runs (one table's ids among several tables')
    run_skews: dict[TensorRef, dict[tuple[int, int], Skew]] = field(default_factory=dict)
    # integer tensors whose columns (along the last dimension) hold ranges of their own: the ids of
    # several fields that a row of offsets moves into one table, each field in its own rows
    columns: dict[TensorRef, tuple[IntRange, ...]] = field(default_factory=dict)
    # and the spreads the capture recorded of such columns (None: a column drawn with the whole tensor's)
    column_skews: dict[TensorRef, tuple[Skew | None, ...]] = field(default_factory=dict)
    # the values the capture recorded of small integer inputs: a tensor holds them where a
    # requirement passes through them (a row of offsets added to ids, see _pass_shift)
    int_values: dict[TensorRef, tuple[int, ...]] = field(default_factory=dict)
    # floating inputs that hold a mask's fill (an additive attention mask's -inf) -> the value, how
    # many elements hold it and the runs they stood in (see :func:`.distributions.mask_of`)
    fills: dict[TensorRef, tuple[float, int, tuple[tuple[int, int], ...]]] = field(default_factory=dict)
    # boolean inputs -> the original's count of true elements and the runs they stood in (see :func:`.distributions.mask_of`)
    masks: dict[TensorRef, tuple[int, tuple[tuple[int, int], ...]]] = field(default_factory=dict)
    # 0-dim inputs whose value the capture recorded (a number the program passed, a step count):
    # each in an allocation of its own, as a writer gives many of them one storage id
    exact: dict[TensorRef, float | int] = field(default_factory=dict)
    # integer inputs that never agree element by element with another, as the original's did (a
    # neighbour list's atoms i and j): each -> the other; the later made is kept apart from the first
    apart: dict[TensorRef, TensorRef] = field(default_factory=dict)
    # and integer inputs of two rows that never agree (an edge list without self-loops)
    rows_apart: set[TensorRef] = field(default_factory=set)
    _made_apart: dict[TensorRef, torch.Tensor] = field(default_factory=dict)  # those of ``apart`` made so far

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
        which are the tensors the factory makes. ``sources_of(ref)``: for a tensor an op
        produced, its (source, how) pairs (see :func:`.ranges.value_sources`) and the op's position in
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
        for ref in [*(r for r, rng in self.ranges.items() if integral(r) or rng.kind == "trues"),
                    *(r for r in self.float_bounds if floating(r))]:  # fmt: skip
            found = sources_of(ref)
            if found is not None:
                heapq.heappush(heap, (-found[1], ref.key, next(order), ref))
        done: set = set()
        while heap:
            _, key, _, ref = heapq.heappop(heap)
            # (integers tensor by tensor, as a writer's reused ids may name several; floats by ids, see sources_of)
            if _done_as(ref) in done:
                continue
            done.add(_done_as(ref))
            for src, how in sources_of(ref)[0]:
                if isinstance(how, Shifted):
                    given = self._pass_shift(ref, src, how, sources_of)
                else:
                    moved = self._pass_pieces(ref, src, how)  # (either, or both: no short circuit)
                    passed = self._passed(ref, src, how) if self._has_requirement(ref) else False
                    given = [src] if passed or moved else []
                for took in given:
                    found = sources_of(took)
                    if found is not None and _done_as(took) not in done:
                        heapq.heappush(heap, (-found[1], took.key, next(order), took))

    def _passed(self, ref: TensorRef, src: TensorRef, how: str) -> bool:
        """Give ``src``, a tensor the values of ``ref`` come from, ``ref``'s requirement; whether
        it took it. A floating range (a weight's, read through ``weight.t()`` by the matrix
        product of a linear layer replayed through its parts) is a suggestion, as from a
        consumer of ``src`` itself (:meth:`suggest_floats`)."""
        if ref in self.ranges and self.ranges[ref].kind == "trues":
            # a count of true elements holds for the tensor whose elements the mask's distinct
            # ones are, each once (``mask.unsqueeze(-1).expand_as(x)``, ``ids.bool()``)
            if not ((src.dtype == "bool" or integral(src)) and same_selection(ref, src, how)):
                return False
            if src in self.ranges and self.ranges[src].kind != "trues":  # (ids an embedding reads keep their range)
                return False
            self.constrain(src, self.ranges[ref])
            return True
        if how in ("shift", "scale", "keep", "running"):
            # only a range that asks for positive values passes (an epsilon or a variance is
            # positive, a positive number scales it, a mean of positive values is one): not an
            # index range, nor one bounded at 1 (a probability plus a number, or times one)
            low, high = self.float_bounds.get(ref, (0.0, 0.0))
            if not (floating(ref) and low > 0 and high > 1):
                return False
            if floating(src):
                self.suggest_floats({src: (low, high)})
                return True
            if how != "scale" or not integral(src):
                return False
            # integers divided into floats (a detector's anchor sizes, ``torch.tensor(sizes) / stride``)
            old = self.ranges.get(src)
            self.constrain(src, IntRange(1, max(old.high, 2) if old is not None else 3))
            return True
        if integral(ref):
            rng = self.ranges[ref]
            if not integral(src) or not (rng.kind == "uniform" or (how != "pick" and same_elements(ref, src, how))):
                return False
            self.constrain(src, rng)
            return True
        if not floating(src):
            return False
        low, high = self.float_bounds[ref]
        if low == high and low > 0 and src.numel > 1:
            # a number's exact value (a 0-dim divisor's 1), read from a tensor of them (``alphas[t]``
            # of a noise schedule): the tensor's values lie around it, not all at it
            low, high = low / 2, high * 1.5
        self.suggest_floats({src: (low, high)})
        return True

    def _pass_shift(self, ref: TensorRef, src: TensorRef, how: Shifted, sources_of) -> list[TensorRef]:
        """Give ``src`` the index range of ``ref``, which is ``src`` plus a number or a row of them
        (:class:`.ranges.Shifted`), moved back by what was added; ``[src]`` where it took it, else
        nothing. A sequence model gathers its last positions at ``lengths - 1``, and a
        factorization machine looks its fields' ids up in one table at ``ids + offsets`` (each
        field's first row). Left on the sum, the range never reached the data: the lengths and ids
        were drawn as 0s and 1s, the gather read index -1 and fell back to seeded indices, and the
        lookup read three rows. A number the trace holds as a 0-dim input without a recorded value
        is fixed at 1 (a subtraction of 1 the commonest); a row of offsets, see
        :meth:`_pass_offsets`. A number or offsets that an op computed (not an input the factory
        makes) leave the range where it is; an input is found through its views
        (``offsets.unsqueeze(0)``)."""
        rng = self.ranges.get(ref)
        if rng is None or rng.kind != "uniform" or not integral(src):
            return []
        if how.addend is None:  # (a number the op was given)
            by = how.by
        else:
            addend = _made_of(how.addend, sources_of)
            if addend is None:
                return []  # (computed by the replay's own ops: its value is not known here)
            if addend.shape:
                return self._pass_offsets(rng, src, addend, how.by)
            number = self._fixed_number(addend)
            if number is None:
                return []
            by = number * how.by
        self.constrain(src, replace(rng, low=rng.low - by, high=rng.high - by))
        return [src]

    def _pass_offsets(self, rng: IntRange, src: TensorRef, offsets: TensorRef, sign: int) -> list[TensorRef]:
        """Give ``src``, ids that ``offsets`` (an input: a row along their last dimension, times
        ``sign``) are added to, the index range ``rng`` of the sum; ``[src]`` where it took it. With
        the offsets' values recorded (:attr:`values`, :attr:`int_values`) and in order, each
        field's ids lie in the rows from its offset to the next (:attr:`columns`); out of order,
        each within ``rng`` moved back by its own offset. Without them, the offsets are fixed at
        equal steps through the range, and each field's ids lie within one step."""
        width = src.shape[-1] if src.shape else 0
        if not width:
            return []
        known = self.values.get(offsets, self.int_values.get(offsets))
        if known is not None and len(known) == width and all(isinstance(v, int) for v in known):
            self.values[offsets] = known
            starts = [sign * v for v in known]
            if starts == sorted(starts) and starts[0] >= rng.low:  # (fields, one after another)
                ends = [*starts[1:], rng.high]
                cols = tuple(IntRange(0, max(b - a, 1)) for a, b in zip(starts, ends))
            else:
                cols = tuple(IntRange(rng.low - a, rng.high - a) for a in starts)
            self.columns[src] = cols
            self.constrain(src, IntRange(min(c.low for c in cols), max(c.high for c in cols)))
            return [src]
        if known is not None or offsets in self.ranges or sign != 1 or width > rng.high - rng.low:
            return []
        step = (rng.high - rng.low) // width
        self.ranges[offsets] = IntRange(kind="values", values=tuple(rng.low + f * step for f in range(width)))
        self.constrain(src, IntRange(0, step))
        return [src]

    def _fixed_number(self, ref: TensorRef) -> int | None:
        """The value an integer 0-dim input holds: the capture's record, a range of one value, or
        1, which it is then fixed at; None for a number the replay cannot know (a range of several)."""
        value = self.exact.get(ref)
        if value is not None:
            return int(value) if float(value).is_integer() else None
        rng = self.ranges.get(ref)
        if rng is None:
            self.ranges[ref] = IntRange(1, 2)
            return 1
        return rng.low if rng.kind == "uniform" and rng.high == rng.low + 1 else None

    def _pass_pieces(self, ref: TensorRef, src: TensorRef, how: str) -> bool:
        """Give ``src`` the layouts of runs of ``ref``'s elements (:attr:`pieces`, or ``ref``'s
        own offsets or counts where ``src`` holds them at another place or in another form);
        whether it took any. A jagged batch's offsets are a 0 and then each row's running totals
        of its lengths (``cat([zeros, lengths.cumsum(-1)], -1)``, FBGEMM's complete cumsum), and a
        lookup reads each row as the offsets of its bags (``offsets[k]``): that row's lengths must
        sum to the count of its ids. Through a view at an offset (a row of the offsets) a run
        moves with it; past the first column of a concatenation ("tail") a row of offsets becomes
        running totals ending at the same count ("cuts"), and through a running sum ("running")
        such totals become counts that sum to it ("parts"). Drawn as 0s and 1s instead, the bags
        of a recommender's lookups held a few ids each and read a tenth of the original's. An
        index range on a view at an offset (one key's ids, split from several tables' ids) holds
        for that run of its base alone; the whole base takes it too (in :meth:`_passed`), and
        where runs overlap each takes a range within both."""
        if not (integral(ref) and integral(src) and _dense(ref) and _dense(src)):
            return False
        runs = dict(self.pieces.get(ref, {}))
        rng = self.ranges.get(ref)
        whole = rng is not None and (rng.kind in _LAYOUTS or rng.kind == "uniform" and how == "view")
        if whole and not (how in ("view", "copy") and same_elements(ref, src, how)):
            # (the same elements in order take it as a whole, in _passed; an index range passes to
            # the whole of the tensor there too, and holds for this run of it alone here: the ids
            # of several tables' lookups, one table's after another)
            runs.setdefault((0, ref.numel), rng)
        moved = [m for (a, b), r in runs.items() if (m := _moved_run(ref, src, how, a, b, r)) is not None]
        if not moved:
            return False
        if len(moved) == 1 and moved[0][:2] == (0, src.numel) and moved[0][2].kind != "uniform":
            self.constrain(src, moved[0][2])
            return True
        have = dict(self.pieces.get(src, {}))
        for a, b, r in moved:
            if r.kind == "uniform":
                if (a, b) == (0, src.numel):
                    continue  # (passed whole, in _passed)
                for (c, d), other in list(have.items()):
                    if other.kind == "uniform" and a < d and c < b:  # (overlapping runs hold a range within both)
                        r = r.narrow(other)
                        have[(c, d)] = other.narrow(r)
            have[(a, b)] = r
        if not have:
            return False
        self.pieces[src] = have
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

    def make(self, ref: TensorRef, *, alone: bool = False) -> torch.Tensor:
        """A view of ``ref``'s storage holding seeded data.

        Input tensors share an allocation when they have the same storage id and element type:
        views of one parameter do, and so do tensors that lived at different times in a block the
        original allocator reused (as they did then), but for numbers (0-dim tensors) alone there,
        each of which keeps its own value, and tensors made ``alone``: seeded stand-ins for values
        the original computed (the output of a boolean mask's indexing), which two such tensors of
        one place would otherwise hold alike. Tensors of different element types never
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
        if alone:
            # Stand-ins: GLPN's loss subtracts the logarithms of a target and a prediction indexed by
            # one mask, each read in place of an indexing's output the original had put in one block
            # in turn; in one allocation the two were equal, the difference 0, and its square root's
            # backward divided by zero. Each has an allocation of its own, under a key no other
            # takes: a writer that gave a later output an earlier one's block may give it the
            # earlier one's tensor id too (PointNet++'s k-NN pairs took its radius pairs'), and the
            # k-NN's draw, indices of 2,048 points, wrote over the radius pairs' centres, of 512.
            self._alone += 1
            key = (*key, "stand-in", self._alone)
        elif not ref.shape and nbytes <= ref.itemsize:
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
        rng, want = self.ranges.get(ref), None  # (want: the range a uniform draw of it took)
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
        if self.own_runs(ref) and device.type != "meta" and t.is_contiguous():
            self._fill_pieces(t, ref)
            self._constrained[key] = True
        if ref in self.columns and device.type != "meta" and t.is_contiguous():
            rows, skews = t.view(-1, t.shape[-1]), self.column_skews.get(ref, ())
            self._draw_parts(ref, [(rows[:, col], rng, skews[col] if col < len(skews) else None)
                                   for col, rng in enumerate(self.columns[ref])])  # fmt: skip
            self._constrained[key] = True
        if ref in self.fills and device.type != "meta" and t.is_contiguous() and t.is_floating_point():
            value, count, runs = self.fills[ref]
            self._seeded_generator()
            with torch.no_grad():
                t.view(-1).masked_fill_(mask_of(t.numel(), count, runs, self._generator, t.device), value)
            self._constrained[key] = True
        if ref in self.definite and (t.dtype.is_floating_point or t.dtype.is_complex):
            make_definite(t)
        if ref in self.regions and t.dtype.is_floating_point and device.type != "meta":
            values = self.float_values.get(ref)
            if values is None or len(values) != t.numel():  # (not the original's own, as recorded)
                self._draw_regions(t, self.regions[ref])
        if ref in self.ordered and device.type != "meta" and t.dim() >= 1 and t.is_contiguous():
            self._in_order(t, ref, want)
        if ref in self.preconditioners and made:
            self.fill(t, ref)  # (its allocation was filled flat: the diagonal is the view's)
        if (ref in self.apart or ref in self.rows_apart) and device.type != "meta":
            self._keep_apart(ref, t)
        return t

    def _in_order(self, t: torch.Tensor, ref: TensorRef, rng: IntRange | None) -> None:
        """``t`` (of :attr:`ordered`) sorted along its last dimension. An integer one drawn uniform
        in ``rng`` (its range, narrowed by the views it overlaps) without a record of the original's
        spread holds each value of the range equally often instead: a sorted uniform draw's
        expected counts. Sorted, the draw's own counts vary by their square root, and what an op
        takes by them varies too: a batch vector of 8 point clouds of 512 points drawn so had
        clouds of 480 to 540, farthest point sampling took half of each, rounded up, and its output
        was two points longer than the trace's."""
        if (t.dtype.is_floating_point or t.dtype.is_complex or t.dtype == torch.bool or rng is None
                or rng.kind != "uniform" or rng.high <= rng.low or ref in self.skews or ref in self.values
                or ref in self.run_skews or ref in self.column_skews):  # fmt: skip
            t.copy_(t.sort(dim=-1).values)  # (along the last dimension: each row a sorted sequence)
            return
        n = t.shape[-1]
        even = torch.arange(n, device=t.device, dtype=torch.int64).mul_(rng.high - rng.low).div_(n, rounding_mode="floor")
        t.copy_(even.add_(rng.low).to(t.dtype).expand_as(t))

    def _draw_regions(self, t: torch.Tensor, regions: Regions) -> None:
        """``t``, a table of regions (:class:`.ranges.Regions`), drawn row by row: an image's index
        among its images, then a box inside that image, its corner uniform over the image and its
        far corner uniform between that and the image's edge. A table drawn as one spread (the
        capture's record of its values, all columns together) has indices outside the batch."""
        g = self._seeded_generator()
        kind = torch.float64 if t.dtype == torch.float64 else torch.float32
        u = torch.rand(t.shape[0], 5, generator=g, device=t.device, dtype=kind)
        extent = torch.tensor([regions.width, regions.height], device=t.device, dtype=kind)
        corner = u[:, 1:3] * extent
        far = corner + u[:, 3:5] * (extent - corner)
        index = (u[:, :1] * regions.images).floor_().clamp_(max=regions.images - 1)
        with torch.no_grad():
            t.copy_(torch.cat([index, corner, far], 1))

    def _keep_apart(self, ref: TensorRef, t: torch.Tensor) -> None:
        """Where ``t`` (``ref``, just made) agrees element by element with the input it must not
        (:attr:`apart`, made before it) or its second row with its first (:attr:`rows_apart`),
        those elements take others of its own values that do not: its spread stays, and no atom
        is its own neighbour. Each input once, as it is first made."""
        if ref in self._made_apart:
            return
        self._made_apart[ref] = t
        if ref in self.rows_apart and t.dim() == 2 and t.shape[0] == 2:
            _apart(t[1], t[0], self._seeded_generator())
        other = self._made_apart.get(self.apart.get(ref))
        if other is not None and other.shape == t.shape and ref not in self.values:
            _apart(t, other, self._seeded_generator())

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

    def _fill_pieces(self, t: torch.Tensor, ref: TensorRef) -> None:
        """Draw again the runs of ``t`` (made for ``ref``) that have layouts of their own (:meth:`own_runs`).

        Index runs of a tensor the capture recorded a spread for (several tables' ids, one
        table's after another) share its distinct values out in proportion to as many as each
        run can hold (its length, or its range where smaller), each run otherwise spread as the
        whole was: the record is of the whole tensor, and its share of distinct values applied
        to each run gave a large table's ids under half the original's distinct rows, and its
        lookup 35% less time. A run the capture recorded a spread for (:attr:`run_skews`) is
        drawn with its own."""
        flat = t.view(-1)
        runs = self.own_runs(ref)
        skew, recorded = self.skews.get(ref), self.run_skews.get(ref, {})
        room = {run: min(run[1] - run[0], rng.high - rng.low) for run, rng in runs if rng.kind == "uniform"}
        scale = min(1.0, skew.distinct * t.numel() / max(sum(room.values()), 1)) if skew is not None else 1.0
        parts = []
        for (a, b), rng in runs:
            own = recorded.get((a, b))  # (the run's own, where the capture recorded it)
            if own is None and skew is not None and (a, b) in room:
                own = replace(skew, distinct=scale * room[a, b] / (b - a), runs=())
            parts.append((flat[a:b], rng, own))
        self._draw_parts(ref, parts)

    def _draw_parts(self, ref: TensorRef, parts: list[tuple[torch.Tensor, IntRange, Skew | None]]) -> None:
        """Draw each part (a view of the tensor made for ``ref``: a run of its elements, a column)
        with its own range and spread, one after another from the seeded generator."""
        self._seeded_generator()
        with torch.no_grad():
            for view, rng, skew in parts:
                view.copy_(self._sample(view.dtype, ref, rng, view.numel(), skew=skew))

    def own_runs(self, ref: TensorRef) -> list[tuple[tuple[int, int], IntRange]]:
        """The runs of ``ref``'s elements that are drawn apart from the rest (:attr:`pieces`): each
        with a layout, or an index range other than the whole tensor's (the rows of a graph's edge
        index, read one by one, hold the same range as the whole)."""
        whole = self.ranges.get(ref)
        return [(run, rng) for run, rng in sorted(self.pieces.get(ref, {}).items())
                if not (rng.kind == "uniform" and whole is not None and (rng.low, rng.high) == (whole.low, whole.high))]  # fmt: skip

    def fill(self, t: torch.Tensor, ref: TensorRef, rng: IntRange | None = None) -> None:
        """Seeded data for ``t`` (integers in ``rng``, else in ``ref``'s range). Large contiguous
        tensors repeat one random block of TILE elements: drawing gigabytes of random numbers
        would dominate the setup time and buys nothing for timing (values keep their range and
        are not degenerate)."""
        n = t.numel()
        key = (ref.storage_id, ref.dtype)
        if n == 0 or key in self.untouched_bytes or key in self.overwritten or t.device.type == "meta":
            return  # (a meta tensor has shapes and no data)
        if ref in self.zeros or ref in self.preconditioners:
            t.zero_()
            if ref in self.preconditioners and t.dim() >= 2 and t.shape[-1] == t.shape[-2]:
                # (the identity times the default epsilon of Shampoo, which starts its preconditioners
                # at eps * I: the step's own g g^T then dominates, and the spectrum of their sum is the
                # original's kind, whose repeated small singular values an svd deflates)
                t.diagonal(dim1=-2, dim2=-1).fill_(PRECONDITIONER_START)
            elif ref in self.preconditioners:
                t.fill_(PRECONDITIONER_START)  # (a packed one: PSGD's triangle as a line unpacks nonsingular)
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
        columns = self.float_columns.get(ref)
        if columns is not None and t.numel() == ref.numel and t.is_contiguous():
            # column by column (a table's ids, counts and prices side by side): each column's draws
            # mapped through its own cells
            cells = [_quantile_cells(torch.tensor(c, dtype=torch.float64)) for c in columns]
            start, slope = (torch.stack([c[i] for c in cells]).to(device=t.device, dtype=kind) for i in (0, 1))
            drawn = torch.rand(ref.shape, generator=self._generator, device=t.device, dtype=kind)
            cell = drawn.mul(QUANTILE_CELLS).to(torch.int64).clamp_(max=QUANTILE_CELLS - 1)
            picked = torch.arange(len(columns), device=t.device) * QUANTILE_CELLS + cell
            t.copy_((start.reshape(-1)[picked] + slope.reshape(-1)[picked] * drawn).view(t.shape))
            return
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
            flat = distinct_draws(positions, nnz, g, dev)
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

    def _sample(self, dtype: torch.dtype, ref: TensorRef, rng: IntRange, n: int, skew: Skew | None = None) -> torch.Tensor:
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
        if rng.kind == "cuts" and (ref in self.parts or len(rng.values) == 2) and n > 1:
            # (each span between the original's smallest and largest: a sparse matrix's rows as
            # many nonzeros as the original's, not cut at uniform random points; or within the
            # bounds the op sets, a jagged batch's padded length)
            spans = bounded_parts(n - 1, *self.parts.get(ref, rng.values), max(rng.high, 0), g, dev)
            return torch.nn.functional.pad(spans.cumsum(0), (1, 0)).to(dtype)
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
            return bag_offsets(n, self.bags[ref], rng.high - 1, g, dev).to(dtype)
        if rng.kind == "offsets":
            # Monotone offsets into a bag of indices: 0, then sorted cut points.
            cuts = torch.sort(torch.randint(0, max(rng.high, 1), (n,), generator=g, device=dev)).values
            cuts[0] = 0
            return cuts.to(dtype)
        info = torch.iinfo(dtype)
        lo, hi = max(rng.low, info.min), min(rng.high, info.max)
        skew = skew or self.skews.get(ref)  # (a run of the tensor's: its own share of the distinct values)
        if skew is not None:
            return lo + skewed_rows(max(hi - lo, 1), n, skew, g, dev, rng.tables).to(dtype)
        return torch.randint(lo, max(hi, lo + 1), (n,), generator=g, device=dev).to(dtype)


def _apart(t: torch.Tensor, other: torch.Tensor, generator: torch.Generator, tries: int = 16) -> None:
    """``t``'s elements that equal ``other``'s (of its shape) take others of ``t``'s values, drawn at
    random, that do not (see :meth:`TensorFactory._keep_apart`); a contiguous ``t`` alone."""
    if not t.is_contiguous() or t.numel() < 2:
        return
    flat, against = t.view(-1), other.reshape(-1)
    for _ in range(tries):
        at = (flat == against).nonzero().squeeze(1)
        if not at.numel():
            return
        picked = flat[torch.randint(0, flat.numel(), (at.numel(),), generator=generator, device=t.device)]
        ok = picked != against[at]
        flat[at[ok]] = picked[ok]


def _within(t: torch.Tensor, rng: IntRange) -> bool:
    """Every value of ``t`` (an integer tensor, not on ``meta``) lies in the uniform range ``rng``."""
    if t.device.type == "meta" or t.dtype.is_floating_point or t.dtype.is_complex or t.dtype == torch.bool:
        return False
    if t.numel() == 0:
        return True
    low, high = torch.aminmax(t)
    return rng.low <= int(low) and int(high) < rng.high


#: Layouts of integer data that hold for elements in order (see :class:`.ranges.IntRange`)
_LAYOUTS = frozenset({"offsets", "cuts", "parts"})


def _done_as(ref: TensorRef) -> tuple:
    return (ref, True) if integral(ref) else (ref.key, False)


def _made_of(ref: TensorRef, sources_of) -> TensorRef | None:
    """The input (a tensor the factory makes) that ``ref`` holds the elements of, in order,
    through views and copies (``offsets.unsqueeze(0)``); ``ref`` itself where it is one; None
    where an op computed its values."""
    for _ in range(64):  # (a writer's reused ids could chain back; no program views a number deeper)
        found = sources_of(ref)
        if found is None:
            return ref
        pairs = found[0]
        if len(pairs) != 1 or pairs[0][1] not in ("view", "copy") or not same_elements(ref, pairs[0][0], pairs[0][1]):
            return None
        ref = pairs[0][0]
    return None


def _dense(ref: TensorRef) -> bool:
    return ref.defined and ref.layout_strides() == contiguous_strides(ref.shape)


def _moved_run(ref: TensorRef, src: TensorRef, how: str, a: int, b: int, rng: IntRange) -> tuple[int, int, IntRange] | None:
    """Where the run ``[a, b)`` of ``ref``'s elements, of layout ``rng``, lies in ``src``, and its
    layout there (see :meth:`TensorFactory._pass_pieces`); None where it does not pass."""
    if how in ("view", "copy"):
        if how == "copy" and ref.numel != src.numel:
            return None
        shift = ref.offset - src.offset if how == "view" else 0
        return (a + shift, b + shift, rng) if 0 <= a + shift < b + shift <= src.numel else None
    if how not in ("tail", "running") or rng.kind not in ("offsets", "cuts") or not ref.shape or not src.shape:
        return None
    width, into = ref.shape[-1], src.shape[-1]
    if a % width or b - a != width or ref.numel // width != src.numel // max(into, 1):
        return None
    row, total = a // width, rng.high - 1 if rng.kind == "offsets" else rng.high
    kind = "cuts" if how == "tail" else "parts"  # (running totals ending at the count; counts summing to it)
    return row * into, (row + 1) * into, IntRange(0, total, kind)
