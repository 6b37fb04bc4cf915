"""pytest-mystique: trace-driven performance regression tests for PyTorch workloads."""

from __future__ import annotations

__version__ = "0.1.0"
__all__ = ["__version__", "capture", "capture_step"]


def __getattr__(name: str):
    # Lazy, so that loading the pytest plugin does not import the profiler machinery.
    if name in ("capture", "capture_step"):
        from . import recorder as _recorder

        return getattr(_recorder, name)
    raise AttributeError(f"module 'pytest_mystique' has no attribute {name!r}")
