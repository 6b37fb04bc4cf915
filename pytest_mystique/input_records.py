"""The capture helper's records of a step's inputs, given to a replay's seeded data.

A trace records each input tensor's shape, type and layout, and nothing of its values. The capture
helper (:func:`.recorder._record_inputs`) keeps what a replay needs of them in the trace's sidecar:
the spread of each integer input, the scale and spread of each floating one, the true elements of
each mask, the values of numbers the program passed and of tensors it made from its own numbers.
:class:`InputRecords` matches those records to the trace's inputs, in the order the capture read
them, and hands what each says to the tensor factory (:class:`.tensors.TensorFactory`), with a
note for the report. The plan (:mod:`.plan`) says which inputs there are; where the sidecar has no
record, the factory draws by the plan's rules.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections import Counter, deque
from collections.abc import Callable

import msgspec
import torch

from .distributions import Bags, Skew
from .ops import Unsupported, qualified_name, resolve
from .ranges import DIVISOR, IntRange, real_floating
from .sidecar import NON_FINITE, take_record
from .steps import PlannedOp, Report, TensorArg, TensorListArg
from .tensors import TensorFactory, torch_dtype
from .trace import Node, TensorRef, Trace, contiguous_strides, tensors_of

#: A recorded floating input with values beyond this is no data with a scale (see InputRecords.scale_floats).
_SCALE_LIMIT = 1e4


class InputRecords:
    """The sidecar's records of ``trace``'s inputs (``sidecar``: () -> the sidecar, empty where
    there is none), given to ``factory``; notes go to ``report``. Each method takes the inputs of
    one kind, as the plan found them; after :meth:`scale_floats`, :attr:`without_grad` holds the
    allocations of the floating inputs that the capture recorded without ``requires_grad``."""

    def __init__(self, trace: Trace, factory: TensorFactory, report: Report, sidecar: Callable[[], dict]):
        self.trace = trace
        self.factory = factory
        self.report = report
        self.sidecar = sidecar
        self.without_grad: set[tuple[int, str]] = set()

    def _unfilled(self, ref: TensorRef) -> bool:
        """``ref`` lies in an input allocation that is left unfilled (:meth:`.plan.Planner._overwritten`)."""
        return (ref.storage_id, ref.dtype) in self.factory.overwritten

    def scale_floats(self, float_inputs: list[TensorRef]) -> None:
        """Floating inputs of the step get the original's scale where the capture helper recorded
        it (the sidecar's ``float_inputs``, matched as index inputs are): uniform with its mean and
        standard deviation, within its lowest and highest value, instead of the range the rules
        give (:func:`.ranges.float_ranges`), which know a layer's initialisation and not what a
        trained model, or one initialised otherwise, holds. An untrained MobileViT's weights
        (deviation 0.02) shrank its activations into subnormal numbers, which made its SiLUs and
        matrix products several times slower; drawn by rule, the replay's were not. Where the
        record holds the input's values (a small one) or its quantiles, those are drawn from
        instead (:meth:`.tensors.TensorFactory.fill`): the shape of the spread passes too (see
        :func:`.recorder._float_scale`). A record whose values reach beyond +-1e4 (an attention
        mask's stand-in for -inf) keeps the rules, but for one of no negative values, which is
        drawn from its lowest value to 1e4 (a transform's table of positive weights up to 270,000,
        whose square root a signed draw turned NaN). The record of an input that an op writes whole
        before any reads it (compiled code's ``out=`` buffers, whose recorded bytes are whatever lay
        there) is passed over: it is left unfilled (:meth:`.plan.Planner._overwritten`)."""
        records = list(self.sidecar().get("float_inputs", [])) if float_inputs else []
        scaled = kept = positive = 0
        for ref in float_inputs:
            record = take_record(records, ref.shape, ref.dtype)
            if record is not None and record.get("requires_grad") is False:
                self.without_grad.add((ref.storage_id, ref.dtype))
            if record is None or self._unfilled(ref):
                continue
            fill = record.get("fill")
            if fill is not None:  # (an additive mask: its fill where the original's stood, checked by the loader)
                value = float(NON_FINITE.get(fill["value"], fill["value"]))
                if math.isfinite(value) and real_floating(ref):  # (float32's lowest, read back, overflows it)
                    value = max(value, -torch.finfo(torch_dtype(ref.dtype)).max)
                runs = tuple((s, m) for s, m in fill.get("runs", ())) or _triangle(ref, fill["trues"])
                self.factory.fills[ref] = (value, fill["trues"], runs)
            if "std" not in record:
                continue
            low, high, mean = record["low"], record["high"], record["mean"]
            if max(abs(low), abs(high)) > _SCALE_LIMIT:
                kept += 1
                if 0 <= low <= _SCALE_LIMIT:
                    # (no stand-in for -inf: a table of positive values, whose square root a
                    # signed draw turned NaN) its sign holds, and its values up to the limit
                    self.factory.float_bounds[ref] = (low, _SCALE_LIMIT)
                    positive += 1
                continue
            half = math.sqrt(3) * record["std"]  # (a uniform draw of that deviation)
            self.factory.float_bounds[ref] = (max(low, mean - half), min(high, mean + half))
            scaled += 1
            if record.get("values") is not None:
                self.factory.float_values[ref] = tuple(record["values"])
            elif record.get("quantiles") is not None:
                self.factory.float_quantiles[ref] = tuple(record["quantiles"])
                if record.get("columns") and len(ref.shape) == 2:  # (checked by the sidecar's loader)
                    self.factory.float_columns[ref] = tuple(tuple(c) for c in record["columns"])
        exact, spread = len(self.factory.float_values), len(self.factory.float_quantiles)
        if scaled - exact - spread:
            self.report.notes[f"{scaled - exact - spread} floating input(s) drawn at the original's scale, as the capture "
                              f"recorded (its mean and deviation, within its lowest and highest value)"] += 1  # fmt: skip
        if spread:
            columns = len(self.factory.float_columns)
            by_columns = (f"; {columns} of them column by column, tables of features whose columns spread unlike each "
                          f"other" if columns else "")  # fmt: skip
            self.report.notes[f"{spread} floating input(s) drawn at the original's scale and spread, as the capture "
                              f"recorded (between its quantiles, each span as often as the share of values it "
                              f"holds{by_columns})"] += 1  # fmt: skip
        if exact:
            self.report.notes[f"{exact} small floating input(s) hold the original's values, as the capture recorded"] += 1
        if self.factory.fills:
            self.report.notes[f"{len(self.factory.fills)} floating input(s) hold a mask's fill (-inf, or a stand-in for "
                              f"it) where the original's did, as the capture recorded (an additive attention "
                              f"mask)"] += 1  # fmt: skip
        if kept:
            self.report.notes[f"{kept} floating input(s) whose recorded values reach beyond +-{_SCALE_LIMIT:g} (a mask's "
                              f"stand-in for infinity) drawn in the ranges the replay's rules give"
                              + (f", {positive} of them none negative, drawn from their lowest value to {_SCALE_LIMIT:g}"
                                 if positive else "")] += 1  # fmt: skip

    def exact_scalars(self, planned: list[PlannedOp], reads: list[tuple[int, int, TensorRef]],
                       written: set[TensorRef]) -> None:  # fmt: skip
        """0-dim inputs of the step take the values the capture helper recorded (the sidecar's
        ``scalar_inputs``), matched by where they were read (the operator, the argument, its place
        in a list, the operator's tensor shapes), read by read. A number the program passed is a
        new tensor at each read, freed at once, and a trace writer gives the next one the same ids
        (so it does to a number the forward pass saved for the backward one): each read of a 0-dim
        input that no op writes gets a tensor of its own with its value. Shared, an AdamW's bias
        correction (0.077) stood in for its weight decay (0.999999) and shrank a MobileViT's
        parameters thirteen-fold a step. One that an op writes in place (a step count) stays one
        tensor, with its first read's value. Without a record a number is drawn from 0.5 to 1 (its
        sign and rough scale pass, not its value), and a scale of 0.088 drawn as 0.97 made a T5's
        logits ten times too large and its step five times slower."""
        queues: dict[tuple, deque] = {}
        for r in self.sidecar().get("scalar_inputs", []) if reads else ():
            key = (r["op"], r["arg"], r["index"], tuple(map(tuple, r["shapes"])), r["dtype"])
            queues.setdefault(key, deque()).append(r["value"])
        if not queues:
            return
        first: set[TensorRef] = set()  # written ones given their first read's value
        own_ids = itertools.count(-1, -1)  # (the per-read tensors' ids: distinct, and no trace's)
        exact = 0
        for i, pos, ref in reads:
            queue = queues.get(_read_at(planned[i], pos, ref) + (ref.dtype,))
            if not queue:
                continue
            value = queue.popleft()
            # (an integer type takes integers only; None: the value was not a finite number)
            fits = value is not None and (isinstance(value, int) or real_floating(ref))
            if ref not in written:
                if fits:
                    own_id = next(own_ids)
                    own = msgspec.structs.replace(ref, tensor_id=own_id, storage_id=own_id)
                    v = planned[i].values[pos]
                    if isinstance(v, TensorListArg):
                        v.refs[v.refs.index(ref)] = own
                    else:
                        planned[i].values[pos] = TensorArg(own)
                    self.factory.exact[own] = value
                    exact += 1
            elif ref not in first:
                first.add(ref)
                if fits:
                    self.factory.exact[ref] = value
                    exact += 1
        if exact:
            self.report.notes[f"{exact} 0-dim input(s) (numbers the program passed, 0-dim parameters) hold the "
                              f"original's values, as the capture recorded"] += 1  # fmt: skip

    def as_the_capture_read(self, first_reader: dict[TensorRef, int], planned: list[PlannedOp],
                             records: str) -> list[TensorRef]:  # fmt: skip
        """The inputs of ``first_reader`` (in the order the planned ops first read them, each with
        the position of the first in ``planned``) in the order the capture
        helper's record lists them, which it matches: the capture looks at the operators that
        reach torch's dispatch modes, which an op of torch's composites never does (its
        ``CompositeImplicitAutograd`` kernel runs first, and the operators it calls do reach
        them), and a composite may read its arguments in another order than it takes them:
        ``kl_div(input, target)`` reads ``target`` first (``xlogy(target, target)``). Taken in
        the op's order, two inputs of one shape swapped their records (a distillation loss's
        log-probabilities drawn as its probabilities and back: the loss NaN). Only the inputs
        an op reads first together, two of them or more, are reordered, by where the operators it
        ran inside it (as the trace records them) read each first. ``records``: the sidecar's list
        they are matched to. An input that reads the very elements of one before it in another
        layout (``weight.t()``, made by an operator inside a replayed one: a linear layer's) is left
        out: the capture saw an operator make it and recorded its base alone, and matched, it took
        the record of the next input of its shape (an optimizer's state, 1e-18 where the weight was
        0.17), which its fill then wrote over the weight."""
        if not self.sidecar().get(records):  # (no records to match: any order will do)
            return list(first_reader)
        aliases = _aliases(first_reader)
        inputs = [ref for ref in first_reader if ref not in aliases]
        by_reader: dict[int, list[TensorRef]] = {}
        for ref, i in first_reader.items():
            by_reader.setdefault(i, []).append(ref)
        order: dict[TensorRef, int] = {}
        for i, refs in by_reader.items():
            p = planned[i]
            kinds = Counter((r.shape, r.dtype) for r in refs)  # (records are matched by shape and type)
            if max(kinds.values()) < 2 or p.collective or not _composite(p.overload):
                continue
            seen = self._reads_inside(p.node)
            if seen:
                rank = {key: n for n, key in enumerate(seen)}
                ahead = sorted(refs, key=lambda r: rank.get(r.key, len(rank)))
                order.update({r: n for n, r in enumerate(ahead)})
        if not order:
            return inputs
        slots = {ref: n for n, ref in enumerate(inputs)}
        return sorted(inputs, key=lambda r: (first_reader[r], order.get(r, 0), slots[r]))

    def _reads_inside(self, node: Node) -> list[tuple[int, int]]:
        """The tensors the operators inside ``node`` read, in the order they read them first,
        through each composite among them to the operators it calls (as the capture saw them)."""
        seen: dict[tuple[int, int], None] = {}
        for child in self.trace.children_ops(node.id):
            overload = _overload_or_none(child.op_schema or "")
            deeper = self._reads_inside(child) if overload is not None and _composite(overload) else []
            for key in deeper or [r.key for r in tensors_of(child.inputs)]:
                seen.setdefault(key)
        return list(seen)

    def fresh_values(self, reads: list[TensorRef]) -> None:
        """Tensors the program made from its own numbers inside the step (``torch.tensor(list)``:
        a trace records an uninitialised allocation, read before any op wrote it) hold the values
        the capture helper recorded (the sidecar's ``fresh_inputs``, matched in the order the
        step made them among those of the same shape and type). Drawn at random, a quantile's
        levels fell outside [0, 1] and the op refused them; a divisor (an image's width and
        height) came out 0 or 1. A writer that gives a later such tensor the same ids gives the
        replay one tensor for both: it holds the first one's values (the later records are
        passed over, so that the ones after them still line up)."""
        records = list(self.sidecar().get("fresh_inputs", [])) if reads else []
        given = 0
        for ref in reads:
            record = take_record(records, ref.shape, ref.dtype) if records else None
            values = None if record is None else record.get("values")
            if values is None or ref in self.factory.values or ref in self.factory.exact or self._unfilled(ref):
                continue
            values = tuple(NON_FINITE.get(v, v) if isinstance(v, str) else v for v in values)
            if real_floating(ref):  # (nine digits of float32's largest, -3.40282347e+38, read back overflow it)
                top = torch.finfo(torch_dtype(ref.dtype)).max
                values = tuple(min(max(v, -top), top) if math.isfinite(v) else v for v in values)
            if ref.shape == ():
                self.factory.exact[ref] = values[0]
            else:
                self.factory.values[ref] = values
            given += 1
        if given:
            self.report.notes[f"{given} tensor(s) the program made from its own numbers (torch.tensor) hold the "
                              f"original's values, as the capture recorded"] += 1  # fmt: skip

    def place_masks(self, mask_inputs: list[TensorRef]) -> None:
        """Boolean inputs of the step (a key padding mask, an image's pixel mask given with the
        batch) hold as many true elements as the original's did, where the capture helper recorded
        them (the sidecar's ``mask_inputs``, matched as index inputs are), and where they stood if
        it recorded their runs (:func:`.distributions.mask_of`). Without a record a mask is drawn half
        true: a padding mask then hid half of each row's keys, and some rows' all of them."""
        records = list(self.sidecar().get("mask_inputs", [])) if mask_inputs else []
        causal = 0
        for ref in mask_inputs:
            record = take_record(records, ref.shape, ref.dtype)
            if self._unfilled(ref):
                continue
            counted = ref in self.factory.ranges  # (an op's count of true elements: no triangle)
            if record is not None:
                given = tuple((s, m) for s, m in record.get("runs", ()))
                if not given and not counted:
                    # (a count of a triangle's, without its runs: a capture that recorded no more, a
                    # mask past MASK_LONG_RUNS' runs; the triangle the count is, upper where it is its)
                    given = _triangle(ref, record["trues"])
                self.factory.masks[ref] = (record["trues"], given)
            elif not counted and (runs := _causal_runs(ref)):
                self.factory.masks[ref] = (sum(m for _, m in runs), runs)
                causal += 1
        if len(self.factory.masks) > causal:
            self.report.notes[f"{len(self.factory.masks) - causal} boolean input(s) hold as many true elements as the "
                              f"original's, as the capture recorded (in the original's places where it recorded "
                              f"them)"] += 1  # fmt: skip
        if causal:
            self.report.notes[f"{causal} square boolean input(s) without a record of their values are drawn lower "
                              f"triangular (a causal mask, the commonest square one: drawn half true at random "
                              f"places, the branches of the ops that select by them mispredict)"] += 1  # fmt: skip

    def matched(self, inputs: list[TensorRef], records: str) -> list[tuple[TensorRef, dict]]:
        """Each of ``inputs`` (in the order the capture read them, see :meth:`as_the_capture_read`)
        that the sidecar's list ``records`` holds a record of, with that record: the first left of
        its shape and type, taken in turn. Inputs left unfilled are passed over (see
        :meth:`.plan.Planner._overwritten`)."""
        left = list(self.sidecar().get(records, [])) if inputs else []
        found = []
        for ref in inputs if left else ():
            record = take_record(left, ref.shape, ref.dtype)
            if record is not None and not self._unfilled(ref):
                found.append((ref, record))
        return found

    def small_ints(self, int_records: list[tuple[TensorRef, dict]]) -> None:
        """The values the capture recorded of small integer inputs of the step (an index record's
        ``values``, see :data:`.recorder.EXACT_INTS`; ``int_records`` as :meth:`matched` gives
        them), for a requirement to pass through (:attr:`.tensors.TensorFactory.int_values`: a row
        of offsets that moves each field's ids into its own rows of one table, ``ids + offsets``):
        drawn from their spread, a factorization machine's four offsets came out unsorted, and
        its fields' ids summed past the table."""
        for ref, record in int_records:
            if record.get("values") is not None:
                self.factory.int_values[ref] = tuple(record["values"])

    def pairs_apart(self, int_records: list[tuple[TensorRef, dict]]) -> None:
        """Integer inputs that never agreed element by element with another (an index record's
        ``differs_from``: a neighbour list's atoms ``i`` and ``j``, which no atom is its own
        neighbour in) or whose two rows never did (``rows_differ``: an edge list without
        self-loops) are kept so (:attr:`.tensors.TensorFactory.apart`). Drawn each by its own
        spread, 12 of a PaiNN potential's 360 pairs met an atom with itself: its distance 0, the
        direction divided by it NaN, and the NaN spread through the step, its gradients and its
        weights (inside operators 0.61 of the original's time, where kept apart 0.94)."""
        records = self.sidecar().get("index_inputs", [])
        ref_of = {id(record): ref for ref, record in int_records}
        pairs = rows = 0
        for ref, record in int_records:
            place = record.get("differs_from")
            other = ref_of.get(id(records[place])) if place is not None else None
            if other is not None and other.shape == ref.shape and other.dtype == ref.dtype and other.key != ref.key:
                self.factory.apart[ref], self.factory.apart[other] = other, ref
                pairs += 1
            if record.get("rows_differ") and len(ref.shape) == 2 and ref.shape[0] == 2:
                self.factory.rows_apart.add(ref)
                rows += 1
        if pairs or rows:
            self.report.notes[f"{pairs + rows} integer input(s) kept apart element by element from another ({pairs}) or "
                              f"row from row ({rows}), as the original's were, as the capture recorded (a neighbour "
                              f"or edge list, no atom its own neighbour)"] += 1  # fmt: skip

    def skew_indices(self, int_records: list[tuple[TensorRef, dict]], summed: set[int]) -> None:
        """Index inputs of the step (integers an op reads as rows or positions, whose range the
        replay knows) get values spread as the original's were, where the capture helper recorded
        them (the sidecar's ``index_inputs``, matched in the order the step first read them among
        those of the same shape and type): as many distinct values, the hottest as frequent
        (:class:`.distributions.Skew`). Without a record they are uniform in their range. Offsets cut
        bags between the original's smallest and largest (:class:`.distributions.Bags`), and counts
        that sum to a size lie between its lowest and highest (:func:`.distributions.bounded_parts`).
        An integer input that no op reads as indices (no range) holds values between the original's
        lowest and highest, spread as its were, unless an op sums it (``summed``: the storages of
        what the ops of :data:`.plan._SUMS` read), whose sums must be the sizes the trace records: where
        its running sums cut a lookup's bags, the layout passed back to it makes them so (and its
        counts lie between the original's lowest and highest, as other counts that sum to a size).
        Runs of an input with ranges of their own (several tables' ids) are drawn each with the
        spread the capture recorded for it (``runs``)."""
        skewed = bagged = by_rows = parted = numbers = exact = ordered = 0
        for ref, record in int_records:
            rng = self.factory.ranges.get(ref)
            pieces = self.factory.pieces.get(ref, {})
            if (rng == DIVISOR and all(r == DIVISOR for r in pieces.values())
                    and (record.get("low", 0) >= 1 or record.get("high", 0) <= -1)):  # fmt: skip
                # (a divisor, or elements of one each a divisor, kept from 0 by the rules alone: the
                # original's values, none of them 0, are numbers as those below; a grid's sizes that
                # torchkbnufft takes its indices modulo, drawn as 1s and 2s, made every interpolation
                # read the grid's first rows)
                rng = None
                self.factory.pieces.pop(ref, None)
            if (rng is not None and rng.derived and rng.kind == "uniform" and record.get("values") is not None
                    and rng.low <= record.get("low", rng.low - 1)):  # fmt: skip
                # (the replay's guess of a range, the least a kernel takes (a spline's size a dimension):
                # the original's own values, which the capture recorded, instead)
                self.factory.values[ref] = tuple(record["values"])
                exact += 1
                continue
            if record.get("values") is not None and self.factory.values.get(ref) == tuple(record["values"]):
                # (taken from small_ints' by a requirement that passed through them: kept where
                # they meet the ops' range, as the original's did)
                if rng is None or rng.kind != "uniform" or rng.low <= record["low"] and record["high"] < rng.high:
                    exact += 1
                    continue
                del self.factory.values[ref]
            runs = [r.kind for r in self.factory.pieces.get(ref, {}).values()]
            spans = [r for r in self.factory.pieces.get(ref, {}).values() if r.kind == "uniform"]
            if rng is not None and rng.kind == "uniform" and spans:
                # (runs of it with index ranges of their own, several tables' ids one table's after
                # another: the original's values lie within the widest of them, and each run is drawn
                # with the spread in its own range)
                rng = IntRange(min(r.low for r in spans), max(r.high for r in spans), derived=rng.derived)
            number = (rng is None and not runs and ref.storage_id not in summed and isinstance(record.get("low"), int)
                      and isinstance(record.get("high"), int))  # fmt: skip
            if number and record.get("values") is not None:
                # (a small one, whose values the capture recorded: those, the original's, and what the
                # ops compute of them alone is the original's too: a grid's sizes that an index is
                # taken modulo, drawn, had that divisor read seeded 1s and 2s, see Replay._build_step)
                self.factory.values[ref] = tuple(record["values"])
                exact += 1
                continue
            if number:
                # (no op reads it, or what is made of it, as indices or sizes: numbers the step computes
                # with, a batch's sequence lengths that it compares positions with; in the replay's
                # default range, 0 and 1, every sequence came out a token or two long. Not counts that an
                # op sums, itself or a view of it (a jagged batch's lengths, whose cumulative sums cut
                # bags of ids): their sums must be the sizes the trace records, which drawn values are not)
                rng = IntRange(record["low"], record["high"] + 1, derived=True)
                self.factory.constrain(ref, rng)
                numbers += 1
            steps = record.get("steps")
            if (rng is not None and rng.kind == "offsets" and steps is not None
                    and 0 <= record.get("low", -1) and record.get("high", rng.high) < rng.high):  # fmt: skip
                # (checked by the sidecar's loader: two counts, the smallest first)
                self.factory.bags[ref] = Bags(steps[0], steps[1], int(record["high"]))
                bagged += 1
                continue
            if (rng is not None and rng.kind == "cuts" and steps is not None and len(ref.shape) == 1
                    and record.get("low") == 0 and record.get("high") == rng.high):  # fmt: skip
                # (cuts from 0 to the size, as the original's ran: each span between its smallest and
                # largest step; a graph's row pointers cut at uniform random points gave some rows
                # many times the nonzeros of others, and a max over each row took 1.2 times as long)
                self.factory.parts[ref] = (int(steps[0]), int(steps[1]))
                parted += 1
                continue
            if ((rng is not None and rng.kind == "parts" or "parts" in runs)
                    and 0 <= record.get("low", -1) <= record.get("high", -1)):  # fmt: skip
                # (counts that sum to a size: segment lengths, repeats) between the original's smallest and largest
                self.factory.parts[ref] = (int(record["low"]), int(record["high"]))
                parted += 1
                continue
            if (rng is not None and rng.kind == "uniform" and rng.high - rng.low > 1
                    and (rng.derived or rng.low <= record.get("low", rng.low) and record.get("high", rng.low) < rng.high)):  # fmt: skip
                # (the original's values lie in the op's range: a record outside it is another tensor's,
                # unless the range is the replay's own guess)
                rows = ()
                if len(ref.shape) == 2 and _rows_differ(record, ref.shape[1], rng.high - rng.low):
                    rows = tuple(_skew_of(row, ref.shape[1], rng.low) for row in record["rows"])
                self.factory.skews[ref] = _skew_of(record, ref.numel, rng.low, rows)
                own = {(r["start"], r["start"] + r["length"]): r for r in record.get("runs", ())}
                runs_drawn = {run: _skew_of(own[run], run[1] - run[0], piece.low)
                              for run, piece in self.factory.own_runs(ref) if piece.kind == "uniform" and run in own
                              and piece.low <= own[run]["low"] and own[run]["high"] < piece.high}  # fmt: skip
                if runs_drawn:  # (one table's ids among several tables': each spread as its own were)
                    self.factory.run_skews[ref] = runs_drawn
                columns = self.factory.columns.get(ref, ())
                if record.get("columns") and len(record["columns"]) == len(columns):
                    # (fields, each in its own range: each column spread as the original's was)
                    self.factory.column_skews[ref] = tuple(
                        _skew_of(c, ref.shape[0], col.low) if col.low <= c["low"] and c["high"] < col.high else None
                        for c, col in zip(record["columns"], columns))  # fmt: skip
                skewed += not number  # (numbers are counted as such)
                by_rows += bool(rows)
                steps = record.get("steps")
                if (steps is not None and steps[0] >= 0 and steps[1] > 0 and len(ref.shape) == 1 and not runs_drawn
                        and ref not in self.factory.apart):  # fmt: skip
                    # (held in order by the original: a batch of graphs' vector of each node's graph,
                    # whose runs the ops cut by its counts; drawn in random order, the nodes of a
                    # graph's range were another graph's, and farthest point sampling per graph took
                    # 514 points of 2,048 where the original took 512)
                    self.factory.ordered.add(ref)
                    ordered += 1
        if exact:
            self.report.notes[f"{exact} small integer input(s) hold the original's values, as the capture recorded"] += 1
        if numbers:
            self.report.notes[f"{numbers} integer input(s) that no op reads as indices or sizes hold values between the "
                              f"original's lowest and highest, spread as its were, as the capture recorded"] += 1  # fmt: skip
        if skewed:
            rows_said = f"; {by_rows} row by row, rows of coordinates that spread unlike each other" if by_rows else ""
            self.report.notes[f"{skewed} index input(s) spread as the original's were, as the capture recorded (as many "
                              f"distinct values, the most frequent as frequent{rows_said})"] += 1  # fmt: skip
        if ordered:
            self.report.notes[f"{ordered} index input(s) held in order (sorted), as the original's were, as the capture "
                              f"recorded (a batch vector: each node's graph)"] += 1  # fmt: skip
        if bagged:
            self.report.notes[f"{bagged} offsets input(s) cut bags between the original's smallest and largest, as the "
                              f"capture recorded, the last one beginning where the original's did"] += 1  # fmt: skip
        if parted:
            self.report.notes[f"{parted} input(s) of counts that sum to a size (segment lengths, repeats, the spans between "
                              f"pointers) each between the original's smallest and largest, as the capture "
                              f"recorded"] += 1  # fmt: skip


@functools.lru_cache(maxsize=4096)
def _composite(overload) -> bool:
    """``overload`` is one of torch's composites: its ``CompositeImplicitAutograd`` kernel calls
    other operators before autograd and any dispatch mode sees it."""
    return overload.has_kernel_for_dispatch_key(torch._C.DispatchKey.CompositeImplicitAutograd)


def _overload_or_none(op_schema: str):
    """The overload ``op_schema`` names, None where this process has none (:func:`.ops.resolve`,
    which keeps the overloads it found and looks again for one it did not)."""
    try:
        return resolve(op_schema)
    except (Unsupported, ValueError, TypeError, RuntimeError, AttributeError):
        return None


#: A square mask without a record is drawn lower triangular up to this many rows in all (a run a row)
CAUSAL_ROWS = 1 << 16


def _causal_runs(ref: TensorRef, upper: bool = False) -> tuple[tuple[int, int], ...]:
    """The [start, length] runs of a lower-triangular mask of ``ref``'s shape (dense, its last
    two dimensions equal: each matrix's row ``i`` true up to its diagonal), or with ``upper`` of
    the strict upper triangle (true past it: the positions a causal model masks out); none for
    another shape (see :meth:`InputRecords.place_masks`)."""
    if len(ref.shape) < 2 or ref.shape[-1] != ref.shape[-2] or ref.shape[-1] < 2 or ref.layout_strides() != contiguous_strides(ref.shape):
        return ()
    side = ref.shape[-1]
    if math.prod(ref.shape[:-1]) > CAUSAL_ROWS:
        return ()
    if upper:
        return tuple((m * side * side + i * side + i + 1, side - i - 1) for m in range(math.prod(ref.shape[:-2]))
                     for i in range(side - 1))  # fmt: skip
    return tuple((m * side * side + i * side, i + 1) for m in range(math.prod(ref.shape[:-2])) for i in range(side))


def _triangle(ref: TensorRef, count: int) -> tuple[tuple[int, int], ...]:
    """The runs of the triangle of ``ref``'s shape (see :func:`_causal_runs`) that holds ``count``
    elements: the lower one with its diagonal (a causal mask's kept positions), or the strict
    upper one (its masked positions, an additive mask's -inf); none where neither does."""
    return next((r for upper in (False, True) if (r := _causal_runs(ref, upper)) and sum(m for _, m in r) == count), ())


def _rows_differ(record: dict, n: int, span: int) -> bool:
    """Whether the rows (of ``n`` elements each, of values in a range of ``span``) of a tensor of
    coordinates the capture recorded are drawn each with its own spread: they spread unlike each
    other (where the whole tensor's hottest share promises a row 8 repeats or more of its hottest
    value, some row's hottest value repeats under half or over twice that often: a graph's
    sources spread evenly, its destinations crowd on hubs), and rows drawn apart would hold about
    as many distinct values together as the original's did (within a tenth: values drawn apart
    overlap only by chance). Rows of one law that share their values (a batch of token or
    recommender ids, a padded one whose rows share the pad id too) are drawn as one tensor, which
    keeps the hot values they share: drawn apart, each row's hot ids were others."""
    rows = record.get("rows", ())
    expected = record["top"] * n
    if expected < 8 or all(expected / 2 <= row["top"] * n <= 2 * expected for row in rows):
        return False
    missed = 1.0  # (the chance that a value of the range is in none of the rows, drawn apart)
    for row in rows:
        missed *= 1 - min(row["distinct"], span) / span
    return abs(span * (1 - missed) - record["distinct"]) <= 0.1 * record["distinct"]


def _aliases(refs) -> set[TensorRef]:
    """Those of ``refs`` (in the order read) that hold the very elements of one before them (the
    same memory, offset and count), both dense in some order of their dimensions, laid out otherwise."""
    first: dict[tuple, TensorRef] = {}
    found = set()
    for ref in refs:
        at = (ref.storage_id, ref.dtype, ref.offset, ref.numel)
        was = first.setdefault(at, ref)
        if was is not ref and was.placement != ref.placement and _dense_in_some_order(ref) and _dense_in_some_order(was):
            found.add(ref)
    return found


def _dense_in_some_order(ref: TensorRef) -> bool:
    """``ref``'s elements fill its extent without gaps, its dimensions taken in some order (a
    transpose, a permutation of a dense tensor)."""
    expected = 1
    for stride, size in sorted((st, n) for n, st in zip(ref.shape, ref.layout_strides()) if n != 1):
        if stride != expected:
            return False
        expected *= size
    return True


def _skew_of(record: dict, n: int, low: int, rows: tuple[Skew, ...] = ()) -> Skew:
    """The spread a capture's record gives ``n`` integers drawn from ``low`` up (the sidecar's
    loader checked it), and its rows' where a tensor of coordinates has them."""
    curve = tuple((rank / record["distinct"], share) for rank, share in record.get("hot", ()))
    runs = tuple(tuple((start, length) for start, length in r) for r in record.get("hot_runs", ()))
    return Skew(record["distinct"] / n, record["top"], curve, rows, tuple(v - low for v in record.get("hot_values", ())), runs)


def _read_at(p: PlannedOp, pos: int, ref: TensorRef) -> tuple:
    """Where ``p`` reads the 0-dim ``ref`` at argument ``pos``, as the capture helper records it
    (:func:`.recorder._scalar_records`): the operator's overload, the argument's name, the place in
    a list (None outside one), the shapes of the operator's tensor arguments."""
    schema = p.overload._schema
    v = p.values[pos]
    index = v.refs.index(ref) if isinstance(v, TensorListArg) else None
    shapes = [list(x.ref.shape) for x in p.values if isinstance(x, TensorArg)]
    return qualified_name(schema), schema.arguments[pos].name, index, tuple(map(tuple, shapes))
