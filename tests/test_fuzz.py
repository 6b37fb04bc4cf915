"""Structure-aware fuzzing of real traces: a replay or the plugin's own clear error, nothing else."""

import copy
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_mystique.errors import MystiqueError
from pytest_mystique.replay import Replay
from pytest_mystique.trace import parse_trace

from conftest import bundled, corpus, read_json

#: A trace per path the replay takes: an inference step (corpus) and a training step with its
#: backward ops and optimizer (bundled).
SOURCES = {"vit_infer": lambda: corpus("vit_infer.json.gz"), "mlp_train": lambda: bundled("mlp_train")}
GOOD: dict[str, dict] = {}

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.floats(allow_nan=True) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=12,
)
TYPES = ["Tensor(float)", "Tensor(long int)", "Tensor(c10::Half)", "Tensor(bool)", "Tensor(nullptr (uninitialized))",
         "Int", "Double", "Bool", "String", "Device", "None", "GenericList[Int,Int]", "GenericList[Tensor(float)]",
         "Tuple[String,String]", "Object", "Stream", "Frobnicate", "Tensor(", "GenericList[", ""]  # fmt: skip


def good_doc(name: str) -> dict:
    if name not in GOOD:
        GOOD[name] = read_json(SOURCES[name]())
    return GOOD[name]


@st.composite
def mutations(draw, source: str):
    doc = copy.deepcopy(good_doc(source))
    nodes = doc["nodes"]
    for _ in range(draw(st.integers(1, 4))):
        node = nodes[draw(st.integers(0, len(nodes) - 1))]
        side = node.get(draw(st.sampled_from(["inputs", "outputs"])))
        if not isinstance(side, dict):  # an earlier mutation removed it: mutate a throwaway
            side = {"types": [], "values": [], "shapes": []}
        what = draw(st.sampled_from(["type", "value", "shape", "stride", "schema", "key", "parent", "top", "op"]))
        i = draw(st.integers(0, 8))
        if what == "type" and side["types"]:
            side["types"][i % len(side["types"])] = draw(st.sampled_from(TYPES))
        elif what == "value" and side["values"]:
            side["values"][i % len(side["values"])] = draw(json_values)
        elif what == "shape" and side["shapes"]:
            side["shapes"][i % len(side["shapes"])] = draw(st.lists(st.integers(-3, 10**7), max_size=5))
        elif what == "stride" and side.get("strides"):
            side["strides"][i % len(side["strides"])] = draw(st.lists(st.integers(-3, 10**9), max_size=5))
        elif what == "schema":
            doc["schema"] = draw(st.sampled_from(["1.0.1", "1.0.3-chakra.0.0.4", "1.1.0-chakra.0.0.4", "0.9", "1.1.1"]))
        elif what == "key":
            node.pop(draw(st.sampled_from(["id", "name", "ctrl_deps", "inputs", "outputs", "attrs"])), None)
        elif what == "parent":
            node["ctrl_deps"] = draw(st.integers(-2, 400))
        elif what == "top":
            doc[draw(st.sampled_from(["nodes", "schema"]))] = draw(json_values)
        elif what == "op":
            for a in node.get("attrs", []):
                if a.get("name") == "op_schema":
                    a["value"] = draw(st.sampled_from(["", "aten::add.Tensor(Tensor self, Tensor other) -> Tensor",
                                                       "os::system(str c) -> int", "aten::__class__(Tensor s) -> Tensor",
                                                       draw(st.text(max_size=30))]))  # fmt: skip
    return doc


OUTCOMES = {"replayed": 0, "clear error": 0}


@pytest.mark.parametrize("source", sorted(SOURCES))
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_mutated_traces_replay_or_fail_clearly(source, data):
    doc = data.draw(mutations(source))
    text = json.dumps(doc)  # every mutation is still JSON: the loader's structural checks are under test
    try:
        trace = parse_trace(json.loads(text), "fuzzed.json")
        replay = Replay(trace, "cpu", max_memory=2 << 30).prepare()
        replay.reset_state()
        replay.run()
    except MystiqueError as e:
        assert "fuzzed.json" in str(e) or e.path is None
        OUTCOMES["clear error"] += 1
        return
    OUTCOMES["replayed"] += 1
    rep = replay.report
    assert rep.ops_replayed + rep.ops_skipped == rep.ops_total


@pytest.fixture(scope="module", autouse=True)
def _print_outcomes():
    yield
    print(f"\nfuzzing outcomes: {OUTCOMES}")
