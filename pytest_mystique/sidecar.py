"""The timing sidecar beside a trace: ``X.meta.json`` for ``X.json`` or ``X.json.gz``."""

from __future__ import annotations

import json
import math
import os
import statistics
from pathlib import Path


def sidecar_path(trace_path: str | os.PathLike) -> Path:
    p = Path(trace_path)
    name = p.name
    for suffix in (".json.gz", ".json"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    return p.with_name(f"{name}.meta.json")


def load_sidecar(trace_path: str | os.PathLike) -> dict | None:
    path = sidecar_path(trace_path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise ValueError(f"{path}: malformed timing sidecar: {e}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: malformed timing sidecar: not a JSON object")
    med = data.get("original_median_s")
    if med is not None and not (isinstance(med, (int, float)) and math.isfinite(med) and med > 0):
        raise ValueError(f"{path}: malformed timing sidecar: original_median_s must be a positive number")
    if not isinstance(data.get("anomaly_mode", False), bool):
        raise ValueError(f"{path}: malformed timing sidecar: anomaly_mode must be true or false")
    counts = data.get("recorded_ops")
    if counts is not None and not (isinstance(counts, list) and len(counts) == 2 and all(_count(c) for c in counts)):
        raise ValueError(f"{path}: malformed timing sidecar: recorded_ops must be two operator counts")
    span = data.get("profiled_ops")
    if span is not None and not (isinstance(span, list) and len(span) == 2 and all(_count(c) for c in span)
                                 and span[0] <= span[1]):  # fmt: skip
        raise ValueError(f"{path}: malformed timing sidecar: profiled_ops must be the least and the most operator "
                         f"counts of the profiled calls")  # fmt: skip
    for key, top in (("original_ops_s", math.inf), ("original_ops_share", 1.0)):
        v = data.get(key)
        if v is not None and not (_number(v) and 0 <= v <= top):
            raise ValueError(f"{path}: malformed timing sidecar: {key} must be a number from 0 to {top}")
    outside = data.get("original_outside")
    if outside is not None and not _outside_ok(outside):
        raise ValueError(f"{path}: malformed timing sidecar: original_outside must map at most {_MOST_OUTSIDE} range "
                         f"names (of at most {_LONGEST_NAME} characters) to shares from 0 to 1")  # fmt: skip
    for key, (ok, what) in INPUT_RECORDS.items():
        records = data.get(key)
        if records is not None and not (isinstance(records, list) and all(ok(r) for r in records)):
            raise ValueError(f"{path}: malformed timing sidecar: {key} must be a list of records with {what}")
    if not _pairs_ok(data.get("index_inputs") or []):
        raise ValueError(f"{path}: malformed timing sidecar: an index record's differs_from must be the place of an "
                         f"earlier record in index_inputs, of one dimension and of its own shape and dtype")  # fmt: skip
    return data


#: The most ranges ``original_outside`` may name, and the longest name it may give: they are
#: printed in a report, and a trace's sidecar is data.
_MOST_OUTSIDE, _LONGEST_NAME = 8, 200


def _outside_ok(outside) -> bool:
    """``original_outside`` (see :func:`.measure.outside_ranges`): range names to shares of the step."""
    return (isinstance(outside, dict) and len(outside) <= _MOST_OUTSIDE
            and all(isinstance(k, str) and 0 < len(k) <= _LONGEST_NAME and k.isprintable() and _number(v) and 0 <= v <= 1
                    for k, v in outside.items()))  # fmt: skip


def _pairs_ok(records: list[dict]) -> bool:
    """Each ``differs_from`` of index records (see :func:`.recorder._differs_from`): the place of
    an earlier one-dimensional record of the same shape and dtype."""
    for place, r in enumerate(records):
        j = r.get("differs_from")
        if j is not None and not (_count(j) and j < place and len(r["shape"]) == 1
                                  and records[j]["shape"] == r["shape"] and records[j]["dtype"] == r["dtype"]):  # fmt: skip
            return False
    return True


def _packed_record_ok(r) -> bool:
    """Packed weights' record (see :func:`.packed.packed_record`)."""
    if not (isinstance(r, dict) and isinstance(r.get("op"), str) and isinstance(r.get("kind"), str)):
        return False
    if "weight" not in r:
        return True  # (weights that did not unpack: the op and the type only)
    shape = r["weight"]
    if not (isinstance(shape, list) and 2 <= len(shape) <= 5 and all(_count(d) and d > 0 for d in shape)
            and math.prod(shape) <= _MOST_WEIGHTS and isinstance(r.get("dtype"), str)
            and isinstance(r.get("per_channel"), bool) and isinstance(r.get("bias"), bool)):  # fmt: skip
        return False
    if not r["kind"].startswith("Conv"):
        return True
    dims = r.get("stride")
    return (isinstance(dims, list) and 1 <= len(dims) <= 3
            and all(isinstance(r.get(k), list) and len(r[k]) == len(dims)
                    and all(_count(x) and x <= _MOST_GEOMETRY for x in r[k])
                    for k in ("stride", "padding", "dilation", "output_padding"))
            and all(x > 0 for x in (*r["stride"], *r["dilation"])) and len(shape) == len(dims) + 2
            and _count(r.get("groups")) and 0 < r["groups"] <= _MOST_GEOMETRY
            and isinstance(r.get("transpose"), bool))  # fmt: skip


#: Bounds on a packed-weights record: its weights' elements (4 GiB of int8) and each of a convolution's
#: strides, paddings, dilations and groups.
_MOST_WEIGHTS = 2**32
_MOST_GEOMETRY = 2**16


def _scalar_record_ok(r) -> bool:
    """A 0-dim input's record (see :func:`.recorder._scalar_records`)."""
    if not isinstance(r, dict):
        return False
    value, index, shapes = r.get("value"), r.get("index"), r.get("shapes")
    return (isinstance(r.get("op"), str) and isinstance(r.get("arg"), str) and isinstance(r.get("dtype"), str)
            and (index is None or _count(index))
            and isinstance(shapes, list) and all(isinstance(x, list) and all(_count(d) for d in x) for x in shapes)
            and (value is None or (_number(value) and (math.isfinite(value) if isinstance(value, float)
                                                       else -(2**63) <= value < 2**63))))  # fmt: skip


def _fresh_record_ok(r) -> bool:
    """The record of a tensor the step made from its own numbers (see :func:`.recorder._fresh_record`)."""
    if not _input_record_ok(r):
        return False
    values = r.get("values")
    if values is None:
        return True
    if not (isinstance(values, list) and len(values) == math.prod(r["shape"])):
        return False
    dtype = r["dtype"]
    if dtype == "bool":
        return all(isinstance(v, bool) for v in values)
    if dtype.startswith(("int", "uint")):
        return all(isinstance(v, int) and not isinstance(v, bool) and -(2**63) <= v < 2**64 for v in values)
    return all((_number(v) and math.isfinite(v)) or v in NON_FINITE for v in values)


#: How a recorded value that is not a finite number is written (JSON has no such numbers).
NON_FINITE = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}


def _float_record_ok(r) -> bool:
    if not _input_record_ok(r):
        return False
    fill = r.get("fill")
    if fill is not None and not (isinstance(fill, dict) and _fill_ok(fill, math.prod(r["shape"]))):
        return False
    if not isinstance(r.get("requires_grad", False), bool):
        return False
    stats = [r.get(k) for k in ("mean", "std", "low", "high")]
    values, quantiles = r.get("values"), r.get("quantiles")
    if all(v is None for v in stats):
        return values is None and quantiles is None  # (an input with a NaN or an infinity: no scale)
    columns = r.get("columns", [])
    return (all(_number(v) and math.isfinite(v) for v in stats) and stats[1] >= 0 and stats[2] <= stats[3]
            and (values is None or (_finite_numbers(values) and len(values) == math.prod(r["shape"])))
            and (quantiles is None or _quantiles_ok(quantiles))
            and isinstance(columns, list) and (not columns or len(r["shape"]) == 2 and len(columns) == r["shape"][1])
            and all(_quantiles_ok(c) for c in columns))  # fmt: skip


def _fill_ok(fill: dict, n: int) -> bool:
    """A floating input's mask fill (see :func:`.recorder._mask_fill`): its value (-inf, or a
    number at or below -1e4), how many of the ``n`` elements hold it, and where, as a mask's runs."""
    value = fill.get("value")
    value = NON_FINITE.get(value) if isinstance(value, str) else value
    return (_number(value) and (value == -math.inf or -math.inf < value <= -1e4)
            and _mask_record_ok({"shape": [n], "dtype": "bool", "trues": fill.get("trues"), **fill}))


def _quantiles_ok(quantiles) -> bool:
    """A spread's quantiles: a finite number a level of :data:`QUANTILE_LEVELS`, none falling."""
    return (_finite_numbers(quantiles) and len(quantiles) == len(QUANTILE_LEVELS)
            and all(a <= b for a, b in zip(quantiles, quantiles[1:])))  # fmt: skip


#: The levels of a floating input's recorded quantiles (``float_inputs[].quantiles``, one value a
#: level): every 32nd of its values and, towards both ends, the lowest and highest 1/64, 1/256,
#: 1/1024 and 1/4096 of them. A draw uniform between the 1/32 level and the lowest value would
#: spread a normal tensor's values a third wider than the original's (its variance, in the end
#: spans' long reach); the finer levels keep those spans' share of the draws small.
QUANTILE_LEVELS = (0.0, 1 / 4096, 1 / 1024, 1 / 256, 1 / 64, *(k / 32 for k in range(1, 32)),
                   63 / 64, 255 / 256, 1023 / 1024, 4095 / 4096, 1.0)  # fmt: skip


def _finite_numbers(x) -> bool:
    return isinstance(x, list) and all(_number(v) and math.isfinite(v) for v in x)


def _number(x) -> bool:
    """An int or a float as JSON gives them (not a bool)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _count(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def _input_record_ok(r) -> bool:
    return (isinstance(r, dict) and isinstance(r.get("shape"), list) and all(_count(d) for d in r["shape"])
            and isinstance(r.get("dtype"), str))  # fmt: skip


def _sparse_record_ok(r) -> bool:
    if not (_input_record_ok(r) and isinstance(r.get("layout"), str)):
        return False
    if r["layout"] != "sparse_coo":
        return True
    dims = r.get("sparse_dim")
    return (_count(dims) and 1 <= dims <= len(r["shape"]) and _count(r.get("nnz"))
            and r["nnz"] <= math.prod(r["shape"][:dims]) and isinstance(r.get("coalesced"), bool))  # fmt: skip


def _index_record_ok(r) -> bool:
    steps = r.get("steps", [0, 0]) if isinstance(r, dict) else None  # (bag boundaries: smallest and largest bag)
    rows = r.get("rows", []) if isinstance(r, dict) else None  # (a tensor of coordinates: each row's spread)
    return (_input_record_ok(r) and _spread_ok(r, math.prod(r["shape"]))
            and isinstance(steps, list) and len(steps) == 2 and all(_count(x) for x in steps) and steps[0] <= steps[1]
            and isinstance(rows, list) and (not rows or len(r["shape"]) == 2 and len(rows) == r["shape"][0])
            and all(isinstance(row, dict) and _spread_ok(row, r["shape"][1]) for row in rows)
            and _runs_ok(r.get("runs", []), math.prod(r["shape"])) and _values_ok(r) and _columns_ok(r)
            and isinstance(r.get("rows_differ", False), bool)
            and (not r.get("rows_differ") or len(r["shape"]) == 2 and r["shape"][0] == 2))  # fmt: skip


def _values_ok(r: dict) -> bool:
    """An index record's ``values`` (a small input's, see :data:`.recorder.EXACT_INTS`), where it has
    them: as many integers as its elements, between its lowest and highest."""
    values = r.get("values")
    if values is None:
        return True
    return (isinstance(values, list) and len(values) == math.prod(r["shape"])
            and all(type(v) is int and r.get("low", v) <= v <= r.get("high", v) for v in values))  # fmt: skip


def _columns_ok(r: dict) -> bool:
    """An index record's ``columns`` (see :data:`.recorder.INT_COLUMNS`), where it has them: one
    spread a column of its two dimensions."""
    columns = r.get("columns")
    if columns is None:
        return True
    shape = r["shape"]
    return (len(shape) == 2 and isinstance(columns, list) and len(columns) == shape[1]
            and all(isinstance(c, dict) and _spread_ok(c, shape[0]) for c in columns))  # fmt: skip


def _runs_ok(runs, n: int) -> bool:
    """An index record's ``runs``: spreads of runs of its ``n`` elements that ops read apart (see
    :func:`.recorder._record_run`), each with its start and length within them."""
    return isinstance(runs, list) and all(
        isinstance(r, dict) and _count(r.get("start")) and _count(r.get("length")) and r["length"] >= 1
        and r["start"] + r["length"] <= n and _spread_ok(r, r["length"]) for r in runs)  # fmt: skip


def _spread_ok(r: dict, n: int) -> bool:
    """A spread of ``n`` integers: a distinct count at most ``n``, the hottest value's share, its
    curve, the lowest and highest value (numbers, the lowest first) where it has them."""
    top, low, high = r.get("top"), r.get("low", 0), r.get("high", r.get("low", 0))
    return (_count(r.get("distinct")) and 1 <= r["distinct"] <= n and _number(top) and 0 < top <= 1
            and _number(low) and _number(high) and low <= high and _hot_ok(r.get("hot", []), r["distinct"])
            and _hot_values_ok(r.get("hot_values", []), low, high, r["distinct"])
            and _hot_runs_ok(r.get("hot_runs"), len(r.get("hot_values", [])), n))  # fmt: skip


def _hot_ok(hot, distinct: int) -> bool:
    """An index record's ``hot`` curve: [rank, share] pairs, ranks rising from 1 to at most the
    distinct count, shares in (0, 1] not falling."""
    if not (isinstance(hot, list) and all(isinstance(p, list) and len(p) == 2 and _count(p[0]) and 1 <= p[0] <= distinct
                                          and _number(p[1]) and 0 < p[1] <= 1 for p in hot)):  # fmt: skip
        return False
    return all(a[0] < b[0] and a[1] <= b[1] for a, b in zip(hot, hot[1:]))


def _hot_values_ok(values, low, high, distinct: int) -> bool:
    """An index record's ``hot_values``: distinct integers between its lowest and highest value, at
    most as many as its distinct count."""
    return (isinstance(values, list) and len(values) <= distinct and len(set(values)) == len(values)
            and all(isinstance(v, int) and not isinstance(v, bool) and low <= v <= high for v in values))  # fmt: skip


def _mask_record_ok(r) -> bool:
    """A boolean input's record: its count of true elements and, if any, the runs they stand in,
    which hold that many."""
    if not (_input_record_ok(r) and r["dtype"] == "bool" and _count(r.get("trues"))):
        return False
    n, runs = math.prod(r["shape"]), r.get("runs")
    return r["trues"] <= n and (runs is None or _hot_runs_ok([runs], 1, n) and sum(m for _, m in runs) == r["trues"])


def _hot_runs_ok(runs, hot: int, n: int) -> bool:
    """An index record's ``hot_runs`` (none, or a list for each of its ``hot`` hottest values):
    [start, length] runs of its ``n`` elements, each at least one long, in order, no two of any
    values overlapping."""
    if runs is None:
        return True
    if not (isinstance(runs, list) and len(runs) == hot and all(isinstance(rs, list) for rs in runs)):
        return False
    spans = [run for rs in runs for run in rs]
    if not all(isinstance(r, list) and len(r) == 2 and _count(r[0]) and _count(r[1]) and r[1] >= 1
               and r[0] + r[1] <= n for r in spans):  # fmt: skip
        return False
    ordered = sorted(spans)
    return all(a[0] + a[1] <= b[0] for a, b in zip(ordered, ordered[1:])) and all(rs == sorted(rs) for rs in runs)


#: The capture helper's records of a step's inputs (:func:`.recorder._record_inputs`), which a trace
#: captured elsewhere, with its timing alone beside it, does not have: each list's check of a
#: record, and what its records hold (for the error that refuses a malformed list).
INPUT_RECORDS = {
    "sparse_inputs": (_sparse_record_ok, "a shape, a dtype, a layout and, for sparse_coo, nnz, sparse_dim and "
                                         "coalesced"),
    "index_inputs": (_index_record_ok, "a shape, a dtype, a count of distinct values at most the elements, the top "
                                       "value's share and, if any, the smallest and largest of two steps, a curve of "
                                       "[rank, share] pairs (ranks rising within the distinct values, shares in (0, 1] "
                                       "not falling), the lowest and highest values (numbers, the lowest first), for a "
                                       "2-dimensional one, each row's spread (rows), the spreads of runs of its elements "
                                       "(runs: a start and a length within them), for a small one, its values (integers "
                                       "between the lowest and highest, one an element), for a table of fields, each "
                                       "column's spread (columns) and, for one of two rows, whether they never agree "
                                       "(rows_differ: true or false)"),
    "mask_inputs": (_mask_record_ok, "a shape, the dtype bool, a count of true elements at most the elements and, if "
                                     "any, the [start, length] runs they stand in (in order, within the tensor, as many "
                                     "as that count)"),
    "float_inputs": (_float_record_ok, "a shape, a dtype and, if any, a finite mean, a standard deviation of 0 or more, "
                                       "a lowest value no higher than the highest, its values (finite numbers, one an "
                                       "element) or its quantiles (finite numbers, one a level of QUANTILE_LEVELS, none "
                                       "lower than the one before), for a 2-dimensional one, each column's quantiles "
                                       "(columns), and whether it requires grad (true or false)"),
    "scalar_inputs": (_scalar_record_ok, "an operator, an argument's name, a place in a list or null, the operator's "
                                         "tensor shapes, a dtype and a finite value or null"),
    "fresh_inputs": (_fresh_record_ok, "a shape, a dtype and, if any, its values (one an element: booleans for bool, "
                                       "integers for an integer type, numbers or \"inf\", \"-inf\", \"nan\" for a "
                                       "floating one)"),
    "packed_weights": (_packed_record_ok, "an operator, a type and, if any, the weights' shape and type, per_channel and "
                                          "bias, and for a convolution its stride, padding, dilation and output padding "
                                          "(one number per dimension), groups and transpose"),
}  # fmt: skip


def write_sidecar(trace_path: str | os.PathLike, samples_s: list[float], *, what: str = "", device: str = "cpu",
                  threads: int | None = None, extra: dict | None = None) -> Path:  # fmt: skip
    """Write the corpus-format sidecar (``original_median_s``, samples, versions) atomically, with
    what the original's time depends on besides the trace: the CPU model, Python, and the C heap's
    regime (:func:`.measure.allocator_regime`; on CPU it alone can move a step by 30%)."""
    import platform

    import torch

    from .baseline import atomic_write
    from .environment import cpu_model
    from .measure import allocator_regime

    path = sidecar_path(trace_path)
    name = path.name[: -len(".meta.json")]
    data = {
        "name": name,
        "original_median_s": statistics.median(samples_s),
        "original_min_s": min(samples_s),
        "original_samples_s": [float(x) for x in samples_s],
        "torch": str(torch.__version__),
        "threads": threads if threads is not None else torch.get_num_threads(),
        "device": device,
        "cpu_model": cpu_model(),
        "python": platform.python_version(),
        "allocator": allocator_regime(),
        "what": what,
        **(extra or {}),
    }
    atomic_write(path, json.dumps(data, indent=1))
    return path


def add_to_sidecar(trace_path: str | os.PathLike, **fields) -> None:
    """Add ``fields`` to the trace's sidecar (written atomically)."""
    from .baseline import atomic_write

    data = load_sidecar(trace_path) or {}
    data.update(fields)
    atomic_write(sidecar_path(trace_path), json.dumps(data, indent=1))


def recorded_device(side: dict) -> str | None:
    """The device a sidecar says the original step ran on (``cpu``, ``cuda``), where it says."""
    device = side.get("device")
    return device if isinstance(device, str) and device else None


def same_device_kind(recorded: str | None, replayed: str | None) -> bool:
    """The original's device (a sidecar's ``cpu``, ``cuda``) and the replay's (``cuda:0``) are of
    one kind, or either is not known: a step's time on one kind says nothing of its time on another."""
    return not recorded or not replayed or recorded.split(":")[0] == replayed.split(":")[0]


def unlike(side: dict, *, threads: int | None, allocator: str, device: str | None = None) -> list[str]:
    """How the original run of a sidecar differs from this replay in what moves a step's time
    besides the trace (the fidelity ratio compares unlike things then, or is not given): the kind
    of device, threads, CPU model, the C heap's regime. Fields the sidecar lacks (older captures)
    are not guessed."""
    from .environment import cpu_model

    notes = []
    recorded = recorded_device(side)
    if not same_device_kind(recorded, device):
        notes.append(f"the original ran on {recorded[:40]}, the replay on {device}: "
                     f"a step's time on one kind of device says nothing of its time on another")  # fmt: skip
    if side.get("threads") not in (None, threads):
        notes.append(f"the original ran with {side['threads']} thread(s), the replay with {threads}")
    if side.get("cpu_model") and side["cpu_model"] != cpu_model():
        notes.append(f"the original ran on {side['cpu_model']!r}, the replay on {cpu_model()!r}")
    if side.get("allocator") and side["allocator"] != allocator:
        notes.append(f"the original ran with the {side['allocator']} C heap, the replay with the {allocator} one "
                     f"(alone up to 30% on CPU)")  # fmt: skip
    counts = side.get("recorded_ops")
    if counts and (side.get("recorded_ops_differ") is True or counts[0] != counts[1]):
        notes.append(f"two recorded calls of the original step ran different operators ({differing(*counts)}; random "
                     f"or data-dependent control flow): its timing covers steps other than the one traced")  # fmt: skip
    span = side.get("profiled_ops")
    if span and span[0] != span[1]:
        notes.append(f"the original step's profiled calls after the traced one ran from {span[0]} to {span[1]} operators "
                     f"(control flow that follows the data or the training's progress, as an adaptive solver's steps "
                     f"do): its timing covers steps other than the one traced")  # fmt: skip
    return notes


def differing(a, b) -> str:
    """How two recorded calls' operators (or their counts) differ, in words."""
    n, m = (len(x) if isinstance(x, list) else x for x in (a, b))
    return f"{n} and {m}" if n != m else f"{n} each, in another order or of other kinds"


def take_record(records: list[dict], shape: tuple[int, ...], dtype: str) -> dict | None:
    """The first of the capture helper's ``records`` of an input of ``shape`` and ``dtype``, taken
    out of the list: records are matched to the trace's inputs in the order the step read them."""
    record = next((r for r in records if r["shape"] == list(shape) and r["dtype"] == dtype), None)
    if record is not None:
        records.remove(record)
    return record
