"""A third instrument for the time inside operators: sampling the process's stacks with py-spy.

The profiler (``measure.inside_operators``) and the dispatcher's clock
(``measure.inside_operators_dispatch``) both run work of their own at every operator call, and on
steps of thousands of tiny operators that work moves their figures by up to 13 points, each its
own way (benchmarks/RESULTS.md). A sampler runs nothing per call: py-spy, another process, stops
this one some 250 times a second and reads its Python and native stacks. A sample is *inside an
operator* where its stack holds the dispatcher's entry to one (``at::_ops::...``), or where its
innermost frame is in a kernel (MKL's, oneDNN's, ATen's vectorised loops: unwinding through their
hand-written code loses the frames above them, so such a sample shows the Python line that made
the call and the kernel, nothing between). Everything else is outside: the step's Python, an
argument parser, the autograd engine's own scheduling, freeing tensors. The original step and its
replay run alternated under one sampling session, each call inside a function whose name says
which side it is, so both see the same seconds of the host. Each side's time inside operators is
its median call, timed alternated without the sampler, times its share of samples inside
operators. (Timed under the sampler the calls are lengthened by its stops, and not alike: py-spy
takes longer to unwind an original's deep stack of module code than a replay's flat one, and
GIN's training came out at 0.84 of its original so, against 0.98 with the calls timed apart.)
It is not neutral either: after each stop the step goes on with caches that py-spy's reading
disturbed, which lengthens the kernels that hold large data more than Python does, and some 2,000
samples a side leave a share uncertain by about a point (the ratio by about 2.5%).

It needs py-spy (``pip install py-spy``; the ``bench`` extra installs it) and leave to read this
process's memory (ptrace: a container may need ``--cap-add SYS_PTRACE``); without either it says
why and gives no figure. Only for the CPU.
"""

from __future__ import annotations

import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pytest_mystique.measure import InsideOperators, inside_operators_alternated  # noqa: E402

#: The dispatcher's entry to an operator: every sample inside one passes through it.
_OPERATOR = re.compile(r"at::_ops::")
#: An innermost frame in a kernel, where unwinding lost the frames between it and Python.
_KERNEL = re.compile(r"mkl_|dnnl|libgomp|libiomp|at::native::|at::vec::|at::internal::|Sleef|\(libmkl|\(libdnnl")
#: Samples a second (py-spy's --rate): each stops the process while py-spy unwinds its stacks.
RATE = 250
#: Seconds of sampling a step and its replay take in the benchmarks' --op-timer sampled (about
#: 2,000 samples a side: a share within about a point, the ratio within about 2.5%).
SAMPLED_S = 16.0
#: The benchmarks' --op-timer choice for this instrument (name -> what it is, for the help).
SAMPLER_CHOICE = {"sampled": "py-spy's samples of the stacks (benchmarks/op_sampler.py; needs py-spy)"}


def py_spy() -> str | None:
    """py-spy's path: beside this Python (a virtual environment's bin/), else on PATH."""
    here = Path(sys.executable).parent / "py-spy"
    return str(here) if here.exists() else shutil.which("py-spy")


def need_py_spy(ap, wanted: bool) -> None:
    """An argument error where a benchmark asked for this instrument and py-spy is missing."""
    if wanted and py_spy() is None:
        ap.error("--op-timer sampled needs py-spy (pip install py-spy)")


def _side0(fn):  # (names the samples of the first function)
    fn()


def _side1(fn):  # (... and of the second)
    fn()


def classify(stack: str) -> bool:
    """Whether one sample's stack (py-spy's raw format: frames outermost first, ``;``-joined) is
    inside an operator."""
    return bool(_OPERATOR.search(stack) or _KERNEL.search(stack.rsplit(";", 1)[-1]))


def inside_operators_sampled(fns, seconds: float = SAMPLED_S, befores=(None, None), rate: int = RATE,
                             calls: int = 20) -> list[InsideOperators] | str:  # fmt: skip
    """Each of ``fns`` (an original step and its replay) called in turn, after its ``before``:
    ``calls`` times timed, then for ``seconds`` under py-spy. Per side: its median timed call times
    its share of samples inside operators, and that share. A string says why there is no figure
    (py-spy missing, refused)."""
    spy = py_spy()
    if spy is None:
        return "py-spy is not installed (pip install py-spy)"
    timed: list[list[float]] = [[], []]
    for _ in range(calls):
        for i, (fn, before) in enumerate(zip(fns, befores)):
            if before is not None:
                before()
            t0 = time.perf_counter()
            fn()
            timed[i].append(time.perf_counter() - t0)
    with tempfile.TemporaryDirectory(prefix="sampled.") as tmp:
        out = Path(tmp) / "stacks.txt"
        proc = subprocess.Popen([spy, "record", "--pid", str(os.getpid()), "--native", "--rate", str(rate),
                                 "--duration", str(int(seconds) + 3), "--format", "raw", "-o", str(out)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
        time.sleep(1.0)  # (attaching)
        end = time.perf_counter() + seconds
        while time.perf_counter() < end and proc.poll() is None:
            for fn, before, side in zip(fns, befores, (_side0, _side1)):
                if before is not None:
                    before()
                side(fn)
        err = proc.communicate()[1].decode(errors="replace").strip()
        if not out.exists():
            return f"py-spy gave no samples: {err.splitlines()[-1] if err else f'exit status {proc.returncode}'}"
        inside, total = [0, 0], [0, 0]
        for line in out.read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            for i, name in enumerate(("_side0", "_side1")):
                if f"{name} (" in stack:
                    total[i] += int(count)
                    inside[i] += int(count) if classify(stack) else 0
    if not all(total):
        return f"too few samples ({total[0]} and {total[1]})"
    return [InsideOperators(statistics.median(w) * k / n, k / n) for w, k, n in zip(timed, inside, total)]


def inside_operators_by(timer: str, fns, calls: int, befores=(None, None)) -> list[InsideOperators] | None:
    """A benchmark's two figures (an original step's and its replay's) by the instrument its
    ``--op-timer`` names: ``sampled`` here (an error that says why where there are none: the row's
    run fails with it), the others through :func:`measure.inside_operators_alternated`."""
    if timer != "sampled":
        return inside_operators_alternated(fns, calls, befores, timer=timer)
    got = inside_operators_sampled(fns, SAMPLED_S, befores, calls=calls)
    if isinstance(got, str):
        raise RuntimeError(f"--op-timer sampled: {got}")
    return got
