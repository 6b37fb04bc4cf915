"""Synthetic slowdowns: a trace in which some of its operators run twice.

Used by the tests and benchmarks to check that a real slowdown of a real workload is caught:
each chosen operator node is copied right after itself, so the replay calls it twice on the same
inputs, in the same place of the program. Works on the decoded JSON of either layout.
"""

from __future__ import annotations

import copy
import random

from .graph import select_ops
from .trace import parse_trace


def duplicate_ops(data: dict, share: float = 1.0, *, seed: int = 0, path: str = "<memory>",
                  node_ids: set[int] | None = None) -> dict:  # fmt: skip
    """A copy of the ET document ``data`` in which ``share`` of the selected ops run twice (or
    exactly the op nodes ``node_ids``)."""
    if node_ids is not None:
        chosen = set(node_ids)
    else:
        ops = [n.id for n in select_ops(parse_trace(data, path))]
        chosen = set(ops if share >= 1 else random.Random(seed).sample(ops, round(share * len(ops))))
    parent_key = "parent" if data["schema"] == "1.0.1" else "ctrl_deps"
    out = {k: v for k, v in data.items() if k != "nodes"}
    nodes = []
    for raw in data["nodes"]:
        node = dict(raw)
        node["id"] = raw["id"] * 2
        node[parent_key] = raw[parent_key] * 2
        nodes.append(node)
        if raw["id"] in chosen:
            twin = copy.deepcopy(node)
            twin["id"] = node["id"] + 1
            nodes.append(twin)
    out["nodes"] = nodes
    return out
