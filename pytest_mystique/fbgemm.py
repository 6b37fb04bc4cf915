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

The weight tensors themselves (gigabytes in a recommender's trace) are read only at the rows the
indices name; :func:`sparse_tables` lists them so that large ones are left as the operating system
gives them (zero pages, not committed until a lookup touches a row) instead of being filled.
"""

from __future__ import annotations

import math
from typing import Any

from .trace import TensorRef

#: Names the TBE operators give their packed weights and optimizer state, by schema generation.
_TABLE_ARGS = ("dev_weights", "uvm_weights", "host_weights", "momentum1_dev", "momentum1_uvm", "momentum1_host",
               "momentum2_dev", "momentum2_uvm", "momentum2_host")  # fmt: skip


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


def tbe_values(name: str, args: dict[str, Any]) -> dict[TensorRef, tuple[str, Any]]:
    """Per input tensor of the FBGEMM op ``name`` (``args``: schema argument name -> recorded
    value): ``("values", [...])`` for exact contents, ``("range", high)`` for indices in
    ``[0, high)``, ``("cuts", n)`` for bag offsets from 0 to ``n``, ``("parts", n)`` for lengths
    summing to ``n``."""
    out: dict[TensorRef, tuple[str, Any]] = {}

    def put(arg: str, how: tuple[str, Any]) -> None:
        ref = _ref(args, arg)
        if ref is not None:
            out[ref] = how

    n_indices = _numel(_ref(args, "indices") or _ref(args, "values"))
    if name in _DATA_SIZED:
        permute = _ref(args, "permute")
        if permute is not None:
            put("permute", ("values", list(range(_numel(permute) - 1, -1, -1))))  # a real permutation
        put("lengths", ("parts", n_indices))
        return out
    if name == "bounds_check_indices":
        rows = _ref(args, "rows_per_table")
        if rows is not None:
            put("rows_per_table", ("values", [max(n_indices, 2)] * _numel(rows)))
        put("indices", ("range", max(n_indices, 2)))
        put("offsets", ("cuts", n_indices))
        return out
    if not (name.startswith("split_embedding_codegen_lookup_") or name == "dense_embedding_codegen_lookup_function"):
        return out
    d_offsets = _ref(args, "D_offsets")
    total_d, max_d = _int(args, "total_D"), _int(args, "max_D")
    if d_offsets is None or total_d is None or max_d is None:
        return out
    tables = _numel(d_offsets) - 1
    widths = table_widths(tables, total_d, max_d)
    weights = max((_numel(_ref(args, a)) for a in _TABLE_ARGS[:3]), default=0)
    rows = weights // total_d if widths else 0
    if not widths or rows < 1:
        return out
    starts = [0]
    for w in widths:
        starts.append(starts[-1] + w)
    put("D_offsets", ("values", starts))
    put("weights_offsets", ("values", [rows * s for s in starts[:-1]]))
    put("hash_size_cumsum", ("values", [rows * t for t in range(tables + 1)]))
    for arg in ("weights_placements", "momentum1_placements", "momentum2_placements"):
        ref = _ref(args, arg)
        if ref is not None:
            put(arg, ("values", [0] * _numel(ref)))  # every table in one place
    for state in ("momentum1", "momentum2"):
        size = max((_numel(_ref(args, f"{state}_{where}")) for where in ("dev", "uvm", "host")), default=0)
        per_row = size // (rows * tables) if size else 0
        # element-wise state is laid out like the weights; row-wise state has one value per row
        put(f"{state}_offsets", ("values", [rows * s for s in starts[:-1]] if per_row > 1 else
                                 [rows * t for t in range(tables)]))  # fmt: skip
    put("indices", ("range", rows))
    put("offsets", ("cuts", n_indices))
    return out


#: Sparse-feature permutations take the size of their output as an argument: the sum of the
#: lengths the original saw. The replay's lengths are its own (seeded, or sent by the other ranks),
#: so the size is recomputed from them; a recorded one that did not match would leave part of the
#: output unwritten (garbage indices for the lookups after it).
_DATA_SIZED = {"permute_2D_sparse_data": "permuted_lengths_sum", "permute_1D_sparse_data": "permuted_lengths_sum",
               "permute_sparse_data": "permuted_lengths_sum"}  # fmt: skip


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
    if not name.startswith(("split_embedding_codegen_lookup_", "dense_embedding_codegen_lookup_")):
        return []
    return [ref for a in _TABLE_ARGS if (ref := _ref(args, a)) is not None]
