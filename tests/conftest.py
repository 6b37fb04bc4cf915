import gzip
import json
import shutil
from pathlib import Path

import pytest

# pytester's in-process runs restore sys.modules afterwards; extension modules (numpy, torch)
# cannot be loaded twice, so everything the plugin imports lazily is imported here first.
import pytest_mystique.recorder  # noqa: F401
import pytest_mystique.report  # noqa: F401
import pytest_mystique.runner  # noqa: F401

ROOT = Path(__file__).resolve().parent.parent
TRACES = ROOT / "traces"
CORPUS = ROOT.parent / "shared" / "corpus"


def corpus(name: str) -> Path:
    path = CORPUS / name
    if not path.exists():
        pytest.skip(f"shared corpus trace {path} is not present beside this checkout")
    return path


def bundled(name: str) -> Path:
    path = TRACES / f"{name}.json.gz"
    assert path.exists(), f"bundled trace {path} missing: run python scripts/make_traces.py"
    return path


def read_json(path: Path) -> dict:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)


def write_json(path: Path, data: dict) -> Path:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "wt") as f:
        json.dump(data, f)
    return path


@pytest.fixture
def trace_copy(tmp_path):
    """Copy a trace (and its sidecar) into a pytester-style directory under a given name."""

    def make(src: Path, dest_dir: Path, name: str | None = None) -> Path:
        dest_dir.mkdir(parents=True, exist_ok=True)
        dest = dest_dir / (name or src.name)
        shutil.copyfile(src, dest)
        return dest

    return make


def extract_ops(data: dict, names: set[str], limit: int = 1) -> dict:
    """A small trace holding the first ``limit`` recorded top-level ops of each name in ``names``
    (with their recorded arguments), hung under the original thread root."""
    from pytest_mystique.graph import select_ops
    from pytest_mystique.trace import parse_trace

    trace = parse_trace(data, "extract")
    picked, seen = set(), {}
    for node in select_ops(trace):
        if node.name in names and seen.get(node.name, 0) < limit:
            seen[node.name] = seen.get(node.name, 0) + 1
            picked.add(node.id)
    key = "parent" if data["schema"] == "1.0.1" else "ctrl_deps"
    roots = [n for n in data["nodes"] if n["name"].startswith("[pytorch|profiler|execution_")]
    thread = next(n for n in roots if "thread" in n["name"])
    nodes = [dict(n) for n in roots]
    for n in data["nodes"]:
        if n["id"] in picked:
            nodes.append(dict(n, **{key: thread["id"]}))
    return {**{k: v for k, v in data.items() if k != "nodes"}, "nodes": nodes}
