"""Errors the plugin reports to the user.

Every error raised for bad input names the file it is about and what is wrong with it, so the
pytest report for that one item is enough to fix the problem.
"""

from __future__ import annotations

import os


class MystiqueError(Exception):
    """Base class: a problem with one item (trace, baseline, history) that the user can fix."""

    def __init__(self, path: str | os.PathLike | None, problem: str):
        self.path = os.fspath(path) if path is not None else None
        self.problem = problem
        super().__init__(f"{self.path}: {problem}" if self.path else problem)


class TraceError(MystiqueError):
    """The execution trace file cannot be read or is not a valid trace."""


class BaselineError(MystiqueError):
    """A stored baseline cannot be read or written."""


class ReplayError(MystiqueError):
    """The replay of a trace failed as a whole (not a single skipped op)."""


def message(e: BaseException) -> str:
    """What the user is told of ``e``: a :class:`MystiqueError`'s own text (it names the file and
    the problem), any other error's type and text."""
    return str(e) if isinstance(e, MystiqueError) else f"{type(e).__name__}: {e}"


def reason(e: BaseException) -> str:
    """``e`` in one line, as a skipped op's or a failed replay's reason: its type and the first
    line of its message (cut at 200 characters)."""
    text = str(e).strip().splitlines()
    first = text[0] if text else type(e).__name__
    return f"{type(e).__name__}: {first[:200]}"
