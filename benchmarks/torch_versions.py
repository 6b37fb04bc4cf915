"""The corpus and the bundled traces replayed under other torch releases than the one installed.

A team gates an upgrade of torch, and may bisect back to an older one: the same traces must
replay under each. The traces here were recorded by newer releases (the corpus's by 2.10-2.13,
the bundled ones by 2.13), so an older torch meets arguments its schemas lack (SDPA's
``enable_gqa``, 2.5), operators it does not have (``aten::_grouped_mm``), and kernels that take
less than the trace asks (a CPU flash-attention kernel without grouped query heads). For each
Python interpreter given (each with pytest-mystique installed beside its own torch: ``pip install
-e .`` into a virtual environment), every trace is replayed in a process of its own, as ``mystique
replay --json`` does, on the CPU with one thread; the table gives ops selected / replayed /
substituted / skipped, the replay's median and, where the trace has its original's timing, the
ratio, and the reasons of what was skipped. A replay whose process dies (a kernel that wrote past
its memory) shows as such.

    python benchmarks/torch_versions.py PYTHON [PYTHON ...] [--iters 5] [--trace PATH [PATH ...]]

e.g. ``python benchmarks/torch_versions.py .venv/bin/python /tmp/v24/bin/python``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pytest_mystique.report import format_table  # noqa: E402

CORPUS = ROOT.parent / "shared" / "corpus"


def traces() -> list[Path]:
    """The corpus's single-rank traces and the bundled ones."""
    return sorted(CORPUS.glob("*.json.gz")) + sorted((ROOT / "traces").glob("*.json.gz"))


def torch_of(python: str) -> str:
    done = subprocess.run([python, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    return done.stdout.strip() or f"(no torch: {done.stderr.strip()[-80:]})"


def replayed(python: str, path: Path, iters: int) -> dict:
    """``mystique replay --json`` of ``path`` under ``python``, or what stopped it."""
    cmd = [python, "-m", "pytest_mystique.cli", "replay", str(path), "--json", "--compact", "--device", "cpu",
           "--threads", "1", "--iters", str(iters), "--warmup", "1"]  # fmt: skip
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return {"error": "timed out (900 s)"}
    if done.returncode < 0:
        return {"error": f"the process died (signal {-done.returncode})"}
    try:
        return json.loads(done.stdout)
    except json.JSONDecodeError:
        return {"error": (done.stderr.strip().splitlines() or ["no output"])[-1][:100]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pythons", nargs="+", help="Python interpreters, each with its own torch and pytest-mystique")
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--trace", action="extend", nargs="+", type=Path,
                    help="traces to replay (default: the corpus's and the bundled)")
    args = ap.parse_args()
    head = ["torch", "trace", "selected", "replayed", "substituted", "skipped", "median ms", "ratio", "skipped because"]
    rows, whole = [head], {}
    for python in args.pythons:
        version = torch_of(python)
        for path in args.trace or traces():
            got = replayed(python, path, args.iters)
            name = path.name.removesuffix(".json.gz")
            if "error" in got:
                rows.append([version, name, "-", "-", "-", "-", "-", "-", got["error"]])
                whole[version] = False
                continue
            subs = sum(s["count"] for s in got.get("substitutions", []))
            why = "; ".join(f"{s['count']}x {s['op']}: {s['reason'][:60]}" for s in got.get("skipped", []))
            ratio = got.get("fidelity_ratio")
            rows.append([version, name, str(got["ops_total"]), str(got["ops_replayed"]), str(subs),
                         str(got["ops_skipped"]), f"{got['median_s'] * 1e3:.2f}",
                         f"{ratio:.3f}" if ratio else "-", why or "-"])  # fmt: skip
            whole[version] = whole.get(version, True) and got["ops_replayed"] == got["ops_total"]
    print("\n".join(format_table(rows)))
    for version, ok in whole.items():
        print(f"torch {version}: {'every op of every trace replayed' if ok else 'NOT every op replayed'}")
    return 0 if all(whole.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
