"""Values the FBGEMM table-batched embedding (TBE) operators need, rebuilt from a trace's shapes.

A TBE operator (``fbgemm::split_embedding_codegen_lookup_*_function``,
``dense_embedding_codegen_lookup_function``, ``bounds_check_indices``) looks up many embedding
tables packed into one weight tensor, described by small integer tensors whose values the trace
does not record: where each table starts (``weights_offsets``), each table's width
(``D_offsets``), the cumulative row counts (``hash_size_cumsum``). Random values there make the
kernel index outside its tables and fail. This module derives values consistent with the recorded
shapes and scalars: ``T`` tables (from ``D_offsets``), widths summing to ``total_D`` with the
widest ``max_D``, and equal row counts filling the recorded weight tensor. Index tensors get values
valid for those tables, bag offsets run from 0 to the number of indices, and the lengths of a
sparse feature sum to the number of indices.

FBGEMM 1.x's lookups (``*_function_pt2``) pass the packed weights and optimizer state as lists;
they are read under the older schema's names. Each table's row count is not in a trace either:
the tables are taken as equal, and the bounds check passes every index.

The weight tensors themselves (gigabytes in a recommender's trace) are read only at the rows the
indices name; :func:`sparse_tables` lists them so that large ones are left as the operating system
gives them (zero pages, not committed until a lookup touches a row) instead of being filled, in a
training step, whose backward pass writes the rows the lookups read (:mod:`.plan` fills an
inference step's: a row no one wrote reads the kernel's single page of zeros, always in the caches).
"""

from __future__ import annotations

import math
from typing import Any

from .ranges import IntRange
from .trace import ListValue, TensorRef

#: Names the TBE operators give their packed weights and their optimizer state, by schema generation.
_WEIGHT_ARGS = ("dev_weights", "uvm_weights", "host_weights")
_STATE_ARGS = tuple(f"{state}_{where}" for state in ("momentum1", "momentum2") for where in ("dev", "uvm", "host"))


#: A table's row count that no index reaches (int64).
ANY_ROW = 1 << 62

#: Sparse-feature permutations take the size of their output as an argument: the sum of the
#: lengths the original saw. The replay's lengths are its own (seeded, or sent by the other ranks),
#: so the size is recomputed from them; a recorded one that did not match would leave part of the
#: output unwritten (garbage indices for the lookups after it).
_DATA_SIZED = {"permute_2D_sparse_data": "permuted_lengths_sum", "permute_1D_sparse_data": "permuted_lengths_sum",
               "permute_sparse_data": "permuted_lengths_sum"}  # fmt: skip


#: The table-batched lookups: the training ones (one per optimizer), the dense one, and the
#: forward kernels a lookup calls (FBGEMM 1.x records its ``*_pt2_wrapper`` under the lookup).
_LOOKUPS = ("split_embedding_codegen_lookup_", "dense_embedding_codegen_lookup_function",
            "split_embedding_codegen_forward_")  # fmt: skip

#: FBGEMM 1.x's lookups (``*_function_pt2``) pass the packed weights and each optimizer state as one
#: list, packed as its invoker does for a lookup on the host or on a device; by its length, the
#: names those tensors have in the older schema, where each was an argument of its own.
_PT2_LISTS = {"weights": {3: ("host_weights", "weights_placements", "weights_offsets"),
                          5: ("dev_weights", "uvm_weights", "weights_placements", "weights_offsets",
                              "lxu_cache_weights")},
              "momentum1": {3: ("momentum1_host", "momentum1_placements", "momentum1_offsets"),
                            4: ("momentum1_dev", "momentum1_uvm", "momentum1_placements", "momentum1_offsets")},
              "momentum2": {3: ("momentum2_host", "momentum2_placements", "momentum2_offsets"),
                            4: ("momentum2_dev", "momentum2_uvm", "momentum2_placements", "momentum2_offsets")}}  # fmt: skip


def _spread_lists(args: dict[str, Any]) -> dict[str, Any]:
    """``args`` with the list arguments of a PT2 lookup also under their older names (a list of
    another length, which no invoker packs, is left as it is)."""
    out = dict(args)
    for arg, layouts in _PT2_LISTS.items():
        v = args.get(arg)
        names = layouts.get(len(v.items)) if isinstance(v, ListValue) else None
        if names:
            out.update(zip(names, v.items))
    return out


def _ref(args: dict, name: str) -> TensorRef | None:
    v = args.get(name)
    return v if isinstance(v, TensorRef) and v.defined else None


def _int(args: dict, name: str) -> int | None:
    v = args.get(name)
    v = getattr(v, "value", None)
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _numel(ref: TensorRef | None) -> int:
    return math.prod(ref.shape) if ref is not None else 0


def table_widths(tables: int, total_d: int, max_d: int) -> list[int] | None:
    """Widths of ``tables`` tables summing to ``total_d``, the first ``max_d`` wide and none wider."""
    if tables < 1 or max_d < 1 or total_d < tables or total_d > tables * max_d:
        return None
    if tables == 1:
        return [total_d] if total_d == max_d else None
    rest, others = total_d - max_d, tables - 1
    widths = [max_d] + [rest // others + (1 if i < rest % others else 0) for i in range(others)]
    return widths if min(widths) >= 1 else None


def tbe_ranges(name: str, args: dict[str, Any]) -> dict[TensorRef, IntRange]:
    """The values each integer input of the FBGEMM op ``name`` needs (``args``: schema argument
    name -> recorded value): exact metadata, indices inside their tables, bag offsets from 0 to
    the number of indices, lengths summing to it."""
    out: dict[TensorRef, IntRange] = {}

    def put(arg: str, rng: IntRange) -> None:
        ref = _ref(args, arg)
        if ref is not None:
            out[ref] = rng

    def exactly(arg: str, values: list[int]) -> None:
        put(arg, IntRange(0, len(values), "values", tuple(values)))

    n_indices = _numel(_ref(args, "indices") or _ref(args, "values"))
    if name in _DATA_SIZED:
        exactly("permute", list(range(_numel(_ref(args, "permute")) - 1, -1, -1)))  # a real permutation
        put("lengths", IntRange(0, n_indices, "parts"))
        return out
    if name == "bounds_check_indices":
        # Each table's row count is not recorded: every index passes, as every one of the original's
        # did (a check that found one outside its table would have rewritten it). The indices take
        # their range from the lookup that reads them, over all of its tables' rows.
        exactly("rows_per_table", [ANY_ROW] * _numel(_ref(args, "rows_per_table")))
        put("offsets", IntRange(0, n_indices, "cuts"))
        return out
    if not name.startswith(_LOOKUPS):
        return out
    args = _spread_lists(args)
    d_offsets = _ref(args, "D_offsets")
    total_d, max_d = _int(args, "total_D"), _int(args, "max_D")
    if d_offsets is None or total_d is None or max_d is None:
        return out
    tables = _numel(d_offsets) - 1
    widths = table_widths(tables, total_d, max_d)
    rows = max(_numel(_ref(args, a)) for a in _WEIGHT_ARGS) // total_d if widths else 0
    if not widths or rows < 1:
        return out
    starts = [0]
    for w in widths:
        starts.append(starts[-1] + w)
    exactly("D_offsets", starts)
    exactly("weights_offsets", [rows * s for s in starts[:-1]])
    exactly("hash_size_cumsum", [rows * t for t in range(tables + 1)])
    for arg in ("weights_placements", "momentum1_placements", "momentum2_placements"):
        exactly(arg, [0] * _numel(_ref(args, arg)))  # every table in one place
    for state in ("momentum1", "momentum2"):
        size = max(_numel(_ref(args, f"{state}_{where}")) for where in ("dev", "uvm", "host"))
        # element-wise state is laid out like the weights; row-wise state has one value per row
        exactly(f"{state}_offsets", [rows * s for s in starts[:-1]] if size > rows * tables else
                [rows * t for t in range(tables)])  # fmt: skip
    put("indices", IntRange(0, rows, derived=True, tables=tables))  # (tables of other sizes: ids may lie beyond)
    put("offsets", IntRange(0, n_indices, "cuts"))
    return out


def drop_data_sizes(name: str, names: list[str], values: list) -> str | None:
    """Clear in ``values`` an argument of the op ``name`` that the replay must recompute from its
    own data; returns the note saying so, or None."""
    arg = _DATA_SIZED.get(name)
    if arg is None or arg not in names or values[names.index(arg)] is None:
        return None
    values[names.index(arg)] = None
    return f"fbgemm::{name}: {arg} recomputed from the replay's lengths (the recorded one is the original data's)"


def sparse_tables(name: str, args: dict[str, Any]) -> list[TensorRef]:
    """The packed tables and optimizer state a TBE lookup reads and writes only row by row."""
    if not name.startswith(_LOOKUPS):
        return []
    args = _spread_lists(args)
    return [ref for a in _WEIGHT_ARGS + _STATE_ARGS if (ref := _ref(args, a)) is not None]
