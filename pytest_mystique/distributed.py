"""Multi-rank replay: one process per rank, joined by ``torch.distributed``.

A job's traces are one file per rank (``rank-0.json.gz``, ``rank-1.json.gz``, ... or
``<name>_rank_N.json``, ``<name>.rankN.json``). :class:`DistributedReplay` starts one process per
rank with torch's own multiprocessing (``spawn``), each of which joins a world through a
``file://`` rendezvous (gloo on the CPU, NCCL for CUDA tensors), rebuilds the trace's process
groups (:mod:`.collectives`), and prepares a :class:`.replay.Replay` of its rank's trace in which
the collectives are real ones. A trace that records a job of N ranks but comes alone (one rank's
file) is replayed by N processes that all run that file: collectives need their peers, and the
ranks of a data-parallel job run the same program.

The parent drives the ranks like a single replay: an iteration is one ``barrier`` followed by
every rank's step, each rank timing its own step; the iteration's time is the slowest rank's (the
step is done when the last rank is). The sampling, statistics and baselines then work on those
times as they do for one process; per-rank medians are reported beside them.
"""

from __future__ import annotations

import os
import re
import statistics
import tempfile
import time
from collections import Counter
from multiprocessing.connection import wait
from pathlib import Path
from types import SimpleNamespace

import torch

from .collectives import backend_for
from .errors import ReplayError, message
from .steps import Report

#: Run-to-run noise of a multi-rank replay on the CPU: the ranks' collectives go through gloo over
#: loopback and the ranks share the cores, so two sessions of the same job differ by far more than
#: one process does (A/A sessions on the 2-core CI host: sd of the log ratio 8.5% for the 8-rank
#: DLRM job, 10.7% for the 2-rank all_gather job, against 1.3-1.9% for single-process traces).
SHARED_CORES_NOISE = 0.10

#: Seconds a rank may wait in a collective for its peers before the replay is declared broken.
COLLECTIVE_TIMEOUT_S = 300
MAX_RANKS = 64

_RANK_RE = re.compile(r"^(?P<stem>.*?)[._-]?rank[-_.]?(?P<rank>\d+)\.json(?:\.gz)?$", re.I)


def rank_of(name: str) -> tuple[str, int] | None:
    """(job stem, rank) for a per-rank trace file name, else None."""
    m = _RANK_RE.match(name)
    if not m or name.endswith(".meta.json"):
        return None
    return m.group("stem"), int(m.group("rank"))


def rank_files(path: Path) -> dict[int, Path]:
    """The per-rank files of the job ``path`` belongs to (same folder, same stem), by rank."""
    key = rank_of(path.name)
    if key is None:
        return {}
    out = {}
    for p in path.parent.iterdir():
        k = rank_of(p.name)
        if k is not None and k[0] == key[0] and p.is_file():
            out.setdefault(k[1], p)
    return dict(sorted(out.items()))


def job_name(path: Path) -> str:
    """The test item's name for a per-rank file's job: its stem, else the folder's name."""
    key = rank_of(path.name)
    stem = key[0] if key else ""
    return stem.strip("._-") or path.parent.name


def resolve_job(path: Path) -> tuple[Path, dict[int, Path] | None, str | None]:
    """What to replay for ``path``: (trace file, per-rank files or None, job name or None). A
    folder holding per-rank files is that job; a per-rank file stands for its whole job."""
    path = Path(path)
    if path.is_dir():
        found = sorted((p for p in path.iterdir() if rank_of(p.name) and p.is_file()), key=lambda p: p.name)
        if not found:  # one rank's file alone: it stands for the job its process groups describe
            found = [p for p in path.iterdir() if p.name.endswith((".json", ".json.gz"))
                     and not p.name.endswith(".meta.json") and p.is_file()]  # fmt: skip
            if len(found) != 1:
                raise ReplayError(path, "a folder must hold per-rank trace files (rank-0.json.gz, rank-1.json.gz, "
                                        "...) or a single trace")  # fmt: skip
        path = found[0]
    ranks = rank_files(path)
    if not ranks:
        return path, None, None
    return ranks[min(ranks)], ranks, job_name(path)


class DistributedReplay:
    """A multi-rank replay, driven from this process; quacks like :class:`.replay.Replay` for
    the measurement and sampling code (``prepare``, ``run``, ``reset_state``, ``device``,
    ``report``, ``time_iterations``, ``per_op_medians``)."""

    probed = False  # no machine-speed probe between iterations: the ranks time themselves

    def __init__(self, files: dict[int, Path], world_size: int, *, name: str, path: Path, schema: str,
                 device: torch.device, seed: int = 0, max_memory: int | None = None, threads: int = 1,
                 max_trace_bytes: int | None = None):  # fmt: skip
        if world_size > MAX_RANKS:
            raise ReplayError(path, f"the trace's job has {world_size} ranks; at most {MAX_RANKS} are replayed")
        missing = sorted(set(range(world_size)) - set(files))
        self.files = {r: files.get(r) or files[min(files)] for r in range(world_size)}
        self.world_size = world_size
        self.trace = SimpleNamespace(name=name, path=path, schema=schema)
        self.device = device
        self.seed = seed
        self.max_memory = max_memory
        self.threads = threads
        self.max_trace_bytes = max_trace_bytes
        self.report = Report()
        self.noisy = device.type == "cpu"  # see SHARED_CORES_NOISE
        if self.noisy:
            self.report.notes[f"{world_size} ranks x {threads} thread(s) on {os.cpu_count()} CPU cores (gloo): the "
                              f"verdict allows {SHARED_CORES_NOISE:.0%} run-to-run noise"] += 1  # fmt: skip
        if missing:
            self.report.notes[f"no trace file for rank(s) {_ranges(missing)}: they replay rank {min(files)}'s trace"] += 1
        self.per_rank: list[dict] = []
        self.rank_samples: list[list[float]] = [[] for _ in range(world_size)]
        self.probe_s = 0.0
        self.free_s = 0.0
        self.env: list = []  # what runner.release() clears on a single replay
        self.steps: list = []
        self.prepared = False
        self._procs: list = []
        self._conns: list = []
        self._tmp: tempfile.TemporaryDirectory | None = None

    # ----------------------------------------------------------------- processes
    def prepare(self) -> DistributedReplay:
        if self.prepared:
            return self
        import torch.multiprocessing as mp

        ctx = mp.get_context("spawn")
        self._tmp = tempfile.TemporaryDirectory(prefix="mystique-ranks-")
        rendezvous = os.path.join(self._tmp.name, "rendezvous")
        gpus = torch.cuda.device_count() if self.device.type == "cuda" else 0
        shared = 0 < gpus < self.world_size
        if shared:
            self.report.notes[f"{self.world_size} ranks share {gpus} GPU(s): NCCL needs a GPU of its own for each rank, "
                              f"so the collectives run through gloo (via host memory) and do not take NCCL's "
                              f"time"] += 1  # fmt: skip
        for rank in range(self.world_size):
            ours, theirs = ctx.Pipe()
            device = self.device
            if device.type == "cuda":
                device = torch.device("cuda", rank % max(1, gpus))
            spec = dict(rank=rank, world_size=self.world_size, file=str(self.files[rank]), device=str(device),
                        backend=backend_for(device, shared), seed=self.seed, max_memory=self.max_memory,
                        threads=self.threads, rendezvous=rendezvous, max_trace_bytes=self.max_trace_bytes,
                        timeout_s=COLLECTIVE_TIMEOUT_S)  # fmt: skip
            proc = ctx.Process(target=rank_main, args=(spec, theirs), daemon=True, name=f"mystique-rank-{rank}")
            proc.start()
            theirs.close()
            self._procs.append(proc)
            self._conns.append(ours)
        ready = self._gather(None, timeout=COLLECTIVE_TIMEOUT_S + 120)
        for info in ready:
            self.per_rank.append(info)
            rep = self.report
            rep.ops_total += info["ops_total"]
            rep.ops_replayed += info["ops_replayed"]
            for op, why, n in info["skipped"]:
                rep.skipped[(op, why)] += n
            for op, alt, n in info["substitutions"]:
                rep.substitutions[(op, alt)] += n
            rep.notes.update(Counter(info["notes"]))
            self.probe_s = max(self.probe_s, info["probe_s"])
            self.free_s = max(self.free_s, info.get("free_s", 0.0))
        self.prepared = True
        return self

    def _gather(self, message, timeout: float) -> list:
        """Send ``message`` to every rank (None: send nothing) and collect one answer from each."""
        if message is not None:
            for c in self._conns:
                c.send(message)
        answers: dict[int, object] = {}
        deadline = time.monotonic() + timeout
        while len(answers) < len(self._conns):
            pending = [c for i, c in enumerate(self._conns) if i not in answers]
            left = deadline - time.monotonic()
            if left <= 0:
                self.close()
                raise ReplayError(self.trace.path, f"ranks {_ranges(sorted(set(range(len(self._conns))) - set(answers)))} "
                                                   f"did not answer within {timeout:g} s")  # fmt: skip
            for c in wait(pending, timeout=min(left, 1.0)):
                rank = self._conns.index(c)
                try:
                    kind, payload = c.recv()
                except (EOFError, OSError):
                    code = self._procs[rank].exitcode
                    self.close()
                    raise ReplayError(self.trace.path, f"rank {rank} exited (code {code}) without answering") from None
                if kind == "error":
                    self.close()
                    raise ReplayError(self.trace.path, f"rank {rank}: {payload}")
                answers[rank] = payload
            for rank, p in enumerate(self._procs):
                if rank not in answers and not p.is_alive() and not self._conns[rank].poll():
                    self.close()
                    raise ReplayError(self.trace.path, f"rank {rank} exited (code {p.exitcode}) without answering")
        return [answers[r] for r in range(len(self._conns))]

    def invalidate(self) -> None:
        """(The ranks' replays, and their straight-line code, live in the ranks' processes.)"""

    def close(self) -> None:
        for c in self._conns:
            try:
                c.send(("stop", None))
            except (OSError, ValueError):
                pass
        for p in self._procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
                p.join(timeout=5)
        for c in self._conns:
            c.close()
        self._procs, self._conns = [], []
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __del__(self):
        if self._procs:
            self.close()

    # ----------------------------------------------------------------- the Replay interface
    def time_iterations(self, iters: int, between=None, *, record: bool = True) -> list[float]:
        per_rank = self._gather(("iters", iters), timeout=COLLECTIVE_TIMEOUT_S + 60)
        if record:
            for rank, times in enumerate(per_rank):
                self.rank_samples[rank].extend(times)
        return [max(ts) for ts in zip(*per_rank)]

    def run(self, after_step=None) -> None:
        """One untimed iteration on every rank (warm-up)."""
        self.time_iterations(1, record=False)

    def reset_state(self) -> None:
        """The ranks re-seed their state themselves (:meth:`.replay.Replay.between_iterations`)."""

    def between_iterations(self) -> None:
        """The ranks do it before each of their iterations themselves."""

    def per_op_medians(self, iters: int) -> dict[str, float]:
        """Per op, the largest of the ranks' per-op medians (the slowest rank sets the pace)."""
        out: dict[str, float] = {}
        for ops in self._gather(("per_op", iters), timeout=COLLECTIVE_TIMEOUT_S + 60):
            for name, s in ops.items():
                out[name] = max(out.get(name, 0.0), s)
        return out

    def rank_summary(self) -> list[dict]:
        rows = []
        for rank, info in enumerate(self.per_rank):
            xs = self.rank_samples[rank]
            rows.append({"rank": rank, "file": info["file"], "ops_total": info["ops_total"],
                         "ops_replayed": info["ops_replayed"], "ops_skipped": info["ops_skipped"],
                         "collectives": info["collectives"], "load_s": info["load_s"], "setup_s": info["setup_s"],
                         "median_s": statistics.median(xs) if xs else None})  # fmt: skip
        return rows


def rank_main(spec: dict, conn) -> None:
    """One rank's process: join the world, prepare the rank's replay, then serve the parent."""
    import datetime

    import torch.distributed as dist

    from .collectives import Comms, end_world
    from .measure import per_op_medians, steady_allocator
    from .replay import Replay
    from .trace import load_trace

    rank = spec["rank"]
    try:
        steady_allocator()
        torch.set_num_threads(spec["threads"])
        device = torch.device(spec["device"])
        if device.type == "cuda":
            torch.cuda.set_device(device)
        dist.init_process_group(spec["backend"], init_method="file://" + spec["rendezvous"], rank=rank,
                                world_size=spec["world_size"], timeout=datetime.timedelta(seconds=spec["timeout_s"]))  # fmt: skip
        t0 = time.perf_counter()
        kw = {"max_bytes": spec["max_trace_bytes"]} if spec["max_trace_bytes"] else {}
        trace = load_trace(spec["file"], **kw)
        load_s = time.perf_counter() - t0
        replay = Replay(trace, device, seed=spec["seed"], max_memory=spec["max_memory"],
                        comms=Comms(trace, rank, spec["world_size"]))  # fmt: skip
        t0 = time.perf_counter()
        replay.prepare()
        replay.comms.settle()
        setup_s = time.perf_counter() - t0
        rep = replay.report
        conn.send(("ready", {
            "file": spec["file"], "ops_total": rep.ops_total, "ops_replayed": rep.ops_replayed,
            "ops_skipped": rep.ops_skipped, "skipped": [(op, why, n) for (op, why), n in rep.skipped.items()],
            "substitutions": [(op, alt, n) for (op, alt), n in rep.substitutions.items()],
            "notes": dict(rep.notes), "probe_s": replay.probe_s, "free_s": replay.free_s, "load_s": load_s, "setup_s": setup_s,
            "collectives": sum(1 for s in replay.steps if s.op.startswith("c10d::")),
        }))  # fmt: skip
        cuda = device.type == "cuda"
        while True:
            kind, arg = conn.recv()
            if kind == "stop":
                break
            if kind == "iters":
                times = []
                for _ in range(arg):
                    replay.between_iterations()
                    if cuda:
                        torch.cuda.synchronize(device)
                    dist.barrier()
                    t = time.perf_counter()
                    replay.run()
                    replay.comms.settle()  # (as the original's schedule waits on its sends by its step's end)
                    if cuda:
                        torch.cuda.synchronize(device)
                    times.append(time.perf_counter() - t)
                conn.send(("times", times))
            elif kind == "per_op":
                dist.barrier()
                medians = per_op_medians(replay, arg)
                replay.comms.settle()
                conn.send(("per_op", medians))
    except (EOFError, KeyboardInterrupt):
        pass
    except BaseException as e:  # noqa: BLE001 - reported to the parent, which names the rank
        try:
            conn.send(("error", message(e)))
        except OSError:
            pass
    finally:
        end_world()


def _ranges(ranks: list[int]) -> str:
    return ", ".join(str(r) for r in ranks[:8]) + (f" (+{len(ranks) - 8} more)" if len(ranks) > 8 else "")
