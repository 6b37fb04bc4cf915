"""The bad-input matrix: each case writes one broken trace beside good ones, and names what the
user must see. Used by tests/test_faults.py and printed as a table by benchmarks/bad_inputs.py."""

from __future__ import annotations

import copy
import gzip
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from pytest_mystique.graph import select_ops
from pytest_mystique.memory import limits_allocations
from pytest_mystique.trace import parse_trace


@dataclass
class Case:
    kind: str
    file: str
    make: Callable[[dict], bytes]  # from a good trace document to the file's bytes
    expect: str  # a line of the output must contain this
    outcome: str = "failed"  # or "passed" (the item runs, the problem is reported) or "ignored"


def _dump(doc) -> bytes:
    return json.dumps(doc).encode()


def _mutated(fn: Callable[[dict], None]) -> Callable[[dict], bytes]:
    def make(good: dict) -> bytes:
        doc = copy.deepcopy(good)
        fn(doc)
        return _dump(doc)

    return make


def first_op(doc: dict) -> dict:
    """The raw node of the first selected op whose first input is a float tensor."""
    ids = {n.id for n in select_ops(parse_trace(doc, "doc"))}
    return next(n for n in doc["nodes"] if n["id"] in ids and n["inputs"]["types"][:1] == ["Tensor(float)"])


def set_op_schema(doc: dict, name: str, schema: str) -> None:
    """Point every recorded ``aten::<name>`` op at another op schema."""
    for node in doc["nodes"]:
        for a in node["attrs"]:
            if a["name"] == "op_schema" and a["value"].startswith(f"aten::{name}("):
                a["value"] = schema


def _gelu_as(kind: str, file: str, schema: str, expect: str) -> Case:
    """A trace whose GELU calls name another op schema; the item runs and reports the skip."""
    return Case(kind, file, _mutated(lambda d: set_op_schema(d, "gelu", schema)), f"skipped 2x aten::gelu: {expect}", "passed")


def _deep(doc: dict) -> None:
    first_op(doc)["inputs"] = "@@DEEP@@"


def _deep_bytes(good: dict) -> bytes:
    doc = copy.deepcopy(good)
    _deep(doc)
    depth = 3000
    deep = f'{{"values": [{"[" * depth}1{"]" * depth}], "shapes": [[]], "types": ["{"GenericList[" * depth}Int{"]" * depth}"], "strides": [[]]}}'
    return json.dumps(doc).replace('"@@DEEP@@"', deep).encode()


def make_huge(doc: dict) -> None:
    """Give the first op an input of 10^15 elements."""
    node = first_op(doc)
    node["inputs"]["shapes"][0] = [10**5, 10**5, 10**5]
    node["inputs"]["strides"][0] = [10**10, 10**5, 1]


def huge_padding(doc: dict) -> None:
    """Give the patch convolution a padding of 8,176: its inputs stay small, but its output needs
    6.0 GiB (8 x 192 x 1,028 x 1,028 floats)."""
    next(n for n in doc["nodes"] if n["name"] == "aten::conv2d")["inputs"]["values"][4] = [8176, 8176]


def _cycle(doc: dict) -> None:
    a, b = doc["nodes"][5], doc["nodes"][6]
    a["ctrl_deps"], b["ctrl_deps"] = b["id"], a["id"]


#: Only where the build runs under its allocation limit (Linux without CUDA): elsewhere the op runs.
OVER_THE_LIMIT = [
    Case("an op asking for more memory than the limit", "huge_output.json", _mutated(huge_padding),
         "skipped 1x aten::conv2d: out of memory: it asks for 6.0 GiB at once, more than the 4.0 GiB memory limit",
         "passed"),
] if limits_allocations(torch.device("cpu")) else []  # fmt: skip

CASES = [
    Case("empty file", "empty.json", lambda g: b"", "traces/empty.json: empty file"),
    Case("invalid JSON", "invalid.json", lambda g: _dump(g)[:-200], "traces/invalid.json: invalid JSON"),
    Case("truncated gzip", "truncated.json.gz", lambda g: gzip.compress(_dump(g))[:3000],
         "traces/truncated.json.gz: truncated gzip file"),
    Case("gzip bomb", "bomb.json.gz",
         lambda g: gzip.compress(b'{"schema": "1.1.1-chakra.0.0.4", "pad": "' + b" " * (40 << 20) + b'", "nodes": []}'),
         "traces/bomb.json.gz: gzip content inflates past the"),
    Case("not JSON at all", "notjson.json", lambda g: b"\x00\x01binary junk", "traces/notjson.json: not JSON"),
    Case("JSON that is not an ET", "package.json", lambda g: b'{"name": "x", "version": "1.0"}',
         "ignored traces/package.json: JSON without a 'schema' key", "ignored"),
    Case("unknown schema", "unknown_schema.json", _mutated(lambda d: d.update(schema="banana")),
         "traces/unknown_schema.json: unknown execution trace schema 'banana'"),
    Case("newer schema", "newer_schema.json", _mutated(lambda d: d.update(schema="2.0.0")),
         "traces/newer_schema.json: unsupported execution trace schema '2.0.0'"),
    Case("schema of the wrong type", "schema_type.json", lambda g: b'{"schema": 7, "nodes": []}',
         "traces/schema_type.json: 'schema' must be a string"),
    Case("missing nodes", "no_nodes.json", _mutated(lambda d: d.pop("nodes")), "traces/no_nodes.json: missing 'nodes' list"),
    Case("node without id", "no_id.json", _mutated(lambda d: d["nodes"][3].pop("id")),
         "traces/no_id.json: nodes[3] has no integer 'id'"),
    Case("id of the wrong type", "id_type.json", _mutated(lambda d: d["nodes"][3].update(id="4")),
         "traces/id_type.json: nodes[3] has no integer 'id'"),
    Case("name of the wrong type", "name_type.json", _mutated(lambda d: d["nodes"][3].update(name=5)),
         "has no string 'name'"),
    Case("inputs of the wrong type", "inputs_type.json", _mutated(lambda d: first_op(d).update(inputs=[1, 2])),
         "'inputs' must be an object with values/shapes/types"),
    Case("duplicate ids", "dup_ids.json", _mutated(lambda d: d["nodes"].append(copy.deepcopy(d["nodes"][3]))),
         "traces/dup_ids.json: duplicate node id"),
    Case("parent cycle", "cycle.json", _mutated(_cycle), "traces/cycle.json: parent links form a cycle"),
    Case("negative size", "negative.json", _mutated(lambda d: first_op(d)["inputs"]["shapes"].__setitem__(0, [-4, 3])),
         "negative tensor size -4"),
    Case("absurd size (10^15 elements)", "huge.json", _mutated(make_huge),
         "over the 4.0 GiB memory limit (--mystique-max-memory); nothing was allocated"),
    *OVER_THE_LIMIT,
    Case("element type no torch has (yet)", "dtype.json",
         _mutated(lambda d: first_op(d)["inputs"]["types"].__setitem__(0, "Tensor(quaternion)")),
         "a tensor of an element type this replayer does not know ('quaternion': a newer torch's?)", "passed"),
    Case("tensor value malformed", "tensor_value.json",
         _mutated(lambda d: first_op(d)["inputs"]["values"].__setitem__(0, "not-a-tensor")),
         "tensor value must be [id, storage, offset, numel, itemsize, device]"),
    Case("lists nested thousands deep", "deep.json", _deep_bytes, "nested"),
    _gelu_as("op that does not exist", "no_such_op.json", "aten::gelu_but_faster(Tensor self) -> Tensor",
             "operator aten::gelu_but_faster is not registered"),
    _gelu_as("op schema naming os.system", "os_system.json", "os::system(str command) -> int",
             "operator os::system is not registered"),
    _gelu_as("op schema naming builtins.eval", "eval.json", "builtins.eval(str source) -> Any",
             "op schema is not of the form 'namespace::op.overload(...)'"),
    _gelu_as("op schema naming __import__", "import.json", "__import__::os(str name) -> Any",
             "refusing special name '__import__'"),
    _gelu_as("op schema reaching a dunder attribute", "dunder.json", "aten::__class__(Tensor self) -> Tensor",
             "refusing special name '__class__'"),
    Case("file name with traversal and shell characters", "..;rm -rf ~ $(id) `x`.json", lambda g: _dump(g),
         "..;rm -rf ~ $(id) `x`", "passed"),
]


def write_cases(directory: Path, good: dict, cases: list[Case] = CASES) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for case in cases:
        (directory / case.file).write_bytes(case.make(good))
