"""A replay worker: ``python -m pytest_mystique.worker``, driven by JSON lines on stdin.

Two users: ``mystique ab`` replays the same trace in two Python environments (say, old and new
torch) alternately; the plugin samples a trace in fresh processes of its own Python
(:func:`fresh_run`), because each process has a speed offset of its own that only more processes
average out (:mod:`.stats`). Each request is one JSON object per line; each answer too, on stdout:

* ``{"cmd": "load", "trace": PATH, "device": "cpu", "threads": 1, "seed": 0, "max_memory": null}``
  -> counts, versions
* ``{"cmd": "warmup", "seconds": 0.3, "iterations": 3}`` -> ``{"per_iter_s": ...}``
* ``{"cmd": "segment", "iters": N, "probe": false}`` -> ``{"samples_s": [...], "probe_s": [...]}``
* ``{"cmd": "unload"}`` -> ``{"ok": true}``: the loaded replay let go (its memory back to the machine)
* ``{"cmd": "quit"}``

Errors come back as ``{"error": "..."}``; the worker keeps serving. Only this package's own
functions are reachable through the protocol: a request names a trace file, never code.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence

from .errors import MystiqueError, message


def _serve(stdin, stdout) -> None:
    import torch

    from .measure import steady_allocator
    from .runner import Options, prepare_file
    from .sampling import _segment, warm_up
    from .trace import DEFAULT_MAX_TRACE_BYTES

    steady_allocator()
    replay = None

    def answer(obj) -> None:
        stdout.write(json.dumps(obj) + "\n")
        stdout.flush()

    for line in stdin:
        try:
            req = json.loads(line)
            cmd = req.get("cmd")
            if cmd == "quit":
                answer({"ok": True})
                return
            if cmd == "load":
                replay = None
                torch.set_num_threads(int(req.get("threads") or 1))
                t0 = time.perf_counter()
                options = Options(device=str(req.get("device", "cpu")), seed=int(req.get("seed", 0)),
                                  max_memory=req.get("max_memory"),
                                  max_trace_bytes=int(req.get("max_trace_bytes") or DEFAULT_MAX_TRACE_BYTES))  # fmt: skip
                loaded, _ = prepare_file(str(req["trace"]), options)
                if not hasattr(loaded, "steps"):
                    answer({"error": "a multi-rank job is not replayed by a single worker"})
                    continue
                replay = loaded.prepare()
                prepare_s = time.perf_counter() - t0
                rep = replay.report
                answer({"ops_total": rep.ops_total, "ops_replayed": rep.ops_replayed, "skipped": rep.skipped_list(),
                        "prepare_s": prepare_s,
                        "torch": torch.__version__, "python": platform.python_version(),
                        "executable": sys.executable})  # fmt: skip
            elif cmd == "unload":
                replay = None
                gc.collect()
                if torch.cuda.is_available():
                    torch.cuda.empty_cache()
                answer({"ok": True})
            elif cmd in ("warmup", "segment") and replay is None:
                answer({"error": "no trace loaded"})
            elif cmd == "warmup":
                done, per_iter = warm_up(replay, int(req.get("iterations", 1)), min_s=float(req.get("seconds", 0.3)))
                answer({"per_iter_s": per_iter, "iterations": done})
            elif cmd == "segment":
                seg = _segment(replay, int(req["iters"]), probe=bool(req.get("probe")))
                answer({"samples_s": seg.samples_s, "probe_s": seg.probe_s})
            else:
                answer({"error": f"unknown command {cmd!r}"})
        except Exception as e:  # noqa: BLE001 - any failure of one request (torch's out of memory too) is answered
            answer({"error": message(e)})


def cpu_sets(pairs: int, threads: int) -> list[set[int] | None]:
    """The CPUs for each of ``pairs`` pairs of workers of ``threads`` threads each: both workers of
    a pair share one set (they never run at once), so that what one CPU does differently (another
    tenant on its core, its cache's state) falls on A and B alike instead of on one side; the pairs
    take the CPUs this process may use in turn, so that different pairs see different CPUs. None
    (no pinning) where a pair would need every CPU or the system has no affinities."""
    try:
        allowed = sorted(os.sched_getaffinity(0))
    except AttributeError:
        return [None] * pairs
    if threads >= len(allowed):
        return [None] * pairs
    return [{allowed[(j * threads + i) % len(allowed)] for i in range(threads)} for j in range(pairs)]


def start_pairs(pythons: Sequence[str], pairs: int, threads: int) -> list[tuple[Worker, Worker]]:
    """``pairs`` pairs of workers, one of each of the two ``pythons`` (A, B) in a pair, the two of
    a pair pinned to the same CPUs (:func:`cpu_sets`). Where a worker cannot start, those started
    before it are closed and the error raised."""
    started: list[Worker] = []
    try:
        for cpus in cpu_sets(pairs, threads):
            for python in pythons:
                started.append(Worker(python, threads, cpus))
    except MystiqueError:
        for w in started:
            w.close()
        raise
    return [(started[i], started[i + 1]) for i in range(0, len(started), 2)]


class Worker:
    """One replay worker process in the environment of ``python``."""

    def __init__(self, python: str, threads: int, cpus: set[int] | None = None):
        env = dict(os.environ, OMP_NUM_THREADS=str(threads), PYTHONUNBUFFERED="1")
        self.stderr = tempfile.TemporaryFile()
        try:
            self.proc = subprocess.Popen(
                [python, "-m", "pytest_mystique.worker"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=self.stderr, text=True, env=env,
            )  # fmt: skip
        except OSError as e:
            self.stderr.close()
            raise MystiqueError(python, f"cannot start a replay worker: {e.strerror or e}") from None
        self.python = python
        #: the CPUs it runs on, where it was pinned (None: wherever the system puts it)
        self.cpus: list[int] | None = None
        if cpus:
            try:  # before the worker has started its threads, which inherit the set
                os.sched_setaffinity(self.proc.pid, cpus)
                self.cpus = sorted(cpus)
            except (AttributeError, OSError):  # (a system without affinities, or CPUs taken away since)
                pass

    def request(self, **req) -> dict:
        try:
            self.proc.stdin.write(json.dumps(req) + "\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        except (BrokenPipeError, OSError):
            line = ""
        if not line:
            raise MystiqueError(self.python, f"replay worker exited ({self._last_words()})")
        try:
            reply = json.loads(line)
        except ValueError:
            raise MystiqueError(self.python, f"replay worker answered something that is not JSON: {line[:200]!r}") from None
        if "error" in reply:
            raise MystiqueError(req.get("trace") or self.python, reply["error"])
        return reply

    def alive(self) -> bool:
        return self.proc.poll() is None

    def _last_words(self) -> str:
        """The end of what the worker wrote to stderr, or a hint when it wrote nothing."""
        try:
            self.proc.wait(timeout=5)
            self.stderr.seek(0)
            lines = self.stderr.read().decode(errors="replace").strip().splitlines()
        except (OSError, subprocess.TimeoutExpired):
            lines = []
        code = self.proc.returncode
        said = lines[-1] if lines else "no message; is pytest-mystique installed in this environment?"
        return f"exit status {code}: {said}" if code is not None else said

    def close(self) -> None:
        try:
            self.request(cmd="quit")
        except MystiqueError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.stderr.close()

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout, self.stderr):
            f.close()


def fresh_run(trace, *, segments: int, segment_iters: int, probe: bool, device: str = "cpu", threads: int = 1,
              seed: int = 0, max_memory: int | None = None, max_trace_bytes: int | None = None,
              warmup: int = 3) -> list:  # fmt: skip
    """Replay ``trace`` in a new process of this Python: load, prepare, warm up, then time
    ``segments`` segments of ``segment_iters`` iterations (with the machine-speed probe when
    ``probe``). The process is killed at the end whatever happens, also when a deadline interrupts."""
    from .measure import MIN_WARMUP_S
    from .sampling import Segment

    worker = Worker(sys.executable, threads)
    try:
        worker.request(cmd="load", trace=str(trace), device=device, threads=threads, seed=seed, max_memory=max_memory,
                       max_trace_bytes=max_trace_bytes)  # fmt: skip
        worker.request(cmd="warmup", seconds=MIN_WARMUP_S, iterations=warmup)
        return [Segment(**worker.request(cmd="segment", iters=segment_iters, probe=probe)) for _ in range(segments)]
    finally:
        # killed, not asked to quit: an interpreter with torch takes half a second to shut down, on
        # a core the next run's timing shares, and this one has nothing left to save
        worker.kill()


@contextlib.contextmanager
def stdout_set_aside():
    """A private copy of this process's stdout, for its answers, while file descriptor 1 and
    Python's ``sys.stdout`` point at stderr: what else is printed, by Python, by a C library
    writing to file descriptor 1 (oneDNN's verbose mode; gloo under torch 2.7-2.10 prints "[Gloo]
    Rank 0 is connected to ..." in a one-process world and in each rank process) or by a process
    started meanwhile, does not mix with the answers (``mystique replay --json``'s was no JSON).
    Python's and the C library's buffers are flushed on the way in and out, and file descriptor
    1 is pointed back whatever the flushes raise."""
    _flush_all()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        with os.fdopen(os.dup(saved), "w") as out, contextlib.redirect_stdout(sys.stderr):
            yield out
    finally:
        try:
            _flush_all()
        finally:
            os.dup2(saved, 1)
            os.close(saved)


def _flush_all() -> None:
    """Python's and the C library's buffers of stdout written out."""
    with contextlib.suppress(OSError, ValueError):
        sys.stdout.flush()
    # (None: every C stream; where the C library cannot be opened so, as on Windows, nothing is flushed)
    with contextlib.suppress(OSError, AttributeError, TypeError):
        ctypes.CDLL(None).fflush(None)


def main() -> None:
    with stdout_set_aside() as out:
        _serve(sys.stdin, out)


if __name__ == "__main__":
    main()
