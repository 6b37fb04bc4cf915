"""Reporting: the terminal table, JUnit properties and pytest-benchmark's JSON format.

A result is a plain dict (it travels from pytest-xdist workers to the controller inside the
test report's ``user_properties``); these functions only format it.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
from pathlib import Path

from .baseline import atomic_write
from .units import fmt_seconds

VERDICT_WORDS = {
    "new": "new baseline",
    "updated": "baseline updated",
    "same": "ok",
    "slower": "SLOWER",
    "faster": "faster",
    "unsure": "unsure",
    "error": "ERROR",
}


def table_rows(results: list[dict]) -> list[list[str]]:
    rows = [["trace", "ops replayed/total", "median", "baseline", "change", "verdict"]]
    for r in results:
        if r.get("status") == "error":
            rows.append([r["trace"], "-", "-", "-", "-", "ERROR"])
            continue
        cmp = r.get("comparison")
        change = "-"
        if cmp:
            change = f"{cmp['change'] * 100:+.1f}% [{(cmp['ci_low'] - 1) * 100:+.1f}, {(cmp['ci_high'] - 1) * 100:+.1f}]"
        rows.append([
            r["trace"],
            f"{r['ops_replayed']}/{r['ops_total']}",
            fmt_seconds(r["median_s"]),
            fmt_seconds(r["baseline_median_s"]) if r.get("baseline_median_s") else "-",
            change,
            VERDICT_WORDS.get(r["status"], r["status"]),
        ])  # fmt: skip
    return rows


def ab_rows(results: list[dict]) -> list[list[str]]:
    rows = [["trace", "A median", "B median", "B / A", "rounds", "pairs", "verdict"]]
    for r in results:
        if r.get("status") == "error":
            rows.append([r["trace"], "-", "-", "-", "-", "-", "ERROR"])
            continue
        c = r["comparison"]
        rows.append([
            r["trace"], fmt_seconds(r["a"]["median_s"]), fmt_seconds(r["b"]["median_s"]),
            f"{c['ratio']:.3f} [{c['ci_low']:.3f}, {c['ci_high']:.3f}]", str(r["rounds"]), str(r.get("pairs", 1)),
            VERDICT_WORDS.get(r["status"], r["status"]),
        ])  # fmt: skip
    return rows


def format_table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for n, row in enumerate(rows):
        lines.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return lines


def rank_lines(result: dict) -> list[str]:
    """A multi-rank replay's ranks: ops, collectives and median step time of each."""
    ranks = result.get("ranks") or []
    lines = [f"rank {r['rank']}: {r['ops_replayed']}/{r['ops_total']} ops, {r['collectives']} collectives, "
             f"median {fmt_seconds(r['median_s']) if r['median_s'] else '-'} ({os.path.basename(r['file'])})"
             for r in ranks]  # fmt: skip
    if ranks:
        lines.append(f"step time: the slowest of the {len(ranks)} ranks in each iteration")
    return lines


def skipped_lines(result: dict) -> list[str]:
    lines = rank_lines(result)
    for s in result.get("skipped", []):
        lines.append(f"skipped {s['count']}x {s['op']}: {s['reason']}")
    for s in result.get("substitutions", []):
        lines.append(f"substituted {s['count']}x {s['op']} -> {s['replacement']}")
    for note, n in result.get("notes", {}).items():
        lines.append(f"note ({n}x): {note}")
    if result.get("env_changes"):  # (an upgrade gate's comparison: what it spanned, whatever the verdict)
        lines.append("compared across an environment change: " + "; ".join(result["env_changes"]))
    return lines


def attribution_lines(result: dict) -> list[str]:
    """Where a slowdown comes from: the operators that added the most time per iteration."""
    rows = result.get("attribution") or []
    if not rows:
        return []
    lines = ["operators that added the most time per iteration (instrumented per-op medians, now vs baseline):"]
    for r in rows:
        lines.append(f"    +{fmt_seconds(r['added_s']):>10}  {r['op']}  "
                     f"({fmt_seconds(r['baseline_s'])} -> {fmt_seconds(r['current_s'])})")  # fmt: skip
    return lines


def session_lines(results: list[dict], alpha: float, strict: bool) -> list[str]:
    """How the session's verdicts were reached: the false-alarm control across its traces, and
    Benjamini-Hochberg q-values of the slowdowns."""
    from .stats import benjamini_hochberg

    compared = [r for r in results if r.get("comparison")]
    if not compared:
        return []
    m = len([r for r in results if r.get("status") != "error"]) or 1
    q = benjamini_hochberg([r["comparison"]["p_slower"] for r in compared])
    lines = [
        f"verdicts: {len(compared)} trace(s) compared, each tested at alpha {alpha:g}/{m} (false alarm chance "
        f"for the session <= {alpha:g}; this is Benjamini-Hochberg's strictest step, so the false discovery "
        f"rate is <= {alpha:g} too)"
    ]
    flagged = [(r, qv) for r, qv in zip(compared, q) if r["status"] in ("slower", "unsure")]
    for r, qv in flagged:
        lines.append(f"  {r['trace']}: {r['status']}, p={r['comparison']['p_slower']:.2g}, BH q={qv:.2g}")
    unsure = [r for r in compared if r["status"] == "unsure"]
    if unsure:
        lines.append(f"{len(unsure)} unsure (budget spent without a verdict): "
                     + ("failed (--mystique-strict)" if strict else "reported, not failed; raise --mystique-budget"))  # fmt: skip
    return lines


def junit_properties(result: dict) -> list[tuple[str, object]]:
    props = [
        ("mystique_status", result.get("status")),
        ("mystique_ops_total", result.get("ops_total")),
        ("mystique_ops_replayed", result.get("ops_replayed")),
        ("mystique_ops_skipped", result.get("ops_skipped")),
        ("mystique_median_s", result.get("median_s")),
        ("mystique_baseline_median_s", result.get("baseline_median_s")),
        ("mystique_device", result.get("device")),
    ]
    cmp = result.get("comparison")
    if cmp:
        props += [
            ("mystique_ratio", cmp["ratio"]),
            ("mystique_ci_low", cmp["ci_low"]),
            ("mystique_ci_high", cmp["ci_high"]),
            ("mystique_p_value", cmp["p_slower"]),
        ]
    return props


def benchmark_json(results: list[dict], machine_info: dict, commit_info: dict) -> dict:
    """The results in pytest-benchmark's saved-run format (readable by ``pytest-benchmark compare``)."""
    from pytest_benchmark import __version__ as pb_version
    from pytest_benchmark.stats import Stats

    benchmarks = []
    for r in results:
        if not r.get("samples_s"):
            continue
        stats = Stats()
        for x in r["samples_s"]:
            stats.update(x)
        d = stats.as_dict()
        d["data"] = list(r["samples_s"])
        d["iterations"] = 1
        benchmarks.append({
            "group": "mystique",
            "name": r["trace"],
            "fullname": r.get("nodeid", r["trace"]),
            "params": None,
            "param": None,
            "extra_info": {
                k: r.get(k) for k in ("status", "device", "threads", "ops_total", "ops_replayed", "ops_skipped",
                                      "baseline_median_s", "comparison", "sampling_s", "segments", "runs", "looks", "timed",
                                      "xdist_worker", "median_s", "skipped", "substitutions", "notes",
                                      "build_canary")  # fmt: skip
            } | ({"world_size": r["world_size"], "ranks": r["ranks"]} if r.get("ranks") else {}),
            "options": {"warmup": r.get("warmup"), "timer": r.get("timer"), "min_rounds": len(r["samples_s"])},
            "stats": d,
        })  # fmt: skip
    return {
        "machine_info": machine_info,
        "commit_info": commit_info,
        "benchmarks": benchmarks,
        "datetime": _dt.datetime.now(_dt.timezone.utc).isoformat(),
        "version": pb_version,
    }


def json_text(obj, indent: int | None = 2) -> str:
    """``obj`` as strict JSON: a float that is not finite (an interval without an upper end, an
    infinite count of degrees of freedom) is written null, as JSON has no Infinity or NaN and
    other readers than Python's refuse them; objects JSON has no type for are written as text."""

    def strict(x):
        if isinstance(x, float):
            return x if math.isfinite(x) else None
        if isinstance(x, dict):
            return {k: strict(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [strict(v) for v in x]
        return x

    return json.dumps(strict(obj), indent=indent, default=str, allow_nan=False)


def write_benchmark_json(path: str | os.PathLike, results: list[dict]) -> None:
    from pytest_benchmark.plugin import pytest_benchmark_generate_machine_info
    from pytest_benchmark.utils import get_commit_info

    data = benchmark_json(results, pytest_benchmark_generate_machine_info(), get_commit_info())
    atomic_write(Path(path), json_text(data))
