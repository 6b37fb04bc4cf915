"""A/B mode: the same traces replayed alternately in two Python environments.

``mystique ab --python OLD/bin/python --python NEW/bin/python TRACE...`` starts ``--workers``
pairs of replay workers (:mod:`.worker`), one of each environment in a pair, loads each trace in
all of them, and then runs *rounds*. In a round the two workers of one pair take turns, a block of
about :data:`BLOCK_S` of iterations each (the first turn chosen at random), until each has timed a
segment. A round's difference of levels (``log q10(B) - log q10(A)``) compares iterations taken
within milliseconds of each other on the same machine in the same state, so the drift that makes
comparisons with a stored baseline noisy cancels within it. Rounds are added, with the looks and
the significance split of :mod:`.sampling`, until the paired interval gives a verdict or the
budget is spent. Each worker process also has an offset of its own (measured: up to several
percent between two processes of the same environment, most for convolutions), which no number
of rounds of one pair removes; the interval counts it as known noise (``--noise``), as the plugin
does. The rounds cycle through the pairs (every pair once in a random order, then again), so the
estimate averages several processes' offsets, and the noise counted shrinks with them
(:func:`.stats.offset_share`): pyperf's answer to the same problem, many processes. Both workers
of a pair run on the same CPUs (:func:`.worker.cpu_sets`; different pairs on different ones) and
which of them loads and warms up first is drawn for each pair, so that neither a CPU's own speed
nor the order of setting up falls on one side only.
"""

from __future__ import annotations

import math
import random
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from .defaults import DEFAULT_ALPHA, DEFAULT_BUDGET_S, DEFAULT_NOISE, DEFAULT_TOLERANCE, SEGMENT_S
from .errors import MystiqueError, ReplayError
from .sampling import FIRST_LOOK, MAX_SEGMENT_ITERS, look_points
from .stats import Spending, compare_paired, offset_variance, segment_level

MAX_ROUNDS = 60
#: Each worker's turn lasts about this long.
BLOCK_S = 0.05


def ab_trace(workers: list, trace: str | Path, *, budget_s: float = DEFAULT_BUDGET_S,
             tolerance: float = DEFAULT_TOLERANCE, alpha: float = DEFAULT_ALPHA, threads: int = 1,
             device: str = "cpu", seed: int = 0, trace_b: str | Path | None = None,
             process_noise: float = DEFAULT_NOISE) -> dict:  # fmt: skip
    """Interleaved rounds of A and B on one trace (B replays ``trace_b`` instead when given): the
    result dict with the paired comparison of B against A. ``workers`` is ``[A, B]``, or pairs
    ``[(A1, B1), (A2, B2), ...]`` of workers of the two environments: the rounds then cycle
    through the pairs, so that the estimate averages several processes' offsets (the noise the
    interval counts for them is scaled by :func:`.stats.offset_share`). A pair after the first
    whose load, warm-up or segment fails (out of memory beside the others, a worker that died,
    other ops replayed than the first pair's) is left out from then on, with a note; the first
    pair's failure is the trace's error. Every worker lets go of the trace at the end."""
    pairs = [tuple(p) for p in workers] if isinstance(workers[0], (list, tuple)) else [tuple(workers)]
    try:
        return _rounds(pairs, trace, trace_b or trace, budget_s=budget_s, tolerance=tolerance, alpha=alpha,
                       threads=threads, device=device, seed=seed, process_noise=process_noise)  # fmt: skip
    finally:
        for w in (w for pair in pairs for w in pair):
            try:
                w.request(cmd="unload")
            except MystiqueError:  # (a worker that died, or one of an older version without the command)
                pass


def _rounds(pairs: list[tuple], trace, trace_b, *, budget_s: float, tolerance: float, alpha: float, threads: int,
            device: str, seed: int, process_noise: float) -> dict:  # fmt: skip
    notes: list[str] = []
    infos: dict[int, list[dict]] = {}
    per_iter: dict[int, list[float]] = {}

    def leave_out(j: int, why: MystiqueError | str) -> None:
        """Pair ``j`` takes no more part; the first pair's failure is the trace's."""
        if j == 0 and isinstance(why, MystiqueError):
            raise why
        notes.append(f"worker pair {j + 1} left out: {why}")
        infos.pop(j, None)
        per_iter.pop(j, None)

    setup_rng = random.Random(f"{seed}:setup")

    def each_side(pair: tuple, ask: Callable[..., dict]) -> list[dict]:
        """``ask(worker, side)`` for A (side 0) and B (side 1) of a pair, the side that goes first
        drawn at random: a side that always loaded or warmed up first (on a machine that had more
        free memory then, say) would differ from the other in all pairs alike, which no number of
        pairs averages out."""
        got: list[dict] = [{}, {}]
        for i in setup_rng.sample((0, 1), 2):
            got[i] = ask(pair[i], i)
        return got

    for j, pair in enumerate(pairs):
        try:
            got = each_side(pair, lambda w, i: w.request(cmd="load", trace=str((trace, trace_b)[i]), device=device,
                                                         threads=threads))  # fmt: skip
        except MystiqueError as e:
            leave_out(j, e)
            continue
        if j == 0:
            _same_ops(trace, got)
        elif _skips(got) != _skips(infos[0]):  # (the same environments replay the same ops, but a
            # worker may have had less memory for its build than the first pair's)
            leave_out(j, f"it replays other ops than pair 1 ({_skips(got)} skipped against {_skips(infos[0])})")
            continue
        infos[j] = got
    for j in list(infos):
        try:
            per_iter[j] = [r["per_iter_s"] for r in each_side(pairs[j], lambda w, i: w.request(cmd="warmup", seconds=0.3))]
        except MystiqueError as e:
            leave_out(j, e)
    times = [t for ts in per_iter.values() for t in ts]
    m = min(MAX_SEGMENT_ITERS, max(5, math.ceil(SEGMENT_S / max(min(times), 1e-9))))
    block = max(1, min(m, round(BLOCK_S / max(max(times), 1e-9))))
    rounds_cap = max(FIRST_LOOK, min(MAX_ROUNDS, int(budget_s / max(m * 2 * statistics.mean(times), 1e-9))))
    points = look_points(rounds_cap)
    rng = random.Random(seed)
    levels: list[list[float]] = [[], []]
    medians: list[list[float]] = [[], []]
    pair_of: list[int] = []  # the pair that ran each round
    cycle: list[int] = []
    start = time.perf_counter()
    cmp = None
    spending = Spending(alpha)
    for k in points:
        while len(levels[0]) < k:
            if not cycle:  # every pair once, in a random order, then again
                cycle = rng.sample(sorted(per_iter), len(per_iter)) if len(per_iter) > 1 else list(per_iter)
            j = cycle.pop()
            if j not in per_iter:  # (left out since the cycle was drawn)
                continue
            order = [0, 1]
            rng.shuffle(order)
            got: list[list[float]] = [[], []]
            try:
                while len(got[order[1]]) < m:
                    for i in (i for i in order if len(got[i]) < m):
                        got[i] += pairs[j][i].request(cmd="segment", iters=min(block, m - len(got[i])))["samples_s"]
            except MystiqueError as e:
                leave_out(j, e)
                continue
            pair_of.append(j)
            for i in (0, 1):
                levels[i].append(segment_level(got[i]))
                medians[i].append(sorted(got[i])[len(got[i]) // 2])
        spent = time.perf_counter() - start
        final = k == points[-1] or spent * 1.5 > budget_s
        diffs = [b - a for a, b in zip(*levels)]
        # sampling error under half of one worker's share of the offsets: more rounds would not narrow the interval
        worker_sd = math.sqrt(offset_variance(process_noise, pair_of) / 2)
        settled = len(diffs) > 2 and statistics.stdev(diffs) / math.sqrt(len(diffs)) < worker_sd / 2
        cmp = compare_paired(diffs, tolerance=tolerance, alpha=spending.at(k / points[-1], final or settled),
                             final=final or settled, process_noise=process_noise, groups=pair_of,
                             calibrated=False,
                             baseline_median_s=_median(medians[0]), current_median_s=_median(medians[1]))  # fmt: skip
        if cmp.verdict != "undecided":
            break
    ran = sorted(set(pair_of))
    by_pair = [[d for d, p in zip(diffs, pair_of) if p == j] for j in ran]
    return {
        "trace": Path(trace).name, "file": str(trace), "status": cmp.verdict, "comparison": cmp.as_dict(),
        "rounds": len(levels[0]), "segment_iters": m, "seconds": time.perf_counter() - start,
        "pairs": len(ran), "pair_ratios": [math.exp(statistics.mean(d)) for d in by_pair],
        "pair_rounds": [len(d) for d in by_pair], "pair_cpus": [getattr(pairs[j][0], "cpus", None) for j in ran],
        "notes": notes,
        "a": infos[0][0] | {"median_s": _median(medians[0])}, "b": infos[0][1] | {"median_s": _median(medians[1])},
    }  # fmt: skip


def _skips(infos: list[dict]) -> list[int]:
    return [info["ops_total"] - info["ops_replayed"] for info in infos]


def _same_ops(trace, infos: list[dict]) -> None:
    """A and B replay the same ops of the trace, or they are not compared."""
    skipped = _skips(infos)
    if skipped[0] != skipped[1]:  # (an operator one torch lacks, and no substitute runs: see runner.same_work)
        why = "; ".join(f"{side}: {s['count']}x {s['op']}: {s['reason']}"
                        for side, info in zip("AB", infos) for s in info["skipped"][:3])  # fmt: skip
        raise ReplayError(trace, f"A's replay skips {skipped[0]} of {infos[0]['ops_total']} ops and B's {skipped[1]} of "
                                 f"{infos[1]['ops_total']}: their times would measure different work, so they are not "
                                 f"compared ({why})")  # fmt: skip


def _median(xs: list[float]) -> float:
    s = sorted(xs)
    return s[len(s) // 2] if s else math.nan
