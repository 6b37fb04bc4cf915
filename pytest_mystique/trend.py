"""Trend report: a trace's runs over time, the points where its performance moved, and why.

The series of a trace is its per-run level (the probe-normalised step time, or the median where a
run has no level), on a log scale. Change points come from ``ruptures`` (PELT, least-squares
cost); the penalty scales with the series' own noise, estimated robustly from successive
differences, so a trace that is noisy on this machine needs a bigger move to be flagged. Each
change point is reported with the environment difference between the runs on either side
(e.g. ``torch 2.13.0 -> 2.14.0``).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

import numpy as np

from .defaults import DEFAULT_NOISE
from .environment import differences
from .units import fmt_seconds

#: Penalty of one more change point, in units of the series' noise variance times log(n).
PENALTY = 4.0
MIN_SEGMENT = 2


@dataclass
class ChangePoint:
    index: int  # first run after the change
    before: float  # mean level before (since the previous change point)
    after: float
    run_before: dict
    run_after: dict
    env_changes: list[str] = field(default_factory=list)

    @property
    def ratio(self) -> float:
        return self.after / self.before


@dataclass
class Series:
    trace: str
    runs: list[dict]  # history rows, oldest first
    values: list[float]  # what is plotted and segmented
    what: str  # "level" or "median"
    change_points: list[ChangePoint]


def series_of(rows: list[dict]) -> tuple[list[float], str]:
    """Per-run values: levels when every run has one, else medians."""
    if rows and all(r.get("level") for r in rows):
        return [float(r["level"]) for r in rows], "level"
    return [float(r["median_s"]) for r in rows], "median"


def noise_sigma(logs: np.ndarray) -> float:
    """Robust standard deviation of the noise: MAD of successive differences / sqrt(2)."""
    if len(logs) < 3:
        return 0.0
    d = np.diff(logs)
    return float(1.4826 * np.median(np.abs(d - np.median(d))) / math.sqrt(2))


def change_points(values: list[float], *, penalty: float = PENALTY, min_sigma: float = DEFAULT_NOISE) -> list[int]:
    """Indices of the first run after each change (ruptures PELT on log values). The noise is
    never taken below ``min_sigma``, the run-to-run noise of a level measured on CI hosts: a short
    series whose successive runs happen to agree closely would otherwise make every wiggle a change."""
    import ruptures

    if len(values) < 2 * MIN_SEGMENT:
        return []
    logs = np.log(np.asarray(values, dtype=float))
    sigma = max(noise_sigma(logs), min_sigma)
    algo = ruptures.Pelt(model="l2", min_size=MIN_SEGMENT, jump=1).fit(logs.reshape(-1, 1))
    ends = algo.predict(pen=penalty * sigma**2 * math.log(len(logs)))
    return [i for i in ends if i < len(logs)]


def build_series(trace: str, rows: list[dict]) -> Series:
    rows = [r for r in rows if r.get("median_s")]
    values, what = series_of(rows)
    cps = []
    bounds = [0, *change_points(values), len(values)]
    for k in range(1, len(bounds) - 1):
        lo, i, hi = bounds[k - 1], bounds[k], bounds[k + 1]
        before = float(np.exp(np.mean(np.log(values[lo:i]))))
        after = float(np.exp(np.mean(np.log(values[i:hi]))))
        env_a, env_b = (_env(rows[i - 1]), _env(rows[i]))
        cps.append(ChangePoint(i, before, after, rows[i - 1], rows[i], differences(env_a, env_b)))
    return Series(trace, rows, values, what, cps)


def _env(row: dict) -> dict:
    try:
        env = json.loads(row.get("environment") or "{}")
    except ValueError:
        return {}
    return env if isinstance(env, dict) else {}


def text_report(series: list[Series], last: int = 10) -> list[str]:
    lines = []
    for s in series:
        lines.append(f"{s.trace}: {len(s.runs)} run(s)")
        for r, v in list(zip(s.runs, s.values))[-last:]:
            commit = (r.get("git_commit") or "")[:10] or "-"
            lvl = f"level {v:.3f}" if s.what == "level" else ""
            lines.append(f"    {r['started']}  {commit:10}  median {fmt_seconds(r['median_s']):>10}  {lvl:14} {r['status']}")
        if not s.change_points:
            lines.append("    no change point")
        for cp in s.change_points:
            why = "; ".join(cp.env_changes) if cp.env_changes else "no environment change recorded"
            lines.append(
                f"    change point at run {cp.index + 1} ({cp.run_after['started']}): {(cp.ratio - 1) * 100:+.1f}% "
                f"({cp.before:.4g} -> {cp.after:.4g} {s.what}); {why}"
            )
    return lines


def write_html(series: list[Series], path, progress=None) -> None:
    """A self-contained HTML page: one plot per trace (PNG inlined), change points marked."""
    import base64
    import html
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    parts = ["<!doctype html><meta charset='utf-8'><title>pytest-mystique history</title>",
             "<style>body{font-family:sans-serif;max-width:60em;margin:auto}</style>",
             "<h1>pytest-mystique history</h1>"]  # fmt: skip
    for n, s in enumerate(series, 1):
        if progress:
            progress(n, len(series), s.trace)
        fig, ax = plt.subplots(figsize=(9, 3.2))
        xs = list(range(1, len(s.values) + 1))
        ax.plot(xs, s.values, "o-", ms=3, lw=1)
        for cp in s.change_points:
            ax.axvline(cp.index + 0.5, color="red", ls="--", lw=1)
            # upright beside its line, from the top: change points a run or two apart keep their labels apart
            ax.annotate(f"{(cp.ratio - 1) * 100:+.1f}%", (cp.index + 0.5, 1), xycoords=("data", "axes fraction"),
                        xytext=(-2, -3), textcoords="offset points", rotation=90, ha="right", va="top",
                        color="red", fontsize=8)  # fmt: skip
        ax.set_xlabel("run")
        ax.set_ylabel("step time / probe time" if s.what == "level" else "median step time (s)")
        ax.set_title(s.trace)
        fig.tight_layout()
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=90)
        plt.close(fig)
        parts.append(f"<h2>{html.escape(s.trace)}</h2>")
        parts.append(f"<img alt='{html.escape(s.trace)}' src='data:image/png;base64,{base64.b64encode(buf.getvalue()).decode()}'>")
        items = [
            f"<li>run {cp.index + 1} ({html.escape(str(cp.run_after['started']))}): {(cp.ratio - 1) * 100:+.1f}%; "
            f"{html.escape('; '.join(cp.env_changes) or 'no environment change recorded')}</li>"
            for cp in s.change_points
        ]
        parts.append("<ul>" + "".join(items) + "</ul>" if items else "<p>no change point</p>")
    from pathlib import Path

    from .baseline import atomic_write

    atomic_write(Path(path), "\n".join(parts))
