"""The timing sidecar beside a trace: ``X.meta.json`` for ``X.json`` or ``X.json.gz``."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path


def sidecar_path(trace_path: str | os.PathLike) -> Path:
    p = Path(trace_path)
    name = p.name
    for suffix in (".json.gz", ".json"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    return p.with_name(f"{name}.meta.json")


def load_sidecar(trace_path: str | os.PathLike) -> dict | None:
    path = sidecar_path(trace_path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise ValueError(f"{path}: malformed timing sidecar: {e}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: malformed timing sidecar: not a JSON object")
    med = data.get("original_median_s")
    if med is not None and not (isinstance(med, (int, float)) and math.isfinite(med) and med > 0):
        raise ValueError(f"{path}: malformed timing sidecar: original_median_s must be a positive number")
    return data
