"""Machine-speed probe: a small fixed workload timed next to every replay iteration.

Shared CI machines change speed under a benchmark: a neighbour takes the memory bus, the
hypervisor steals cycles, the clock steps down. On the 2-core machines this project is tested on,
the median of the same replay moves by 10% from one process to the next, which no statistics on
the replay alone can tell from a regression. Such slowdowns hit every program on the machine, so
the replay is timed together with a probe that shares the machine but not the code under test:
pure Python arithmetic, a small numpy matrix product, a memory copy and numpy elementwise
kernels (about 1 ms in all; the copy's time counts half, :data:`COPY_WEIGHT`). Dividing the
replay's time by the probe's cancels most of the machine's drift (see benchmarks/stat_power.py),
while a change in torch, its kernels or a driver moves the replay and not the probe.

The probe runs on one core: its matrix product runs with numpy's BLAS held to one thread
(threadpoolctl). With the BLAS's own pool of a thread per core, the probe took 40 times as long
(82 ms against 2 ms) whenever a second process ran beside it on a 2-core host, as the pool's
threads wait for each other spinning, so any neighbour (another pytest-xdist worker preparing its
traces, a build) moved it far more than the machine's speed.

The probe runs Python and numpy code, so a change of Python or numpy changes it, and so does a
change of the probe itself (:data:`PROBE_VERSION`); its :func:`signature` goes into the baseline
and the comparison falls back to raw times when the signature differs.
"""

from __future__ import annotations

import platform
import time

import numpy as np
from threadpoolctl import ThreadpoolController

_rng = np.random.default_rng(0)
_MAT = _rng.random((96, 96))
_BIG = _rng.random(1 << 19)  # 4 MiB: larger than most L2 caches
_BIG_OUT = np.empty_like(_BIG)
_SMALL = _rng.random(1 << 14).astype(np.float32)
_SMALL_OUT = np.empty_like(_SMALL)


#: Share of the memory copy's time in the probe's. The copy's time scatters most from one process
#: to the next (about 10% sd), and most replays follow only part of it: over 1,169 fresh processes
#: of the four bundled traces (two sets, 35 and 20 minutes long), the scatter of a 5-process mean
#: against another a few minutes later was 1.68% and 2.14% (geometric mean over the traces) with the
#: copy counted whole, 1.51% and 1.64% with half of it, and the worst trace's 2.22% and 3.57% fell
#: to 1.74% and 2.03%. Compute-bound traces (the CNN) want less of it, the MLP's and the
#: transformer's training steps more; a per-trace weight fitted from a comparison's own runs was
#: measured too and scattered more than the whole probe (README, "The verdict").
COPY_WEIGHT = 0.5


_blas = None


def _one_blas_thread():
    """A context holding numpy's BLAS to one thread (the libraries are looked up once)."""
    global _blas
    if _blas is None:
        _blas = ThreadpoolController().select(user_api="blas")
    return _blas.limit(limits=1)


def probe() -> float:
    """Seconds taken by one run of the probe workload on one core, the copy's share weighted by
    :data:`COPY_WEIGHT`."""
    with _one_blas_thread():
        return _workload()


def _workload() -> float:
    t0 = time.perf_counter_ns()
    s = 0
    for i in range(10000):  # the interpreter
        s += i * i
    for _ in range(5):  # BLAS
        _MAT @ _MAT
    t1 = time.perf_counter_ns()
    np.copyto(_BIG_OUT, _BIG)  # memory bandwidth
    t2 = time.perf_counter_ns()
    for _ in range(20):  # vectorised elementwise kernels
        np.exp(_SMALL, out=_SMALL_OUT)
        np.add(_SMALL_OUT, _SMALL, out=_SMALL_OUT)
    t3 = time.perf_counter_ns()
    return ((t1 - t0) + COPY_WEIGHT * (t2 - t1) + (t3 - t2)) / 1e9


#: Bumped whenever the probe's workload or weighting changes: a baseline timed with another probe
#: is compared on raw times until it is re-recorded.
PROBE_VERSION = 3


def signature() -> str:
    """What the probe's speed depends on besides the machine: its own version, Python's and
    numpy's."""
    return f"probe {PROBE_VERSION} python {platform.python_version()} numpy {np.__version__}"
