"""The pytest plugin: ``pytest --mystique traces/``.

Each execution trace file under the given paths becomes one test item named after the file. The
item replays the trace, compares its timing with the stored baseline and fails only on a
significant slowdown. Without ``--mystique`` nothing here changes pytest's behaviour.
"""

from __future__ import annotations

import fnmatch
import functools
import json
import os
import re
import uuid
from pathlib import Path

import pytest

from .defaults import (
    DEFAULT_ALPHA,
    DEFAULT_BUDGET_S,
    DEFAULT_DRIFT,
    DEFAULT_NOISE,
    DEFAULT_RUNS,
    DEFAULT_TOLERANCE,
    DEFAULT_WARMUP,
)
from .errors import MystiqueError, message
from .trace import sniff, trace_stem

# Everything that imports torch, numpy or scipy is imported where it is used, so that collecting
# (even thousands of traces with --collect-only) stays fast and a session without --mystique
# pays nothing.

RESULT_PROPERTY = "mystique_result"
_run_key = pytest.StashKey[str]()


class _XdistHooks:
    """With pytest-xdist, all workers of one session record into the same history run, and
    ``-n auto`` means one worker per GPU (see :mod:`.parallel`)."""

    def pytest_configure_node(self, node) -> None:
        node.workerinput["mystique_run_id"] = node.config.stash[_run_key]

    def pytest_xdist_auto_num_workers(self, config):
        if not _enabled(config):
            return None
        from .parallel import gpu_count

        return gpu_count() or None
_ignored_key = pytest.StashKey[list]()
_count_key = pytest.StashKey[int]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("mystique", "trace-driven performance regression tests (pytest-mystique)")
    group.addoption("--mystique", action="store_true", default=False,
                    help="collect execution traces (*.json, *.json.gz) as performance tests")  # fmt: skip
    group.addoption("--mystique-device", default="auto", metavar="DEV",
                    help="replay device: auto (current CUDA device, else cpu), cpu, cuda, cuda:N")  # fmt: skip
    group.addoption("--mystique-warmup", type=int, default=None, metavar="N",
                    help=f"warm-up iterations per trace (default {DEFAULT_WARMUP})")  # fmt: skip
    group.addoption("--mystique-iters", type=int, default=None, metavar="N",
                    help="timed iterations per segment (default: as many as fill half a second)")  # fmt: skip
    group.addoption("--mystique-budget", type=float, default=None, metavar="SECONDS",
                    help=f"sampling time per trace before the verdict is 'unsure' (default {DEFAULT_BUDGET_S:g})")  # fmt: skip
    group.addoption("--mystique-runs", type=int, default=None, metavar="N",
                    help=f"most fresh worker processes whose runs a verdict or new baseline uses, within the "
                         f"budget; 1: this process only (default {DEFAULT_RUNS})")  # fmt: skip
    group.addoption("--mystique-strict", action="store_true", default=False,
                    help="fail traces whose verdict is 'unsure' too")  # fmt: skip
    group.addoption("--mystique-alpha", type=float, default=None, metavar="P",
                    help=f"chance of a false alarm per session (default {DEFAULT_ALPHA:g})")  # fmt: skip
    group.addoption("--mystique-noise", type=float, default=None, metavar="FRACTION",
                    help=f"run-to-run noise that sampling cannot remove (default {DEFAULT_NOISE:g})")  # fmt: skip
    group.addoption("--mystique-drift", type=float, default=None, metavar="FRACTION",
                    help="session-to-session offset of the machine that neither the probe nor more processes remove "
                         f"(default {DEFAULT_DRIFT:g})")  # fmt: skip
    group.addoption("--mystique-threads", type=int, default=None, metavar="N",
                    help="CPU threads for the replay (default: OMP_NUM_THREADS, else the threads the trace "
                         "was captured with (its .meta.json), else torch's default)")  # fmt: skip
    group.addoption("--mystique-baseline-dir", default=None, metavar="DIR",
                    help="baseline directory (default .mystique/baselines under the rootdir)")  # fmt: skip
    group.addoption("--mystique-update", action="store_true", default=False,
                    help="re-record the baselines of the traces that run")  # fmt: skip
    group.addoption("--mystique-tolerance", type=float, default=None, metavar="FRACTION",
                    help=f"slowdown tolerated before failing, e.g. 0.05 for 5% (default {DEFAULT_TOLERANCE})")  # fmt: skip
    group.addoption("--mystique-json", default=None, metavar="PATH",
                    help="write the results in pytest-benchmark's JSON format")  # fmt: skip
    group.addoption("--mystique-max-memory", default=None, metavar="SIZE",
                    help="refuse a replay whose input tensors need more than SIZE (e.g. 8GiB); without CUDA, skip an "
                         "op that would take the build's memory past SIZE")  # fmt: skip
    group.addoption("--mystique-history", default=None, metavar="PATH",
                    help="history database: an SQLite file (default: history.sqlite in the baseline directory), "
                         "a postgresql:// URL, or 'off'")  # fmt: skip
    group.addoption("--mystique-timeout", type=float, default=None, metavar="SECONDS",
                    help="fail a trace whose replay takes longer than this (default: no limit)")  # fmt: skip
    group.addoption("--mystique-max-trace-size", default=None, metavar="SIZE",
                    help="refuse a trace that decompresses to more than SIZE (default 2GiB)")  # fmt: skip
    parser.addini("mystique_baseline_dir", "baseline directory, relative to the rootdir", default=None)
    parser.addini("mystique_tolerance", "default slowdown tolerance (fraction)", default=None)
    parser.addini("mystique_trace_tolerance", "per-trace tolerance lines: 'GLOB = FRACTION'", type="linelist",
                  default=[])  # fmt: skip
    parser.addini("mystique_iters", "timed iterations per trace", default=None)
    parser.addini("mystique_history", "history database path, relative to the rootdir ('off' disables)", default=None)
    parser.addini("mystique_history_timeout", "seconds to wait for a locked history database", default=None)
    parser.addini("mystique_warmup", "warm-up iterations per trace", default=None)
    parser.addini("mystique_runs", "most fresh worker processes a trace is sampled in (1: this process only)",
                  default=None)
    parser.addini("mystique_budget", "sampling seconds per trace", default=None)
    parser.addini("mystique_noise", "run-to-run noise (fraction) that sampling cannot remove", default=None)
    parser.addini("mystique_drift", "session-to-session offset (fraction) that no sampling removes", default=None)


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_ignored_key] = []
    worker = getattr(config, "workerinput", None)
    config.stash[_run_key] = (worker or {}).get("mystique_run_id") or uuid.uuid4().hex
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(_XdistHooks(), "mystique-xdist")
    config.addinivalue_line("markers", "mystique: a trace replayed by pytest-mystique")
    if _enabled(config):
        options_from(config)  # a bad setting is a usage error now, not an error in every item


def _enabled(config: pytest.Config) -> bool:
    return bool(config.getoption("mystique", False))


def _int_setting(config: pytest.Config, name: str, default: int) -> int:
    value = config.getoption(f"mystique_{name}")
    if value is None:
        raw = config.getini(f"mystique_{name}")
        value = int(raw) if raw not in (None, "") else default
    least = {"iters": 2, "runs": 1}.get(name, 0)
    if value is not None and value < least:
        raise pytest.UsageError(f"--mystique-{name} must be {f'at least {least}' if least else 'non-negative'}")
    return value


def _float_setting(config: pytest.Config, name: str, default: float) -> float:
    value = config.getoption(f"mystique_{name}")
    if value is None:
        raw = config.getini(f"mystique_{name}") if name in ("budget", "noise", "drift") else None
        value = float(raw) if raw not in (None, "") else default
    if not value > 0 and not (name in ("noise", "drift") and value == 0):
        raise pytest.UsageError(f"--mystique-{name} must be positive")
    if name == "alpha" and not value < 0.5:
        raise pytest.UsageError("--mystique-alpha must be below 0.5")
    return value


_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(i?B?)\s*$", re.I)


def parse_size(text: str | None) -> int | None:
    if text in (None, ""):
        return None
    m = _SIZE_RE.match(str(text))
    if not m:
        raise pytest.UsageError(f"--mystique-max-memory: cannot read size {text!r} (e.g. 512MiB, 8GiB)")
    mult = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}[m.group(2).upper()]
    return int(float(m.group(1)) * mult)


def options_from(config: pytest.Config):
    from .runner import Options

    return Options(
        device=config.getoption("mystique_device") or "auto",
        warmup=_int_setting(config, "warmup", DEFAULT_WARMUP),
        iters=_int_setting(config, "iters", None),
        budget_s=_float_setting(config, "budget", DEFAULT_BUDGET_S),
        runs=_int_setting(config, "runs", DEFAULT_RUNS),
        # each trace is tested at alpha / (number of traces): Benjamini-Hochberg's strictest step
        alpha=_float_setting(config, "alpha", DEFAULT_ALPHA) / max(1, config.stash.get(_count_key, 1)),
        process_noise=_float_setting(config, "noise", DEFAULT_NOISE),
        drift=_float_setting(config, "drift", DEFAULT_DRIFT),
        threads=config.getoption("mystique_threads"),
        max_memory=parse_size(config.getoption("mystique_max_memory")),
        **({"max_trace_bytes": parse_size(config.getoption("mystique_max_trace_size"))}
           if config.getoption("mystique_max_trace_size") else {}),
        timeout_s=config.getoption("mystique_timeout"),
    )


def baseline_dir(config: pytest.Config) -> Path:
    opt = config.getoption("mystique_baseline_dir")
    if opt:
        return Path(opt).resolve()
    ini = config.getini("mystique_baseline_dir")
    base = config.inipath.parent if config.inipath else config.rootpath
    return (base / ini).resolve() if ini else config.rootpath / ".mystique" / "baselines"


def history_path(config: pytest.Config) -> Path | str | None:
    """The history database: a file path, a ``postgresql://`` URL, or None when off."""
    value = config.getoption("mystique_history") or config.getini("mystique_history")
    if value == "off":
        return None
    if value and value.startswith(("postgresql://", "postgres://")):
        return value
    if value:
        base = config.inipath.parent if config.inipath and not config.getoption("mystique_history") else Path.cwd()
        return (base / value).resolve()
    return baseline_dir(config) / "history.sqlite"


def _earlier_sessions(config: pytest.Config, trace: str, file: str, hardware_key: str, baseline_median_s: float,
                      baseline_environment: dict | None = None) -> dict[str, list[tuple[float, float]]]:  # fmt: skip
    """This trace's earlier comparisons with the same baseline on this hardware, from the history:
    ``drift``, the evidence of its session drift, and ``reference``, the sessions pooled with the
    baseline's (:func:`.history.earlier_sessions`). A history that cannot be read gives none
    (writing to it reports the problem)."""
    path = history_path(config)
    if path is None or (not isinstance(path, str) and not Path(path).exists()):
        return {"drift": [], "reference": []}
    from .history import earlier_sessions, open_store

    try:
        rows = open_store(path, timeout_s=5).results(trace, limit=EARLIER_ROWS)
    except MystiqueError:
        return {"drift": [], "reference": []}
    return earlier_sessions(rows, file, hardware_key, baseline_median_s, baseline_environment)


#: History rows of a trace read for its earlier sessions: the drift needs the last 30, the
#: reference the first few after the baseline was recorded.
EARLIER_ROWS = 1000


def _record_history(config: pytest.Config, result: dict) -> None:
    path = history_path(config)
    if path is None or result.get("status") in (None, "error"):
        return
    from .history import HistoryError, open_store

    raw = config.getini("mystique_history_timeout")
    try:
        open_store(path, float(raw) if raw else 30.0).record(config.stash[_run_key], result)
    except HistoryError as e:
        result["history_error"] = str(e)


def tolerance_for(config: pytest.Config, trace_name: str, rel_path: str) -> float:
    for line in config.getini("mystique_trace_tolerance"):
        pattern, sep, value = line.partition("=")
        if not sep:
            raise pytest.UsageError(f"mystique_trace_tolerance: expected 'GLOB = FRACTION', got {line!r}")
        pattern = pattern.strip()
        if fnmatch.fnmatch(trace_name, pattern) or fnmatch.fnmatch(rel_path, pattern):
            return _fraction(value, "mystique_trace_tolerance")
    opt = config.getoption("mystique_tolerance")
    if opt is not None:
        return _fraction(opt, "--mystique-tolerance")
    ini = config.getini("mystique_tolerance")
    return _fraction(ini, "mystique_tolerance") if ini else DEFAULT_TOLERANCE


def _fraction(value, what: str) -> float:
    try:
        f = float(value)
    except (TypeError, ValueError):
        raise pytest.UsageError(f"{what}: {value!r} is not a number") from None
    if not 0 <= f < 10:
        raise pytest.UsageError(f"{what}: {f} is not a fraction such as 0.05")
    return f


def _is_trace_name(name: str) -> bool:
    return (name.endswith(".json") or name.endswith(".json.gz")) and not name.endswith(".meta.json")


def pytest_collection_finish(session: pytest.Session) -> None:
    session.config.stash[_count_key] = sum(isinstance(i, TraceItem) for i in session.items)


def pytest_collect_file(file_path: Path, parent: pytest.Collector):
    config = parent.config
    if not _enabled(config) or not _is_trace_name(file_path.name) or not _requested(config, file_path):
        return None
    from .distributed import rank_files, rank_of

    ranks = rank_files(file_path) if rank_of(file_path.name) else {}
    if ranks and ranks[min(ranks)] != file_path:
        return None  # a job's per-rank files are one item, collected through its lowest rank's file
    kind, info = sniff(file_path)
    if kind == "other":
        config.stash[_ignored_key].append(f"{_rel(config, file_path)}: {info}")
        return None
    return TraceFile.from_parent(parent, path=file_path)


def _requested(config: pytest.Config, file_path: Path) -> bool:
    """Whether ``file_path`` is, or lies under, a path given on the command line: pytest also
    offers the files beside the ones asked for (it collects from the rootdir down), and those are
    neither sniffed nor reported as ignored. Paths are compared as given (``abspath``, as pytest
    does), so a trace reached through a symbolic link counts as under the folder that links it."""
    if config.option.pyargs:
        return True
    here = Path(os.path.abspath(file_path))
    for arg in config.args:
        p = Path(os.path.abspath(Path(config.invocation_params.dir, arg.split("::")[0])))
        if here == p or p in here.parents:
            return True
    return False


def _rel(config: pytest.Config, path: Path) -> str:
    try:
        return str(path.relative_to(config.rootpath))
    except ValueError:
        return str(path)


class TraceFile(pytest.File):
    def collect(self):
        from .distributed import job_name, rank_files

        ranks = rank_files(self.path)
        item = TraceItem.from_parent(self, name=job_name(self.path) if ranks else trace_stem(self.path))
        item.ranks = ranks or None  # a multi-rank job: every rank's file, by rank
        yield item


class Regression(Exception):
    """The replay is significantly slower than its baseline (or, under --mystique-strict, no
    verdict was reached)."""


class TraceItem(pytest.Item):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.add_marker("mystique")
        self.ranks: dict | None = None

    def runtest(self) -> None:
        from . import parallel
        from .baseline import BaselineStore
        from .runner import check_file, release, with_original_timing

        config = self.config
        worker = getattr(config, "workerinput", None)
        rel = _rel(config, self.path)
        baseline_name = re.sub(r"\.json(\.gz)?$", "", rel)
        if self.ranks:  # a job: named after the job, not after its lowest rank's file
            folder = Path(rel).parent
            baseline_name = str(folder if folder.name == self.name else folder / self.name)
        result = {"trace": self.name, "nodeid": self.nodeid, "file": rel, "status": "error"}
        run = None
        try:
            options = options_from(config)
            options.device, note = parallel.worker_device(options.device, parallel.worker_index(worker))
            run, result = check_file(
                self.path, options, BaselineStore(baseline_dir(config)), baseline_name,
                tolerance=tolerance_for(config, self.name, rel),
                update=config.getoption("mystique_update"), rootdir=config.rootpath,
                turn=functools.partial(parallel.cpu_turn, config.stash[_run_key] if worker else None, options.device),
                ranks=self.ranks, name=self.name, earlier=functools.partial(_earlier_sessions, config, self.name, rel),
            )  # fmt: skip
            if worker:
                result["xdist_worker"] = worker.get("workerid")
            if note:
                result["notes"][note] = 1
            result = with_original_timing(result, self.path)
            result.update(trace=self.name, nodeid=self.nodeid, file=rel)
            _record_history(config, result)
        except Exception as e:
            result["error"] = message(e)
            raise
        finally:
            release(run)
            self._record(result)
        if result["status"] == "slower" or (result["status"] == "unsure" and config.getoption("mystique_strict")):
            raise Regression(_regression_message(result))

    def _record(self, result: dict) -> None:
        from . import report
        from .runner import host_share_note

        for name, value in report.junit_properties(result):
            if value is not None:
                self.user_properties.append((name, value))
        slim = {k: v for k, v in result.items() if k not in ("environment",)}
        self.user_properties.append((RESULT_PROPERTY, json.dumps(slim, default=str)))
        lines = report.skipped_lines(result)
        if result.get("status") not in (None, "error"):
            head = (
                f"{result['ops_replayed']}/{result['ops_total']} ops replayed on {result['device']}, "
                f"median {report.fmt_seconds(result['median_s'])} over {len(result['samples_s'])} iterations "
                f"in {result.get('segments', '?')} segments, {result.get('runs', 1)} process(es) "
                f"({result.get('sampling_s', 0):.1f} s)"
            )
            if result.get("fidelity_ratio"):
                head += f", {result['fidelity_ratio']:.2f}x the original step"
                head += "".join(f" ({note})" for note in result.get("fidelity_unlike", ()))
                if result.get("original_host_share") is not None:
                    head += f" ({host_share_note(result['original_host_share'], ranges=result.get('original_outside'))})"
            elif result.get("original_median_s"):
                head += ", not comparable with the original step" + "".join(
                    f" ({note})" for note in result.get("fidelity_unlike", ()))
            lines.insert(0, head)
        if lines:
            self.add_report_section("call", "mystique", "\n".join(lines))

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, (MystiqueError, Regression)):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self):
        return self.path, None, f"mystique trace {self.name}"


def _regression_message(result: dict) -> str:
    from . import report
    from .stats import Comparison

    cmp = Comparison(**{k: v for k, v in result["comparison"].items() if k != "change"})
    what = "is slower than its baseline" if cmp.verdict == "slower" else "reached no verdict within the budget (--mystique-strict)"
    lines = [
        f"{result['trace']} {what}: {cmp.describe()}",
        f"baseline: {result['baseline_path']}",
    ]
    lines += report.attribution_lines(result)
    changes = result.get("env_changes") or []
    lines.append("environment changes: " + ("; ".join(changes) if changes else "none recorded"))
    if result.get("ops_skipped"):
        lines.append(f"{result['ops_skipped']} of {result['ops_total']} ops were skipped (see the mystique section)")
    return "\n".join(lines)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when != "call":
        return
    for name, value in report.user_properties:
        if name == RESULT_PROPERTY:
            _pending.append(json.loads(value))


# Results gathered from reports: on the controller this includes pytest-xdist workers' items.
_pending: list[dict] = []


def pytest_sessionstart(session: pytest.Session) -> None:
    _pending.clear()


def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config) -> None:
    if not _enabled(config):
        return
    tr = terminalreporter
    results = list(_pending)
    ignored = config.stash.get(_ignored_key, [])
    if not results and not ignored:
        return
    from . import report

    tr.write_sep("=", "mystique")
    if results:
        for line in report.format_table(report.table_rows(results)):
            tr.write_line(line)
        for r in results:
            extra = report.skipped_lines(r)
            if r.get("status") == "error":
                tr.write_line(f"{r['trace']}: {r.get('error', 'error')}")
            elif extra:
                tr.write_line(f"{r['trace']}:")
                for line in extra:
                    tr.write_line(f"    {line}")
        for line in report.session_lines(results, _float_setting(config, "alpha", DEFAULT_ALPHA),
                                         config.getoption("mystique_strict")):  # fmt: skip
            tr.write_line(line)
        workers = {r["xdist_worker"] for r in results if r.get("xdist_worker") and str(r.get("device")).startswith("cpu")}
        if len(workers) > 1:
            tr.write_line(f"pytest-xdist on the CPU: {len(workers)} workers loaded and prepared traces in parallel and "
                          "took turns timing them (replays timed at once on shared cores measure each other)")  # fmt: skip
        new = [r for r in results if r.get("status") in ("new", "updated")]
        if new:
            tr.write_line(f"{len(new)} baseline(s) recorded under {baseline_dir(config)}")
        for problem in dict.fromkeys(r["history_error"] for r in results if r.get("history_error")):
            tr.write_line(f"history not recorded: {problem}")
    for line in ignored:
        tr.write_line(f"ignored {line}")


def pytest_sessionfinish(session: pytest.Session, exitstatus) -> None:
    config = session.config
    path = config.getoption("mystique_json", None) if _enabled(config) else None
    if path and not hasattr(config, "workerinput"):
        from . import report

        report.write_benchmark_json(path, list(_pending))
