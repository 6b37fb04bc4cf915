"""The spreads the replay draws integer inputs from, where the capture recorded the original's.

An index input's values follow the original's spread (:class:`Skew`: a Zipf law or the recorded
curve over distinct values, hot values in their recorded runs), an embedding bag's offsets its
bag sizes (:class:`Bags`), a mask its count of true elements and their runs (:func:`mask_of`), and
counts that sum to a size lie between the original's smallest and largest (:func:`bounded_parts`).
The functions take torch alone: an exported script copies their source (:mod:`.export`), so that
it draws as the replay does.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


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


def bag_offsets(n: int, bags: Bags, limit: int, g: torch.Generator, dev: torch.device) -> torch.Tensor:
    """``n`` offsets from 0, each bag's size drawn uniformly between the original's smallest and
    largest, scaled so that the last bag begins where the original's did (at most ``limit``, the
    number of indices): bags of one size come out exactly as the original's."""
    sizes = torch.randint(max(bags.smallest, 0), max(bags.largest, bags.smallest, 0) + 1, (n,), generator=g, device=dev)
    starts = torch.cumsum(sizes, 0) - sizes
    end, last = int(starts[-1]), max(min(bags.last, limit), 0)
    return torch.div(starts * last, end, rounding_mode="floor") if end > 0 else torch.zeros_like(starts)


def distinct_draws(span: int, k: int, g: torch.Generator, dev: torch.device) -> torch.Tensor:
    """``k`` distinct integers of ``[0, span)``, seeded, in random order. (Copied into exported
    scripts: torch alone.)"""
    if 4 * k >= span:  # dense enough to take a permutation's first k
        return torch.randperm(span, generator=g, device=dev)[:k]
    flat = torch.empty(0, dtype=torch.int64, device=dev)
    while flat.numel() < k:  # draws with few repeats, drawn again until k distinct ones
        more = torch.randint(0, span, (k - flat.numel() + k // 16 + 8,), generator=g, device=dev)
        flat = torch.unique(torch.cat([flat, more]))
    return flat[torch.randperm(flat.numel(), generator=g, device=dev)[:k]]


def skewed(span: int, n: int, skew: Skew, g: torch.Generator, dev: torch.device, tables: int = 1) -> torch.Tensor:
    """``n`` integers of ``[0, span)`` spread as ``skew`` says: ``distinct * n`` distinct values
    (as many as fit), each at least once, as many times as its rank on the recorded curve gives
    (:func:`curve_counts`), or, without one, the rest drawn with Zipf weights ``1 / rank ** s``
    over them, ``s`` chosen so that the hottest value takes the ``top`` share of the elements.
    The hot values are random ones of the range (but for those ``skew.values`` names), the order
    random (but for the runs ``skew.runs`` gives those, :func:`in_runs`). With ``tables`` over 1
    the ``n`` are that many tables' indices, one table's after another (equal parts): each value
    belongs to one table, where all of its repeats are. (Spread over all of them, a hot id read
    once per table was as many rows, and a table-batched lookup read four times as many distinct
    rows as its original.) (Copied into exported scripts: torch alone.)"""
    k = max(1, min(n, span, round(skew.distinct * n)))
    distinct = values = distinct_draws(span, k, g, dev)  # (by rank, hottest first)
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
        weights = torch.arange(1, k + 1, dtype=torch.float64, device=dev).pow_(-zipf_exponent(k, hottest))
        cdf = weights.cumsum_(0)
        cdf /= cdf[-1].item()
        picks = torch.searchsorted(cdf, torch.rand(extra, generator=g, device=dev, dtype=torch.float64))
        picks.clamp_(max=k - 1)
        counts = torch.bincount(picks, minlength=k) + 1
        values = torch.cat([values, values[picks]])
    if tables <= 1 or counts is None:
        drawn = values[torch.randperm(n, generator=g, device=dev)]
        placed = [(v, runs) for v, runs in zip(ranked, skew.runs) if runs and all(s + m <= n for s, m in runs)]
        return in_runs(drawn, placed, dev) if placed else drawn
    # each value's repeats together, the values in random order (hot ones in every table), cut into
    # the tables' parts, each part shuffled
    order = torch.randperm(k, generator=g, device=dev)
    grouped = distinct[order].repeat_interleave(counts[order])
    return torch.cat([part[torch.randperm(part.numel(), generator=g, device=dev)]
                      for part in torch.tensor_split(grouped, tables)])  # fmt: skip


def in_runs(drawn: torch.Tensor, placed, dev: torch.device) -> torch.Tensor:
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


def skewed_rows(span: int, n: int, skew: Skew, g: torch.Generator, dev: torch.device, tables: int = 1) -> torch.Tensor:
    """:func:`skewed`, row by row where ``skew`` has the rows' spreads (the ``n`` elements are
    theirs, one row after another). (Copied into exported scripts: torch alone.)"""
    if not skew.rows or n % len(skew.rows):
        return skewed(span, n, skew, g, dev, tables)
    return torch.cat([skewed(span, n // len(skew.rows), row, g, dev, tables) for row in skew.rows])


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
    knots[-1] = (k, n)  # (the last band ends at all of them, where rounding reached every rank before it)
    counts = torch.empty(k, dtype=torch.int64)
    for (r0, c0), (r1, c1) in zip(knots, knots[1:]):
        each, more = divmod(c1 - c0, r1 - r0)
        counts[r0:r1] = each
        counts[r0:r0 + more] += 1
    return counts


def zipf_exponent(k: int, hottest: float) -> float:
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
