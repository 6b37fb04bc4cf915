"""A prepared replay's steps as one straight-line Python function: the timed iteration.

The interpreted loop (:meth:`Replay.run` with ``after_step``) reads a dozen attributes of each
step, copies its argument list and fills it from a slot list before the call. On a trace of
thousands of small ops (a recurrence on a CPU: RWKV, Mamba) that bookkeeping cost 0.3 us per op,
a tenth of the step, which the original program never paid. Here each step becomes one line,
``v12 = f7(v3, c7_1, 2)``, whose names are local variables (the tensors) and globals of the
function (the pre-bound op, the constant arguments): what runs between two ops is what a
program's own straight-line code runs, as ``torch.fx`` writes its graphs' code.

A trace is data, never code: the source holds only names made here from the steps' positions
and slot numbers, and ``None``, ``True``, ``False`` and integer literals. Every object from the
trace (the op, the constant arguments, the keyword names) reaches the function through its
namespace, never through the text.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

_FILENAME = "<mystique replay>"


@dataclass
class StraightLine:
    """One iteration of the steps as a function, and where each of its lines came from."""

    fn: Any  # () -> None; reads and writes back the persistent slots of the env it was made for
    step_of_line: list[int]  # line number - 1 -> index of the step (-1: not a step's line)
    source: str  # (kept for reading: what runs in a timed iteration)

    def failed_step(self, tb) -> int | None:
        """The index of the step whose line raised, from the exception's traceback."""
        code = self.fn.__code__
        while tb is not None:
            if tb.tb_frame.f_code is code:
                line = tb.tb_lineno - 1
                i = self.step_of_line[line] if 0 <= line < len(self.step_of_line) else -1
                return i if i >= 0 else None
            tb = tb.tb_next
        return None


def straight_line(steps: list, permanent: set[int], env: list) -> StraightLine:
    """The function that runs ``steps`` in order on ``env``'s slots, as :meth:`Replay.run` does
    without ``after_step``: autograd recording switched per step, graphs let go where a backward
    pass starts, each output bound to its slot and each slot dropped after its last reader.
    The slots an iteration starts from (the inputs) are read from ``env`` at its start; the inputs
    it rebinds (an input detached from a graph) are written back at its end, a failed one's too."""
    ns: dict[str, Any] = {"_grad": torch._C._set_grad_enabled, "_T": torch.Tensor, "env": env}
    body: list[tuple[str, int]] = []
    assigned: set[int] = set()
    loaded: set[int] = set()
    rebound: set[int] = set()

    def read(s: int) -> str:
        s = int(s)
        if s not in assigned:
            loaded.add(s)
        return f"v{s}"

    grad = False
    for i, step in enumerate(steps):
        if bool(step.grad) is not grad:
            grad = bool(step.grad)
            body.append((f"_grad({grad})", i))
        for s in map(int, step.release):
            v = read(s)
            body.append((f"if {v}.__class__ is _T and {v}.grad_fn is not None: {v} = {v}.data", i))
            assigned.add(s)
            if s in permanent:
                rebound.add(s)
                loaded.add(s)  # (bound from the start, so the write-back never meets an unbound name)
        fills, list_fills = dict(step.fills), dict(step.list_fills)
        parts = []
        for j, a in enumerate(step.args):
            if j in fills:
                parts.append(read(fills[j]))
            elif j in list_fills:
                parts.append("[" + ", ".join(read(s) if s >= 0 else "None" for s in list_fills[j]) + "]")
            elif a is None or type(a) is bool or type(a) is int:
                parts.append(repr(a))
            else:
                ns[f"c{i}_{j}"] = a
                parts.append(f"c{i}_{j}")
        ns[f"f{i}"] = step.fn
        args = ", ".join(parts[: step.npos])
        if step.kwnames:
            ns[f"k{i}"] = step.kwnames
            kw = ", ".join(parts[step.npos:])
            args += f"{', ' if args else ''}**dict(zip(k{i}, ({kw},)))"
        call = f"f{i}({args})"
        if step.out is not None:
            body.append((f"v{int(step.out)} = {call}", i))
            assigned.add(int(step.out))
        elif step.outs:
            body.append((f"r = {call}" if not step.single else f"r = ({call},)", i))
            for k, slot in step.outs:
                for n, s in ([(None, slot)] if isinstance(slot, int) else enumerate(slot)):
                    if s >= 0:
                        body.append((f"v{int(s)} = r[{int(k)}]" + ("" if n is None else f"[{n}]"), i))
                        assigned.add(int(s))
            body.append(("r = None", i))  # (held, it would keep the op's other outputs, and their graph, alive)
        else:
            body.append((call, i))
        if step.frees:
            body.append((" = ".join(f"v{int(s)}" for s in step.frees) + " = None", i))
    head = [(f"v{s} = env[{s}]", -1) for s in sorted(loaded)]
    lines = [("def replay_iteration():", -1)] + [("    " + text, i) for text, i in head]
    if rebound:  # written back however the iteration ends, as the loop's writes to env are
        lines += [("    try:", -1)] + [("        " + text, i) for text, i in body]  # (holds the release lines)
        lines += [("    finally:", -1)] + [(f"        env[{s}] = v{s}", -1) for s in sorted(rebound)]
    else:
        lines += [("    " + text, i) for text, i in body]
    if len(lines) == 1:
        lines.append(("    pass", -1))
    source = "\n".join(text for text, _ in lines) + "\n"
    exec(compile(source, _FILENAME, "exec"), ns)  # noqa: S102 (generated here from integers, see the module's docstring)
    fn = ns.pop("replay_iteration")  # (kept in its own globals, it would make a cycle through every input tensor)
    return StraightLine(fn, [i for _, i in lines], source)
