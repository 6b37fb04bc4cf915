"""Loading and validating execution traces of every supported layout."""

import gc
import gzip
import json
import tracemalloc

import pytest
import torch
from bad_inputs import first_op

from pytest_mystique.errors import TraceError
from pytest_mystique.graph import select_ops
from pytest_mystique.replay import Replay
from pytest_mystique.trace import ListValue, Scalar, TensorRef, load_trace, sniff, storages_of, tensors_of

from conftest import corpus, read_json, write_json


def test_chakra_111_loads_with_strides():
    trace = load_trace(corpus("llama_train.json.gz"))
    assert trace.schema == "1.1.1-chakra.0.0.4"
    strided = [v for n in trace.nodes for v in n.inputs if isinstance(v, TensorRef) and v.strides is not None]
    assert strided, "1.1.1 traces record strides"
    t = strided[0]
    assert len(t.strides) == len(t.shape)


def test_flat_101_layout_loads():
    trace = load_trace(corpus("param_linear_v101.json.gz"))
    addmm = next(n for n in trace.nodes if n.name == "aten::addmm")
    assert addmm.op_schema.startswith("aten::addmm(")
    tensors = [v for v in addmm.inputs if isinstance(v, TensorRef)]
    assert [t.shape for t in tensors] == [(1024,), (512, 1024), (1024, 1024)]
    assert all(t.strides is None for t in tensors)  # 1.0.1 records none: contiguous assumed
    assert tensors[1].layout_strides() == (1024, 1)


def test_102_layout_loads():
    trace = load_trace(corpus("multirank/allgather_2rank/chakra_allgather_v102.json.gz"))
    assert trace.schema == "1.0.2-chakra.0.0.4"
    ag = next(n for n in trace.nodes if n.name == "c10d::allgather_")
    nested = ag.inputs[0]
    assert isinstance(nested, ListValue) and isinstance(nested.items[0], ListValue)
    # the tensors of the output list of lists (one list per rank), in order, and the input's
    inner = [ref for lst in nested.items for ref in lst.items]
    assert len(inner) >= 2 and all(isinstance(r, TensorRef) and r.defined for r in inner)
    [sent] = ag.inputs[1].items
    assert tensors_of(ag.inputs) == [*inner, sent]
    assert storages_of([nested]) == {r.storage_id for r in inner}


def test_value_types_are_parsed():
    trace = load_trace(corpus("llama_train.json.gz"))
    kinds = {type(v).__name__ for n in trace.nodes for v in n.inputs}
    assert {"TensorRef", "ListValue", "Scalar"} <= kinds
    scalar_types = {v.type for n in trace.nodes for v in n.inputs if isinstance(v, Scalar)}
    assert {"Int", "Bool", "None", "Device"} <= scalar_types


def test_selection_descends_labels_and_skips_nested_ops():
    trace = load_trace(corpus("llama_train.json.gz"))
    ops = select_ops(trace)
    ids = {n.id for n in ops}
    assert [n.id for n in ops] == sorted(ids)
    # Nothing selected lies below another selected op.
    for n in ops:
        p = trace.by_id.get(n.parent)
        while p is not None and p.id != p.parent:
            assert p.id not in ids
            p = trace.by_id.get(p.parent)
    # Backward ops below autograd labels are selected.
    assert any(n.name == "aten::mm" for n in ops)
    assert any("Backward" in trace.by_id[n.parent].name for n in ops)
    # Ops nested inside a selected op (aten::linear -> aten::t) are not.
    linear = next(n for n in ops if n.name == "aten::linear")
    child_ids = [c.id for c in trace.nodes if c.parent == linear.id]
    assert child_ids and not (set(child_ids) & ids)


@pytest.mark.parametrize(
    "content, problem",
    [
        (b"", "empty file"),
        (b'{"schema": "1.1.1-chakra.0.0.4", "nodes": [', "invalid JSON"),
        (b'{"schema": "9.9.9", "nodes": []}', "unsupported execution trace schema '9.9.9'"),
        (b'{"schema": "banana", "nodes": []}', "unknown execution trace schema 'banana'"),
        (b'{"schema": "2.0.0", "nodes": []}', "unsupported execution trace schema"),
        (b'{"schema": "1.1.1-chakra.0.0.4"}', "missing 'nodes' list"),
        (b'{"schema": 3, "nodes": []}', "'schema' must be a string"),
        (b'{"nodes": []}', "no 'schema' key"),
        (b'[1, 2]', "top level must be a JSON object"),
    ],
)
def test_bad_files_name_file_and_problem(tmp_path, content, problem):
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(TraceError) as info:
        load_trace(path)
    assert str(path) in str(info.value)
    assert problem in str(info.value)


def test_truncated_gzip(tmp_path):
    raw = gzip.compress(json.dumps(read_json(corpus("vit_infer.json.gz"))).encode())
    path = tmp_path / "cut.json.gz"
    path.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(TraceError, match="truncated gzip"):
        load_trace(path)


def test_gzip_bomb_is_refused(tmp_path):
    path = tmp_path / "bomb.json.gz"
    path.write_bytes(gzip.compress(b'{"schema": "1.1.1-chakra.0.0.4", "nodes": [], "pad": "' + b" " * (8 << 20) + b'"}'))
    with pytest.raises(TraceError, match="inflates past"):
        load_trace(path, max_bytes=1 << 20)


def test_structural_errors(tmp_path):
    good = read_json(corpus("vit_infer.json.gz"))
    cases = {
        "duplicate node id": lambda d: d["nodes"].append(dict(d["nodes"][3])),
        "cycle": lambda d: (d["nodes"][5].update(ctrl_deps=d["nodes"][6]["id"]),
                            d["nodes"][6].update(ctrl_deps=d["nodes"][5]["id"])),
        "negative tensor size": lambda d: first_op(d)["inputs"]["shapes"].__setitem__(0, [-4, 3]),
        "unknown tensor element type": lambda d: first_op(d)["inputs"]["types"].__setitem__(
            0, "Tensor(" + "q" * 200 + ")"),
        "tensor storage id must be a non-negative integer": lambda d: first_op(d)["inputs"]["values"][0].__setitem__(1, -1),
        "tensor offset must be a non-negative integer": lambda d: first_op(d)["inputs"]["values"][0].__setitem__(2, True),
        "tensor shape must hold integers": lambda d: first_op(d)["inputs"]["shapes"].__setitem__(0, [2.0, 3]),
        "tensor strides must hold integers": lambda d: first_op(d)["inputs"]["strides"].__setitem__(0, [True, 1]),
        "tensor device must look like": lambda d: first_op(d)["inputs"]["values"][0].__setitem__(5, "cuda:x"),
    }  # fmt: skip
    for problem, mutate in cases.items():
        data = json.loads(json.dumps(good))
        mutate(data)
        path = write_json(tmp_path / "t.json", data)
        with pytest.raises(TraceError, match=problem):
            load_trace(path)


def test_an_element_type_of_a_newer_torch_skips_the_ops_that_read_it_alone(tmp_path):
    """A trace written by a newer torch may hold a tensor of an element type this replayer does
    not know. The trace loads; an op that reads such a tensor as an input of the step is skipped
    with that reason, and the others replay (the whole trace was refused before)."""
    data = read_json(corpus("vit_infer.json.gz"))
    op = first_op(data)
    op["inputs"]["types"][0] = "Tensor(c10::Float7_e3m3)"
    trace = load_trace(write_json(tmp_path / "t.json", data))
    replay = Replay(trace, "cpu").prepare()
    rep = replay.report
    assert rep.skipped_list() == [{"op": op["name"], "count": 1, "reason": "cannot build its input tensors: ValueError: a "
                                   "tensor of an element type this replayer does not know ('c10::Float7_e3m3': a newer "
                                   "torch's?)"}], rep.skipped_list()  # fmt: skip
    assert rep.ops_replayed == rep.ops_total - 1 > 50


@pytest.mark.parametrize("given, composed", [(False, False), (True, False), (True, True)])
def test_an_argument_a_newer_torch_added_is_left_out_where_it_holds_its_default(tmp_path, monkeypatch, given, composed):
    """A newer torch may add an argument to an op's schema (SDPA's ``enable_gqa``, new in 2.5):
    its trace records one more input than this torch's schema has. Where the added argument holds
    its default in the schema the trace records, the op replays without it, and a note names it;
    given another value, the op is skipped with the argument and its value (the count alone was
    the reason before), unless ops around the call are known to do what that value asks
    (``composed``: as SDPA's ``enable_gqa=True`` repeats keys and values on a torch before 2.5),
    which then run around it, listed as a substitution. The corpus's ViT, with an argument this
    torch lacks added to its two attention calls."""
    from pytest_mystique import substitute

    around = []
    if composed:
        monkeypatch.setitem(substitute.ADDED_ARGUMENTS, ("aten::scaled_dot_product_attention", "sink_heads", True),
                            (lambda op, *a, **k: around.append(op) or op(*a, **k), lambda v: "sinks added"))  # fmt: skip
    data = read_json(corpus("vit_infer.json.gz"))
    attention = [n for n in data["nodes"] if n["name"] == "aten::scaled_dot_product_attention"]
    assert len(attention) == 2
    for node in attention:
        schema = next(a for a in node["attrs"] if a["name"] == "op_schema")
        assert schema["value"].endswith("bool enable_gqa=False) -> Tensor")
        schema["value"] = schema["value"].replace(") -> Tensor", ", bool sink_heads=False) -> Tensor")
        for key, item in (("values", given), ("shapes", []), ("types", "Bool"), ("strides", [])):
            node["inputs"][key].append(item)
    replay = Replay(load_trace(write_json(tmp_path / "t.json", data)), "cpu").prepare()
    rep = replay.report
    if composed:
        sdpa = "aten::scaled_dot_product_attention"
        assert rep.skipped_list() == [] and rep.ops_replayed == rep.ops_total == 56 and len(around) == 2
        assert rep.substitutions_list() == [{"op": sdpa, "count": 2, "replacement": f"{sdpa} (sink_heads=True, "
                                             f"which this torch lacks: sinks added)"}], rep.substitutions_list()  # fmt: skip
    elif given:
        assert rep.skipped_list() == [{"op": "aten::scaled_dot_product_attention", "count": 2, "reason": (
            f"the torch that wrote the trace passes sink_heads=True, an argument this torch's schema of the op does not "
            f"have (torch {torch.__version__})")}], rep.skipped_list()  # fmt: skip
        assert rep.ops_replayed == rep.ops_total - 2
    else:
        assert rep.skipped_list() == [] and rep.ops_replayed == rep.ops_total == 56
        left_out = {n: k for n, k in rep.notes.items() if "this torch lacks, each at its default there" in n}
        # (on a torch before 2.5, SDPA's own enable_gqa is left out too)
        assert [(n.split(":")[2], n.endswith("sink_heads)"), k) for n, k in left_out.items()] == [
            ("scaled_dot_product_attention", True, 2)], left_out  # fmt: skip


def test_a_node_whose_parent_is_missing_is_read_as_top_level(tmp_path):
    """torch's own writer loses parents: the backward of a checkpointed layer, recomputed under an
    autograd node it did not record, names a parent id no node has. Such a node is read as a root
    (its operator is selected), and the replay report says how many there were."""
    data = read_json(corpus("vit_infer.json.gz"))
    gelu = next(n for n in data["nodes"] if n["name"] == "aten::gelu")
    old_parent = gelu["ctrl_deps"]
    gelu["ctrl_deps"] = 999999
    trace = load_trace(write_json(tmp_path / "t.json", data))
    assert trace.orphans == 1
    assert gelu["id"] in {n.id for n in select_ops(trace)} and trace.by_id[old_parent].is_op is False
    replay = Replay(trace, "cpu").prepare()
    assert any("1 node(s) name a parent the trace does not hold" in n for n in replay.report.notes)
    assert replay.report.ops_replayed == replay.report.ops_total == 56


def test_a_malformed_operator_inside_a_selected_one_does_not_stop_the_load(tmp_path):
    """Op selection reads the values of some nested operators (an operator calling itself, to see
    whether autocast cast its inputs): one whose values are malformed shows nothing there, and the
    trace loads as before, the operator around it selected. Only what is replayed is validated at
    load time."""
    data = read_json(corpus("vit_infer.json.gz"))
    gelu = next(n for n in data["nodes"] if n["name"] == "aten::gelu")
    inner = json.loads(json.dumps(gelu))
    inner["id"], inner["ctrl_deps"] = max(n["id"] for n in data["nodes"]) + 1, gelu["id"]
    inner["inputs"]["values"][0][3] = -4  # (a negative element count)
    data["nodes"].append(inner)
    trace = load_trace(write_json(tmp_path / "t.json", data))
    assert gelu["id"] in {n.id for n in select_ops(trace)} and inner["id"] not in {n.id for n in select_ops(trace)}
    with pytest.raises(TraceError, match="numel"):
        trace.by_id[inner["id"]].inputs  # noqa: B018 - parses


@pytest.mark.parametrize("depth", [200, 100_000])
def test_deep_nesting_is_refused(tmp_path, depth):
    data = read_json(corpus("vit_infer.json.gz"))
    first_op(data)["inputs"] = "@@DEEP@@"
    typ = "GenericList[" * depth + "Int" + "]" * depth
    deep = f'{{"values": [{"[" * depth}1{"]" * depth}], "shapes": [[]], "types": ["{typ}"], "strides": [[]]}}'
    path = tmp_path / "deep.json"
    path.write_text(json.dumps(data).replace('"@@DEEP@@"', deep))
    with pytest.raises(TraceError, match="nested"):
        load_trace(path)  # refused with a clear error, never a RecursionError


def test_sniff(tmp_path):
    assert sniff(corpus("vit_infer.json.gz"))[0] == "et"
    (tmp_path / "pkg.json").write_text('{"name": "x", "version": "1"}')
    assert sniff(tmp_path / "pkg.json")[0] == "other"
    (tmp_path / "junk.json").write_text("hello")
    assert sniff(tmp_path / "junk.json")[0] == "broken"
    (tmp_path / "empty.json").write_text("")
    assert sniff(tmp_path / "empty.json") == ("broken", "empty file")


def test_a_loaded_trace_is_left_out_of_the_collectors_passes_and_freed_when_dropped():
    """A trace's nodes and their stored pieces are objects the cyclic collector does not track
    (walking them cost a large trace's build a quarter of its time), without freezing the
    process's objects out of its passes; they hold no cycles, so dropping the trace frees them
    all the same."""
    # (what a first load leaves in the process, its operators' parsed names and overloads cached
    # and the modules it imports, is not the trace's: run alone, this test counted them)
    load_trace(corpus("llama_train.json.gz"))
    frozen = gc.get_freeze_count()
    gc.collect()
    tracked = len(gc.get_objects())
    tracemalloc.start()
    try:
        trace = load_trace(corpus("llama_train.json.gz"))
        held = tracemalloc.get_traced_memory()[0]
        assert gc.get_freeze_count() == frozen
        gc.collect()
        walked = {id(o) for o in gc.get_objects()}  # what the collector's generations hold
        assert not any(id(n) in walked or id(n._parts) in walked for n in trace.nodes)
        # (what it tracks of the trace: a list of each side's values parsed, of the operators selected)
        parsed = sum((n._inputs is not None) + (n._outputs is not None) for n in trace.nodes)
        assert len(walked) - tracked <= parsed + 20 < len(trace.nodes)
        del trace, walked
        assert tracemalloc.get_traced_memory()[0] < held / 10
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("name", ["vit_infer", "llama_train", "distilbert_train", "param_resnet_ddp_1gpu",
                                  "multirank/allgather_2rank/chakra_allgather_v102"])
def test_the_typed_decoder_reads_a_trace_as_the_whole_document_decoder_does(name):
    """A trace of the nested layout is decoded into typed nodes whose values stay JSON text until
    asked for; every node, its values and attributes come out as the whole document's decoding
    gives them, and the same operators are selected."""
    from pytest_mystique import trace as tr

    path = corpus(f"{name}.json.gz")
    raw, _ = tr.read_bytes(path)
    lazy = tr._parse_lazily(raw, path)
    assert lazy is not None, "the typed decoder took this well-formed trace"
    whole = tr.parse_trace(json.loads(raw), path)
    assert lazy.schema == whole.schema and lazy.meta == whole.meta and lazy.orphans == whole.orphans
    assert [n.id for n in lazy.selected] == [n.id for n in whole.selected] and lazy.opened == whole.opened
    for a, b in zip(lazy.nodes, whole.nodes, strict=True):
        assert (a.id, a.name, a.parent, a.op_schema) == (b.id, b.name, b.parent, b.op_schema)
        assert a.output_storages() == b.output_storages()
        # one attribute decoded alone, before the node's others are, is as the whole decoding gives it
        names = [*(key for key, _ in b._parts.named()), "kernel_backend"]
        alone = [a.attr(k) for k in names], [b.attr(k) for k in names]
        assert alone[0] == alone[1] == [b.attrs.get(k) for k in names], a
        assert (a.inputs, a.outputs, a.attrs) == (b.inputs, b.outputs, b.attrs), a


@pytest.mark.parametrize("edit", ["id_bool", "ctrl_null", "attrs_entry", "flat"])
def test_an_irregular_trace_is_read_by_the_whole_document_decoder(tmp_path, edit):
    """Whatever the typed decoder does not take (a field of another type, the flat layout) is read
    whole, which names the problem or reads the trace as before."""
    from pytest_mystique import trace as tr

    name = "param_linear_v101" if edit == "flat" else "vit_infer"
    data = read_json(corpus(f"{name}.json.gz"))
    op = first_op(data) if edit != "flat" else {}
    if edit == "id_bool":
        op["id"] = True
    elif edit == "ctrl_null":
        op["ctrl_deps"] = None
    elif edit == "attrs_entry":
        op["attrs"].append(7)  # (an entry that is not an object: skipped, as the whole decoder does)
    path = tmp_path / "t.json"
    write_json(path, data)
    assert tr._parse_lazily(path.read_bytes(), path) is None
    if edit in ("id_bool", "ctrl_null"):
        with pytest.raises(TraceError, match="integer"):
            load_trace(path)
    else:
        assert load_trace(path).selected
