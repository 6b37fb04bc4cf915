"""Parallel sessions (pytest-xdist): one GPU per worker; on the CPU, timing one replay at a time.

With GPUs, ``pytest --mystique -n auto`` starts one worker per visible GPU (the
``pytest_xdist_auto_num_workers`` hook) and worker ``gwN`` replays on ``cuda:N`` (modulo the
number of GPUs, with a note when workers have to share one).

On a CPU-only machine, replays timed at the same time would share cores, caches and memory
bandwidth and measure each other: the numbers would depend on which traces happened to run
together. So workers load, validate and prepare their traces in parallel, but take turns for the
timed part, through an exclusive lock (``fcntl.flock``) on a file named after the session's run
id. Each worker's timing is then as good as a serial run's; the session is shorter by the
loading and preparing it overlaps.
"""

from __future__ import annotations

import os
import re
import tempfile
from contextlib import contextmanager
from pathlib import Path


def worker_index(workerinput: dict | None) -> int | None:
    """0 for ``gw0`` and so on; None outside pytest-xdist workers."""
    if not workerinput:
        return None
    m = re.fullmatch(r"gw(\d+)", str(workerinput.get("workerid", "")))
    return int(m.group(1)) if m else None


def worker_device(spec: str, index: int | None) -> tuple[str, str | None]:
    """The device a worker replays on, and a note when the choice deserves one."""
    if index is None or spec not in (None, "", "auto"):
        return spec, None
    import torch

    if not torch.cuda.is_available():
        return "cpu", None  # resolved here: the CPU timing turns (cpu_turn) apply to it
    count = torch.cuda.device_count()
    note = None
    if index >= count:
        note = f"more pytest-xdist workers than GPUs ({count}): workers share GPUs and disturb each other's timings"
    return f"cuda:{index % count}", note


def gpu_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


@contextmanager
def cpu_turn(run_id: str | None, device: str):
    """Hold the session's CPU timing lock (pytest-xdist workers on a CPU take turns)."""
    if run_id is None or not str(device).startswith("cpu"):
        yield
        return
    import fcntl

    path = Path(tempfile.gettempdir()) / f"pytest-mystique-{re.sub(r'[^0-9a-f]', '', run_id)[:32]}.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
