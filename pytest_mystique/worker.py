"""A replay worker: ``python -m pytest_mystique.worker``, driven by JSON lines on stdin.

Used by ``mystique ab`` to replay the same trace in two Python environments (say, old and new
torch) alternately. Each request is one JSON object per line; each answer too, on stdout:

* ``{"cmd": "load", "trace": PATH, "device": "cpu", "threads": 1, "seed": 0}`` -> counts, versions
* ``{"cmd": "warmup", "seconds": 0.3}`` -> ``{"per_iter_s": ...}``
* ``{"cmd": "segment", "iters": N}`` -> ``{"samples_s": [...]}``
* ``{"cmd": "quit"}``

Errors come back as ``{"error": "..."}``; the worker keeps serving. Only this package's own
functions are reachable through the protocol: a request names a trace file, never code.
"""

from __future__ import annotations

import json
import platform
import sys
import time


def _serve(stdin, stdout) -> None:
    import torch

    from .errors import MystiqueError
    from .measure import steady_allocator, time_iterations
    from .replay import Replay, resolve_device
    from .sampling import warm_up
    from .trace import load_trace

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
                replay = Replay(load_trace(str(req["trace"])), resolve_device(req.get("device", "cpu")),
                                seed=int(req.get("seed", 0))).prepare()  # fmt: skip
                prepare_s = time.perf_counter() - t0
                rep = replay.report
                answer({"ops_total": rep.ops_total, "ops_replayed": rep.ops_replayed, "skipped": rep.skipped_list(),
                        "prepare_s": prepare_s,
                        "torch": torch.__version__, "python": platform.python_version(),
                        "executable": sys.executable})  # fmt: skip
            elif cmd in ("warmup", "segment") and replay is None:
                answer({"error": "no trace loaded"})
            elif cmd == "warmup":
                done, per_iter = warm_up(replay, 1, min_s=float(req.get("seconds", 0.3)))
                answer({"per_iter_s": per_iter, "iterations": done})
            elif cmd == "segment":
                with torch.no_grad():
                    answer({"samples_s": time_iterations(replay.run, replay.device, int(req["iters"]),
                                                         between=replay.reset_state)})  # fmt: skip
            else:
                answer({"error": f"unknown command {cmd!r}"})
        except (MystiqueError, ValueError, KeyError, TypeError, OSError) as e:
            answer({"error": str(e)})


def main() -> None:
    # answers go to the real stdout; anything else printed (warnings, library chatter) to stderr
    out = sys.stdout
    sys.stdout = sys.stderr
    _serve(sys.stdin, out)


if __name__ == "__main__":
    main()
