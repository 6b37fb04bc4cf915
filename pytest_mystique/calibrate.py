"""Machine-speed probe: a small fixed workload timed next to every replay iteration.

Shared CI machines change speed under a benchmark: a neighbour takes the memory bus, the
hypervisor steals cycles, the clock steps down. On the 2-core machines this project is tested on,
the median of the same replay moves by 10% from one process to the next, which no statistics on
the replay alone can tell from a regression. Such slowdowns hit every program on the machine, so
the replay is timed together with a probe that shares the machine but not the code under test:
pure Python arithmetic, a small numpy matrix product, a memory copy and numpy elementwise
kernels (about 1 ms in all). Dividing the replay's time by the probe's cancels most of the
machine's drift (see benchmarks/stat_power.py), while a change in torch, its kernels or a driver
moves the replay and not the probe.

The probe runs Python and numpy code, so a change of Python or numpy changes it; its
:func:`signature` goes into the baseline and the comparison falls back to raw times when the
signature differs.
"""

from __future__ import annotations

import platform
import time

import numpy as np

_rng = np.random.default_rng(0)
_MAT = _rng.random((96, 96))
_BIG = _rng.random(1 << 19)  # 4 MiB: larger than most L2 caches
_BIG_OUT = np.empty_like(_BIG)
_SMALL = _rng.random(1 << 14).astype(np.float32)
_SMALL_OUT = np.empty_like(_SMALL)


def _work() -> int:
    s = 0
    for i in range(10000):  # the interpreter
        s += i * i
    for _ in range(5):  # BLAS
        _MAT @ _MAT
    np.copyto(_BIG_OUT, _BIG)  # memory bandwidth
    for _ in range(20):  # vectorised elementwise kernels
        np.exp(_SMALL, out=_SMALL_OUT)
        np.add(_SMALL_OUT, _SMALL, out=_SMALL_OUT)
    return s


def probe() -> float:
    """Seconds taken by one run of the probe workload."""
    t0 = time.perf_counter_ns()
    _work()
    return (time.perf_counter_ns() - t0) / 1e9


def signature() -> str:
    """What the probe's speed depends on besides the machine: Python's and numpy's versions."""
    return f"python {platform.python_version()} numpy {np.__version__}"
