"""Baseline store: one human-readable YAML file per trace per hardware.

Layout: ``<dir>/<hardware key>/<trace name>.yaml``. A file holds the raw samples, their summary
and provenance (date, versions, git commit when known), so a pull request that updates a baseline
can be reviewed like code. Files are read with ``yaml.safe_load`` only and written atomically: a
temporary file in the same directory, flushed and fsynced, then renamed over the old one, so a
killed run never leaves a half-written baseline.
"""

from __future__ import annotations

import datetime as _dt
import os
import re
import statistics
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import yaml

from .errors import BaselineError

FORMAT_VERSION = 2  # 2: segments with probe times; 1 (flat samples) is still read
_SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")


def safe_name(name: str) -> str:
    """A file name made only of letters, digits, '.', '_' and '-', never '.' or '..' alone."""
    cleaned = re.sub(r"\.{2,}", "_", _SAFE_NAME.sub("_", name)).strip("._") or "trace"
    return cleaned[:150]


@dataclass
class Baseline:
    path: Path
    data: dict

    @property
    def samples_s(self) -> list[float]:
        return self.data["samples_s"]

    @property
    def environment(self) -> dict:
        return self.data.get("environment", {})

    @property
    def per_op_median_s(self) -> dict:
        return self.data.get("per_op_median_s") or {}

    @property
    def median_s(self) -> float:
        return statistics.median(self.samples_s)

    @property
    def segments(self) -> list:
        from .sampling import Segment

        segs = self.data.get("segments")
        if segs:
            return [Segment(list(s["samples_s"]), list(s.get("probe_s") or []), int(s.get("run") or 0)) for s in segs]
        xs = self.samples_s  # format 1: flat samples, no probe; cut into segments of up to 5
        size = max(1, min(5, len(xs) // 2))
        return [Segment(xs[i:i + size], []) for i in range(0, len(xs) - size + 1, size)]

    @property
    def probe_signature(self) -> str | None:
        return self.data.get("probe_signature")

    @property
    def segment_iters(self) -> int | None:
        return self.data.get("segment_iters")

    @property
    def ops(self) -> tuple[int, int] | None:
        """(ops selected, ops replayed) of the replay these timings are of; None where the file
        does not say."""
        ops = self.data.get("ops")
        if isinstance(ops, dict) and all(type(ops.get(k)) is int for k in ("total", "replayed")):
            return ops["total"], ops["replayed"]
        return None

    @property
    def built(self) -> dict | None:
        """What the replay whose timings these are was built from (:func:`.runner.build_identity`):
        it built in this process without crashing it. Absent from baselines before the field."""
        built = self.data.get("built")
        return built if isinstance(built, dict) else None


def git_commit(cwd: str | os.PathLike | None = None) -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=5, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    sha = out.stdout.strip()
    return sha if out.returncode == 0 and re.fullmatch(r"[0-9a-f]{40}", sha) else None


class BaselineStore:
    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)

    def path_for(self, hardware_key: str, trace_name: str) -> Path:
        return self.root / safe_name(hardware_key) / f"{safe_name(trace_name)}.yaml"

    def load(self, hardware_key: str, trace_name: str) -> Baseline | None:
        path = self.path_for(hardware_key, trace_name)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except OSError as e:
            raise BaselineError(path, f"cannot read baseline: {e.strerror or e}") from None
        except UnicodeDecodeError:
            raise BaselineError(path, "baseline is not UTF-8 text") from None
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as e:
            raise BaselineError(path, f"corrupt baseline YAML: {_yaml_problem(e)}") from None
        return Baseline(path, validate(data, path))

    def save(self, hardware_key: str, trace_name: str, data: dict, *, replace: bool = False) -> Path:
        """Write a baseline. Unless ``replace`` (``--mystique-update``), an existing file is never
        overwritten, also when another run created it a moment ago: :class:`BaselineExists`."""
        path = self.path_for(hardware_key, trace_name)
        text = yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=100)
        atomic_write(path, text, replace=replace)
        return path


def validate(data, path: Path) -> dict:
    if not isinstance(data, dict):
        raise BaselineError(path, "corrupt baseline: top level is not a mapping")
    fmt = data.get("format")
    if not isinstance(fmt, int):
        raise BaselineError(path, "corrupt baseline: no integer 'format' field")
    if fmt > FORMAT_VERSION:
        raise BaselineError(path, f"baseline format {fmt} is newer than this pytest-mystique understands ({FORMAT_VERSION}); upgrade it")
    if not _positive_numbers(data.get("samples_s"), 2):
        raise BaselineError(path, "corrupt baseline: 'samples_s' must be a list of at least two positive numbers")
    segs = data.get("segments")
    if segs is not None and not (
        isinstance(segs, list)
        and len(segs) >= 2
        and all(isinstance(g, dict) and _positive_numbers(g.get("samples_s"), 1)
                and _positive_numbers(g.get("probe_s", []), 0)
                and isinstance(g.get("run", 0), int) and not isinstance(g.get("run", 0), bool) for g in segs)  # fmt: skip
    ):
        raise BaselineError(path, "corrupt baseline: 'segments' must be a list of at least two segments of positive times")
    if not isinstance(data.get("environment", {}), dict):
        raise BaselineError(path, "corrupt baseline: 'environment' is not a mapping")
    return data


def _positive_numbers(xs, at_least: int) -> bool:
    return (
        isinstance(xs, list)
        and len(xs) >= at_least
        and all(isinstance(x, (int, float)) and not isinstance(x, bool) and x > 0 for x in xs)
    )


def make_record(trace_name: str, trace_file: str, sampled, environment: dict, *,
                ops_total: int, ops_replayed: int, per_op_median_s: dict | None = None,
                commit: str | None = None, built: dict | None = None) -> dict:  # fmt: skip
    """A baseline from a :class:`~.sampling.Sampled` measurement."""
    samples_s = sampled.samples_s
    return {
        "format": FORMAT_VERSION,
        "trace": trace_name,
        "trace_file": trace_file,
        "recorded": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "git_commit": commit,
        "summary": {
            "median_s": statistics.median(samples_s),
            "min_s": min(samples_s),
            "max_s": max(samples_s),
            "n": len(samples_s),
        },
        "ops": {"total": ops_total, "replayed": ops_replayed},
        "environment": environment,
        "samples_s": [float(x) for x in samples_s],
        "segment_iters": sampled.segment_iters,
        "probe_signature": sampled.probe_signature,
        "segments": [{"samples_s": [float(x) for x in g.samples_s], "probe_s": [float(x) for x in g.probe_s],
                      "run": g.run} for g in sampled.segments],  # fmt: skip
        **({"per_op_median_s": per_op_median_s} if per_op_median_s else {}),
        **({"built": built} if built else {}),
    }


class BaselineExists(BaselineError):
    """The file appeared between reading and writing (another run recorded it)."""


def atomic_write(path: Path, text: str, *, replace: bool = True) -> None:
    """Write ``text`` to ``path`` so that readers see the old file or the new one, never a mix.

    With ``replace=False`` the new file is linked into place only if no file is there (an atomic
    create-exclusive), so two runs racing to record the same baseline cannot overwrite each other."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as e:
        raise BaselineError(path, f"cannot write baseline: {e.strerror or e}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        if replace:
            os.replace(tmp, path)
        else:
            try:
                os.link(tmp, path)
            except FileExistsError:
                raise BaselineExists(path, "baseline was recorded by another run meanwhile; kept it") from None
            finally:
                os.unlink(tmp)
        _fsync_dir(path.parent)
    except OSError as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise BaselineError(path, f"cannot write baseline: {e.strerror or e}") from None


def _fsync_dir(directory: Path) -> None:
    """Make a rename durable: a crash right after it must not bring the old name back."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _yaml_problem(e: yaml.YAMLError) -> str:
    mark = getattr(e, "problem_mark", None)
    problem = getattr(e, "problem", None) or str(e).splitlines()[0]
    return f"{problem} (line {mark.line + 1}, column {mark.column + 1})" if mark else str(problem)
