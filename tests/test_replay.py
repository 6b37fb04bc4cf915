"""The replay engine on real traces: coverage, tensor semantics, data, safety."""

import collections
import copy
import gzip
import importlib.util
import json
import math
import re
import subprocess
import sys
import warnings

import pytest
import torch
from bad_inputs import make_huge, set_op_schema
from hypothesis import given, settings
from hypothesis import strategies as st

import pytest_mystique.replay as replay_module
from pytest_mystique import capture_step
from pytest_mystique.cli import main as cli_main
from pytest_mystique.errors import ReplayError
from pytest_mystique.export import export_script
from pytest_mystique.graph import select_ops
from pytest_mystique.inject import duplicate_ops
from pytest_mystique.memory import _storage_bytes, limits_allocations, replay_peak_bytes
from pytest_mystique.nonfinite import keeps_values, made_of_zeros_or_extremes
from pytest_mystique.ops import Unsupported, arg_specs, load_op_library, resolve
from pytest_mystique.replay import Replay
from pytest_mystique.sidecar import load_sidecar, sidecar_path
from pytest_mystique.substitute import REMOVED, flash_takes_grouped_heads, substitute_for
from pytest_mystique.tensors import PRECONDITIONER_START, TensorFactory
from pytest_mystique.trace import TensorRef, Unstrided, load_trace, parse_trace, tensors_of

from conftest import (
    ROOT,
    TORCH,
    ImageTokens,
    autocast_copies_require_grad,
    bundled,
    capture_attention_inference,
    capture_image_tokens,
    corpus,
    extract_ops,
    graph_step,
    observer_records_strides,
    padded_attention_step,
    printed_json,
    read_json,
    row_spreads,
    tbe_rows_read,
    tbe_step,
    write_json,
)


@pytest.mark.parametrize("name", ["llama_train", "vit_infer", "distilbert_train"])
def test_cpu_corpus_traces_replay_every_op(name):
    replay = Replay(load_trace(corpus(f"{name}.json.gz")), "cpu").prepare()
    rep = replay.report
    assert rep.ops_total > 50
    assert rep.ops_skipped == 0, rep.skipped_list()
    assert rep.ops_replayed == rep.ops_total
    replay.run()
    replay.run()  # a second iteration works on the state the first left


def _resident_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def test_dlrm_rank_replays_its_fbgemm_ops_and_keeps_tables_unfilled():
    """One rank of the DLRM job alone (no process group: its collectives are skipped, with the
    reason). Every FBGEMM op replays: the CUDA lookup runs as FBGEMM's CPU lookup with the tables in
    host memory (listed as a substitution), on table metadata derived from the recorded shapes
    (random metadata makes the lookups index outside their tables), and the 4.8 GiB of tables and
    optimizer state stay zero pages; several iterations run on the state the previous ones left."""
    if load_op_library("fbgemm") is not True:
        pytest.skip("fbgemm_gpu is not installed for this torch")
    before = _resident_bytes()
    replay = Replay(load_trace(corpus("multirank/dlrm_8rank/rank-0.json.gz")), "cpu").prepare()
    rep = replay.report
    reasons = {s["op"]: s["reason"] for s in rep.skipped_list()}
    assert set(reasons) == {"c10d::alltoall_base_", "c10d::allreduce_"}, reasons
    assert all(r.startswith("collective:") for r in reasons.values())
    fbgemm_ops = [n for n in select_ops(replay.trace) if n.name.startswith("fbgemm::")]
    assert len(fbgemm_ops) == 7 and rep.ops_replayed + rep.ops_skipped == rep.ops_total
    subs = {s["op"]: s["replacement"] for s in rep.substitutions_list()}
    assert subs["fbgemm::split_embedding_codegen_lookup_adagrad_function"] == \
        "fbgemm::split_embedding_codegen_lookup_adagrad_function_cpu"  # fmt: skip
    assert any("4.8 GiB) left as zero pages" in n for n in rep.notes)
    assert any("permuted_lengths_sum recomputed" in n for n in rep.notes)
    for _ in range(3):
        replay.reset_state()
        replay.run()
    assert _resident_bytes() - before < 1 << 30


def test_unregistered_ops_are_counted_with_reasons():
    """An operator this torch lacks is skipped with the reason, also where it ran an operator
    inside it that did not do its work: FBGEMM's bounds check, renamed, zeroes its warning counter
    through ``aten::zero_`` and checks the indices it writes in its own kernel."""
    data = read_json(corpus("multirank/dlrm_8rank/rank-0.json.gz"))
    for node in data["nodes"]:
        if node["name"] == "fbgemm::bounds_check_indices":
            node["name"] = "mystique_test::bounds_check_indices"
            node["op_schema"] = node["op_schema"].replace("fbgemm::", "mystique_test::")
    replay = Replay(parse_trace(data, "renamed"), "cpu").prepare()
    rep = replay.report
    assert rep.ops_replayed + rep.ops_skipped == rep.ops_total
    reasons = {s["op"]: s["reason"] for s in rep.skipped_list()}
    assert "not registered" in reasons["mystique_test::bounds_check_indices"]
    assert reasons["c10d::alltoall_base_"].startswith("collective:")
    replay.run()


def test_outputs_feed_consumers_and_are_released_after_last_use():
    replay = Replay(load_trace(corpus("vit_infer.json.gz")), "cpu").prepare()
    produced_reads = [slot for s in replay.steps for _, slot in s.fills if slot not in replay.permanent]
    assert produced_reads, "later ops read the outputs of earlier ones"
    freed = {slot for s in replay.steps for slot in s.frees}
    assert set(produced_reads) <= freed
    replay.run()
    assert all(v is None for i, v in enumerate(replay.env) if i not in replay.permanent)


def test_the_build_holds_no_more_tensors_than_an_iteration(tmp_path, monkeypatch):
    """The build calls every op once and lets go of each output after its last read. A trace's ids
    are reused once the original freed a tensor: three training steps in one trace give the second
    step's outputs the first's ids. Held to the last read of their ids anywhere, the first step's
    outputs outlived it (the build held 1.5 times an iteration's tensors here, and 8 GB where an
    iteration holds 2.9 in the corpus's DDP ResNet); let go after their own last read, the build
    holds about what an iteration does."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
                                torch.nn.Conv2d(16, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.Flatten(),
                                torch.nn.Linear(16 * 32 * 32, 10))  # fmt: skip
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(8, 3, 32, 32), torch.randint(0, 10, (8,))

    def step():
        for _ in range(3):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()

    capture_step(step, tmp_path / "three_steps.json.gz", warmup=1, runs=1, min_warmup_s=0)
    trace = load_trace(tmp_path / "three_steps.json.gz")
    made = collections.Counter(ref.key for n in select_ops(trace) for ref in tensors_of(n.outputs))
    assert max(made.values()) > 1  # (ids the second and third steps' outputs took again)
    replay = Replay(trace, "cpu")
    held, build_step = [], Replay._build_step

    def counted(self, p):
        build_step(self, p)
        held.append(_storage_bytes(self.env, set()))

    monkeypatch.setattr(Replay, "_build_step", counted)
    replay.prepare()
    monkeypatch.undo()
    assert replay.report.ops_skipped == 0, replay.report.skipped_list()
    iteration = replay_peak_bytes(replay)
    assert iteration > 0 and max(held) <= 1.25 * iteration, (max(held), iteration)


@pytest.mark.parametrize("liveness", replay_module.LIVENESS)
def test_an_output_is_freed_after_its_last_read_or_where_the_original_reused_its_memory(liveness):
    """The trace gives memory at an address the storage id of the last tensor there: an op's output
    in a storage id seen before, and in none of its inputs', is where the original reused that
    memory. By default an output is freed after its last read; with ``until-reuse``, just before
    the op where the original reused its memory, where the trace shows that later."""
    trace = load_trace(corpus("vit_infer.json.gz"))
    replay = Replay(trace, "cpu", liveness=liveness).prepare()
    nodes = {n.id: n for n in trace.nodes}
    storage, made, last_read, freed_at, starts = {}, {}, {}, {}, []
    for i, step in enumerate(replay.steps):
        for slot in [s for _, s in step.fills] + [s for _, slots in step.list_fills for s in slots if s >= 0]:
            last_read[slot] = i
        for slot in step.frees:
            freed_at[slot] = i
        node = nodes[step.node_id]
        ins = {r.storage_id for r in tensors_of(node.inputs)}
        starts.append(set() if step.view else {r.storage_id for r in node.outputs
                                                if isinstance(r, TensorRef) and r.numel and r.storage_id not in ins})  # fmt: skip
        for idx, slot in [] if step.view else step.outs:
            if isinstance(slot, int) and isinstance(node.outputs[idx], TensorRef):
                storage[slot], made[slot] = node.outputs[idx].storage_id, i
    held = 0
    for slot, sid in storage.items():
        reused = next((k for k in range(made[slot] + 1, len(starts)) if sid in starts[k]), None)
        expected = last_read[slot]
        if reused is not None and liveness == replay_module.UNTIL_REUSE:
            expected = max(last_read[slot], reused - 1)
        assert freed_at[slot] == expected, (replay.steps[made[slot]].name, made[slot], last_read[slot], reused)
        held += freed_at[slot] > last_read[slot]
    assert held >= 10 if liveness == replay_module.UNTIL_REUSE else held == 0
    replay.run()
    assert all(v is None for i, v in enumerate(replay.env) if i not in replay.permanent)


@pytest.mark.parametrize(("name", "rule"), [("vit_infer.json.gz", replay_module.UNTIL_REUSE),
                                            ("llama_train.json.gz", replay_module.LAST_READ)])  # fmt: skip
def test_by_default_an_inference_step_holds_outputs_until_reuse_and_a_training_step_frees_at_last_read(name, rule):
    """Without a rule given, the step decides: an inference step holds each output until the op
    that took its memory in the original, one with a backward pass frees after the last read (a
    loop over positions held thousands of outputs there and overshot its original)."""
    trace = load_trace(corpus(name))

    def frees(liveness):
        replay = Replay(trace, "cpu", liveness=liveness).prepare(timed=False)
        return replay.liveness, [s.frees for s in replay.steps]

    chosen, default = frees(None)
    assert chosen == rule
    assert default == frees(rule)[1]
    other = next(r for r in replay_module.LIVENESS if r != rule)
    assert default != frees(other)[1], "the two rules free this step's outputs at different ops"


def test_an_unknown_liveness_rule_is_refused():
    with pytest.raises(ValueError, match="liveness must be one of last-read, until-reuse, not 'never'"):
        Replay(load_trace(corpus("vit_infer.json.gz")), "cpu", liveness="never")


def test_saved_activations_are_read_from_the_op_that_wrote_them():
    # Autograd hands a backward op the ReLU's saved output as a new tensor object (a new id in the
    # trace, same storage and layout): the replay must bind it to the forward op's output, not
    # make a permanent seeded copy of every activation.
    replay = Replay(load_trace(bundled("mlp_train")), "cpu").prepare()
    backward = [s for s in replay.steps if s.name == "aten::threshold_backward"]
    assert backward
    produced = {slot for s in replay.steps for _, out in s.outs for slot in ((out,) if isinstance(out, int) else out)}
    for step in backward:
        slots = [slot for _, slot in step.fills]
        assert all(slot in produced and slot not in replay.permanent for slot in slots), step.node_id
    replay.run()


def test_views_share_storage_with_their_base():
    replay = Replay(load_trace(corpus("llama_train.json.gz")), "cpu").prepare()
    by_storage = {}
    for (ref, generation), slot in replay._externals.items():
        by_storage.setdefault((ref.storage_id, ref.dtype, generation), []).append((ref, replay.env[slot]))
    # (numbers alone in a storage, which a writer recycled for several, keep apart: see
    # test_a_number_made_again_under_reused_ids_keeps_the_value_earlier_ops_read)
    shared = [v for v in by_storage.values() if len(v) > 1 and any(ref.shape for ref, _ in v)]
    assert shared, "the trace has several tensors living in one storage"
    numbers = [v for v in by_storage.values() if len({ref.tensor_id for ref, _ in v}) > 1 and not any(ref.shape for ref, _ in v)]
    assert numbers and all(len({t.untyped_storage().data_ptr() for _, t in v}) == len(v) for v in numbers), numbers
    for group in shared:
        ptrs = {t.untyped_storage().data_ptr() for _, t in group}
        assert len(ptrs) == 1
        for ref, t in group:
            assert t.storage_offset() == ref.offset
            assert tuple(t.shape) == ref.shape
            assert t.stride() == ref.layout_strides()


def test_index_tensors_are_valid_for_their_consumer():
    trace = load_trace(corpus("llama_train.json.gz"))
    replay = Replay(trace, "cpu").prepare()
    emb = next(n for n in trace.nodes if n.name == "aten::embedding" and n.op_schema)
    weight, indices = emb.inputs[0], emb.inputs[1]
    t = dict(replay.inputs())[indices]
    assert t.dtype == torch.int64
    assert int(t.min()) >= 0 and int(t.max()) < weight.shape[0]
    assert len(torch.unique(t)) > 1, "indices are not degenerate"


# (found in the test, not at collection: without the shared corpus its case skips, not the module)
@pytest.mark.parametrize("find, name", [(corpus, "distilbert_train.json.gz"), (bundled, "transformer_train")],
                         ids=["distilbert_train", "transformer_train"])  # fmt: skip
def test_index_requirements_reach_inputs_read_through_views(find, name):
    """A program reshapes or slices its integer data before the op that indexes with it
    (``position_ids[:, :n]`` into an embedding, ``labels.reshape(-1)`` into a loss): the
    requirement reaches the input the view was taken of, which holds values across the
    consumer's range, not the default 0s and 1s."""
    replay = Replay(load_trace(find(name)), "cpu").prepare()
    ints = [(ref, t) for ref, t in replay.inputs() if not t.dtype.is_floating_point and t.numel() > 16]
    assert ints
    for ref, t in ints:
        assert len(t.unique()) > 2, ref


@pytest.mark.parametrize("train, rows", [(False, (300_000, 300_000)), (True, (300_000, 300_000)),
                                         (False, (300_000, 60_000))], ids=["infer", "train", "infer-unequal"])
def test_fbgemm_pt2_lookup_replays_over_real_table_memory(tmp_path, train, rows):
    """FBGEMM 1.x's lookups take their packed tables and state as lists: the metadata and the
    index ranges are derived from them as from the older schema's arguments (before, the lookup
    was skipped: its indices ran outside the tables). The bounds check passes every index, so the
    indices spread over all of the tables' rows as the original's (as the capture recorded), not
    over the first few thousand. An inference step never writes its tables, so they are filled:
    left as zero pages, every row a lookup read was the same page of zeros, always in the
    caches. A training step's backward writes the rows it looks up, which stay zero pages until
    then. The trace does not record each table's rows, and the replay takes its tables as equal:
    where the original's ids reach beyond those rows (unequal tables), their recorded spread still
    holds (as many distinct ids, as hot; before, the ids were uniform: four times as many distinct
    rows, a lookup twice as slow as the original's), and each id is one table's, as the capture
    cannot tell which table an id was of (spread over all of them, a hot id was a row of each)."""
    if load_op_library("fbgemm") is not True:
        pytest.skip("fbgemm_gpu is not installed for this torch")
    step, ids, offsets = tbe_step(train, rows)
    path = tmp_path / "tbe.json.gz"
    capture_step(step, path, warmup=1, runs=1, min_warmup_s=0)
    replay = Replay(load_trace(path), "cpu").prepare()
    rep = replay.report
    assert rep.ops_skipped == 0 and rep.ops_replayed == rep.ops_total, rep.skipped_list()
    names = [s.name for s in replay.steps]
    lookup = ("fbgemm::split_embedding_backward_codegen_sgd_unweighted_pt2_wrapper" if train
              else "fbgemm::split_embedding_codegen_lookup_sgd_function_pt2")  # fmt: skip
    assert lookup in names, names
    assert any("index input(s) spread as the original's" in n for n in rep.notes), rep.notes
    assert any("left as zero pages" in n for n in rep.notes) == train, rep.notes
    seen = []

    def look(s, result):
        if s.name == "fbgemm::bounds_check_indices":
            indices, offsets = replay.env[dict(s.fills)[1]], replay.env[dict(s.fills)[2]]
            seen.append((int(indices.max()), len(indices.unique()), tbe_rows_read(indices, offsets, len(rows))))

    replay.run(look)
    highest, distinct, pairs = seen[0]
    equal = sum(rows) // len(rows)  # each table's rows, as the replay takes them
    original = len(ids.unique()), tbe_rows_read(ids, offsets, len(rows))
    assert equal * 0.8 < highest < equal and abs(distinct - original[0]) < 0.1 * original[0], (seen, original)
    assert abs(pairs - original[1]) < 0.1 * original[1], (seen, original)  # each id in one table, as the original's
    tables = max((t for _, t in replay.inputs() if t.dtype == torch.float32), key=torch.Tensor.numel)
    assert tables.numel() == sum(rows) * 64
    if not train:  # every 1009th row holds drawn data (a zero page reads as zeros)
        assert bool((tables[:: 64 * 1009] != 0).all())


def inference(model, *inputs):
    """A step that calls ``model`` on ``inputs`` without autograd (an inference step)."""

    def step():
        with torch.no_grad():
            return model(*inputs)

    return step


def test_eight_bit_float_inputs_are_drawn_in_float32_and_converted(tmp_path):
    """torch has no random kernels for the float8 types (``uniform_`` raises): a step that keeps its
    weights in float8_e4m3fn and widens them for a product (float8 weight-only quantization) had
    its weights' op skipped, and the product read seeded floats instead. They are drawn in float32
    at their range and converted."""
    w8 = (torch.randn(256, 128) * 0.05).to(torch.float8_e4m3fn)
    scale = torch.tensor(0.5)
    x = torch.randn(32, 128)

    def step():
        with torch.no_grad():
            return torch.nn.functional.linear(x, w8.to(torch.float32) * scale)

    path = tmp_path / "f8.json.gz"
    capture_step(step, path, warmup=1, runs=1, min_warmup_s=0)
    replay = Replay(load_trace(path), "cpu").prepare()
    rep = replay.report
    assert rep.ops_skipped == 0 and rep.ops_replayed == rep.ops_total, rep.skipped_list()
    (weight,) = [t for _, t in replay.inputs() if t.dtype == torch.float8_e4m3fn]
    wide = weight.to(torch.float32)
    assert wide.shape == (256, 128) and wide.isfinite().all() and len(wide.unique()) > 16  # not a constant
    replay.run()


def test_torchao_quantized_steps_replay_with_torchao_loaded_for_their_operators(tmp_path):
    """torchao's quantized layers call operators of its own namespace (dynamic int8 activations:
    ``torchao::choose_qparams_affine``, ``quantize_affine``) between aten's (``_int_mm``): a replay
    in a process that has not imported torchao loads it for them (as FBGEMM's), and every op
    replays. Before, they were skipped as not registered in this torch."""
    if importlib.util.find_spec("torchao") is None:
        pytest.skip("torchao is not installed")
    from torchao.quantization import Int8DynamicActivationInt8WeightConfig, quantize_

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.GELU(), torch.nn.Linear(256, 64)).eval()
    quantize_(model, Int8DynamicActivationInt8WeightConfig())
    x = torch.randn(16, 128)

    path = tmp_path / "da8w8.json.gz"
    capture_step(inference(model, x), path, warmup=1, runs=1, min_warmup_s=0)
    got = replayed_in_a_fresh_process(path, "torchao")
    assert got["loaded"] and not got["skipped"] and got["replayed"] == got["total"], got
    assert "torchao::choose_qparams_affine" in got["names"] and "aten::_int_mm" in got["names"], got["names"]


def replayed_in_a_fresh_process(path, module: str) -> dict:
    """A replay of ``path`` in a process that has imported nothing but the project (and torch): its
    steps' names, its skipped ops, its counts, and whether ``module`` was imported by the end. As a
    run replays it: collectives in a world of one (FSDP2's reduce-scatters, recorded at a world size
    of 1 by torch 2.7-2.10)."""
    code = ("import json, sys; from pytest_mystique.runner import Options, prepare_file; "
            "r = prepare_file(sys.argv[1], Options(device='cpu'))[0].prepare(); r.run(); "
            "print(json.dumps({'loaded': sys.argv[2] in sys.modules, 'skipped': r.report.skipped_list(), "
            "'names': [s.name for s in r.steps], 'total': r.report.ops_total, 'replayed': r.report.ops_replayed, "
            "'notes': list(r.report.notes)}))")  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code, str(path), module], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return printed_json(done.stdout)


def test_a_model_quantized_through_export_replays_its_quantize_and_dequantize_ops(tmp_path):
    """A model quantized through export (PT2E: torchao's prepare_pt2e and convert_pt2e with the x86
    quantizer) runs its convolutions and linear layer in float between
    ``quantized_decomposed::quantize_per_tensor`` and ``dequantize_per_tensor``/``_per_channel``,
    which torch registers only when a module of its own is imported: a replay imports it for that
    namespace (before, 13 of 20 ops were skipped as not registered)."""
    if importlib.util.find_spec("torchao") is None:
        pytest.skip("torchao is not installed")
    import torchao.quantization.pt2e.quantizer.x86_inductor_quantizer as x86
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    torch.manual_seed(0)
    nn = torch.nn
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 32, 3, stride=2), nn.ReLU(),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10)).eval()  # fmt: skip
    x = torch.randn(4, 3, 16, 16)
    quantizer = x86.X86InductorQuantizer().set_global(x86.get_default_x86_inductor_quantization_config())
    prepared = prepare_pt2e(torch.export.export(model, (x,)).module(), quantizer)
    prepared(x)  # (calibration)
    path = tmp_path / "pt2e.json.gz"
    capture_step(inference(convert_pt2e(prepared), x), path, warmup=1, runs=1, min_warmup_s=0)
    got = replayed_in_a_fresh_process(path, "torch.ao.quantization.fx._decomposed")
    assert got["loaded"] and not got["skipped"] and got["replayed"] == got["total"], got
    names = set(got["names"])
    assert {"quantized_decomposed::quantize_per_tensor", "quantized_decomposed::dequantize_per_channel",
            "aten::conv2d"} <= names, names  # fmt: skip


@pytest.mark.skipif(TORCH < (2, 7), reason="the FSDP2 job on CPU runs from torch 2.7 (2.4 has no fully_shard; 2.6's "
                    "fails on a CPU stream's record_event)")  # fmt: skip
def test_an_fsdp2_training_step_replays_the_ops_of_fully_shards_own_namespace(tmp_path):
    """FSDP2 (``fully_shard``) copies gradients into its reduce-scatter buffer with
    ``fsdp::chunk_cat``, an operator torch 2.7-2.14 register only when their FSDP module is
    imported: a replay imports it for that namespace (before, those ops were skipped as not
    registered). Torch 2.15 copies with ``fsdp::chunk_cat_mixed_dtype``, which its own library
    registers: the replay then imports nothing. Here one process (a world of one) of
    ``scripts/capture_ddp.py --wrap fsdp2``: its three linear layers are three units, and each
    copies its gradients in once."""
    if not torch.distributed.is_available():
        pytest.skip("this torch has no torch.distributed")
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "capture_ddp.py"), str(tmp_path), "--world", "1",
                           "--wrap", "fsdp2"], capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    got = replayed_in_a_fresh_process(tmp_path / "rank-0.json.gz", "torch.distributed.fsdp")
    assert not got["skipped"] and got["replayed"] == got["total"], got
    copies = [n for n in got["names"] if n.startswith("fsdp::")]
    assert len(copies) == 3 and set(copies) in ({"fsdp::chunk_cat"}, {"fsdp::chunk_cat_mixed_dtype"}), got
    assert got["loaded"] == (copies[0] == "fsdp::chunk_cat"), got


def test_an_operator_without_a_kernel_for_the_replays_device_replays_through_the_operators_it_ran(tmp_path):
    """Torch 2.8 has ``aten::_grouped_mm`` with a GPU's kernel alone: a mixture of experts captured
    on a GPU, replayed on the CPU, had its 4 grouped products skipped ("Could not run
    'aten::_grouped_mm' with arguments from the 'CPU' backend"). An operator this torch has but
    has no kernel of for the replay's device, neither its own nor a composite one, is now replayed
    through the operators it ran, as one this torch lacks is, with a note; on a device it has a
    kernel for, it replays whole. Here a program's op of the CPU captured, then named in the
    trace as one registered with a GPU's kernel alone."""

    @torch.library.custom_op("mystique_test::gated_rows", mutates_args=())
    def gated_rows(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return x @ w * torch.sigmoid(x.sum(-1, keepdim=True))

    @torch.library.custom_op("mystique_test::gated_rows_gpu", mutates_args=(), device_types="cuda")
    def gated_rows_gpu(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return x @ w * torch.sigmoid(x.sum(-1, keepdim=True))

    x, w = torch.randn(16, 32), torch.randn(32, 32)
    path = tmp_path / "gated.json.gz"
    capture_step(lambda: torch.ops.mystique_test.gated_rows(x, w).relu(), path, warmup=1, runs=1, min_warmup_s=0)
    data = read_json(path)

    def rename(old: str, new: str) -> None:  # (the op's calls: their name and their schema's)
        for node in data["nodes"]:
            if node["name"] == f"mystique_test::{old}":
                node["name"] = f"mystique_test::{new}"
                for a in node["attrs"]:
                    if a["name"] == "op_schema":
                        a["value"] = a["value"].replace(f"::{old}(", f"::{new}(")

    rename("gated_rows", "gated_rows_gpu")
    trace = load_trace(write_json(tmp_path / "gated_gpu.json.gz", data))
    replay = Replay(trace, "cpu").prepare()
    replay.run()
    rep, names = replay.report, [s.name for s in replay.steps]
    assert rep.ops_skipped == 0 and rep.ops_replayed == rep.ops_total, rep.skipped_list()
    assert "mystique_test::gated_rows_gpu" not in names and {"aten::matmul", "aten::sigmoid", "aten::relu"} <= set(names)
    assert any(n.startswith("1 operator(s) that this torch has no kernel of on cpu") for n in rep.notes), rep.notes
    # on a GPU it has a kernel: replayed whole there; the selection follows the device it is asked for
    assert "mystique_test::gated_rows_gpu" in [n.name for n in select_ops(trace, "cuda")]
    assert trace.no_kernel == [] and trace.not_in_torch == []
    assert "mystique_test::gated_rows_gpu" not in [n.name for n in select_ops(trace, "cpu")]
    # a build without CUDA has no GPU kernel of any op: an op with a kernel for no kind of device, in
    # a GPU trace, goes through its parts on the CPU; the same op recorded on the CPU stays whole
    torch.library.define("mystique_test::gated_rows_nowhere", "(Tensor x, Tensor w) -> Tensor")
    rename("gated_rows_gpu", "gated_rows_nowhere")
    on_cpu = load_trace(write_json(tmp_path / "gated_nowhere.json.gz", data))
    assert "mystique_test::gated_rows_nowhere" in [n.name for n in select_ops(on_cpu, "cpu")]

    def on_the_gpu(value):
        if isinstance(value, list) and len(value) == 6 and value[5] == "cpu":
            value[5] = "cuda:0"
        elif isinstance(value, list):
            for item in value:
                on_the_gpu(item)

    for node in data["nodes"]:
        for side in ("inputs", "outputs"):
            on_the_gpu(node[side]["values"])
    on_gpu = load_trace(write_json(tmp_path / "gated_nowhere_gpu.json.gz", data))
    replay = Replay(on_gpu, "cpu").prepare()
    names = [s.name for s in replay.steps]
    assert replay.report.ops_skipped == 0 and "mystique_test::gated_rows_nowhere" not in names, names


@pytest.mark.parametrize("through", ["torch.ops", "function"])
def test_a_custom_operator_of_the_programs_own_replays_through_the_operators_it_ran(tmp_path, through):
    """A custom operator that a program defines in its own code (``torch.library.custom_op``, with
    a backward of its own through ``register_autograd``; one that writes its input) is registered
    only in that program's process: a replay elsewhere cannot call it. The trace records what it
    ran inside it, and those operators are replayed in its place, with a note naming it (before,
    each was skipped as not registered in this torch, its time missing from the step).

    Called through ``torch.ops.<namespace>.<op>`` (not its overload, ``.default``) the operator is
    recorded under every release. Called through the function ``custom_op`` returns (or the
    overload), torch 2.14 runs its Python body without the dispatcher's record: the trace then
    holds the operators inside it as the step's own, and they replay as such, with no note (under
    2.4-2.13 the same as through ``torch.ops``)."""
    nn, F = torch.nn, torch.nn.functional
    swiglu_op, halve_op = f"swiglu_{through[0]}", f"halve_{through[0]}_"
    swiglu_name, halve_name = f"mystique_test::{swiglu_op}", f"mystique_test::{halve_op}"

    @torch.library.custom_op(swiglu_name, mutates_args=())
    def swiglu(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return F.silu(a) * b

    @swiglu.register_fake
    def _(a, b):
        return torch.empty_like(a)

    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        return grad * b * torch.sigmoid(a) * (1 + a * (1 - torch.sigmoid(a))), grad * F.silu(a)

    swiglu.register_autograd(backward, setup_context=lambda ctx, inputs, output: ctx.save_for_backward(*inputs))

    @torch.library.custom_op(halve_name, mutates_args=("x",))
    def halve_(x: torch.Tensor) -> None:
        x.mul_(0.5)

    if through == "torch.ops":
        swiglu, halve_ = getattr(torch.ops.mystique_test, swiglu_op), getattr(torch.ops.mystique_test, halve_op)
    torch.manual_seed(0)
    gate, up, down = nn.Linear(32, 64), nn.Linear(32, 64), nn.Linear(64, 32)
    opt = torch.optim.SGD([*gate.parameters(), *up.parameters(), *down.parameters()], lr=0.01)
    x = torch.randn(8, 32)

    def step():
        opt.zero_grad()
        y = down(swiglu(gate(x), up(x)))
        y.pow(2).mean().backward()
        opt.step()
        with torch.no_grad():
            halve_(down.weight)

    path = tmp_path / "custom.json.gz"
    capture_step(step, path, warmup=1, runs=1, min_warmup_s=0)
    recorded = {swiglu_name, halve_name} & {n.name for n in load_trace(path).nodes}
    if through == "torch.ops":
        assert recorded == {swiglu_name, halve_name}, recorded
    got = replayed_in_a_fresh_process(path, "torch")
    assert not got["skipped"] and got["replayed"] == got["total"], got
    names = got["names"]
    assert not any(n.startswith("mystique_test::") for n in names), names
    assert "aten::silu" in names and "aten::mul_" in names, names
    notes = [n for n in got["notes"] if "this torch does not have" in n]
    if recorded:
        (note,) = notes
        assert sorted(note.rsplit(": ", 1)[1].split(", ")) == sorted(f"{name} x1" for name in recorded), note
    else:
        assert not notes, notes


def _quantized_cnn():
    """A statically quantized CNN (eager mode, the x86 backend): convolutions fused with their
    batch norms and ReLUs (one of stride 2), a residual add of quantized tensors, a pooled linear
    head, a quantize at the start and a dequantize at the end."""
    import warnings

    from torch.ao.quantization import DeQuantStub, QuantStub, convert, fuse_modules, get_default_qconfig, prepare

    nn = torch.nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.q, self.dq = QuantStub(), DeQuantStub()
            self.c1, self.b1, self.r1 = nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU()
            self.c2, self.b2, self.r2 = nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.BatchNorm2d(32), nn.ReLU()
            self.c3, self.r3 = nn.Conv2d(32, 32, 1), nn.ReLU()
            self.skip = torch.ao.nn.quantized.FloatFunctional()
            self.pool, self.fc = nn.AdaptiveAvgPool2d(1), nn.Linear(32, 10)

        def forward(self, x):
            x = self.r2(self.b2(self.c2(self.r1(self.b1(self.c1(self.q(x)))))))
            x = self.skip.add(x, self.r3(self.c3(x)))
            return self.dq(self.fc(self.pool(x).flatten(1)))

    torch.manual_seed(0)
    torch.backends.quantized.engine = "x86"
    with warnings.catch_warnings():  # (eager-mode quantization is deprecated in favour of torchao)
        warnings.simplefilter("ignore")
        model = fuse_modules(Net().eval(), [["c1", "b1", "r1"], ["c2", "b2", "r2"], ["c3", "r3"]])
        model.qconfig = get_default_qconfig("x86")
        prepare(model, inplace=True)
        x = torch.randn(8, 3, 32, 32)
        with torch.no_grad():
            model(x)
        convert(model, inplace=True)
    return model, x


def test_statically_quantized_cnn_replays_with_packed_weights_as_the_capture_recorded(tmp_path):
    """A statically quantized model's activations are quantized tensors (quint8: the trace failed to
    load, its element type unknown), and its convolutions and linear layer take packed weights, an
    opaque object in the trace. A convolution's hold its kernel size, stride, padding and groups,
    which the trace does not record: the capture helper records them (the sidecar's
    packed_weights), and the replay packs seeded weights of that geometry. Without the record the
    convolutions are skipped with that reason, and the ops after them read seeded quantized
    tensors."""
    model, x = _quantized_cnn()

    path = tmp_path / "qcnn.json.gz"
    capture_step(inference(model, x), path, warmup=1, runs=1, min_warmup_s=0)
    records = load_sidecar(path)["packed_weights"]
    assert [r["op"] for r in records] == ["quantized::conv2d_relu"] * 3 + ["quantized::linear"], records
    assert records[1]["stride"] == [2, 2] and records[1]["weight"] == [32, 16, 3, 3] and records[2]["weight"][2:] == [1, 1]
    replay = Replay(load_trace(path), "cpu").prepare()
    rep = replay.report
    assert rep.ops_skipped == 0 and rep.ops_replayed == rep.ops_total, rep.skipped_list()
    convs = [s for s in replay.steps if s.name == "quantized::conv2d_relu"]
    packed = [s.args[1] for s in convs]
    assert [list(p.unpack()[0].shape) for p in packed] == [r["weight"] for r in records[:3]]
    assert [p.stride() for p in packed] == [[1, 1], [2, 2], [1, 1]] and [p.padding() for p in packed][1] == [1, 1]
    assert {s.name for s in replay.steps} >= {"quantized::add", "quantized::linear", "aten::quantize_per_tensor"}
    replay.run()

    side = json.loads(sidecar_path(path).read_text())
    del side["packed_weights"]
    sidecar_path(path).write_text(json.dumps(side))
    replay = Replay(load_trace(path), "cpu").prepare()
    rep = replay.report
    (why,) = {w for (op, w) in rep.skipped if op == "quantized::conv2d_relu"}
    assert rep.skipped[("quantized::conv2d_relu", why)] == 3 and "kernel size, stride, padding" in why, why
    assert rep.ops_replayed == rep.ops_total - 3, rep.skipped_list()
    seeded = next(t for _, t in replay.inputs() if t.dtype == torch.quint8 and t.dim() == 4)
    assert seeded.is_quantized and len(seeded.int_repr().unique()) > 100  # drawn over the type's range
    replay.run()


def test_packed_weights_records_that_do_not_fit_their_calls_are_named_and_the_op_skipped(tmp_path):
    """A sidecar's packed-weights records are matched to the trace's calls that take packed weights
    in order, each checked for its op and type: a record of another type, one whose geometry makes
    no valid weights (groups that do not divide the channels) and records that do not line up with
    the calls (one too many) each skip the convolutions with a reason naming the sidecar, and the
    other ops replay."""
    model, x = _quantized_cnn()
    path = tmp_path / "qcnn.json.gz"
    capture_step(inference(model, x), path, warmup=1, runs=1, min_warmup_s=0)
    side = json.loads(sidecar_path(path).read_text())
    records = side["packed_weights"]

    def skipped_with(changed: list[dict]) -> dict:
        sidecar_path(path).write_text(json.dumps(side | {"packed_weights": changed}))
        rep = Replay(load_trace(path), "cpu").prepare().report
        assert rep.ops_replayed == rep.ops_total - sum(rep.skipped.values()), rep.skipped_list()
        return {why: n for (op, why), n in rep.skipped.items() if op == "quantized::conv2d_relu"}

    first = {k: v for k, v in records[0].items()} | {"kind": "LinearPackedParamsBase"}
    whys = skipped_with([first, *records[1:]])
    assert list(whys.values()) == [1] and "is of quantized::conv2d_relu's LinearPackedParamsBase" in next(iter(whys))
    assert "qcnn.meta.json" in next(iter(whys))
    whys = skipped_with([records[0] | {"groups": 5}, *records[1:]])  # (3 input channels)
    assert list(whys.values()) == [1] and "qcnn.meta.json) makes no valid weights" in next(iter(whys)), whys
    whys = skipped_with([*records, records[0]])
    assert list(whys.values()) == [3] and "do not line up" in next(iter(whys)), whys
    sidecar_path(path).write_text(json.dumps(side | {"packed_weights": [records[0] | {"groups": 0}, *records[1:]]}))
    with pytest.raises(ReplayError, match=r"qcnn\.meta\.json: malformed timing sidecar: packed_weights"):
        Replay(load_trace(path), "cpu").prepare()


def test_packed_weights_are_recorded_for_the_calls_that_take_them_and_quantized_tables_rebuilt(tmp_path):
    """The quantized functional API packs its weights inside the step (``conv2d_prepack``, which
    returns packed weights, then ``conv2d``, which takes them): only the calls that take them are
    recorded and matched, so the convolution replays from its record. A quantized embedding bag's
    packed table (8 and 4 bits a value, a scale and offset per row) is rebuilt at the recorded
    shape and its ids drawn within its rows (before, its unpacking, to one tensor, failed the whole
    record: the ids' spread was lost, and the bag skipped). Without the record the bag is skipped
    with the reason."""
    import warnings

    import torch.ao.nn.quantized as nnq
    import torch.ao.nn.quantized.functional as qF
    from torch.ao.quantization import PerChannelMinMaxObserver, PlaceholderObserver, QConfig

    torch.backends.quantized.engine = "x86"
    bags = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        x = torch.quantize_per_tensor(torch.randn(2, 4, 10, 10), 0.1, 128, torch.quint8)
        w = torch.quantize_per_tensor(torch.randn(8, 4, 3, 3), 0.05, 0, torch.qint8)
        for rows, dtype in ((3000, torch.quint8), (500, torch.quint4x2)):
            bag = torch.nn.EmbeddingBag(rows, 16, mode="sum")
            bag.qconfig = QConfig(activation=PlaceholderObserver.with_args(dtype=torch.float),
                                  weight=PerChannelMinMaxObserver.with_args(
                                      dtype=dtype, qscheme=torch.per_channel_affine_float_qparams, ch_axis=0))  # fmt: skip
            bags.append(nnq.EmbeddingBag.from_float(bag))
    ids = [torch.randint(0, 3000, (256,)), torch.randint(0, 500, (256,))]
    offsets = torch.arange(0, 256, 8)

    def step():
        qF.conv2d(x, w, None, stride=2, padding=1, scale=0.2, zero_point=128)
        for bag, i in zip(bags, ids):
            bag(i, offsets)

    path = tmp_path / "functional.json.gz"
    capture_step(step, path, warmup=1, runs=1, min_warmup_s=0)
    side = load_sidecar(path)
    records = side["packed_weights"]
    assert [(r["op"], r["kind"]) for r in records] == [
        ("quantized::conv2d", "Conv2dPackedParamsBase"), ("quantized::embedding_bag_byte", "EmbeddingPackedParamsBase"),
        ("quantized::embedding_bag_4bit", "EmbeddingPackedParamsBase")]  # fmt: skip
    assert records[0]["stride"] == [2, 2] and [r["weight"] for r in records[1:]] == [[3000, 16], [500, 16]]
    assert side["index_inputs"], side.keys()
    replay = Replay(load_trace(path), "cpu").prepare()
    rep = replay.report
    assert rep.ops_skipped == 0 and rep.ops_replayed == rep.ops_total, rep.skipped_list()
    assert any(n.startswith("quantized::conv2d: packed weights") and "capture's record" in n for n in rep.notes)
    seen = []

    def look(s, result):
        if s.name.startswith("quantized::embedding_bag"):
            table, indices, offs = s.args[0], replay.env[dict(s.fills)[1]], replay.env[dict(s.fills)[2]]
            seen.append((table.unpack().shape[0], int(indices.min()), int(indices.max()), offs[:2].tolist()))

    replay.run(look)
    assert [(rows, low >= 0, high < rows) for rows, low, high, _ in seen] == [(3000, True, True), (500, True, True)]
    assert seen[0][2] > 1500 and all(o[0] == 0 for *_, o in seen), seen  # ids over the rows; bags from 0

    del side["packed_weights"]
    sidecar_path(path).write_text(json.dumps(side))
    rep = Replay(load_trace(path), "cpu").prepare().report
    assert {s["op"] for s in rep.skipped_list()} == {"quantized::conv2d", "quantized::embedding_bag_byte",
                                                     "quantized::embedding_bag_4bit"}, rep.skipped_list()  # fmt: skip
    assert all("a trace does not record" in s["reason"] for s in rep.skipped_list()), rep.skipped_list()


def test_sparse_features_are_consistent_through_permutes_and_conversions():
    """TorchRec's sparse features reach FBGEMM's bounds check and lookup through a view, a
    permutation and a widening to int64: the lengths a permutation reads sum to its number of
    values, the recorded one (else the bounds check rewrites the bag offsets and logs each call),
    and the indices the lookup reads are spread over its range, in every iteration. (The lengths
    are read through a view whose storage the step's last all-to-all fills again for the next
    batch; the requirement used to stop at that view, and the lengths were 0s and 1s.)"""
    if load_op_library("fbgemm") is not True:
        pytest.skip("fbgemm_gpu is not installed for this torch")
    replay = Replay(load_trace(corpus("multirank/dlrm_8rank/rank-0.json.gz")), "cpu").prepare()
    seen = []

    def look(step, result):
        if step.name == "fbgemm::permute_2D_sparse_data":
            lengths, values = result[0], result[1]
            seen.append((int(lengths.sum()), values.numel()))
            seen.append((values.numel(), math.prod(replay.trace.by_id[step.node_id].outputs[1].shape)))
        elif step.name == "fbgemm::bounds_check_indices":
            indices = replay.env[dict(step.fills)[1]]
            seen.append((len(indices.unique()), "distinct indices"))

    for _ in range(2):
        replay.reset_state()
        replay.run(look)
    assert len(seen) == 10
    for a, b in seen:
        assert a == b if isinstance(b, int) else a > 100, seen


class _TopFourRouting(torch.nn.Module):
    """Tokens routed to experts as transformers' mixture-of-experts layers do it: each token's
    top four choices, sorted by expert, and each position divided by four back into its token;
    the experts' outputs put back in the choices' order through the sort's inverse permutation
    (an uninitialised tensor that the sort's indices fill whole)."""

    def __init__(self, dim: int = 16):
        super().__init__()
        self.router = torch.nn.Linear(dim, 8, bias=False)
        self.expert = torch.nn.Linear(dim, dim)

    def forward(self, x):
        weights, chosen = self.router(x).topk(4, dim=-1)
        order = chosen.flatten().argsort()
        tokens = order // 4  # a Python int: recorded as a 0-dim tensor
        inverse = torch.empty_like(order)
        inverse[order] = torch.arange(order.numel())
        return (self.expert(x[tokens])[inverse] * weights.flatten()[:, None]).sum()


@pytest.mark.parametrize("checked_first", [False, True], ids=["caught", "checked-first"])
def test_indices_computed_from_the_data_fall_back_to_seeded_ones(tmp_path, monkeypatch, checked_first):
    """The original's routing keeps every token index below the token count; the replay's
    divisor is seeded (a 0-dim tensor records no value) and its quotients overrun the token
    count. The index op then reads seeded indices in its range, and says so, instead of being
    skipped; the 0-dim divisor itself is never zero (an integer division by zero raises).

    On a GPU an index out of range is a device-side assertion, after which the process can use
    the device no more, not an error to catch: there the computed indices are checked before
    the call. ``checked-first`` runs that check on the CPU, with the op's own complaint no longer
    taken for an index out of range, so only the check can catch them. It checks the range the op
    accepts, not the one the sort's indices are drawn in for the division's reader: seeded there,
    they would leave the inverse permutation partly unwritten (on a GPU: another assertion, in
    whichever later iteration that memory held something else)."""
    if checked_first:
        monkeypatch.setattr(replay_module, "RAISES_ON_BAD_INDICES", set())
        monkeypatch.setattr(replay_module, "_out_of_range", lambda e: False)
    model, x = _TopFourRouting(), torch.randn(32, 16)
    capture_step(lambda: model(x).backward(), tmp_path / "moe.json.gz", warmup=1, runs=1, min_warmup_s=0)
    # the capture recorded the divisor (4): the replay's quotients are in range
    rep = Replay(load_trace(tmp_path / "moe.json.gz"), "cpu").prepare().report
    assert rep.ops_replayed == rep.ops_total and not any("indices computed" in n for n in rep.notes), rep.notes
    _drop_numbers(tmp_path / "moe.json.gz")  # as of a trace captured elsewhere
    replay = Replay(load_trace(tmp_path / "moe.json.gz"), "cpu").prepare()
    rep = replay.report
    assert rep.ops_skipped == 0 and rep.ops_replayed == rep.ops_total, rep.skipped_list()
    assert any(n.startswith("aten::index: indices computed from the replay's data") for n in rep.notes), rep.notes
    # the sort's indices are in the inverse permutation's range, whatever range the division needs
    assert not any(n.startswith("aten::index_put_: indices computed") for n in rep.notes), rep.notes
    divisors = [t for ref, t in replay.inputs() if t.dim() == 0 and not t.dtype.is_floating_point]
    assert divisors and all(int(t) != 0 for t in divisors)
    for _ in range(3):
        replay.reset_state()
        replay.run()


def test_one_hot_classes_counted_from_the_data_fall_back_to_seeded_ones(tmp_path):
    """st-moe's ``safe_one_hot`` counts its classes from the data (``one_hot(p, p.max() + 1)``,
    each token's position among those routed to its expert): the trace records the original's
    count. The replay's positions come from its own routing, and where they reach past that
    count ``one_hot`` refuses them in its own words ("Class values must be smaller than
    num_classes"), which the replay once did not take for an index out of range: the op was
    skipped. It now reads seeded classes in its range, and says so."""
    x = -torch.ones(256, 32)
    x[:, 0] = 1.0  # (one routed token a row in the original; the replay's spread draw puts more in some rows)

    def step():
        positions = (x > 0).long().cumsum(-1)
        return torch.nn.functional.one_hot(positions, int(positions.max()) + 1).float().sum()

    replay = _captured(tmp_path, "one_hot", step)
    rep = replay.report
    assert rep.ops_skipped == 0 and rep.ops_replayed == rep.ops_total, rep.skipped_list()
    assert any(n.startswith("aten::one_hot: indices computed from the replay's data") for n in rep.notes), rep.notes
    replay.run()


@pytest.mark.parametrize("checked_first, strides", [(False, True), (True, True), (True, False)],
                         ids=["caught", "checked-first", "checked-first-without-strides"])
def test_values_put_by_a_mask_keep_the_originals_count_of_selected_elements(tmp_path, monkeypatch, checked_first,
                                                                             strides):  # fmt: skip
    """``x[mask] = values`` and ``x.masked_scatter(mask, values)`` need a mask with as many true
    elements as there are values (a model's image features put at its image tokens), or for
    ``masked_scatter`` no more. A mask given with the step was drawn half true, and those computed
    from seeded ids selected almost none (``ids == IMAGE``) or almost all (``ids != IMAGE``): the
    three ops were skipped with shape errors. A mask given with the step is now drawn with as many
    true elements as the values put, and one computed from the replay's data that selects a count
    the op refuses reads such a seeded mask instead, with a note. (Here the ids' record lacks
    their hottest values, as a capture made elsewhere may: the next test has them.)
    ``checked-first`` finds the computed masks by the check made before the call on a GPU (where
    ``masked_scatter`` given too few values is a device-side assertion), not by the op's error;
    ``without-strides`` does so in a trace that records no strides, as torch 2.4 writes (the
    count of an expanded mask, taken as contiguous, is of all its elements: the check had
    multiplied it by the replay's mask's repeats, and passed a mask that selected too many)."""
    if checked_first:
        monkeypatch.setattr(replay_module, "RAISES_ON_BAD_INDICES", set())
        monkeypatch.setattr(replay_module, "_miscounted", lambda e: False)
    capture_image_tokens(tmp_path / "vlm.json.gz")
    if not strides:
        data = read_json(tmp_path / "vlm.json.gz")
        for node in data["nodes"]:
            for side in ("inputs", "outputs"):
                node.get(side, {}).pop("strides", None)
        write_json(tmp_path / "vlm.json.gz", data)
    side = json.loads(sidecar_path(tmp_path / "vlm.json.gz").read_text())
    assert [r["hot_values"][0] for r in side["index_inputs"]] == [ImageTokens.IMAGE]
    side["index_inputs"] = [{k: v for k, v in r.items() if k not in ("hot_values", "hot_runs")} for r in side["index_inputs"]]
    sidecar_path(tmp_path / "vlm.json.gz").write_text(json.dumps(side))
    replay = Replay(load_trace(tmp_path / "vlm.json.gz"), "cpu").prepare()
    rep = replay.report
    assert rep.ops_skipped == 0 and rep.ops_replayed == rep.ops_total, rep.skipped_list()
    for op in ("aten::index_put_", "aten::masked_scatter"):
        assert any(n.startswith(f"{op}: a mask or counts computed from the replay's data") for n in rep.notes), rep.notes
    masks = sorted(int(t.count_nonzero()) for _, t in replay.inputs() if t.dtype == torch.bool)
    assert masks == [12, 12, 28 * 16], masks  # (the given one; the seeded ones, one read as expanded)
    for _ in range(3):
        replay.reset_state()
        replay.run()


def test_an_index_after_a_mask_of_two_dimensions_reads_the_third(tmp_path):
    """``targets[mask, classes] = 1`` (FCOS's one-hot class targets: a mask over the images and
    their anchors, then the class of each anchor it selects): the mask covers the first two
    dimensions, so the classes index the third. Taken as indexing the second, the seeded classes
    that stand in for ``labels[mask]`` (its count follows the replay's data) were drawn up to the
    anchors' count, and the write was skipped with an index error."""
    logits, scores, labels = torch.randn(2, 50, 6), torch.rand(2, 50), torch.randint(0, 6, (2, 50))

    def step():
        mask = scores > 0.7
        targets = torch.zeros_like(logits)
        targets[mask, labels[mask]] = 1.0
        return targets.sum()

    replay = _captured(tmp_path, "one_hot", step)
    rep = replay.report
    assert rep.ops_skipped == 0 and rep.ops_replayed == rep.ops_total, rep.skipped_list()
    assert any(n.startswith("aten::index: its output's shape depends on the data") for n in rep.notes), rep.notes
    put = next(s for s in replay.steps if s.name == "aten::index_put_")
    classes = replay.env[put.list_fills[0][1][1]]
    assert classes.dtype == torch.int64 and int(classes.min()) >= 0 and int(classes.max()) < 6, classes
    assert len(classes.unique()) > 1, classes
    replay.run()


def test_ids_hold_the_originals_hottest_values_so_masks_computed_from_them_select_as_many(tmp_path):
    """The capture records an integer input's hottest values themselves, and the replay's ids hold
    them as often as the original's did: a mask computed by comparing the ids with the image token
    selects the original's 12 positions, so the features go in as the original's did, with no
    seeded mask. (Before, the ids held no image token and the ops read seeded masks.) And where
    the original's stood together, they stand in the same runs: each row's image at 3 to 8 (a
    model finds each image from where its run begins; drawn at random places, the image tokens
    made several images of a token or two). A record of runs that overlap is an error naming
    the sidecar."""
    capture_image_tokens(tmp_path / "vlm.json.gz")
    replay = Replay(load_trace(tmp_path / "vlm.json.gz"), "cpu").prepare()
    rep = replay.report
    assert rep.ops_skipped == 0 and rep.ops_replayed == rep.ops_total, rep.skipped_list()
    assert not any("a mask or counts computed" in n for n in rep.notes), rep.notes
    ids = [t for _, t in replay.inputs() if t.dtype == torch.int64 and t.shape == (2, 20)]
    assert len(ids) == 1 and int((ids[0] == ImageTokens.IMAGE).sum()) == 12, ids
    assert torch.nonzero(ids[0] == ImageTokens.IMAGE)[:, 1].tolist() == [3, 4, 5, 6, 7, 8] * 2, ids
    for _ in range(3):
        replay.reset_state()
        replay.run()
    path = sidecar_path(tmp_path / "vlm.json.gz")
    side = json.loads(path.read_text())
    assert side["index_inputs"][0]["hot_runs"][0] == [[3, 6], [23, 6]]
    for key, bad in (("hot_values", [1000, *side["index_inputs"][0]["hot_values"][1:]]),  # (above the highest value)
                     ("hot_runs", [[[3, 6], [8, 6]]] + side["index_inputs"][0]["hot_runs"][1:])):  # (overlapping)  # fmt: skip
        path.write_text(json.dumps({**side, "index_inputs": [{**side["index_inputs"][0], key: bad}]}))
        with pytest.raises(ReplayError, match=r"vlm\.meta\.json: malformed timing sidecar: index_inputs"):
            Replay(load_trace(tmp_path / "vlm.json.gz"), "cpu").prepare()


def test_a_padding_mask_given_with_the_step_holds_the_originals_pads(tmp_path):
    """A key padding mask given with the batch (``nn.MultiheadAttention``'s, True at each row's
    last two keys) was drawn half true at random, hiding half of each row's keys and, in some
    rows, all of them. The capture records a boolean input's count of true elements and their
    runs, and the replay's mask is the original's; without the runs it holds as many true
    elements, at seeded places. A record of more true elements than the mask has is an error
    naming the sidecar."""
    step, pads = padded_attention_step()
    capture_step(step, tmp_path / "kpm.json.gz", warmup=1, runs=1, min_warmup_s=0)

    def replayed_mask():
        replay = Replay(load_trace(tmp_path / "kpm.json.gz"), "cpu").prepare()
        rep = replay.report
        assert rep.ops_skipped == 0 and rep.ops_replayed == rep.ops_total, rep.skipped_list()
        replay.run()
        [mask] = [t for _, t in replay.inputs() if t.dtype == torch.bool]
        return mask, rep.notes

    mask, notes = replayed_mask()
    assert torch.equal(mask, pads), mask
    assert any(n.startswith("1 boolean input(s) hold as many true elements") for n in notes), notes
    path = sidecar_path(tmp_path / "kpm.json.gz")
    side = json.loads(path.read_text())
    [record] = side["mask_inputs"]
    path.write_text(json.dumps({**side, "mask_inputs": [{k: v for k, v in record.items() if k != "runs"}]}))
    mask, _ = replayed_mask()
    assert int(mask.sum()) == 16 and not torch.equal(mask, pads), mask
    path.write_text(json.dumps({**side, "mask_inputs": [{**record, "trues": 49, "runs": []}]}))
    with pytest.raises(ReplayError, match=r"kpm\.meta\.json: malformed timing sidecar: mask_inputs"):
        Replay(load_trace(tmp_path / "kpm.json.gz"), "cpu").prepare()


@pytest.mark.parametrize("record", ["runs", "count-only", "captured-elsewhere"])
def test_a_causal_mask_given_with_the_step_stays_triangular(tmp_path, record):
    """xLSTM's mLSTM builds its decay matrix with ``where(causal_mask, log_gates, -inf)``, the
    lower-triangular mask a buffer of the layer. The capture recorded its count of true elements
    alone (a run a row, past the 64 runs it recorded), and the replay drew them at random places:
    the select's branches and those of the ``exp`` and row maximum after it mispredicted, and the
    replay took 1.45 times the original's time inside operators. The capture now records the
    runs of a mask whose runs are long (16 true elements a run on average, up to 4096 runs); a
    record with the count alone that is a triangle's count takes that triangle, and a square mask
    without any record is drawn lower triangular, with a note."""
    side = 256
    causal = torch.tril(torch.ones(side, side, dtype=torch.bool))
    gates = torch.randn(4, side + 1, side + 1).cumsum(-1) * 0.01

    def step():
        with torch.no_grad():
            logits = torch.where(causal, gates[:, 1:, 1:], -float("inf"))
            return torch.exp(logits - logits.max(-1, keepdim=True).values).sum()

    path = tmp_path / "causal.json.gz"
    capture_step(step, path, warmup=1, runs=1, min_warmup_s=0)
    data = load_sidecar(path)
    [mask_record] = data["mask_inputs"]
    assert len(mask_record["runs"]) == side and mask_record["trues"] == side * (side + 1) // 2
    if record == "count-only":
        sidecar_path(path).write_text(json.dumps({**data, "mask_inputs": [{"shape": [side, side], "dtype": "bool",
                                                                            "trues": side * (side - 1) // 2}]}))  # fmt: skip
    elif record == "captured-elsewhere":
        sidecar_path(path).unlink()
    replay = Replay(load_trace(path), "cpu").prepare()
    assert replay.report.ops_skipped == 0, replay.report.skipped_list()
    replay.run()
    [mask] = [t for _, t in replay.inputs() if t.dtype == torch.bool]
    # (the count given without runs is the strict upper triangle's: the mask a model fills with -inf)
    want = torch.triu(torch.ones_like(causal), 1) if record == "count-only" else causal
    assert torch.equal(mask, want), mask.float().mean()
    drawn = any(n.startswith("1 square boolean input(s) without a record") for n in replay.report.notes)
    assert drawn == (record == "captured-elsewhere"), replay.report.notes


@pytest.mark.parametrize("fill", ["-inf", "lowest", "count-only"])
def test_an_additive_mask_holds_its_fill_where_the_originals_did(tmp_path, fill):
    """``nn.Transformer``'s square subsequent mask is -inf above its diagonal and 0 elsewhere,
    given to the encoder with the batch (HF models fill theirs with float32's lowest instead).
    The capture recorded no scale of an input that holds an infinity, and one past +-1e4 kept the
    replay's rules: the mask was drawn from -1 to 1, the attention masked nothing, and the
    replay's data turned NaN in the encoder's output (a note said so). The capture now records
    where such a mask holds its fill, as a boolean mask's runs, and the scale of the rest; the
    replay's mask is the original's; a record of the count alone (a mask past the runs the
    capture keeps) that is a triangle's count takes that triangle. A fill record of a value that
    is no mask's fill is an error naming the sidecar."""
    side = 64
    layer = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True).eval()
    mask = torch.nn.Transformer.generate_square_subsequent_mask(side)
    if fill == "lowest":
        mask = mask.clamp(min=torch.finfo(torch.float32).min)
    x = torch.randn(4, side, 32)

    def step():
        with torch.no_grad():
            return layer(x, src_mask=mask)

    path = tmp_path / "subsequent.json.gz"
    capture_step(step, path, warmup=1, runs=1, min_warmup_s=0)
    data = load_sidecar(path)
    [record] = [r for r in data["float_inputs"] if r["shape"] == [side, side]]
    assert len(record["fill"]["runs"]) == side - 1 and record["fill"]["trues"] == side * (side - 1) // 2
    if fill == "count-only":
        without = {**record, "fill": {k: v for k, v in record["fill"].items() if k != "runs"}}
        sidecar_path(path).write_text(json.dumps({**data, "float_inputs": [without if r is record else r
                                                                            for r in data["float_inputs"]]}))  # fmt: skip
    replay = Replay(load_trace(path), "cpu").prepare()
    assert replay.report.ops_skipped == 0, replay.report.skipped_list()
    replay.run()
    assert not any("NaN" in n for n in replay.report.notes), replay.report.notes
    assert any(n.startswith("1 floating input(s) hold a mask's fill") for n in replay.report.notes), replay.report.notes
    [made] = [t for _, t in replay.inputs() if t.shape == (side, side)]
    assert torch.equal(made, mask)
    sidecar_path(path).write_text(json.dumps({**data, "float_inputs": [{**record, "fill": {**record["fill"], "value": -5.0}}]}))
    with pytest.raises(ReplayError, match=r"subsequent\.meta\.json: malformed timing sidecar: float_inputs"):
        Replay(load_trace(path), "cpu").prepare()


def test_counts_that_must_add_up_to_a_size_add_up_to_the_originals(tmp_path):
    """Segment lengths must sum to the data's length (``segment_reduce``), and repeats to the
    ``output_size`` given (``repeat_interleave``): given with the step they were drawn 0 or 1,
    and both ops were skipped. Given ones now sum to that size; computed ones (``mask.sum(1)``
    over a seeded mask) that do not are replaced by seeded ones that do, with a note. (With the
    capture's record of the mask, the replay's mask is the original's, and its counts add up.)"""
    data, given = torch.randn(100, 16, requires_grad=True), torch.tensor([10, 30, 5, 55])
    mask = torch.rand(4, 30) > 0.3
    flat = torch.randn(int(mask.sum()), 16)

    def step():
        reduced = torch.segment_reduce(data, "sum", lengths=given)
        spread = torch.arange(4.0).repeat_interleave(given, output_size=100)
        lengths = mask.sum(1)
        means = torch.segment_reduce(flat, "mean", lengths=lengths)
        (reduced.pow(2).sum() + spread.sum() + means.sum()).backward()

    capture_step(step, tmp_path / "segments.json.gz", warmup=1, runs=1, min_warmup_s=0)
    replay = Replay(load_trace(tmp_path / "segments.json.gz"), "cpu").prepare()
    rep = replay.report
    assert rep.ops_skipped == 0 and rep.ops_replayed == rep.ops_total, rep.skipped_list()
    assert not any("a mask or counts computed" in n for n in rep.notes), rep.notes
    assert [torch.equal(t, mask) for _, t in replay.inputs() if t.dtype == torch.bool] == [True]
    path = sidecar_path(tmp_path / "segments.json.gz")  # (a trace captured elsewhere: no record of the mask)
    path.write_text(json.dumps({k: v for k, v in json.loads(path.read_text()).items() if k != "mask_inputs"}))
    replay = Replay(load_trace(tmp_path / "segments.json.gz"), "cpu").prepare()
    rep = replay.report
    assert rep.ops_skipped == 0 and rep.ops_replayed == rep.ops_total, rep.skipped_list()
    assert any(n.startswith("aten::segment_reduce: a mask or counts computed") for n in rep.notes), rep.notes
    sums = sorted(int(t.sum()) for _, t in replay.inputs() if t.dtype == torch.int64 and t.shape == (4,))
    assert sums == sorted([100, flat.shape[0]]), sums
    for _ in range(3):
        replay.reset_state()
        replay.run()


def test_segment_lengths_given_with_the_step_stay_within_the_originals_bounds(tmp_path):
    """Lengths of ragged segments given with the step (2 to 19 rows each) and a mean over each
    segment: drawn as counts that only sum to the rows, some came out 0, the mean divided by
    zero and the replay's data went infinite from there on. With the capture's record of their
    smallest and largest, each count lies between those and they still sum to the rows."""
    lengths, rows, step = _segment_means()
    capture_step(step, tmp_path / "ragged.json.gz", warmup=1, runs=1, min_warmup_s=0)
    replay = Replay(load_trace(tmp_path / "ragged.json.gz"), "cpu").prepare()
    rep = replay.report
    assert rep.ops_skipped == 0 and rep.ops_replayed == rep.ops_total, rep.skipped_list()
    assert any("counts that sum to a size" in n for n in rep.notes), rep.notes
    [given] = [t for _, t in replay.inputs() if t.dtype == torch.int64 and t.shape == (32,)]
    low, high = int(lengths.min()), int(lengths.max())
    assert int(given.sum()) == rows.shape[0] and low <= int(given.min()) and int(given.max()) <= high, given
    replay.run()
    assert not any("NaN or inf" in n for n in rep.notes), rep.notes


def _segment_means():
    """Lengths of 32 ragged segments (2 to 19 rows each), the rows, and a training step that
    takes the mean over each segment."""
    lengths = torch.randint(2, 20, (32,))
    rows = torch.randn(int(lengths.sum()), 16, requires_grad=True)

    def step():
        seg = torch.repeat_interleave(torch.arange(32), lengths)
        sums = torch.zeros(32, 16).index_add_(0, seg, rows)
        (sums / lengths[:, None]).square().mean().backward()

    return lengths, rows, step


def test_segment_lengths_without_a_record_that_divide_are_never_zero(tmp_path):
    """The same segment means in a trace captured elsewhere: no record bounds the lengths. Cut
    from sorted uniform points, some came out 0 and the mean divided by zero. A length the step
    divides by is at least 1; the lengths still sum to the rows."""
    lengths, rows, step = _segment_means()
    replay = _replayed_without_records(step, tmp_path / "ragged.json.gz")
    [given] = [t for _, t in replay.inputs() if t.dtype == torch.int64 and t.shape == (32,)]
    assert int(given.sum()) == rows.shape[0] and int(given.min()) >= 1, given


def test_a_width_a_rotary_table_divides_by_without_a_record_is_drawn_as_a_size(tmp_path):
    """``1 / base ** (arange(0, dim, 2) / dim)`` computed in the step (XLNet's, Funnel's, DETR's
    position tables): ``dim`` reaches the trace as a 0-dim integer tensor without its value. Drawn
    1 or 2, as an integer divisor is, the power overflowed. A Python integer that a floating tensor
    is divided by is drawn as a size, from 8 to 64; an integer division's divisor stays 1 or 2."""
    pos, ids = torch.arange(32.0), torch.randint(0, 100, (8,))

    def step():
        inv_freq = 1.0 / (10000 ** (torch.arange(0, 64, 2).float() / 64))
        angles = pos[:, None] * inv_freq[None, :]
        return torch.cat([angles.sin(), angles.cos()], -1).sum() + (ids // 7).sum()

    replay = _replayed_without_records(step, tmp_path / "rotary.json.gz")
    numbers = [int(t) for _, t in replay.inputs() if t.dim() == 0 and t.dtype == torch.int64]
    assert sorted(n >= 8 for n in numbers) == [False, True] and all(1 <= n <= 64 for n in numbers), numbers


def test_a_positive_range_passes_back_through_a_product_by_a_number_a_quotient_and_a_mean(tmp_path):
    """A square root or a logarithm of an input scaled by a number (``log(x * 3)``, ``sqrt(v /
    2)``, ``rsqrt(w * 0.5 + eps)``), of an input's mean, or of a quotient of integers the program
    made (a detector's anchor sizes, ``torch.tensor(sizes) / stride``): without a record, each
    input was drawn signed (the integers 0 or 1) and the replay's data went NaN, where the
    original's was positive. The requirement passes back through the product, the quotient and
    the mean to the input. Not through a product by a negative number, which flips the sign."""
    x, v, w = torch.rand(64, 16) + 0.1, torch.rand(48, 16) + 0.1, torch.rand(32, 16) + 0.1
    wh, m, neg = torch.rand(3, 2) + 0.1, torch.rand(24, 16) + 0.1, -torch.rand(5, 7)

    def step():
        anchors = torch.tensor([[10, 13], [16, 30], [33, 23]]) / 8
        return (torch.log(x * 3).sum() + torch.sqrt(v / 2).sum() + torch.rsqrt(w * 0.5 + 1e-6).sum()
                + torch.log(m.mean(0)).sum() + torch.log(wh / anchors).sum())  # fmt: skip

    replay = _replayed_without_records(step, tmp_path / "scaled.json.gz")
    made = {(tuple(t.shape), t.dtype): t for _, t in replay.inputs() if t.shape}
    assert all(bool((made[tuple(t.shape), t.dtype] > 0).all()) for t in (x, v, w, m, wh)), made
    assert bool((made[(3, 2), torch.int64] >= 1).all()), made  # (the anchor sizes)

    trace = _captured_without_records(lambda: torch.sqrt(torch.ops.aten.mul.Scalar(neg, -2.0)), tmp_path / "neg.json.gz")
    drawn = next(t for _, t in Replay(trace, "cpu").prepare().inputs() if t.shape == (5, 7))
    assert bool((drawn < 0).any()), drawn


def test_tensors_the_program_made_from_its_own_numbers_hold_the_originals_values(tmp_path):
    """``torch.tensor(...)`` inside the step: the trace records an uninitialised allocation that
    the program filled, read before any op wrote it. Seeded, a quantile's levels fell outside [0,
    1] and the op was skipped, and a divisor made of a feature map's width and height came out 0
    or 1. The capture records such tensors' values (an infinity as a string), and the replay's
    hold them; a record whose values do not fit its shape is an error naming the sidecar."""
    x, offsets = torch.randn(16, 100), torch.randn(16, 2, requires_grad=True)

    def step():
        levels = torch.quantile(x, torch.tensor([0.1, 0.5, 0.9]), dim=1)
        scaled = offsets / torch.tensor([32, 24])
        floor = torch.maximum(x, torch.tensor(float("-inf")))
        lowest = torch.maximum(x, torch.tensor(torch.finfo(torch.float32).min))  # (GPT-Neo's mask value)
        (levels.sum() + scaled.sum() + floor.sum() + lowest.sum()).backward()

    capture_step(step, tmp_path / "fresh.json.gz", warmup=1, runs=1, min_warmup_s=0)
    replay = Replay(load_trace(tmp_path / "fresh.json.gz"), "cpu").prepare()
    rep = replay.report
    assert rep.ops_skipped == 0 and rep.ops_replayed == rep.ops_total, rep.skipped_list()
    assert any(n.startswith("4 tensor(s) the program made from its own numbers") for n in rep.notes), rep.notes
    replay.run()
    made = [t for _, t in replay.inputs() if t.shape]
    assert any(t.dtype == torch.float32 and torch.allclose(t, torch.tensor([0.1, 0.5, 0.9])) for t in made if t.shape == (3,))
    assert any(torch.equal(t, torch.tensor([32, 24])) for t in made if t.shape == (2,)), made
    # (among others: where the writer reuses ids, a level of the quantile can be read as a 0-dim input)
    numbers = {float(t) for _, t in replay.inputs() if not t.shape and t.dtype == torch.float32}
    assert {float("-inf"), torch.finfo(torch.float32).min} <= numbers, numbers
    path = sidecar_path(tmp_path / "fresh.json.gz")
    side = json.loads(path.read_text())
    levels, divisor, floor, _ = (r["values"] for r in side["fresh_inputs"])
    assert levels == pytest.approx([0.1, 0.5, 0.9]) and divisor == [32, 24] and floor == ["-inf"], side["fresh_inputs"]
    path.write_text(json.dumps({**side, "fresh_inputs": [{**side["fresh_inputs"][0], "values": [0.1]}]}))
    with pytest.raises(ReplayError, match=r"fresh\.meta\.json: malformed timing sidecar: fresh_inputs"):
        Replay(load_trace(tmp_path / "fresh.json.gz"), "cpu").prepare()
    # a trace captured elsewhere, without the record: the levels are drawn where torch accepts them
    path.write_text(json.dumps({k: v for k, v in side.items() if k != "fresh_inputs"}))
    replay = Replay(load_trace(tmp_path / "fresh.json.gz"), "cpu").prepare()
    assert replay.report.ops_skipped == 0, replay.report.skipped_list()
    levels = next(t for _, t in replay.inputs() if t.dtype == torch.float32 and t.shape == (3,))
    assert 0 <= float(levels.min()) and float(levels.max()) <= 1, levels


def test_numbers_assigned_and_compared_with_hold_the_originals_values(tmp_path):
    """Two inputs the replay once drew as 0s, 1s and 2s. A number assigned into a tensor
    (``chart[:, 0] = -7.5``) becomes, to torch 2.14, a tensor with no op recorded that reaches the
    ops through ``aten::lift_fresh``: it holds the value the capture recorded (torch 2.15 fills the
    column with the number itself, which the trace records). An integer input that no op
    reads as indices (a batch's sequence lengths, compared with positions) holds values between
    the original's lowest and highest: in torch-struct's CRF every sequence came out a token or
    two long, and its log-partition ran 18% slower inside the operators than the original's. (One
    of 64 elements or fewer holds the original's values: see the divisors' test.)"""
    lengths, scores = torch.randint(11, 31, (96,)), torch.randn(96, 30)

    def step():
        chart = scores.clone()
        chart[:, 0] = -7.5
        keep = torch.arange(30)[None, :] < (lengths - 1)[:, None]
        return chart.masked_fill(~keep, -1e5).logsumexp(-1).sum()

    replay = _captured(tmp_path, "numbers", step)
    rep = replay.report
    assert rep.ops_skipped == 0, rep.skipped_list()
    assert any(n.startswith("1 integer input(s) that no op reads as indices") for n in rep.notes), rep.notes
    made = {(tuple(t.shape), t.dtype): t for _, t in replay.inputs()}
    drawn = made[(96,), torch.int64]
    assert int(drawn.min()) >= int(lengths.min()) and int(drawn.max()) <= int(lengths.max()), drawn
    if any(n.name == "aten::lift_fresh" for n in replay.trace.nodes):
        assert float(made[(), torch.float32]) == -7.5, made
    else:
        assert ((), torch.float32) not in made, made
        assert next(s for s in replay.steps if s.name == "aten::fill_").args[1] == -7.5
    replay.run()


def test_counts_that_an_op_sums_keep_the_replays_own_rule(tmp_path):
    """A jagged batch's lengths (TorchRec's keyed jagged tensor) are summed into the offsets that
    cut its ids into bags: their sum must be the number of ids the trace records. Drawn between
    the original's lowest and highest (the rule for integers no op reads as indices), they summed
    past it, and the embedding bag refused the last offset in every iteration (TorchRec's DLRM
    skipped all three of its lookups). Counts that an op sums, through a view too, are left to the
    replay's own rule."""
    lengths = torch.randint(1, 9, (2, 64))
    ids = torch.randint(0, 1000, (int(lengths[0].sum()),))
    bag = torch.nn.EmbeddingBag(1000, 16, mode="sum", include_last_offset=True)

    def step():
        offsets = torch.cat([torch.zeros(1, dtype=torch.long), lengths.view(-1)[:64].cumsum(0)])
        return bag(ids, offsets).sum()

    replay = _captured(tmp_path, "jagged", step)
    rep = replay.report
    assert rep.ops_skipped == 0 and rep.ops_replayed == rep.ops_total, rep.skipped_list()
    assert not any("no op reads as indices" in n for n in rep.notes), rep.notes
    replay.run()
    # (and the lengths the offsets are made of sum to the ids, as the original's: see the next test)
    made = _int_inputs(replay, (2, 64))
    assert len(made) == 1 and int(made[0][0].sum()) == ids.numel(), [int(t.sum()) for t in made]


def _int_inputs(replay, shape) -> list[torch.Tensor]:
    """The replay's integer input tensors of ``shape``."""
    return [t for s in sorted(replay.permanent) if isinstance(t := replay.env[s], torch.Tensor)
            and not t.is_floating_point() and tuple(t.shape) == shape]  # fmt: skip


@pytest.mark.parametrize("records", [True, False], ids=["recorded", "captured-elsewhere"])
def test_jagged_lengths_sum_to_the_ids_of_their_bags(tmp_path, records):
    """A jagged batch (TorchRec's keyed jagged tensor) gives each key's lookup the offsets of its
    bags as a 0 and the running totals of that key's row of lengths (``cat([zeros,
    lengths.cumsum(1)], 1)``, a row of it each), or FBGEMM's complete cumsum of them. Drawn as 0s
    and 1s, the lengths summed to a fraction of the ids the trace records, and each lookup read
    that fraction of the original's ids. The offsets' layout now passes back through the row, the
    concatenation and the running sum, row by row, to the lengths: each row sums to its lookup's
    ids, and with the capture's record each length lies between the original's lowest and
    highest. The offsets of the rows are views with the same ids (the trace writer reused them),
    each read by its own lookup. The keys' ids are one tensor cut into views, each in its own
    table's range: drawn in the narrowest, the larger tables' lookups read their first rows alone;
    the capture records each view's spread too, which each is drawn with."""
    torch.manual_seed(0)
    keys, batch, tables = 3, 48, (500, 2000, 100)
    lengths = torch.randint(1, 9, (keys * batch,))
    rows = lengths.view(keys, batch).sum(1).tolist()
    ids = torch.cat([torch.randint(0, n, (k,)) for n, k in zip(tables, rows)])
    bags = torch.nn.ModuleList(torch.nn.EmbeddingBag(n, 8, mode="sum", include_last_offset=True) for n in tables)

    def step():
        with torch.no_grad():
            per_key = lengths.view(keys, batch)
            offsets = torch.cat([per_key.new_zeros(keys, 1), per_key.cumsum(1)], 1)
            return [bag(part, offsets[k]) for k, (bag, part) in enumerate(zip(bags, ids.split(rows)))]

    path = tmp_path / "jagged_rows.json.gz"
    replay = _captured(tmp_path, "jagged_rows", step) if records else _replayed_without_records(step, path)
    assert replay.report.ops_skipped == 0, replay.report.skipped_list()
    (made,) = _int_inputs(replay, (keys * batch,))
    assert made.view(keys, batch).sum(1).tolist() == rows
    assert any(n.startswith("2 integer input(s) drawn run by run") for n in replay.report.notes), replay.report.notes
    replay.run()
    # each key's ids (a view of the one tensor of ids, at its place) lie in its own table's rows,
    # not all in the smallest table's, which is what the whole tensor's ranges narrow to
    (drawn,) = _int_inputs(replay, (sum(rows),))
    for part, n in zip(drawn.split(rows), tables):
        assert 0 <= int(part.min()) and n / 2 < int(part.max()) < n, (n, int(part.max()))
    if records:
        assert 1 <= int(made.min()) and int(made.max()) <= 8, made
        assert any("counts that sum to a size" in n for n in replay.report.notes), replay.report.notes
        # the capture recorded each key's ids apart (the views the lookups read): the two larger
        # tables' ids, drawn apart from the whole's range, have as many distinct rows as the original's
        for part, want in list(zip(drawn.split(rows), ids.split(rows)))[:2]:
            assert part.unique().numel() == want.unique().numel()
        side = load_sidecar(path)
        [record] = [r for r in side["index_inputs"] if r["shape"] == [sum(rows)]]
        assert [(r["start"], r["length"]) for r in record["runs"]] == [(0, rows[0]), (rows[0], rows[1]), (sum(rows[:2]), rows[2])]
        record["runs"][0]["start"] = sum(rows)  # (past the tensor's elements)
        sidecar_path(path).write_text(json.dumps(side))
        with pytest.raises(ReplayError, match=r"jagged_rows\.meta\.json: malformed timing sidecar: index_inputs"):
            Replay(load_trace(path), "cpu").prepare()


@pytest.mark.parametrize("records", [True, False], ids=["recorded", "captured-elsewhere"])
def test_an_index_range_passes_back_through_the_subtraction_of_a_number(tmp_path, records):
    """A sequence model gathers each sequence's last position at ``lengths - 1`` (SASRec, GRU4Rec).
    The gather's index range stayed on the difference: a trace captured elsewhere had its lengths
    drawn as 0s and 1s, and the gather read -1 and fell back to seeded indices in every
    iteration. The range now passes back through the subtraction (Python's 1, a 0-dim input in
    the trace, is fixed at 1 where no record gives its value), and the lengths lie from 1 to the
    sequence's length."""
    torch.manual_seed(0)
    seq, lengths = torch.randn(96, 50, 32), torch.randint(5, 51, (96,))

    def step():
        with torch.no_grad():
            return seq.gather(1, (lengths - 1).view(-1, 1, 1).expand(-1, 1, 32)).squeeze(1)

    path = tmp_path / "last.json.gz"
    replay = _captured(tmp_path, "last", step) if records else _replayed_without_records(step, path)
    assert replay.report.ops_skipped == 0, replay.report.skipped_list()
    replay.run()
    assert not any("seeded indices" in n for n in replay.report.notes), replay.report.notes
    (made,) = _int_inputs(replay, (96,))
    assert 1 <= int(made.min()) and int(made.max()) <= 50 and made.unique().numel() > 20, made


@pytest.mark.parametrize("records", [True, False], ids=["recorded", "captured-elsewhere"])
@pytest.mark.parametrize("made", ["in-step", "buffer"])
def test_field_offsets_move_each_fields_ids_into_its_own_rows(tmp_path, records, made):
    """A factorization machine (pytorch-fm's FeaturesEmbedding) looks the ids of all its fields up
    in one table, each field's moved into its own rows by a row of offsets: ``x + offsets``. The
    lookup's range stayed on the sum: without the capture's records the ids and offsets were
    drawn as 0s and 1s and the lookup read three rows; with them, each was drawn from its own
    spread, the offsets out of order, the sums past the table, and the lookup fell back to seeded
    indices. The range now passes back through the sum: with recorded offsets (made in the step
    from a list, or a small input whose values the capture now records) each field's ids lie in
    its own field, spread as the capture recorded each column, and without them the offsets are
    fixed at equal steps through the table and each field's ids lie within one."""
    torch.manual_seed(0)
    fields = (100, 2000, 30, 500)
    starts = [0, 100, 2100, 2130]
    buffer = torch.tensor(starts)
    ids = torch.stack([torch.randint(0, n, (512,)) for n in fields], 1)
    table = torch.nn.Embedding(sum(fields), 16)

    def step():
        with torch.no_grad():
            if made == "in-step":
                return table(ids + ids.new_tensor(starts).unsqueeze(0)).sum(1)
            return table(buffer.unsqueeze(0) + ids).sum(1)  # (the offsets first)

    path = tmp_path / "fm.json.gz"
    replay = _captured(tmp_path, "fm", step) if records else _replayed_without_records(step, path)
    assert replay.report.ops_skipped == 0, replay.report.skipped_list()
    replay.run()
    assert not any("seeded indices" in n for n in replay.report.notes), replay.report.notes
    (drawn,) = _int_inputs(replay, (512, 4))
    (offsets,) = _int_inputs(replay, (4,))
    rows = drawn + offsets
    assert 0 <= int(rows.min()) and int(rows.max()) < sum(fields)
    if records:
        assert offsets.tolist() == starts
        for column, n in zip(drawn.t(), fields):
            assert 0 <= int(column.min()) and n / 2 < int(column.max()) < n, (n, int(column.max()))
        # (the original read as many distinct rows: each field's ids spread through the field)
        assert rows.unique().numel() > 0.8 * (ids + buffer).unique().numel()
    else:
        step_rows = sum(fields) // len(fields)
        assert offsets.tolist() == [f * step_rows for f in range(len(fields))]
        assert int(drawn.max()) < step_rows and rows.unique().numel() > 1000


def test_a_table_of_features_is_drawn_column_by_column(tmp_path):
    """A tabular model's features in one float tensor (DeepCTR's DIN: ids, a price and a count side
    by side, each column cut out and the ids converted): the capture records each column's spread
    beside the whole's, and the replay draws each column from its own. Drawn from the whole
    tensor's spread, the price column read values up to 3000, the click probabilities saturated,
    and the backward pass's gradients fell into subnormal numbers (four times the original's
    time); the ids of the small table went out of its range."""
    torch.manual_seed(0)
    items, colors = torch.nn.Embedding(3000, 8), torch.nn.Embedding(12, 8)
    features = torch.stack([torch.randint(0, 3000, (256,)).float(), torch.rand(256),
                            torch.randint(0, 12, (256,)).float(), torch.randint(1, 40, (256,)).float()], 1)  # fmt: skip

    def step():
        with torch.no_grad():
            x = items(features[:, 0].long()) * features[:, 1:2] + colors(features[:, 2].long())
            return x * features[:, 3:4].log()

    replay = _captured(tmp_path, "tabular", step)
    assert replay.report.ops_skipped == 0, replay.report.skipped_list()
    [record] = [r for r in load_sidecar(tmp_path / "tabular.json.gz")["float_inputs"] if r["shape"] == [256, 4]]
    assert len(record["columns"]) == 4
    [made] = [t for ref, t in replay.inputs() if ref.shape == (256, 4)]
    for column, want in zip(made.t(), features.t()):
        assert float(want.min()) <= float(column.min()) and float(column.max()) <= float(want.max())
        assert float(column.max()) > 0.5 * float(want.max())
    assert not any("out of its range" in n for n in replay.report.notes), replay.report.notes
    assert any("column by column" in n for n in replay.report.notes), replay.report.notes
    replay.run()
    side = load_sidecar(tmp_path / "tabular.json.gz")
    [record] = [r for r in side["float_inputs"] if r["shape"] == [256, 4]]
    record["columns"] = record["columns"][:3]  # (a column short)
    sidecar_path(tmp_path / "tabular.json.gz").write_text(json.dumps(side))
    with pytest.raises(ReplayError, match=r"tabular\.meta\.json: malformed timing sidecar: float_inputs"):
        Replay(load_trace(tmp_path / "tabular.json.gz"), "cpu").prepare()


def test_a_weights_transposed_view_takes_no_record_of_its_own(tmp_path):
    """A linear layer's backward reads its weight's transposed view, which ``linear`` made inside
    itself and the replay makes as a view of the weight's memory: an input the capture never saw
    an operator read as such. Matched to the sidecar's records by shape, it took the next record
    of its shape (another parameter's, an optimizer's state in DIN), and its fill wrote that over
    the weight. It takes none now: the weight holds its own recorded values."""
    torch.manual_seed(0)
    out = torch.nn.Linear(32, 1, bias=False)
    alpha = torch.nn.Parameter(torch.full((32, 1), 1e-6))  # (a tensor of the transposed view's shape, read later)
    x = torch.randn(64, 32)

    def step():
        out(x * (1 + alpha.t())).square().mean().backward()

    replay = _captured(tmp_path, "transposed", step)
    views = [t for ref, t in replay.inputs() if ref.shape in ((1, 32), (32, 1)) and ref.strides in ((32, 1), (1, 32))]
    assert views and all(float(t.detach().abs().max()) == pytest.approx(float(out.weight.abs().max())) for t in views[:2])


def test_batch_norm_statistics_made_behind_a_view_are_the_replays_own(tmp_path):
    """A batch norm over a sequence's features (DIN's Dice: the input transposed) computes the
    batch's mean with ``aten::mean`` and then views it for the broadcast, inside
    ``native_batch_norm``, which ``batch_norm`` calls and which returns the mean and inverse
    deviation to the backward pass alone. The view was taken for the memory's last maker, another
    tensor than the one the backward reads, so ``batch_norm`` was not opened and the backward read
    seeded statistics (an optimizer's state there: 1e-27 for an inverse deviation, its gradients
    subnormal). The operator that made the memory read is the one before the view, inside the
    same one: ``batch_norm`` is replayed through its parts, and the backward reads their output."""
    torch.manual_seed(0)
    layer, bn = torch.nn.Linear(24, 16), torch.nn.BatchNorm1d(16)
    keys = torch.randn(64, 20, 24)

    def step():
        h = bn(layer(keys).transpose(1, 2)).transpose(1, 2)
        torch.sigmoid(h).sum(-1).square().mean().backward()

    replay = _captured(tmp_path, "sequence_norm", step)
    backward = [s for s in replay.steps if s.name == "aten::native_batch_norm_backward"]
    assert len(backward) == 1
    saved = dict(backward[0].fills)
    assert saved.get(5) is not None and saved[5] not in replay.permanent and saved[6] not in replay.permanent
    assert any("replayed through their parts" in n and "batch_norm" in n for n in replay.report.notes), replay.report.notes
    replay.run()


def test_lengths_cut_by_fbgemms_complete_cumsum_sum_to_the_ids(tmp_path):
    """FBGEMM's complete cumsum (a 0, then the running totals) makes a jagged batch's offsets in
    one op: the lengths it reads sum to the ids of the bags (see the test before)."""
    if load_op_library("fbgemm") is not True:
        pytest.skip("fbgemm_gpu is not installed for this torch")
    torch.manual_seed(0)
    lengths = torch.randint(0, 12, (96,))
    ids = torch.randint(0, 300, (int(lengths.sum()),))
    bag = torch.nn.EmbeddingBag(300, 8, mode="mean", include_last_offset=True)

    def step():
        with torch.no_grad():
            return bag(ids, torch.ops.fbgemm.asynchronous_complete_cumsum(lengths))

    replay = _replayed_without_records(step, tmp_path / "complete_cumsum.json.gz")
    (made,) = _int_inputs(replay, (96,))
    assert int(made.sum()) == ids.numel() and int(made.min()) >= 0


def _captured_without_records(step, path):
    """``step`` captured into ``path``, its sidecar taken away (as a trace captured elsewhere comes)."""
    capture_step(step, path, warmup=1, runs=1, min_warmup_s=0)
    sidecar_path(path).unlink()
    return load_trace(path)


def _replayed_without_records(step, path):
    """``step`` captured into ``path`` and replayed as a trace captured elsewhere (no sidecar):
    every op replays, and an iteration runs without the data going NaN or infinite."""
    replay = Replay(_captured_without_records(step, path), "cpu").prepare()
    rep = replay.report
    assert rep.ops_skipped == 0 and rep.ops_replayed == rep.ops_total, rep.skipped_list()
    replay.run()
    assert not any("NaN" in n for n in rep.notes), rep.notes
    return replay


def test_probabilities_and_rates_without_a_record_are_drawn_where_torch_accepts_them(tmp_path):
    """A trace captured elsewhere has no record of its inputs' values. Drawn from [-1, 1), the
    probabilities a sampler or a binary cross-entropy reads and the rates of a Poisson draw were
    refused by torch, and those ops skipped; a KL divergence's target had its logarithm taken and
    went NaN, and so did a Poisson loss's rates, an incomplete gamma function's arguments, a
    logit's probabilities, an inverse hyperbolic cosine's argument and a covariance's log
    determinant. They are drawn in [0, 1] (a sampler's rates positive), and
    probabilities whose logarithm is taken too, where both hold."""
    probs, p, target, x = torch.rand(8, 10), torch.rand(64, 16), torch.rand(64, 16), torch.rand(64, 16)
    rates, concentration = torch.rand(100) * 5, torch.rand(30) + 0.1
    predicted, counts, shape, upto, q = torch.rand(50) + 0.1, torch.rand(50) * 3, torch.rand(20) + 0.1, torch.rand(20), torch.rand(40)
    above_one, covariance = torch.rand(30) + 1, torch.eye(6) * 2

    def step():
        picks, coins = torch.multinomial(probs, 3), torch.bernoulli(p)
        bce = torch.nn.functional.binary_cross_entropy(x, target)
        kl = torch.nn.functional.kl_div(x.log(), target, reduction="batchmean")
        nll = torch.nn.functional.poisson_nll_loss(predicted, counts, log_input=False)
        return (picks, coins, bce, kl, torch.poisson(rates), torch._standard_gamma(concentration), nll,
                torch.special.gammainc(shape, upto), torch.logit(q), torch.acosh(above_one), torch.logdet(covariance))  # fmt: skip

    replay = _replayed_without_records(step, tmp_path / "samplers.json.gz")
    assert replay.report.ops_total == 13
    bce = next(s for s in replay.steps if s.name == "aten::binary_cross_entropy")
    read = replay.env[bce.fills[0][1]]
    assert 0.5 <= float(read.min()) and float(read.max()) <= 1, read  # (its log is taken too)


def test_a_noise_schedule_without_a_record_gives_roots_and_divisors_that_hold(tmp_path):
    """A diffusion step reads its noise schedule (``alphas_cumprod``, a buffer of 100 values in (0,
    1)) at drawn time steps and takes ``a ** 0.5`` and ``(1 - a) ** 0.5`` of them, and a sampler
    divides by one entry. Without a record, the schedule was drawn from [-1, 1) (the roots' range
    stayed on the picked values, the ``index`` output) or all 1 (a 0-dim divisor's exact 1, given
    to the whole buffer it was read from), and the replay's data went NaN or infinite. The roots'
    range reaches the buffer through the ``index``, and a number's exact 1 reaches it as a range
    around 1: the buffer's values lie in [0.5, 1)."""
    alphas = torch.cumprod(1 - torch.linspace(1e-4, 0.02, 100), 0)
    x, noise = torch.randn(4, 8), torch.randn(4, 8)

    def step():
        t = torch.randint(0, 100, (4,))
        a = alphas[t]
        noisy = a[:, None] ** 0.5 * x + (1 - a[:, None]) ** 0.5 * noise
        return noisy / alphas[36], (noisy - (1 - alphas[36]) ** 0.5 * noise) / (1 - alphas[36])

    replay = _replayed_without_records(step, tmp_path / "schedule.json.gz")
    [schedule] = [t for _, t in replay.inputs() if t.shape == (100,)]
    assert 0.5 <= float(schedule.min()) and float(schedule.max()) < 1 and len(set(schedule.tolist())) > 90, schedule


def test_frozen_batch_norms_without_a_record_take_the_root_of_positive_variances(tmp_path):
    """A detection backbone's frozen batch norms (DETR's, torchvision's) compute ``w * (var +
    eps).rsqrt()`` from buffers given with the step. Without a record the variances were drawn
    from [-1, 1): the root's requirement stayed on the sum, and its square root went NaN. It now
    reaches the variance through the addition of a number; and where the writer gave the sum's
    ids to a later tensor (a product of the same shape), through the op that made each."""
    convs = [torch.nn.Conv2d(8, 8, 3, padding=1) for _ in range(3)]
    buffers = [(torch.rand(8) + 0.5, torch.randn(8) * 0.1, torch.rand(8) + 0.5, torch.randn(8) * 0.1) for _ in convs]
    x = torch.randn(2, 8, 16, 16, requires_grad=True)

    def step():
        h = x
        for conv, (w, b, var, mean) in zip(convs, buffers):
            scale = w.reshape(1, -1, 1, 1) * (var.reshape(1, -1, 1, 1) + 1e-5).rsqrt()
            shift = b.reshape(1, -1, 1, 1) - mean.reshape(1, -1, 1, 1) * scale
            h = torch.relu(conv(h) * scale + shift)
            gate = w.reshape(1, -1, 1, 1) * b.reshape(1, -1, 1, 1)
            h = h * gate
        h.square().mean().backward()

    path = tmp_path / "frozen_bn.json.gz"
    replay = _replayed_without_records(step, path)
    roots = [s for s in replay.steps if s.name == "aten::rsqrt"]
    assert len(roots) == 3
    # the writer gives the first sum's ids to the first layer's gate (as freed memory is reused)
    data = read_json(path)
    ops = [n for n in data["nodes"] if n["name"].startswith("aten::")]
    first_root = next(n for n in ops if n["name"] == "aten::rsqrt")
    total = first_root["inputs"]["values"][0]
    gate = next(n for n in ops if n["name"] == "aten::mul" and n["id"] > first_root["id"]
                and all(v[1] not in {t[1] for t in first_root["outputs"]["values"]} for v in n["inputs"]["values"])
                and n["inputs"]["shapes"] == [[1, 8, 1, 1], [1, 8, 1, 1]] and n["ctrl_deps"] == first_root["ctrl_deps"]
                and not any(v[:2] == total[:2] for v in n["inputs"]["values"]))  # fmt: skip
    gate_ids = gate["outputs"]["values"][0][:2]
    later = [n for n in ops if n["id"] > gate["id"] and any(v[:2] == gate_ids for v in n["inputs"]["values"] if isinstance(v, list))]
    assert later  # (a later op reads the gate)

    def renamed(v):
        if isinstance(v, list) and len(v) == 6 and v[:2] == gate_ids:
            return total[:2] + v[2:]
        return [renamed(x) for x in v] if isinstance(v, list) else v

    for n in ops:
        for side in ("inputs", "outputs"):
            n[side]["values"] = renamed(n[side]["values"])
    reused = write_json(tmp_path / "reused_ids.json.gz", data)
    replay = Replay(load_trace(reused), "cpu").prepare()
    assert replay.report.ops_skipped == 0, replay.report.skipped_list()
    replay.run()
    assert not any("NaN" in n for n in replay.report.notes), replay.report.notes


def test_an_infinity_the_trace_gives_is_not_reported_as_the_replays_data_going_nan(tmp_path):
    """A router's scores are filled with -inf and its top choices scattered into them (Llama 4):
    the -inf is the original's, given by a number the trace records. The build had noted the
    replay's data becoming NaN or inf at the scatter; it now notes only what the replay's data
    did of themselves (the square root of a drawn value less 2, here)."""
    logits, x = torch.randn(32, 8), torch.rand(32, 8)

    def step():
        top = logits.topk(2, dim=-1)
        scores = torch.full_like(logits, float("-inf")).scatter_(1, top.indices, top.values)
        return torch.sigmoid(scores).sum() + torch.sqrt(x - 2).sum()

    path = tmp_path / "router.json.gz"
    capture_step(step, path, warmup=1, runs=1, min_warmup_s=0)
    replay = Replay(load_trace(path), "cpu").prepare()
    notes = [n for n in replay.report.notes if "NaN or inf" in n]
    assert len(notes) == 1 and "aten::sqrt" in notes[0], replay.report.notes


def test_a_division_by_a_zero_the_trace_gives_is_not_reported_as_the_replays_data_going_nan(tmp_path):
    """RAdam's first steps (foreach form) divide each parameter's buffer by a rectified step size
    the trace gives as -0.0 (``_foreach_div_(buffers, [-0.0, ...])``) and take the reciprocal of
    the infinities: the original's data are infinite there too. The build had noted that division
    as where the replay's data went NaN or inf; it notes only the square root of a drawn value
    less 2, after the optimizer's step."""
    model, x = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)), torch.rand(8, 16)
    opt = torch.optim.RAdam(model.parameters(), foreach=True)

    def step():
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()
        return torch.sqrt(x - 2).sum()

    trace = _captured_without_records(step, tmp_path / "radam.json.gz")
    [div] = [n for n in select_ops(trace) if n.name == "aten::_foreach_div_"]
    assert all(float(s.value) == 0 for s in div.inputs[1].items)  # (the premise: the step size is 0)
    replay = Replay(trace, "cpu").prepare()
    assert replay.report.ops_skipped == 0, replay.report.skipped_list()
    (note,) = [n for n in replay.report.notes if "NaN or inf" in n]
    assert "first in the output of aten::sqrt" in note, note
    with torch.no_grad():
        replay.run()


def test_stand_ins_for_two_computed_tensors_of_one_block_hold_values_of_their_own(tmp_path):
    """A depth model's scale-invariant loss (GLPN's): the logarithms of a target and of a
    prediction, each indexed by the mask of valid pixels, subtracted. Each indexing's output has
    a shape that follows the data, so its reader gets a seeded stand-in; the original's allocator
    gave both outputs one block in turn, and the replay gave both stand-ins that block's one
    allocation: the two were equal, the difference 0, and the square root's backward divided by
    it (noted as the replay's data going NaN or inf)."""
    torch.manual_seed(0)
    target, conv = torch.rand(2, 1, 64, 64) * 10, torch.nn.Conv2d(1, 1, 3, padding=1)

    def step():
        pred = torch.sigmoid(conv(target)) * 10
        valid = (target > 0).detach()
        d = torch.log(target[valid]) - torch.log(pred[valid])
        torch.sqrt((d**2).mean() - 0.5 * d.mean() ** 2).backward()

    path = tmp_path / "depth.json.gz"
    capture_step(step, path, warmup=1, runs=1, min_warmup_s=0)
    sidecar_path(path).unlink()  # (as a trace captured elsewhere comes)
    # whether malloc gives the second output the first one's freed block varies from run to run:
    # the first output (read by the first log alone) takes the second's storage id, as a writer
    # naming storages by their memory gives it where malloc did
    data = read_json(path)
    (_, earlier), (_, later) = sorted((n["id"], n["outputs"]["values"][0][:2]) for n in data["nodes"]
                                      if n["name"] == "aten::index")  # fmt: skip
    for v in (v for n in data["nodes"] for side in ("inputs", "outputs") for v in n[side]["values"]):
        if _is_tensor_value(v) and v[:2] == earlier:
            v[1] = later[1]
    trace = load_trace(write_json(path, data))
    logs = [n for n in select_ops(trace) if n.name == "aten::log"]
    assert len({n.inputs[0].storage_id for n in logs}) == 1 and len({n.inputs[0].tensor_id for n in logs}) == 2
    replay = Replay(trace, "cpu").prepare()
    assert any("output's shape depends on the data" in n for n in replay.report.notes)
    first, second = (replay.env[next(s for s in replay.steps if s.node_id == n.id).fills[0][1]] for n in logs)
    assert first.data_ptr() != second.data_ptr() and not torch.equal(first, second)
    assert not any("NaN" in n for n in replay.report.notes), replay.report.notes


def test_inputs_a_composite_reads_out_of_order_take_their_own_records(tmp_path):
    """A distillation loss, ``kl_div(log_probs, probs)``, over a student's log-probabilities and a
    teacher's probabilities given with the step: both of one shape, so the capture's records are
    matched to them by the order they are read. ``kl_div`` is a composite that reads its target
    first, which is the order the capture saw: the replay took the trace's argument order, drew
    the log-probabilities as probabilities and back, and the loss was NaN from the first op."""
    student = torch.log_softmax(torch.randn(32, 10), 1).requires_grad_()
    teacher = torch.softmax(torch.randn(32, 10), 1)
    capture_step(lambda: torch.nn.functional.kl_div(student, teacher, reduction="batchmean").backward(),
                 tmp_path / "distil.json.gz", warmup=1, runs=1, min_warmup_s=0)  # fmt: skip
    replay = Replay(load_trace(tmp_path / "distil.json.gz"), "cpu").prepare()
    assert not any("NaN" in n for n in replay.report.notes), replay.report.notes
    step = next(s for s in replay.steps if s.name == "aten::kl_div")
    log_probs, probs = (replay.env[slot] for _, slot in step.fills[:2])
    assert float(log_probs.max()) <= 0 <= float(probs.min()) and float(probs.max()) <= 1


def test_a_trace_of_two_iterations_records_the_second_forward_pass_too(tmp_path):
    """A trace of two training iterations (an observer left on over both, or a profiler's two
    active steps): the second forward pass reads each weight where the first backward pass's
    ``t(t(weight))`` lies, and was bound to that view, made with autograd off. Once the
    optimizer had written the weight, autograd refused to record the second pass's ``linear``
    through it, and it ran without recording. It reads the weight itself again."""
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    opt = torch.optim.Adam(model.parameters())
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))

    def iteration():
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    capture_step(lambda: [iteration() for _ in range(2)], tmp_path / "two.json.gz", warmup=1, runs=1, min_warmup_s=0)
    replay = Replay(load_trace(tmp_path / "two.json.gz"), "cpu").prepare()
    rep = replay.report
    assert rep.ops_skipped == 0 and rep.ops_replayed == rep.ops_total, rep.skipped_list()
    assert not any("without autograd recording" in n for n in rep.notes), rep.notes
    linears = [s for s in replay.steps if s.name == "aten::linear"]
    assert len(linears) == 4 and all(s.grad for s in linears)
    for _ in range(2):
        replay.reset_state()
        replay.run()


def test_a_positive_input_beyond_the_scale_limit_keeps_its_sign(tmp_path):
    """A transform's table of positive weights (CSATv2's, 0.08 to 270,000) reaches beyond the
    limit past which a record is taken for a mask's stand-in for infinity and the replay's rules
    draw the input: drawn signed, its square root was NaN. A record of no negative values keeps
    its sign: drawn from its lowest value up to the limit."""
    table, x = torch.rand(3, 64) * 3e5 + 0.08, torch.randn(8, 3, 64)
    capture_step(lambda: (x * table.pow(0.5)).sum(), tmp_path / "table.json.gz", warmup=1, runs=1, min_warmup_s=0)
    replay = Replay(load_trace(tmp_path / "table.json.gz"), "cpu").prepare()
    assert not any("NaN" in n for n in replay.report.notes), replay.report.notes
    drawn = [t for _, t in replay.inputs() if t.shape == (3, 64)]
    assert drawn and float(drawn[0].min()) >= 0.08


def test_a_layer_norms_epsilon_printed_as_zero_keeps_a_constant_row_finite(tmp_path):
    """A vision transformer's class token and position embedding start as zeros (DeiT's, BEiT's),
    so the class token's row holds equal values, and its layer norm divides by the square root of
    the row's variance plus epsilon (1e-12), which the trace writer printed as 0.0: 0/0 made the
    replay's data NaN from that op on. The replay takes an epsilon below the writer's resolution,
    says so, and its data stay finite."""
    cls, pos = torch.zeros(1, 1, 32), torch.zeros(1, 17, 32)
    proj, norm = torch.nn.Linear(48, 32), torch.nn.LayerNorm(32, eps=1e-12)
    patches = torch.randn(4, 16, 48)

    def step():
        with torch.no_grad():
            x = torch.cat([cls.expand(4, -1, -1), proj(patches)], dim=1) + pos
            norm(x).sum()

    capture_step(step, tmp_path / "tokens.json.gz", warmup=1, runs=1, min_warmup_s=0)
    trace = load_trace(tmp_path / "tokens.json.gz")
    [ln] = [n for n in select_ops(trace) if n.name == "aten::layer_norm"]
    assert [v.value for v in ln.inputs if getattr(v, "type", None) == "Double"] == [0.0]  # (what the writer kept of 1e-12)
    replay = Replay(trace, "cpu").prepare()
    rep = replay.report
    assert rep.ops_skipped == 0, rep.skipped_list()
    assert any(n.startswith("aten::layer_norm: its eps recorded as 0.0") for n in rep.notes), rep.notes
    assert not any("NaN or inf" in n for n in rep.notes), rep.notes
    outputs = []
    replay.run(after_step=lambda step, result: outputs.append(result))
    assert all(bool(torch.isfinite(t).all()) for t in outputs if isinstance(t, torch.Tensor) and t.is_floating_point())


def test_a_clamp_at_an_epsilon_the_trace_printed_as_zero_keeps_a_routers_weights_finite(tmp_path):
    """A top-2 router divides each expert's weight by their sum clamped at float32's epsilon
    (NLLB-MoE's): where the capacity drops both of a token's experts, the sum is 0 and the weight
    0 / eps = 0. The writer printed the clamp's ``min`` as 0.0, and 0/0 made the replay's
    weights NaN. It takes a value below the writer's resolution, as an epsilon, and says so."""
    probs = torch.rand(64, 2)

    def step():
        kept = (torch.arange(64) % 4 != 0).unsqueeze(-1)  # (tokens over capacity: both experts dropped)
        p1, p2 = probs[:, :1] * kept, probs[:, 1:] * kept
        denom = torch.clamp(p1 + p2, min=torch.finfo(torch.float32).eps)
        return (p1 / denom + p2 / denom).sum()

    replay = _replayed_without_records(step, tmp_path / "router.json.gz")
    assert any(n.startswith("aten::clamp: its min recorded as 0.0") for n in replay.report.notes), replay.report.notes


@pytest.mark.parametrize("foreach", [False, True])
def test_a_weight_decay_without_a_record_leaves_the_parameters_at_their_scale(tmp_path, foreach):
    """AdamW decays each parameter in place by ``1 - lr * weight_decay``, a Python number that
    the trace records without its value. Drawn from [0.5, 1) as other numbers are, it shrank the
    replay's weights by a quarter or so every iteration, where the original's barely move. The
    number is 1."""
    lin = torch.nn.Linear(64, 64)
    opt = torch.optim.AdamW(lin.parameters(), lr=1e-3, weight_decay=0.01, foreach=foreach)
    x = torch.randn(32, 64)

    def step():
        opt.zero_grad()
        lin(x).sum().backward()
        opt.step()

    replay = _replayed_without_records(step, tmp_path / "decay.json.gz")
    [linear] = [n for n in select_ops(replay.trace) if n.name == "aten::linear"]
    weight = dict(replay.inputs())[linear.inputs[1]]
    before = float(weight.abs().max())
    assert 0.9 / 8 < before < 1.1 / 8  # (+-1/sqrt(64), PyTorch's initialisation, and the build's step)
    for _ in range(3):
        replay.between_iterations()
        replay.run()
    assert float(weight.abs().max()) > 0.95 * before, (float(weight.abs().max()), before)


def test_an_epsilon_the_trace_printed_as_zero_keeps_the_optimizer_finite(tmp_path):
    """The trace writer prints float scalars with six decimals: AdamW's epsilon (1e-8), which the
    foreach path adds to its denominators, is recorded as 0.0. Rows of an embedding that no id
    reads have zero gradients, so zero denominators: 0/0 made the replay's parameters NaN. The
    replay adds a value below the writer's resolution instead, says so, and the parameters stay
    finite over iterations."""
    emb, head = torch.nn.Embedding(1000, 16), torch.nn.Linear(16, 4)
    opt = torch.optim.AdamW([*emb.parameters(), *head.parameters()], lr=1e-3, foreach=True)
    ids = torch.randint(0, 10, (64,))

    def step():
        opt.zero_grad()
        head(emb(ids)).sum().backward()
        opt.step()

    capture_step(step, tmp_path / "adamw.json.gz", warmup=1, runs=1, min_warmup_s=0)
    scalars = [v.value for n in load_trace(tmp_path / "adamw.json.gz").nodes if n.name == "aten::_foreach_add_"
               for v in n.inputs if getattr(v, "type", None) == "Double"]  # fmt: skip
    assert 0.0 in scalars  # (what the writer kept of 1e-8)
    replay = Replay(load_trace(tmp_path / "adamw.json.gz"), "cpu").prepare()
    rep = replay.report
    assert rep.ops_skipped == 0, rep.skipped_list()
    assert any(n.startswith("aten::_foreach_add_: a float recorded as 0.0") for n in rep.notes), rep.notes
    assert not any("NaN or inf" in n for n in rep.notes), rep.notes
    for _ in range(3):
        replay.reset_state()
        replay.run()
    assert all(bool(torch.isfinite(t).all()) for t in replay.env if isinstance(t, torch.Tensor) and t.is_floating_point())


def _ops_run(fn) -> set[str]:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    return {e.key for e in prof.key_averages()}


@pytest.mark.skipif(not observer_records_strides(), reason="this torch's observer records no strides (2.4): the "
                    "layout that shows the path is not in its traces")  # fmt: skip
def test_an_inference_step_s_parameters_require_grad_where_its_ops_paths_show_it(tmp_path):
    """In an inference step autograd is off, yet a parameter still requires grad, and two ATen
    paths read that flag. A matmul of a batch by a weight that requires grad folds the batch into
    one ``mm``; without the flag it runs ``bmm`` against the weight expanded (about twice as slow
    here) where the batch cannot be viewed as a matrix (the sequence-first input of a batch-first
    attention), and always where the weight is on the left. An embedding bag over a weight that
    requires grad runs ``_embedding_bag``, not its forward-only path. The trace records the path
    each op took: the replay gives those inputs the flag, says so, and then runs the original's
    paths."""
    attention = torch.nn.MultiheadAttention(64, 4, batch_first=True)
    bag = torch.nn.EmbeddingBag(500, 16, mode="sum")
    mixer = torch.nn.Parameter(torch.randn(8, 32))  # a matrix on the left of a batch: folded only for the flag,
    columns = torch.randn(4, 64, 32).mT  # even a batch whose transpose folds as a view, as this one's does
    x, ids, offsets = torch.randn(4, 32, 64), torch.randint(0, 500, (40,)), torch.tensor([0, 10, 20, 30])

    def step():
        with torch.no_grad():
            attention(x, x, x, need_weights=False)
            bag(ids, offsets)
            torch.matmul(mixer, columns)

    path = tmp_path / "infer.json.gz"
    capture_step(step, path, warmup=1, runs=1, min_warmup_s=0)
    original = _ops_run(step)
    assert {"aten::mm", "aten::_embedding_bag"} <= original and "aten::bmm" not in original
    replay = Replay(load_trace(path), "cpu").prepare()
    rep = replay.report
    assert rep.ops_skipped == 0, rep.skipped_list()
    assert any("3 input allocation(s) require grad, as the original's did" in n and "aten::matmul folded" in n
               and " x2" in n and "_embedding_bag" in n for n in rep.notes), rep.notes  # fmt: skip
    flagged = [t for t in replay.env if isinstance(t, torch.Tensor) and t.requires_grad]
    assert sorted(tuple(t.shape) for t in flagged) == [(8, 32), (192, 64), (500, 16)]  # the weights, the table

    def iteration():
        with torch.no_grad():
            replay.run()

    replayed = _ops_run(iteration)
    assert {"aten::mm", "aten::_embedding_bag"} <= replayed, replayed
    assert not {"aten::bmm", "aten::_embedding_bag_forward_only"} & replayed, replayed


@pytest.mark.skipif(not observer_records_strides(), reason="this torch's observer records no strides (2.4): the "
                    "layout that shows the path is not in its traces")  # fmt: skip
def test_a_malformed_op_inside_a_replayed_one_shows_no_flag_and_stops_nothing(tmp_path):
    """The requires_grad evidence and the value ranges read the recorded matmuls inside the
    replayed ops, whose values nothing else may have parsed: one with a malformed tensor record
    shows nothing, is named in the report's notes, and the ops around it replay as before."""
    from pytest_mystique.grad_flags import required_grad

    data = read_json(capture_attention_inference(tmp_path / "attention.json.gz"))
    assert required_grad(parse_trace(data, "intact"))[0]  # the in-projection's weight
    damaged = 0
    for node in data["nodes"]:
        if node["name"] == "aten::matmul":
            node["inputs"]["values"][0] = ["not an id", 1, 0, 1, 4, "cpu"]
            damaged += 1
    trace = parse_trace(data, "damaged")
    assert damaged and not any(n.name == "aten::matmul" for n in select_ops(trace))
    assert required_grad(trace) == (set(), {}, [])
    replay = Replay(trace, "cpu").prepare()
    assert replay.report.ops_skipped == 0 and replay.report.ops_replayed == replay.report.ops_total
    assert not any("require grad" in n for n in replay.report.notes)
    malformed = [n for n in replay.report.notes if "malformed record" in n]
    assert malformed and all(n.startswith("aten::matmul inside aten::") for n in malformed), replay.report.notes
    replay.run()


def test_an_op_that_warns_replays_under_warnings_filters_that_make_warnings_errors(tmp_path):
    """A CI that runs pytest with ``-W error`` (or ``filterwarnings = error``) made each warning
    torch raises in an op an exception: an ``out=`` tensor of another shape resized by ``mul``
    (a warning at every call), or an operator in beta (once a process). The build skipped such an
    op with the warning as its reason, and an iteration stopped at it. The replay now runs every op
    as the original did whatever the filters say, and lists each warning as a note."""
    a, b = torch.randn(4, 5), torch.randn(4, 5)

    def step():
        out = torch.empty(3)
        torch.mul(a, b, out=out)  # (resized to 4 x 5, with torch's warning)
        return out.sum()

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        capture_step(step, tmp_path / "out.json.gz", warmup=1, runs=1, min_warmup_s=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        replay = Replay(load_trace(tmp_path / "out.json.gz"), "cpu").prepare()
        rep = replay.report
        assert rep.ops_skipped == 0 and rep.ops_replayed == rep.ops_total, rep.skipped_list()
        assert any(n.startswith("aten::mul: torch warned") and "was resized" in n for n in rep.notes), rep.notes
        for _ in range(2):
            replay.run()
        replay.run(after_step=lambda step, result: None)  # (the instrumented iteration too)


def test_an_op_whose_inputs_the_trace_left_out_is_skipped_naming_them(tmp_path):
    """torch's observer writes a node with no inputs where it failed on one (a nested tensor's
    sizes, in ``nn.TransformerEncoder``'s fast path). The op was skipped with torch's own binding
    error, which blamed the call; it is now skipped naming the arguments the trace has no value
    for, and the ops around it replay."""
    data = read_json(capture_attention_inference(tmp_path / "attention.json.gz"))
    (node,) = [n for n in data["nodes"] if n["name"] == "aten::scaled_dot_product_attention"]
    node["inputs"] = {"values": [], "shapes": [], "types": [], "strides": []}
    replay = Replay(parse_trace(data, "lost.json"), "cpu").prepare()
    ((op, why),) = replay.report.skipped
    assert op == "aten::scaled_dot_product_attention", op
    assert why.startswith("the trace records 0 of its inputs and no value for its required 'query', 'key', 'value'"), why
    assert replay.report.ops_replayed == replay.report.ops_total - 1
    replay.run()


def test_tensors_the_program_filled_itself_read_seeded_data(tmp_path):
    """``torch.tensor([...])`` records an ``aten::empty`` and copies the list in outside the ops:
    replayed, the empty tensor would hold whatever the memory held (here an index that must stay
    below 8, and a scale). Read before any op wrote them, such tensors read seeded data, in the
    range their consumer needs, and the report says so."""

    def step():
        cols = torch.tensor([0, 2, 5, 7])
        scale = torch.tensor(64.0)
        return (x[:, cols] / scale.sqrt()).sum()

    x = torch.randn(4, 8)
    capture_step(step, tmp_path / "lists.json.gz", warmup=1, runs=1, min_warmup_s=0)
    replay = Replay(load_trace(tmp_path / "lists.json.gz"), "cpu").prepare()
    rep = replay.report
    assert rep.ops_skipped == 0, rep.skipped_list()
    assert any("read before any op wrote them" in n for n in rep.notes), rep.notes
    results = []
    replay.run(lambda s, r: results.append(r))
    cols = [t for ref, t in replay.inputs() if t.dtype == torch.int64 and t.shape == (4,)]
    assert cols and all(0 <= int(v) < 8 for v in cols[0]), cols
    assert torch.isfinite(results[-1]).all()


def test_wrapped_integers_are_never_zero_and_non_finite_data_is_reported(tmp_path):
    """``torch.tensor(n)`` of a Python int (a size, a count) records no value: seeded, it is 1 or
    2, never the 0 that a scale computed from it would divide by. Data that still becomes NaN or
    inf in the replay (here the log of a difference the original kept positive) is named in the
    report: the ops after it may run at another speed than the original's."""
    x = torch.rand(4, 64) + 3

    def step():
        scales = [torch.tensor(x.size(-1) // k).float().sqrt() for k in (1, 2, 4, 8, 16, 32)]
        return sum((x / s).sum() for s in scales) + torch.log(x - 2).sum()

    capture_step(step, tmp_path / "sizes.json.gz", warmup=1, runs=1, min_warmup_s=0)
    _drop_scales(tmp_path / "sizes.json.gz")  # (x drawn by rule: x - 2 goes negative)
    replay = Replay(load_trace(tmp_path / "sizes.json.gz"), "cpu").prepare()
    sizes = [t for _, t in replay.inputs() if t.dim() == 0 and t.dtype == torch.int64]
    assert len(sizes) >= 6 and all(int(t) >= 1 for t in sizes), sizes
    nan_notes = [n for n in replay.report.notes if "NaN or inf" in n]
    assert len(nan_notes) == 1 and "aten::log" in nan_notes[0], replay.report.notes
    divided = []
    replay.run(lambda s, r: divided.append(r[0] if isinstance(r, tuple) else r) if s.name == "aten::div" else None)
    assert len(divided) == 6 and all(torch.isfinite(r).all() for r in divided)


def test_a_conversion_that_overflows_is_named_though_copies_and_relus_are_not_read(tmp_path):
    """Ops whose outputs hold only their inputs' values (a copy, a ReLU) are not read for NaN or
    inf at the build, as their inputs were; but a copy between types converts (float64 into
    float32, integers into float16), and values the new type cannot hold become inf there: the
    report names the first such copy, not the ReLU or the sum after it."""
    x = torch.rand(64, 64, dtype=torch.float64)
    into = torch.empty(64, 64)

    def step():
        same = torch.empty(64, 64, dtype=torch.float64).copy_(x * 1e300)  # (one type: not read)
        counts = torch.empty(64, dtype=torch.float16).copy_(torch.arange(64) * 100_000)  # (integers converted: read)
        return into.copy_(same).relu().sum() + counts.sum()

    capture_step(step, tmp_path / "cast.json.gz", warmup=1, runs=1, min_warmup_s=0)
    trace = load_trace(tmp_path / "cast.json.gz")
    copies = [n for n in select_ops(trace) if n.name == "aten::copy_"]
    assert [keeps_values(n) for n in copies] == [True, False, False]
    assert keeps_values(next(n for n in select_ops(trace) if n.name == "aten::relu"))
    (note,) = [n for n in Replay(trace, "cpu").prepare().report.notes if "NaN or inf" in n]
    assert f"first in the output of aten::copy_ (node {copies[1].id})" in note, note  # (the integers' copy)


def test_data_gone_infinite_through_numbers_without_a_record_is_reported_where_it_first_did(tmp_path):
    """A diffusion model's timestep embedding: ``exp(-log(10000) / half * arange(half))``. The
    number reaches the trace as a 0-dim tensor without its value; in a trace captured elsewhere
    it is drawn, positive, and ``exp`` overflows. The report named an op of the optimizer's
    step, hundreds of ops later: a drawn number was taken for the program's own, and the ops
    reading only such numbers and ``arange`` for exact, never read. It names the ``exp``. Before
    it, a T5's relative position buckets take the log of ``|i - j| / 8``: -inf on the diagonal,
    the original's too, as a zero divided by any number stays 0 (no note there)."""
    torch.manual_seed(0)
    t, lin = torch.rand(8) * 1000, torch.nn.Linear(2048, 16)

    def step():
        distance = (torch.arange(64)[None, :] - torch.arange(64)[:, None]).abs()
        buckets = torch.log(distance.float() / 8) / math.log(128 / 8)
        far = torch.where(distance < 8, distance.float(), buckets.clamp(min=0)).sum()
        freqs = torch.exp(-math.log(10000.0) / 1024 * torch.arange(1024, dtype=torch.float32))
        args = t[:, None] * freqs[None]
        (lin(torch.cat([args.cos(), args.sin()], -1)).square().mean() + far).backward()

    trace = _captured_without_records(step, tmp_path / "timesteps.json.gz")
    replay = Replay(trace, "cpu").prepare()
    # (the premise: the scale the replay drew is positive, as numbers without a record are)
    assert all(float(t) > 0 for _, t in replay.inputs() if t.dim() == 0 and t.is_floating_point())
    (note,) = [n for n in replay.report.notes if "NaN or inf" in n]
    [exp] = [n for n in select_ops(trace) if n.name == "aten::exp"]
    assert any(n.name == "aten::log" and n.id < exp.id for n in select_ops(trace))
    assert f"first in the output of aten::exp (node {exp.id}), which was made of numbers the trace does not record" in note, note


def test_nan_or_inf_is_the_originals_only_where_each_stands_at_an_inputs_zero_or_extreme():
    """The test the note above rests on, op by op: a log or a division of a zero (broadcast
    inputs too) is; so is a mask's stand-in for infinity (float32's lowest) cast to bfloat16 or
    doubled, whether the data around it was drawn or not (a zero of drawn data is not the
    original's); an overflow (of a value short of the type's extreme too), a NaN beside no zero,
    and an output whose shape is not its inputs' broadcast (a matrix product) are not."""
    distance, lowest = torch.arange(4.0), torch.finfo(torch.float32).min
    mask = torch.tensor([0.0, lowest, 0.0, lowest])
    with torch.no_grad():
        assert made_of_zeros_or_extremes([distance / 8], torch.log(distance / 8))
        assert not made_of_zeros_or_extremes([distance / 8], torch.log(distance / 8), zeros=False)
        assert made_of_zeros_or_extremes([torch.ones(3, 4), distance], torch.ones(3, 4) / distance)
        assert not made_of_zeros_or_extremes([distance * 60], torch.exp(distance * 60))
        assert not made_of_zeros_or_extremes([distance], torch.log(distance - 2))  # (the log of -2: no zero there)
        assert not made_of_zeros_or_extremes([distance], torch.log(distance + 1))  # (nothing odd at all)
        a, b = torch.zeros(4, 3), torch.zeros(3, 4)  # (shapes that do not broadcast to the output's)
        assert not made_of_zeros_or_extremes([a, b], torch.full((4, 4), math.inf))
        for zeros in (True, False):
            assert made_of_zeros_or_extremes([mask], mask.to(torch.bfloat16), zeros=zeros)
            assert made_of_zeros_or_extremes([mask, torch.full((3, 4), 2.0)], mask * torch.full((3, 4), 2.0), zeros=zeros)
        large = torch.tensor([1.0, 1e5])  # (beyond float16's range, short of float32's extreme)
        assert not made_of_zeros_or_extremes([large], large.to(torch.float16))


def test_a_masks_stand_in_for_infinity_cast_under_autocast_is_not_reported_as_the_replays_nan(tmp_path):
    """A mask of float32's lowest value where drawn ids are padding, cast to bfloat16 under
    autocast (ProphetNet's and others' masks in a bfloat16 step): the cast makes it -inf, in the
    original too. Without a record the mask is made of drawn data, and the note named the cast as
    where the replay's data went NaN or inf."""
    ids, q, k = torch.randint(0, 10, (2, 16)), torch.randn(2, 16, 8), torch.randn(2, 16, 8)

    def step():
        mask = torch.where(ids[:, None, :] > 0, 0.0, torch.finfo(torch.float32).min)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return (torch.matmul(q, k.transpose(-1, -2)) + mask.to(torch.bfloat16)).softmax(-1).sum()

    replay = _replayed_without_records(step, tmp_path / "mask.json.gz")
    assert any(s.name == "aten::to" for s in replay.steps)


def test_data_gone_subnormal_is_reported_where_it_first_did(tmp_path):
    """Subnormal numbers (below float32's smallest normal one) are computed with many times
    slower on a CPU: the report names the first op whose output held them (not the ops that read
    them after), and says nothing of a step whose data stayed normal."""
    x = torch.randn(64, 64)

    def step():
        small = x * 1e-20  # normal
        tiny = small * 1e-20  # subnormal: made here
        return (tiny + tiny).relu().sum() + small.sum()

    capture_step(step, tmp_path / "tiny.json.gz", warmup=1, runs=1, min_warmup_s=0)
    notes = Replay(load_trace(tmp_path / "tiny.json.gz"), "cpu").prepare().report.notes
    (note,) = [n for n in notes if "subnormal" in n]
    tiny_mul = [n for n in load_trace(tmp_path / "tiny.json.gz").nodes if n.name == "aten::mul"][1]
    assert f"first in the output of aten::mul (node {tiny_mul.id})" in note, note
    capture_step(lambda: (x * 1e-20).sum(), tmp_path / "small.json.gz", warmup=1, runs=1, min_warmup_s=0)
    notes = Replay(load_trace(tmp_path / "small.json.gz"), "cpu").prepare().report.notes
    assert not [n for n in notes if "subnormal" in n], notes


def test_weights_read_through_a_view_get_their_layers_range():
    """A linear layer replayed through its parts (the bundled transformer's attention projection:
    a later op reads what its matrix product made) reads its weight through ``weight.t()``. The
    range that the matrix product asks of what it reads (PyTorch's initialisation,
    +-1/sqrt(in_features)) is passed back through the view to the weight. Drawn from [-1, 1)
    instead, activations grew with every layer: in a small CANINE, attention scores of +-500, a
    softmax whose outputs underflowed to subnormal numbers, matrix products twice as slow."""
    trace = load_trace(bundled("transformer_train"))
    replay = Replay(trace, "cpu").prepare()
    made = {ref.key: t for ref, t in replay.inputs()}
    opened = [trace.by_id[i] for i in trace.opened if trace.by_id[i].name == "aten::linear"]
    assert opened, "the bundled transformer has no linear layer replayed through its parts"
    for node in opened:
        weight = made[node.inputs[1].key]
        bound = 1 / math.sqrt(weight.shape[1])
        assert 0.9 * bound < float(weight.abs().max()) <= bound, (node.id, float(weight.abs().max()), bound)


def test_a_square_root_of_a_view_of_integers_passes_no_floating_range_back(tmp_path):
    """Floating ranges pass back through views to the inputs they came from; a square root's
    positive range on a view of an integer input is no floating range to pass (integers get
    their own ranges): the replay builds and runs."""
    lengths = torch.randint(1, 10, (4, 8))

    def step():
        return torch.sqrt(lengths.view(-1)).sum()

    capture_step(step, tmp_path / "roots.json.gz", warmup=1, runs=1, min_warmup_s=0)
    replay = Replay(load_trace(tmp_path / "roots.json.gz"), "cpu").prepare()
    assert replay.report.ops_skipped == 0 and replay.report.ops_replayed == replay.report.ops_total
    out = []
    replay.run(lambda s, r: out.append(r))
    assert torch.isfinite(out[-1]).all()


def test_einsum_weights_get_their_layers_range(tmp_path):
    """XLNet projects with ``einsum("ibh,hnd->ibnd", h, weight)``: the weight's range is that of a
    layer whose fan-in is the dimensions the output does not keep (here h, 64). Drawn from
    [-1, 1) instead, its attention scores reached +-330, the softmax's outputs underflowed to
    subnormal numbers, and its training step's matrix products took 3.6 times the original's."""
    torch.manual_seed(0)
    h = torch.randn(32, 2, 64)
    weight = torch.randn(64, 4, 16) * 0.02

    def step():
        q = torch.einsum("ibh,hnd->ibnd", h, weight)
        return torch.einsum("ibnd,jbnd->bnij", q, q).softmax(-1).sum()

    capture_step(step, tmp_path / "einsum.json.gz", warmup=1, runs=1, min_warmup_s=0)
    replay = Replay(load_trace(tmp_path / "einsum.json.gz"), "cpu").prepare()
    (w,) = [t for _, t in replay.inputs() if t.shape == (64, 4, 16)]
    assert float(w.std()) == pytest.approx(0.02, rel=0.1)  # the recorded scale wins over the rule
    _drop_scales(tmp_path / "einsum.json.gz")  # as a trace captured elsewhere: the rule
    replay = Replay(load_trace(tmp_path / "einsum.json.gz"), "cpu").prepare()
    (w,) = [t for _, t in replay.inputs() if t.shape == (64, 4, 16)]
    assert 0.9 / 8 < float(w.abs().max()) <= 1 / 8
    (x,) = [t for _, t in replay.inputs() if t.shape == (32, 2, 64)]
    assert float(x.abs().max()) > 0.9  # (the first operand, an activation, keeps [-1, 1))


def test_weights_that_a_fused_layer_reads_inside_get_the_range_of_the_part_reading_them(tmp_path):
    """In eval mode without grad, a transformer's layers take fused paths: the encoder layer is one
    ``_transformer_encoder_layer_fwd`` and the decoder's self-attention one
    ``_native_multi_head_attention``, ops with no weight rule of their own. The parts they run
    inside (the ``mm``, ``addmm`` and ``_addmm_activation`` reading ``weight.t()``, the layer
    norms) say what their weights need: +-1/sqrt(fan-in) and scales around 1. Drawn from
    [-1, 1), a decoder's attention scores saturated its softmax into subnormal outputs and the
    batched product reading them took twelve times the original's time."""
    torch.manual_seed(0)
    nn = torch.nn
    enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(64, 4, 128, batch_first=True), 1,
                                enable_nested_tensor=False).eval()  # fmt: skip
    dec = nn.TransformerDecoder(nn.TransformerDecoderLayer(64, 4, 128, batch_first=True), 1).eval()
    x, memory = torch.randn(2, 16, 64), torch.randn(2, 8, 64)

    def step():
        with torch.no_grad():
            return dec(enc(x), memory)

    capture_step(step, tmp_path / "fused.json.gz", warmup=1, runs=1, min_warmup_s=0)
    _drop_scales(tmp_path / "fused.json.gz")  # (the rules, as for a trace captured elsewhere)
    trace = load_trace(tmp_path / "fused.json.gz")
    replay = Replay(trace, "cpu").prepare()
    assert replay.report.ops_skipped == 0, replay.report.skipped_list()
    made = {ref.key: t for ref, t in replay.inputs()}
    fused = [n for n in trace.selected if n.name.split("::")[-1] in ("_transformer_encoder_layer_fwd",
                                                                      "_native_multi_head_attention")]  # fmt: skip
    assert {n.name for n in fused} == {"aten::_transformer_encoder_layer_fwd", "aten::_native_multi_head_attention"}
    weights = [ref for n in fused for ref in n.inputs if isinstance(ref, TensorRef) and len(ref.shape) == 2]
    assert len(weights) == 6, weights  # two attention projections each, and the encoder's feed-forward pair
    for ref in weights:
        bound = 1 / math.sqrt(ref.shape[1])
        assert 0.9 * bound < float(made[ref.key].abs().max()) <= bound, (ref.shape, float(made[ref.key].abs().max()))
    (layer,) = [n for n in fused if n.name == "aten::_transformer_encoder_layer_fwd"]
    args = dict(zip([a.name for a in resolve(layer.op_schema)._schema.arguments], layer.inputs))
    for name in ("norm_weight_1", "norm_weight_2"):
        scale = made[args[name].key]
        assert 0.5 <= float(scale.min()) and float(scale.max()) < 1.5, (name, scale)


def test_floating_inputs_are_drawn_at_the_scale_the_capture_recorded(tmp_path):
    """The capture helper records each floating input's mean, deviation, lowest and highest
    value (``float_inputs``), and the replay draws it at that scale instead of by rule: weights
    far smaller than PyTorch's initialisation (an untrained model's 0.02, here 0.001) shrink the
    activations layer by layer towards subnormal numbers in the original, and in the replay too.
    Drawn by rule, the replay's stayed near 1. A malformed record is an error naming the sidecar."""
    torch.manual_seed(0)
    layers = torch.nn.Sequential(*[torch.nn.Linear(64, 64, bias=False) for _ in range(16)])
    for layer in layers:
        torch.nn.init.normal_(layer.weight, std=0.001)
    x = torch.randn(8, 64)

    path = tmp_path / "deep.json.gz"
    capture_step(inference(layers, x), path, warmup=1, runs=1, min_warmup_s=0)
    side = load_sidecar(path)
    weights = [r for r in side["float_inputs"] if r["shape"] == [64, 64]]
    assert len(weights) == 16 and all(r["std"] == pytest.approx(0.001, rel=0.1) for r in weights)

    def last_output(replay) -> float:
        out = []
        replay.run(lambda s, r: out.append(r))
        return float(out[-1].abs().max())

    replay = Replay(load_trace(path), "cpu").prepare()
    assert any("17 floating input(s) drawn at the original's scale" in n for n in replay.report.notes)
    assert last_output(replay) < 1e-25 and float(layers(x).abs().max()) < 1e-25
    bad = copy.deepcopy(side)
    bad["float_inputs"][0]["std"] = -1.0
    sidecar_path(path).write_text(json.dumps(bad))
    with pytest.raises(ReplayError, match=r"deep\.meta\.json: malformed timing sidecar: float_inputs"):
        Replay(load_trace(path), "cpu").prepare()
    sidecar_path(path).write_text(json.dumps(side))
    _drop_scales(path)
    assert last_output(Replay(load_trace(path), "cpu").prepare()) > 1e-10


def test_floating_inputs_keep_the_shape_of_their_spread(tmp_path):
    """Beyond its scale, the capture helper records a small floating input's values and a larger
    one's quantiles, and the replay holds those values and draws between those quantiles: a
    gated-delta layer's decay rates (``A_log``, the logs of a uniform draw, a value a head) and a
    skewed larger tensor keep their spread. Uniform at the same mean and deviation, the larger
    one's median would be 0.3 away from the original's (-1 against -0.69), and the decays the
    rates make would fall into subnormal numbers at other places. Malformed quantiles are an error
    naming the sidecar."""
    g = torch.Generator().manual_seed(0)
    a_log = torch.log(torch.empty(16).uniform_(0, 16, generator=g))
    skewed = torch.log(torch.rand(64, 1000, generator=g))

    def step():
        return (skewed * -a_log.exp()[:, None, None]).exp().sum()

    path = tmp_path / "decay.json.gz"
    capture_step(step, path, warmup=1, runs=1, min_warmup_s=0)
    replay = Replay(load_trace(path), "cpu").prepare()
    made = {tuple(ref.shape): t for ref, t in replay.inputs()}
    assert torch.equal(made[(16,)], a_log)
    q = torch.tensor([0.05, 0.25, 0.5, 0.75, 0.95])
    drawn, original = torch.quantile(made[(64, 1000)].flatten(), q), torch.quantile(skewed.flatten(), q)
    assert torch.allclose(drawn, original, rtol=0.03, atol=0.02), (drawn, original)
    notes = replay.report.notes
    assert any("1 floating input(s) drawn at the original's scale and spread" in n for n in notes), notes
    assert any("1 small floating input(s) hold the original's values" in n for n in notes), notes
    side = load_sidecar(path)
    bad = copy.deepcopy(side)
    big = next(r for r in bad["float_inputs"] if "quantiles" in r)
    big["quantiles"] = big["quantiles"][::-1]
    sidecar_path(path).write_text(json.dumps(bad))
    with pytest.raises(ReplayError, match=r"decay\.meta\.json: malformed timing sidecar: float_inputs"):
        Replay(load_trace(path), "cpu").prepare()


def test_numbers_the_program_passed_hold_the_originals_values(tmp_path):
    """A Python number an op reads as a tensor (a T5 scales its decoder's output by
    ``d_model ** -0.5`` before the LM head) is in a trace as a 0-dim tensor without its value. The
    capture helper records it (``scalar_inputs``), with 0-dim parameters and an optimizer's step
    count, and the replay passes the original's values: the LM head's logits keep the original's
    scale. Drawn from 0.5 to 1, the scale made the logits six to eleven times too large (a T5's
    softmax then saturated, its gradient went subnormal and its step took five times as long).
    A malformed record is an error naming the sidecar."""
    torch.manual_seed(0)
    d = 128
    emb, h = torch.nn.Parameter(torch.randn(1000, d)), torch.randn(64, d)
    temperature = torch.nn.Parameter(torch.tensor(0.7))
    opt = torch.optim.Adam([emb, temperature])

    def step():
        opt.zero_grad()
        logits = (h * d**-0.5) @ emb.t() * temperature
        torch.log_softmax(logits, -1).mean().backward()
        opt.step()

    # (the logits' spread before the capture, whose calls train the model: its profiled calls of
    # the time inside operators run after the record of the numbers, and a short step's are many)
    with torch.no_grad():
        original = float(torch.log_softmax((h * d**-0.5) @ emb.t() * temperature, -1).std())
    path = tmp_path / "head.json.gz"
    capture_step(step, path, warmup=1, runs=1, min_warmup_s=0)
    side = load_sidecar(path)
    values = {(r["op"], r["dtype"]): r["value"] for r in side["scalar_inputs"]}
    assert values[("aten::mul.Tensor", "float64")] == d**-0.5
    assert values[("aten::mul.Tensor", "float32")] == pytest.approx(0.7, abs=0.01)  # the temperature

    def logits_std(replay) -> float:
        out = []
        replay.run(lambda s, r: out.append(float(r.detach().std())) if "log_softmax" in s.name else None)
        return out[0]

    replay = Replay(load_trace(path), "cpu").prepare()
    assert any("0-dim input(s) (numbers the program passed, 0-dim parameters) hold the original's values" in n
               for n in replay.report.notes), replay.report.notes  # fmt: skip
    assert d**-0.5 in {float(replay.env[slot]) for (ref, _), slot in replay._externals.items() if ref.dtype == "float64"}
    assert logits_std(replay) == pytest.approx(original, rel=0.25)
    for value in ("0.088", 10**400, True, float("nan")):
        bad = copy.deepcopy(side)
        bad["scalar_inputs"][0]["value"] = value
        sidecar_path(path).write_text(json.dumps(bad))
        with pytest.raises(ReplayError, match=r"head\.meta\.json: malformed timing sidecar: scalar_inputs"):
            Replay(load_trace(path), "cpu").prepare()
    side.pop("scalar_inputs")  # as of a trace captured elsewhere: the number is drawn from 0.5 to 1
    sidecar_path(path).write_text(json.dumps(side))
    assert logits_std(Replay(load_trace(path), "cpu").prepare()) > 4 * original


def test_each_number_passed_gets_its_own_value_where_the_trace_gives_many_one_id(tmp_path):
    """AdamW (one tensor at a time, the CPU default) passes numbers one after the other: the weight
    decay's factor, beta2, the bias correction, epsilon. Each is freed at once, and the trace
    writer gives the next one the same ids. Each read gets its own value in the replay: the
    parameters' decay multiplies by 1 - lr * weight_decay, never by a bias correction (which had
    shrunk a MobileViT's weights thirteen-fold a step and made its step 2.5 times slower). A
    number may also take the ids of an activation freed before it (8 bytes where the activation
    lay): it is still a number the program passed, with its recorded value, not that activation
    (read as one, it was drawn, and every later number of its kind took its neighbour's value)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.Linear(32, 32))
    opt = torch.optim.AdamW(model.parameters(), lr=0.1, weight_decay=0.1, foreach=False)
    x = torch.randn(8, 32)

    def step():
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()

    def numbers_read(replay) -> dict[str, list[float]]:  # the 0-dim float64 each op read, in order
        numbers: dict[str, list[float]] = {}

        def after(s, r):
            for _, slot in s.fills:
                t = replay.env[slot]
                if isinstance(t, torch.Tensor) and t.dim() == 0 and t.dtype == torch.float64:
                    numbers.setdefault(s.name, []).append(float(t))

        replay.run(after)
        return numbers

    path = tmp_path / "adamw.json.gz"
    capture_step(step, path, warmup=1, runs=1, min_warmup_s=0)
    data = read_json(path)
    for recycled in (False, True):
        if recycled:  # the first decay factor gets the ids of the first layer's output
            activation = next(n for n in data["nodes"] if n["name"] == "aten::addmm")["outputs"]["values"][0]
            number = next(n for n in data["nodes"] if n["name"] == "aten::mul_"
                          and n["inputs"]["types"][1] == "Tensor(double)")["inputs"]["values"][1]  # fmt: skip
            assert activation[3] > 1 and number[3] == 1
            number[:2] = activation[:2]
            write_json(path, data)
        replay = Replay(load_trace(path), "cpu").prepare()
        numbers = numbers_read(replay)
        # four parameters, each: decay (0.99) and beta2 (0.999) multiply, the bias correction
        # divides, eps adds, in that order
        correction = numbers["aten::div"][0]
        assert 0.05 < correction < 0.2, numbers
        assert numbers == {"aten::mul_": [0.99, 0.999] * 4, "aten::div": [correction] * 4,
                           "aten::add_": [1e-8] * 4}, (recycled, numbers)  # fmt: skip


def test_recurrent_weights_get_their_layers_range_and_do_not_drift(tmp_path):
    """A recurrent layer's weights and biases get PyTorch's initialisation, +-1/sqrt(hidden
    size). Drawn from [-1, 1), an LSTM's gates saturated, and with SGD at lr 0.1 the replayed
    training step's gradients grew its weights from 1 to 5-13 in one iteration; the step slowed
    as they grew (1.13-1.15 of its original's once iterations ran without a re-seed between)."""
    torch.manual_seed(0)
    lstm, head = torch.nn.LSTM(32, 64, 2, batch_first=True), torch.nn.Linear(64, 10)
    opt = torch.optim.SGD([*lstm.parameters(), *head.parameters()], lr=0.1)
    x, y = torch.randn(4, 16, 32), torch.randint(0, 10, (4 * 16,))

    def step():
        opt.zero_grad()
        torch.nn.functional.cross_entropy(head(lstm(x)[0]).flatten(0, 1), y).backward()
        opt.step()

    capture_step(step, tmp_path / "lstm.json.gz", warmup=1, runs=1, min_warmup_s=0)
    replay = Replay(load_trace(tmp_path / "lstm.json.gz"), "cpu").prepare()
    assert replay.report.ops_skipped == 0, replay.report.skipped_list()
    bound = 1 / math.sqrt(64)
    shapes = {(256, 32), (256, 64), (256,)}  # the gates' weights and biases, 4 x 64 rows
    weights = [t for ref, t in replay.inputs() if tuple(ref.shape) in shapes]
    assert len(weights) == 8, [tuple(ref.shape) for ref, _ in replay.inputs()]
    for _ in range(3):
        replay.run()
    assert all(float(w.abs().max()) <= 1.2 * bound for w in weights), [float(w.abs().max()) for w in weights]


def test_seeded_divisors_do_not_scale_up_and_decayed_state_does_not_grow(tmp_path):
    """A Python number that a step divides by (attention's sqrt(head size)) is recorded as a 0-dim
    tensor without its value. Seeded under 1, it scaled what it divides up (attention scores into
    a softmax whose outputs underflowed); seeded over 1, the same tensor id, which a trace writer
    gives to many wrapped numbers, could multiply state (weight decay's 1 - lr * wd) and grow
    it. Every quotient of the replay is at most its dividend, and the weight that decays in
    place does not grow."""
    torch.manual_seed(0)
    w = torch.randn(64, 64) * 0.05
    x = torch.randn(8, 16, 64)

    def step():
        w.mul_(1 - 1e-4)
        q = x @ w
        scores = (q @ q.transpose(-1, -2)) / math.sqrt(64)
        return torch.softmax(scores / 2.0, -1).sum()

    capture_step(step, tmp_path / "scaled.json.gz", warmup=1, runs=1, min_warmup_s=0)
    replay = Replay(load_trace(tmp_path / "scaled.json.gz"), "cpu").prepare()
    (weight,) = [t for _, t in replay.inputs() if t.shape == (64, 64)]
    before = float(weight.abs().max())
    results = []
    replay.run(lambda s, r: results.append((s.name, r)))
    divisions = [(results[i - 1][1], r) for i, (name, r) in enumerate(results) if name == "aten::div"]
    assert len(divisions) == 2, [name for name, _ in results]
    for dividend, quotient in divisions:
        assert float(quotient.abs().max()) <= float(dividend.abs().max()), (dividend.abs().max(), quotient.abs().max())
    assert float(weight.abs().max()) <= before


def test_non_finite_values_made_in_place_are_reported(tmp_path):
    """An in-place op's output is the argument it writes: NaN there is the op's own, not its input's
    (here the in-place log of a difference the original kept positive, drawn by rule, without
    the input's recorded scale; with it, the difference stays positive as in the original)."""
    x = torch.rand(4, 64) + 3

    def step():
        return (x - 2).log_().sum()

    replay = _captured(tmp_path, "inplace", step, scales=False)
    nan_notes = [n for n in replay.report.notes if "NaN or inf" in n]
    assert len(nan_notes) == 1 and "aten::log_" in nan_notes[0], replay.report.notes
    replay = _captured(tmp_path, "inplace", step)
    assert not [n for n in replay.report.notes if "NaN or inf" in n], replay.report.notes
    assert any("1 floating input(s) drawn at the original's scale and spread" in n for n in replay.report.notes)


def test_non_finite_values_the_original_had_too_are_not_reported(tmp_path):
    """A causal mask of ``-inf`` (``torch.full``, or ``where`` with ``-inf`` as a number), and the log
    of a relative position that is 0 (T5's position buckets): the replay computes them from the
    trace's constants and the program's numbers, as the original did, so their ``inf`` is the
    original's and no NaN note is made. An empty ``torch.tensor([])`` holds nothing to seed.
    The log of seeded data that comes out NaN is still reported (the test above)."""
    x = torch.randn(2, 8, 8)

    def step():
        mask = torch.full((8, 8), float("-inf")).triu(1)
        causal = torch.where(torch.ones(8, 8, dtype=torch.bool).tril(), 0.0, float("-inf"))
        pos = torch.arange(8)[None, :] - torch.arange(8)[:, None]
        buckets = torch.log(pos.abs().float() / 4).clamp(min=0).long()
        past = torch.cat([torch.tensor([]), x.flatten()])
        return (x + mask + causal).softmax(-1).sum() + buckets.sum() + past.sum()

    replay = _captured(tmp_path, "masks", step)
    assert replay.report.ops_skipped == 0, replay.report.skipped_list()
    assert not [n for n in replay.report.notes if "NaN or inf" in n or "read before" in n], replay.report.notes
    results = []
    replay.run(lambda s, r: results.append(r))
    assert torch.isfinite(results[-1]).all()


def test_data_written_through_one_view_is_not_the_originals_in_another(tmp_path):
    """A number the program made (``full``) holds the original's value, and so does a view of it;
    an in-place op then writes seeded data into it. Both the tensor and its view now hold the
    replay's own values: the NaN the log of the view makes is the replay's and is reported."""
    v = torch.full((64,), 0.001)

    def step():
        x = torch.full((), 4.0)
        y = x.view(())
        x.sub_(v.abs().sum())  # the original: 3.936; v seeded by rule (no recorded scale): about -28
        return torch.log(y - 3.5)

    replay = _captured(tmp_path, "alias", step, scales=False)
    assert replay.report.ops_skipped == 0, replay.report.skipped_list()
    nan_notes = [n for n in replay.report.notes if "NaN or inf" in n]
    assert len(nan_notes) == 1 and "aten::log" in nan_notes[0], replay.report.notes


def test_an_input_saved_as_a_view_inside_a_composite_op_reads_that_memory(tmp_path):
    """``aten::linear`` on a 3-D input flattens it inside itself (a view no replayed op makes) and
    saves that view for the backward pass, whose ``mm`` for the weight's gradient reads it. The
    replay reads it through a view of the activation the forward made in the same iteration, as
    the original did, not from a seeded copy of its own that would stay in memory for good."""
    lin, x = torch.nn.Linear(32, 16), torch.randn(4, 8, 32)

    def step():
        lin(x.tanh()).sum().backward()

    capture_step(step, tmp_path / "saved_view.json.gz", warmup=1, runs=1, min_warmup_s=0)
    replay = Replay(load_trace(tmp_path / "saved_view.json.gz"), "cpu")
    released = []
    release = replay._release
    replay._release = lambda slot: (released.append(slot), release(slot))
    replay.prepare()
    assert replay.report.ops_skipped == 0, replay.report.skipped_list()
    assert any("read through a view of that output" in n for n in replay.report.notes), replay.report.notes
    assert not [t for _, t in replay.inputs() if t.shape == (32, 32)]
    [tanh] = [n for n in select_ops(replay.trace) if n.name == "aten::tanh"]
    assert replay._produced[tanh.outputs[0].key][0] in released  # the build lets go of it after the view's reader, not at its end
    made = {}
    replay.run(lambda s, r: made.setdefault(s.name, []).append(r))
    [activation], [view] = made["aten::tanh"], made["aten::as_strided"]
    assert view.shape == (32, 32) and view.data_ptr() == activation.data_ptr()
    assert torch.equal(view, activation.reshape(32, 32))


def test_memory_that_a_freed_output_held_is_not_read_as_a_view_of_it(tmp_path):
    """Tensors made outside the traced ops take the addresses, and so the storage ids, of outputs
    freed before them: Python numbers wrapped as 0-dim tensors, ``torch.from_numpy``. No operator
    inside a replayed one made them, so they are not views of those outputs: they are seeded, and
    the numbers are passed as numbers (``idx * 2.5`` stays float32). A parameter read directly
    (``P.square()``) is the input itself, not a view of the ``P.t()`` made from it before. (The
    first two happen where the allocator reuses an address, in most captures; the last in all.)"""
    import numpy as np

    v, idx = torch.randn(16, dtype=torch.float64), torch.arange(16)
    w = torch.randn(4096)
    P = torch.nn.Parameter(torch.randn(32, 32))
    opt = torch.optim.SGD([P], lr=0.01)
    x = torch.randn(4, 8, 32)

    def step():
        keep = []
        for _ in range(12):
            a = v.add(1.0)
            del a
            keep.append(idx.mul(2.5).sum())
            b = w.exp()
            keep.append(b.sum())
            del b
            keep.append(torch.from_numpy(np.full(2048, 0.5, dtype=np.float32)).log1p().sum())
        opt.zero_grad()
        ((x @ P.t()).relu().sum() + P.square().sum()).backward()
        opt.step()

    replay = _captured(tmp_path, "freed", step)
    assert replay.report.ops_skipped == 0, replay.report.skipped_list()
    assert not any("differs from the trace" in n for n in replay.report.notes), replay.report.notes
    dtypes, views = set(), []
    replay.run(lambda s, r: (dtypes.add(r.dtype) if s.name == "aten::mul" else None,
                             views.append(r.shape) if s.name == "aten::as_strided" else None))  # fmt: skip
    assert dtypes == {torch.float32} and views == [], (dtypes, views)


def test_memory_a_skipped_operator_allocated_is_not_read_as_a_view_of_what_lay_there(tmp_path):
    """A composite the replay cannot run (here ``matmul``, pointed at ``aten::mm``, which refuses
    its 3-D input) is skipped, but in the original it allocated its output, often where an ``exp`` output had just
    been freed (same address, same storage id), and made it a view inside itself. Its reader gets a
    seeded input: the skipped op's inner view is no evidence, and the allocation ends what lay there.
    Whether the allocator reuses the place depends on the heap's history (the tests run before in
    the process decide it), so the trace is made to say it did: each matmul's output storage, from
    the matmul to the next ``exp``, takes the id of the ``exp`` output freed just before it."""
    w, x, W = torch.randn(32, 32), torch.randn(4, 8, 32), torch.randn(32, 32)

    def step():
        keep = []
        for _ in range(12):
            a = w.exp()
            keep.append(a.sum())
            del a
            keep.append(torch.matmul(x, W).log1p())

    path = tmp_path / "skipped.json.gz"
    capture_step(step, path, warmup=1, runs=1, min_warmup_s=0)
    data = read_json(path)
    freed, moving, moved = None, {}, 0
    for node in data["nodes"]:
        if node["name"] == "aten::exp":
            freed, moving = node["outputs"]["values"][0][1], {}
        elif node["name"] == "aten::matmul" and freed is not None:
            moving = {node["outputs"]["values"][0][1]: freed}
            moved += 1
        for side in ("inputs", "outputs"):
            for v in node[side]["values"]:
                if _is_tensor_value(v) and v[1] in moving:
                    v[1] = moving[v[1]]
    assert moved == 12, moved
    set_op_schema(data, "matmul", "aten::mm(Tensor self, Tensor mat2) -> Tensor")
    trace = parse_trace(data, "skipped")
    storages = [[o.storage_id for n in trace.nodes if n.name == op for o in n.outputs] for op in ("aten::exp", "aten::matmul")]
    assert storages[0] == storages[1], storages
    replay = Replay(trace, "cpu").prepare()
    assert [s["op"] for s in replay.report.skipped_list()] == ["aten::matmul"]
    assert not [s for s in replay.steps if s.view]
    replay.run()


def _is_tensor_value(v) -> bool:
    """A trace's record of one tensor: [id, storage id, offset, numel, itemsize, device]."""
    return isinstance(v, list) and len(v) == 6 and all(type(i) is int for i in v[:5]) and isinstance(v[5], str)


def _captured(tmp_path, name, step, *, scales: bool = True):
    """A prepared replay of ``step``'s capture; with ``scales=False``, as of a trace whose sidecar
    has no floating inputs' scales (one captured elsewhere): its floating inputs are drawn by rule."""
    capture_step(step, tmp_path / f"{name}.json.gz", warmup=1, runs=1, min_warmup_s=0)
    if not scales:
        _drop_scales(tmp_path / f"{name}.json.gz")
    return Replay(load_trace(tmp_path / f"{name}.json.gz"), "cpu").prepare()


def _drop_numbers(path) -> None:
    """The sidecar without the values of the step's 0-dim inputs, as of a trace captured elsewhere."""
    side = load_sidecar(path)
    assert side.pop("scalar_inputs", None), "the capture recorded no 0-dim input's value"
    sidecar_path(path).write_text(json.dumps(side))


def _drop_scales(path) -> None:
    side = load_sidecar(path)
    assert side.pop("float_inputs", None), "the capture recorded no floating input's scale"
    side.pop("scalar_inputs", None)  # (and no 0-dim input's value)
    sidecar_path(path).write_text(json.dumps(side))


def test_foreach_optimizer_with_scalar_lists_and_wrapped_numbers(tmp_path):
    """AdamW's foreach implementation (the default on CUDA) passes a list of Python numbers
    (``Scalar[]``) to ``_foreach_div_`` and ``_foreach_addcdiv_``; gradient clipping multiplies
    0-dim tensors by Python numbers, which the trace records as 0-dim float64 tensors although
    they did not promote the result to float64. All replay, with the original's types."""
    model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.Linear(32, 32))
    opt = torch.optim.AdamW(model.parameters(), foreach=True)
    x = torch.randn(8, 32)

    def step():
        opt.zero_grad()
        model(x).sum().backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    replay = _captured(tmp_path, "foreach", step)
    rep = replay.report
    assert rep.ops_skipped == 0 and rep.ops_replayed == rep.ops_total, rep.skipped_list()
    assert not any("differs from the trace" in n for n in rep.notes), rep.notes
    assert any("were Python numbers in the original" in n for n in rep.notes), rep.notes
    for _ in range(2):
        replay.reset_state()
        replay.run()


def test_autocast_ops_replay_their_casts_and_the_low_precision_op(tmp_path):
    """Under ``torch.autocast`` the recorded ``aten::linear`` takes float32 inputs; its children
    cast them to bfloat16 and call ``aten::linear`` again. The replay runs those children: the
    matrix products run in bfloat16, as in the original, and none fails on mixed types."""
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(16, 64), torch.randint(0, 10, (16,))

    def step():
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()

    replay = _captured(tmp_path, "amp", step)
    rep = replay.report
    assert rep.ops_skipped == 0 and rep.ops_replayed == rep.ops_total, rep.skipped_list()
    assert not any("differs from the trace" in n for n in rep.notes), rep.notes
    linear_types = []
    replay.run(lambda s, r: linear_types.append((r[0] if isinstance(r, tuple) else r).dtype)
               if s.name == "aten::linear" else None)  # fmt: skip
    assert linear_types == [torch.bfloat16, torch.bfloat16]


@pytest.mark.skipif(not observer_records_strides(), reason="this torch's observer records no strides (2.4): the "
                    "layout that shows the path is not in its traces")  # fmt: skip
@pytest.mark.skipif(not autocast_copies_require_grad(), reason="this torch's autocast makes its kept copies under "
                    "no_grad without the flag (2.4-2.10): the matmul's path does not show it")  # fmt: skip
def test_autocast_inference_replays_each_op_in_the_originals_types_and_paths(tmp_path):
    """An inference step under ``torch.autocast``: an ``einsum`` (not an op autocast casts for)
    whose ``bmm`` casts its float32 inputs; a layer whose weight is used twice, the second time
    through autocast's kept copy (no cast among the wrapper's children, only the real call); and a
    ``matmul`` of a transposed batch by a parameter, which folds the batch into one ``mm`` because
    the kept copy requires grad (autocast makes it with autograd on). Replayed, every op runs
    (the einsum through its parts, the shared layer's real call), in the recorded types, and the
    ``matmul`` takes the original's path: ``mm``, not ``bmm``."""
    shared = torch.nn.Linear(32, 32)
    proj = torch.nn.Parameter(torch.randn(32, 16))
    x, y = torch.randn(4, 8, 32), torch.randn(4, 8, 32)

    def step():
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            h = shared(shared(x))  # (the second call reads the kept bfloat16 copy of the weight)
            scores = torch.einsum("bik,bjk->bij", x, y)  # float32 in, bfloat16 out
            torch.matmul(h.transpose(0, 1), proj)  # a batch that cannot fold as a view
            return scores

    replay = _captured(tmp_path, "autocast_infer", step)
    rep = replay.report
    assert rep.ops_skipped == 0 and rep.ops_replayed == rep.ops_total, rep.skipped_list()
    assert not any("differs from the trace" in n for n in rep.notes), rep.notes
    assert any("ran under torch.autocast" in n and "aten::einsum" in n for n in rep.notes), rep.notes
    assert any("kept copy cast by torch.autocast" in n for n in rep.notes), rep.notes
    names = [s.name for s in replay.steps]
    assert "aten::einsum" not in names and names.count("aten::bmm") == 1
    assert names.count("aten::linear") == 2 and "aten::matmul" in names
    ran = collections.Counter()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        replay.run()
    ran.update(e.name for e in prof.events())
    assert ran["aten::mm"] >= 1 and ran["aten::bmm"] == 1, ran  # (the einsum's bmm alone)


def test_tensors_without_storage_are_read_from_the_op_that_made_them(tmp_path):
    """A sparse gradient (``nn.Embedding(sparse=True)``) is recorded without storage or device,
    only its id. The ops that read it (SparseAdam's coalescing, masking, in-place adds) read
    what the replayed backward made, and every op replays."""
    emb = torch.nn.Embedding(1000, 16, sparse=True)
    opt = torch.optim.SparseAdam(emb.parameters())
    idx = torch.randint(0, 1000, (64, 4))

    def step():
        opt.zero_grad()
        emb(idx).sum().backward()
        opt.step()

    replay = _captured(tmp_path, "sparse", step)
    rep = replay.report
    assert rep.ops_skipped == 0 and rep.ops_replayed == rep.ops_total, rep.skipped_list()
    layouts = []
    replay.run(lambda s, r: layouts.append((r[0] if isinstance(r, tuple) else r).layout)
               if s.name == "aten::embedding_backward" else None)  # fmt: skip
    assert layouts == [torch.sparse_coo]
    for _ in range(2):
        replay.reset_state()
        replay.run()


def test_torch_func_transforms_replay_the_calls_on_the_tensors_their_wrappers_hold(tmp_path):
    """Per-sample gradients (``vmap`` over ``grad``) record each operator at each level of the
    transforms, on wrapper tensors without storage, nested down to the call on plain tensors. The
    replay runs those innermost calls: no selected op reads or returns a wrapper, every op
    replays (8 of 16 were skipped, their wrappers rebuilt as sparse tensors), the note says so,
    and the products run on the batch's own shapes (all 32 samples at once, as vmap batched them)."""
    w, x, y = torch.randn(8, 16), torch.randn(32, 16), torch.randn(32, 8)

    def one(w, x, y):
        return ((x @ w.T - y) ** 2).sum()

    path = tmp_path / "per_sample.json.gz"
    capture_step(lambda: torch.func.vmap(torch.func.grad(one), in_dims=(None, 0, 0))(w, x, y).sum(), path,
                 warmup=1, runs=1, min_warmup_s=0)  # fmt: skip
    trace = load_trace(path)
    selected = select_ops(trace)
    assert trace.unwrapped and not any(isinstance(v, Unstrided) for n in selected for v in (*n.inputs, *n.outputs))
    products = [[r.shape for r in tensors_of(n.inputs)] for n in selected if n.name == "aten::matmul"]
    assert len(products) == 2 and all(shapes[0][0] == 32 for shapes in products), products
    replay = Replay(trace, "cpu").prepare()
    rep = replay.report
    assert rep.ops_skipped == 0 and rep.ops_replayed == rep.ops_total, rep.skipped_list()
    assert any("recorded without storage replayed through the calls they made" in n for n in rep.notes), rep.notes
    replay.run()


def test_a_hessian_replays_its_forward_mode_zero_tensors_and_leaves_out_its_checks_on_wrappers(tmp_path):
    """``torch.func.hessian`` (forward-mode ``jacfwd`` over ``jacrev``) makes zero tensors of
    forward-mode AD (``aten::_efficientzerotensor``: a storage without memory, whose address torch
    refuses to give) and checks its wrappers' sizes and storages (``is_same_size``,
    ``_has_same_storage_numel``, which return a boolean and run nothing). Before, the build
    failed on the first zero tensor ("invalid python storage") and lost the whole trace; with that
    fixed, 13 checks on wrappers were skipped. Now every op replays and the checks are listed."""
    w, x = torch.randn(16), torch.randn(32, 16)
    path = tmp_path / "hessian.json.gz"
    capture_step(lambda: torch.func.hessian(lambda w: torch.sigmoid(x @ w).log().sum())(w), path,
                 warmup=1, runs=1, min_warmup_s=0)  # fmt: skip
    trace = load_trace(path)
    assert "aten::_efficientzerotensor" in {n.name for n in select_ops(trace)}
    idle = {trace.by_id[i].name for i in trace.idle_wrappers}
    assert {"aten::is_same_size", "aten::_has_same_storage_numel"} <= idle, idle
    replay = Replay(trace, "cpu").prepare()
    rep = replay.report
    assert rep.ops_skipped == 0 and rep.ops_replayed == rep.ops_total, rep.skipped_list()
    assert any("or only a number or boolean about its tensors" in n for n in rep.notes), rep.notes
    replay.run()
    assert replay_peak_bytes(replay) > 0


def test_a_nested_jagged_tensors_step_replays_the_ops_on_its_values(tmp_path):
    """A nested jagged tensor is a Python tensor subclass: the trace records each operator on it
    (without storage) and, under a ``PythonSubclass`` label, the same operator on the plain tensor
    of its values; its backward makes and takes apart such tensors (``_nested_view_from_jagged``,
    ``_nested_get_offsets``...), which run no kernel. The replay runs the calls on the values, and
    lists the wrapping calls as not replayed; before, 9 of 59 ops were skipped. A number the step
    multiplies the jagged tensor by is recorded for the call on the values, which the replay runs,
    by their sizes (the jagged tensor's ragged size is a symbolic ``j1``: reading it as a number
    failed, and the capture kept no record of the step's inputs at all)."""
    torch.manual_seed(0)
    nn, F = torch.nn, torch.nn.functional
    up, down = nn.Linear(32, 96), nn.Linear(32, 32)
    opt = torch.optim.SGD([*up.parameters(), *down.parameters()], lr=0.01)
    rows = [torch.randn(n, 32) for n in (17, 40, 9)]

    def step():
        opt.zero_grad()
        x = torch.nested.nested_tensor(rows, layout=torch.jagged)
        out = down(F.gelu(F.layer_norm(up(x) * 0.37, (96,))).chunk(3, dim=-1)[0])
        out.values().pow(2).mean().backward()
        opt.step()

    path = tmp_path / "jagged.json.gz"
    try:
        step()
    except RuntimeError as e:  # (torch 2.4's jagged tensors have no backward of chunk: the workload does not run)
        if "derivative for aten::chunk is not implemented" not in str(e):
            raise
        pytest.skip(f"this torch cannot run the step: {e}")
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        capture_step(step, path, warmup=1, runs=1, min_warmup_s=0)
    assert not [w for w in warned if "could not be looked at" in str(w.message)], [str(w.message) for w in warned]
    scaled = [r for r in load_sidecar(path)["scalar_inputs"] if r["value"] == pytest.approx(0.37)]
    assert scaled and all(r["shapes"] == [[66, 96], []] for r in scaled), scaled  # (the forward's and backward's)
    trace = load_trace(path)
    selected = select_ops(trace)
    names = {n.name for n in selected}
    assert {"aten::linear", "aten::native_layer_norm", "aten::gelu", "aten::gelu_backward"} <= names, sorted(names)
    assert not any(isinstance(v, Unstrided) for n in selected for v in (*n.inputs, *n.outputs))
    assert {"aten::_nested_view_from_jagged", "aten::_nested_get_offsets"} <= {
        trace.by_id[i].name for i in trace.idle_wrappers}  # fmt: skip
    replay = Replay(trace, "cpu").prepare()
    rep = replay.report
    assert rep.ops_skipped == 0 and rep.ops_replayed == rep.ops_total, rep.skipped_list()
    assert any("made or took apart a wrapper (a nested jagged tensor" in n for n in rep.notes), rep.notes
    assert sum(v == pytest.approx(0.37) for v in replay.factory.exact.values()) == len(scaled), replay.factory.exact
    replay.run()


def test_a_trace_of_several_profiler_steps_says_an_iteration_replays_them_all(tmp_path):
    """An execution trace taken through ``torch.profiler.profile`` (its ``execution_trace_observer``)
    holds every active step of the profiler's schedule, each in its ``ProfilerStep#N`` range: an
    iteration of the replay runs all of them, and the report says so (of one step, nothing)."""
    from torch.profiler import ExecutionTraceObserver, profile, schedule

    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    x = torch.randn(8, 32)
    found = {}
    for active in (1, 2):
        path = tmp_path / f"active{active}.json"
        observer = ExecutionTraceObserver().register_callback(str(path))
        with profile(schedule=schedule(wait=1, warmup=1, active=active, repeat=1), execution_trace_observer=observer) as p:
            for _ in range(2 + active):
                model(x).sum().backward()
                p.step()
        replay = Replay(load_trace(path), "cpu").prepare()
        assert replay.report.ops_skipped == 0 and replay.report.ops_replayed == replay.report.ops_total
        found[active] = [n for n in replay.report.notes if "of the profiler's steps" in n]
    assert not found[1], found[1]
    assert found[2] == ["the trace holds 2 of the profiler's steps (ProfilerStep#2, ProfilerStep#3): an iteration "
                        "replays them all, and its time is theirs together"], found[2]  # fmt: skip


def test_a_tensor_set_onto_a_storage_the_program_made_reads_a_seeded_one_of_its_size(tmp_path):
    """``all_gather_object`` pickles each object and points a byte tensor at the pickle's bytes
    (``torch.ByteTensor(storage)``: ``aten::set_`` with a storage, an opaque object in a trace).
    The replay gives ``set_`` a seeded storage of the size its output spans, and the ops that
    read the bytes run on them; before, ``set_`` was skipped ("cannot be rebuilt from a trace")."""
    import pickle
    import warnings

    buf = pickle.dumps({"loss": 0.25, "step": 3, "rank": 0})

    def step():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # (TypedStorage is deprecated)
            t = torch.ByteTensor(torch.ByteStorage._from_buffer(buf))  # as torch.distributed's _object_to_tensor
        return torch.cat([t, t]).sum()

    path = tmp_path / "pickled.json.gz"
    capture_step(step, path, warmup=1, runs=1, min_warmup_s=0)
    replay = Replay(load_trace(path), "cpu").prepare()
    rep = replay.report
    assert rep.ops_skipped == 0 and rep.ops_replayed == rep.ops_total, rep.skipped_list()
    assert "aten::set_" in [s.name for s in replay.steps]
    assert any("a storage the program made in Python" in n for n in rep.notes), rep.notes
    seen = []
    replay.run(after_step=lambda step, result: seen.append(result) if step.name == "aten::cat" else None)
    assert seen[0].shape == (2 * len(buf),) and seen[0].dtype == torch.uint8


def test_ops_given_the_programs_generator_draw_from_a_seeded_one_of_the_replays(tmp_path):
    """A program that passes its own ``torch.Generator`` (a sampler's permutation, a diffusion
    pipeline's noise, dropout masks drawn by hand) is recorded with the generator as an opaque
    object. Each such op draws from a generator of the replay's, seeded with its seed: the same
    seed draws the same numbers, another seed others, and the draws follow the op's arguments.
    Before, all five such ops of this step were skipped ("cannot be rebuilt from a trace")."""
    g = torch.Generator().manual_seed(3)
    x, p, weights = torch.randn(64, 32), torch.full((64, 32), 0.3), torch.rand(8, 10)

    def step():
        noise = torch.randn(64, 32, generator=g)
        order = torch.randperm(64, generator=g)
        picks = torch.multinomial(weights, 3, generator=g)
        mask = torch.bernoulli(p, generator=g)
        jitter = torch.empty(64, 32).uniform_(generator=g)
        return (x + noise)[order] * mask + jitter, picks

    path = tmp_path / "generator.json.gz"
    capture_step(step, path, warmup=1, runs=1, min_warmup_s=0)
    trace = load_trace(path)
    drawing = {"aten::randn", "aten::randperm", "aten::multinomial", "aten::bernoulli", "aten::uniform_"}

    def draws(seed):
        replay = Replay(trace, "cpu", seed=seed).prepare()
        rep = replay.report
        assert rep.ops_skipped == 0 and rep.ops_replayed == rep.ops_total, rep.skipped_list()
        assert rep.notes["op(s) drawing from a generator the program made (an opaque object in a trace) draw from "
                         "one of the replay's, seeded"] == 5, rep.notes  # fmt: skip
        seen = {}
        replay.run(after_step=lambda step, result: seen.setdefault(step.name, result) if step.name in drawing else None)
        return seen

    first, again, other = draws(0), draws(0), draws(1)
    assert set(first) == drawing
    assert [name for name in drawing if not torch.equal(first[name], again[name])] == []
    assert not torch.equal(first["aten::randn"], other["aten::randn"])
    assert sorted(first["aten::randperm"].tolist()) == list(range(64))
    assert first["aten::bernoulli"].unique().tolist() == [0.0, 1.0] and 0.2 < first["aten::bernoulli"].mean() < 0.4


def test_a_model_converted_to_mkldnn_replays_its_convolutions_on_that_layout(tmp_path):
    """A CPU inference model converted with ``torch.utils.mkldnn.to_mkldnn`` runs its layers on
    MKL-DNN tensors, an opaque layout the trace records without storage. Each convolution's only
    part is the allocation of its output: the convolution is its own kernel and replays whole
    (before, it was taken for a call on wrapper tensors, and its allocation replayed in its place,
    with a layout code read as another layout). Its weights, inputs of the step of that layout,
    are rebuilt as MKL-DNN tensors, from the capture's record or, without one, because their
    reader is an MKL-DNN operator. The build read a sample of each output for NaN through a view,
    which that layout does not have, and failed the whole trace."""
    from torch.utils import mkldnn

    model = mkldnn.to_mkldnn(torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3), torch.nn.ReLU(),
                                                 torch.nn.Conv2d(16, 16, 3)).eval())  # fmt: skip
    x = torch.randn(2, 3, 32, 32)

    def step():
        with torch.no_grad():
            return model(x.to_mkldnn()).to_dense()

    path = tmp_path / "mkldnn.json.gz"
    capture_step(step, path, warmup=1, runs=1, min_warmup_s=0)
    seen: list[torch.Tensor] = []
    for sidecar in (True, False):
        if not sidecar:
            sidecar_path(path).unlink()
        replay = Replay(load_trace(path), "cpu").prepare()
        rep = replay.report
        assert rep.ops_skipped == 0 and rep.ops_replayed == rep.ops_total, rep.skipped_list()
        assert [s.name for s in replay.steps].count("aten::mkldnn_convolution") == 2
        how = "as the capture recorded" if sidecar else "the layout its reader takes"
        rebuilt = {n: c for n, c in rep.notes.items() if "rebuilt as an MKL-DNN tensor" in n}
        assert sum(rebuilt.values()) == 4 and all(n.endswith(how) for n in rebuilt), rebuilt
        weights = [t for t in replay.env if isinstance(t, torch.Tensor) and t.layout == torch._mkldnn]
        assert sorted(tuple(t.shape) for t in weights) == [(16,), (16,), (16, 3, 3, 3), (16, 16, 3, 3)]
        seen.clear()
        replay.run(after_step=lambda step, result: seen.append(result) if step.name == "aten::to_dense" else None)
        assert seen[0].layout == torch.strided and seen[0].shape == (2, 16, 28, 28) and seen[0].abs().sum() > 0


def test_a_frozen_torchscript_model_on_mkldnn_replays_the_ops_its_trace_holds(tmp_path):
    """TorchScript's ``optimize_for_inference`` runs a frozen CNN on MKL-DNN tensors: its
    convolution is a TorchScript operator, not in the trace, and the ReLU after it writes in place
    an MKL-DNN tensor that is an input of the step. Its output's allocation passes the layout as
    code 3, MKL-DNN in c10's order (it was read as CSC). The rebuilt input is no parameter to re-seed
    between iterations (that raised KeyError)."""
    model = torch.jit.optimize_for_inference(torch.jit.freeze(torch.jit.script(torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU()).eval())))  # fmt: skip
    x = torch.randn(2, 3, 32, 32)

    def step():
        with torch.no_grad():
            return model(x)

    path = tmp_path / "frozen.json.gz"
    capture_step(step, path, warmup=1, runs=1, min_warmup_s=0)
    replay = Replay(load_trace(path), "cpu").prepare()
    rep = replay.report
    assert rep.ops_skipped == 0 and rep.ops_replayed == rep.ops_total, rep.skipped_list()
    assert {"aten::relu_", "aten::empty", "aten::to_dense"} <= {s.name for s in replay.steps}
    empty = next(s for s in replay.steps if s.name == "aten::empty")
    assert torch._mkldnn in empty.args, empty.args
    for _ in range(2):
        replay.between_iterations()
        replay.run()


def test_dtype_codes_past_bfloat16_are_read_in_c10s_order(tmp_path):
    """A trace writes a dtype argument as its code in c10's ScalarType order. Codes past bfloat16's
    (15) were refused as invalid, so every cast to a float8 type (23-26: a float8 training
    recipe's scaling casts) or to an unsigned integer wider than a byte (27-29) was skipped; and a
    trace holding a uint16 tensor was refused whole, its element type printed as GCC names it
    ("short unsigned int")."""
    x = torch.randn(64, 64)

    def step():
        scale = x.abs().amax() / 448.0
        low = (x / scale).to(torch.float8_e4m3fn)
        grads = (x * 1e-3).to(torch.float8_e5m2)
        counts = torch.zeros(64, dtype=torch.uint16)
        return low.to(torch.float32) * scale, grads.float(), counts

    path = tmp_path / "float8.json.gz"
    capture_step(step, path, warmup=1, runs=1, min_warmup_s=0)
    replay = Replay(load_trace(path), "cpu").prepare()
    rep = replay.report
    assert rep.ops_skipped == 0 and rep.ops_replayed == rep.ops_total, rep.skipped_list()
    made = []
    replay.run(after_step=lambda step, result: made.append(result.dtype) if isinstance(result, torch.Tensor) else None)
    assert {torch.float8_e4m3fn, torch.float8_e5m2, torch.uint16} <= set(made), made


def test_a_complex_number_argument_recorded_without_its_value_takes_one_of_magnitude_one(tmp_path):
    """A complex-valued layer's backward multiplies by a complex number (``angle``'s gradient),
    which the trace writer records by its type alone ("<ComplexDouble>"). The op replays with a
    complex number of magnitude 1 in its place, with a note (it was skipped: "should be a number").
    The exported script writes it as code too."""
    w = torch.randn(32, 32, dtype=torch.cfloat, requires_grad=True)
    x = torch.randn(16, 32, 2)

    def step():
        z = torch.view_as_complex(x) @ w
        ((z.abs() ** 2).sum() + torch.angle(z).sum()).backward()

    path = tmp_path / "complex.json.gz"
    capture_step(step, path, warmup=1, runs=1, min_warmup_s=0)
    replay = Replay(load_trace(path), "cpu").prepare()
    rep = replay.report
    assert rep.ops_skipped == 0 and rep.ops_replayed == rep.ops_total, rep.skipped_list()
    assert rep.notes["a complex number argument, recorded without its value, is taken as (0.6+0.8j) (of magnitude 1)"]
    assert any(complex(0.6, 0.8) in s.args for s in replay.steps)
    replay.run()
    script = tmp_path / "bench.py"
    assert cli_main(["export", str(path), "-o", str(script)]) == 0
    assert "(0.6+0.8j)" in script.read_text()


def test_a_vectorized_jacobian_leaves_out_the_legacy_vmaps_batch_wrapping(tmp_path):
    """``torch.autograd.functional.jacobian(..., vectorize=True)`` runs the legacy ``vmap``, whose
    ``_add_batch_dim`` and ``_remove_batch_dim`` are recorded as operators. Replayed outside its
    ``vmap``, ``_add_batch_dim`` made a batched wrapper, and the build's check of its output for NaN
    failed the whole trace ("Batching rule not implemented for aten::item"). The two are listed,
    not run, as wrappers' makers are; the operators on the batched values replay."""
    f = torch.nn.Sequential(torch.nn.Linear(6, 12), torch.nn.Tanh(), torch.nn.Linear(12, 3))
    x = torch.randn(6)
    path = tmp_path / "jacobian.json.gz"
    capture_step(lambda: torch.autograd.functional.jacobian(f, x, vectorize=True), path, warmup=1, runs=1,
                 min_warmup_s=0)  # fmt: skip
    trace = load_trace(path)
    wrapping = {n.id for n in trace.nodes if n.name in ("aten::_add_batch_dim", "aten::_remove_batch_dim")}
    assert len(wrapping) == 2 and not wrapping & {n.id for n in select_ops(trace)}
    replay = Replay(trace, "cpu").prepare()
    rep = replay.report
    assert rep.ops_skipped == 0 and rep.ops_replayed == rep.ops_total, rep.skipped_list()
    assert {"aten::matmul", "aten::tanh_backward"} <= {s.name for s in replay.steps}
    assert any(n.startswith("2 operator call(s) on tensors recorded without storage not replayed") for n in rep.notes)
    replay.run()


def test_a_parameters_update_by_its_sparse_gradient_replays_in_place(tmp_path):
    """SGD adds an embedding bag's sparse gradient to its weight in place (``add_``), which runs
    ``add`` on the same sparse tensor, inside which its values are read. The ``add_`` is an
    operator on a sparse tensor, not a call on a wrapper tensor: it replays whole and writes the
    weight in place. It was taken for a wrapper's level and replaced by the ``add`` inside it,
    which wrote a new tensor and left the weight as it was."""
    bag = torch.nn.EmbeddingBag(5000, 32, mode="sum", sparse=True)
    idx, offsets = torch.randint(0, 5000, (400,)), torch.arange(0, 400, 10)
    opt = torch.optim.SGD(bag.parameters(), lr=0.1)

    def step():
        opt.zero_grad()
        bag(idx, offsets).sum().backward()
        opt.step()

    path = tmp_path / "sparse_sgd.json.gz"
    capture_step(step, path, warmup=1, runs=1, min_warmup_s=0)
    trace = load_trace(path)
    assert not trace.unwrapped
    replay = Replay(trace, "cpu").prepare()
    rep = replay.report
    assert rep.ops_skipped == 0 and rep.ops_replayed == rep.ops_total, rep.skipped_list()
    update = next(s for s in replay.steps if s.name == "aten::add_")
    weight = replay.env[update.fills[0][1]]
    before = weight.clone()
    replay.run()
    changed = (weight != before).any(dim=1)
    assert weight.layout == torch.strided and 0 < int(changed.sum()) <= 400


def test_a_sparse_input_of_the_step_is_rebuilt_with_the_elements_the_capture_recorded(tmp_path):
    """A sparse adjacency matrix that a graph network's step reads (``torch.sparse.mm``, forward
    and backward) is recorded with its id, type and shape only. The capture helper notes its
    layout and element count in the sidecar; the replay rebuilds it with that many elements at
    distinct positions, shared by all its readers, and every op replays. Without the record it
    holds 1% of its positions, and says so; a record of another layout skips its readers with the
    reason; a malformed record is an error naming the sidecar."""
    gen = torch.Generator().manual_seed(1)
    adj = torch.sparse_coo_tensor(torch.randint(0, 300, (2, 2000), generator=gen), torch.rand(2000, generator=gen),
                                  (300, 300)).coalesce()  # fmt: skip
    x, lin = torch.randn(300, 24), torch.nn.Linear(24, 8)
    path = tmp_path / "gcn.json.gz"
    capture_step(lambda: torch.sparse.mm(adj, lin(x)).relu().sum().backward(), path, warmup=1, runs=1, min_warmup_s=0)
    side = load_sidecar(path)
    assert side["sparse_inputs"] == [{"shape": [300, 300], "dtype": "float32", "layout": "sparse_coo",
                                      "nnz": adj._nnz(), "sparse_dim": 2, "coalesced": True}]  # fmt: skip

    def rebuilt(replay):
        sparse = [v for v in replay.env if isinstance(v, torch.Tensor) and v.layout == torch.sparse_coo]
        assert len(sparse) == 1  # (one tensor for the forward's reader and the backward's transpose)
        return sparse[0]

    trace = load_trace(path)
    # the sparse products stay whole (their parts read the sparse tensor's indices and values,
    # which the replay does not have): they are not taken for calls on torch.func's wrappers
    assert {"aten::mm", "aten::_sparse_mm"} & {n.name for n in select_ops(trace)} and not trace.unwrapped
    replay = Replay(trace, "cpu").prepare()
    rep = replay.report
    assert rep.ops_skipped == 0 and rep.ops_replayed == rep.ops_total, rep.skipped_list()
    t = rebuilt(replay)
    assert t.shape == adj.shape and t._nnz() == adj._nnz() and t.is_coalesced()
    assert t._indices().unique(dim=1).shape[1] == adj._nnz() and 0 <= t._indices().min() and t._indices().max() < 300
    assert any("300x300 float32) rebuilt as a sparse COO tensor of" in n and "as the capture recorded" in n
               for n in rep.notes), rep.notes  # fmt: skip
    replay.run()
    replay.run()
    # on the meta device (shapes only: no positions drawn, no generator) it is rebuilt too; the
    # products that read it are refused by torch itself, which has no sparse meta kernels for them
    meta = Replay(load_trace(path), "meta").prepare()
    assert rebuilt(meta).shape == adj.shape and rebuilt(meta)._nnz() == adj._nnz() and rebuilt(meta).is_coalesced()
    assert {s["op"] for s in meta.report.skipped_list()} <= {"aten::_sparse_mm", "aten::mm"}
    assert all(s["reason"].startswith("NotImplementedError: Could not run") for s in meta.report.skipped_list())

    del side["sparse_inputs"]
    sidecar_path(path).write_text(json.dumps(side))
    replay = Replay(load_trace(path), "cpu").prepare()
    assert replay.report.ops_skipped == 0
    assert rebuilt(replay)._nnz() == 900
    assert any("1% of its positions" in n for n in replay.report.notes), replay.report.notes

    side["sparse_inputs"] = [{"shape": [300, 300], "dtype": "float32", "layout": "sparse_csr"}]
    sidecar_path(path).write_text(json.dumps(side))
    replay = Replay(load_trace(path), "cpu").prepare()
    skipped = replay.report.skipped_list()
    refused = {s["op"]: s["count"] for s in skipped if "sparse_csr, which is not rebuilt" in s["reason"]}
    # both readers of the input (the forward's product and the backward's transpose) are refused,
    # not the first alone with the second falling back to a guess; the transpose's reader follows
    assert refused == {"aten::_sparse_mm": 1, "aten::t": 1}, skipped
    assert all("did not give" in s["reason"] for s in skipped if s["op"] not in refused), skipped
    assert not any(isinstance(v, torch.Tensor) and v.layout == torch.sparse_coo for v in replay.env)
    assert replay.report.ops_replayed > 0
    replay.run()

    side["sparse_inputs"] = [{"shape": [300, 300], "dtype": "float32", "layout": "sparse_coo", "nnz": 10,
                              "sparse_dim": 3, "coalesced": True}]  # fmt: skip
    sidecar_path(path).write_text(json.dumps(side))
    with pytest.raises(ReplayError, match=r"malformed timing sidecar: sparse_inputs"):  # (3 sparse dims of 2)
        Replay(load_trace(path), "cpu").prepare()

    side["sparse_inputs"] = [{"shape": [300, 300], "dtype": "float32", "layout": "sparse_coo", "nnz": -4}]
    sidecar_path(path).write_text(json.dumps(side))
    with pytest.raises(ReplayError, match=r"gcn\.meta\.json: malformed timing sidecar: sparse_inputs"):
        Replay(load_trace(path), "cpu").prepare()


def test_index_inputs_are_spread_as_the_capture_recorded(tmp_path):
    """A recommender's ids follow a power law: the capture helper records each integer input's
    number of distinct values and its hottest value's share (``index_inputs``), and the replay
    draws the embedding bag's ids with as many distinct values and the hottest as frequent, in the
    table's range; the bag offsets keep their own layout. Without the record the ids are uniform
    (almost all distinct); a malformed record is an error naming the sidecar."""
    rows, n = 50_000, 8192
    gen = torch.Generator().manual_seed(3)
    ranks = torch.distributions.Categorical(probs=1.0 / torch.arange(1, rows + 1) ** 1.2).sample((n,))
    idx = torch.randperm(rows, generator=gen)[ranks]
    bag, offsets = torch.nn.EmbeddingBag(rows, 16, mode="sum"), torch.arange(0, n, 32)
    path = tmp_path / "rec.json.gz"

    pos_emb = torch.nn.Embedding(n, 4)

    def step():  # (a tensor the step makes itself, of the ids' shape and type, is not an input)
        positions = torch.tensor(range(n))
        (bag(idx, offsets).sum() + pos_emb(positions).sum()).backward()

    capture_step(step, path, warmup=1, runs=1, min_warmup_s=0)
    _, counts = idx.unique(return_counts=True)
    side = load_sidecar(path)
    [record] = [r for r in side["index_inputs"] if r["shape"] == [n]]
    assert record["distinct"] == counts.numel() and record["top"] == pytest.approx(counts.max().item() / n, abs=1e-6)
    assert record["distinct"] < n / 3 and record["top"] > 0.05

    def ids(replay):  # (the bag's ids: the input of their shape whose range is the table's rows)
        rng = replay.factory.ranges
        [t] = [t for ref, t in replay.inputs() if ref.shape == (n,) and getattr(rng.get(ref), "high", 0) == rows]
        return t

    replay = Replay(load_trace(path), "cpu").prepare()
    assert replay.report.ops_skipped == 0
    assert any("1 index input(s) spread as the original's were" in note for note in replay.report.notes)
    got = ids(replay)
    _, got_counts = got.unique(return_counts=True)
    assert got_counts.numel() == record["distinct"] and 0 <= got.min() and got.max() < rows
    assert got_counts.max().item() / n == pytest.approx(record["top"], rel=0.25)
    [bounds] = [t for ref, t in replay.inputs() if ref.shape == (n // 32,)]  # (offsets: sorted, from 0)
    assert bounds[0] == 0 and bool((bounds.diff() >= 0).all()) and bounds.max() < n
    replay.run()

    del side["index_inputs"]
    sidecar_path(path).write_text(json.dumps(side))
    uniform = Replay(load_trace(path), "cpu").prepare()
    assert ids(uniform).unique().numel() > 0.9 * n
    assert not any("index input" in note for note in uniform.report.notes)

    side["index_inputs"] = [{**record, "distinct": n + 1}]
    sidecar_path(path).write_text(json.dumps(side))
    with pytest.raises(ReplayError, match=r"rec\.meta\.json: malformed timing sidecar: index_inputs"):
        Replay(load_trace(path), "cpu").prepare()


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 400), k_share=st.floats(0.0, 1.0),
       shares=st.lists(st.floats(0.0, 1.0), min_size=1, max_size=8))  # fmt: skip
def test_curve_counts_give_every_element_a_value(n, k_share, shares):
    """The repeats of each of ``k`` values that follow a recorded curve of hottest shares count
    all ``n`` elements, each value at least once, for any ``k`` up to ``n``. Where rounding reached
    every rank before the curve's end (4 values over 6 elements, a graph's index row drawn alone)
    the last band was left out: the counts summed to 4, and the draw indexed past its values."""
    from pytest_mystique.distributions import curve_counts

    k = max(1, round(k_share * n))
    ranks = sorted({min(max(r, 1e-3), 1.0) for r in shares})
    curve = tuple(zip(ranks, sorted(min(max(s, r), 1.0) for s, r in zip(sorted(shares), ranks))))
    counts = curve_counts(k, n, curve)
    assert counts.numel() == k and int(counts.sum()) == n and int(counts.min()) >= 1, (k, n, curve, counts)


def test_index_inputs_follow_the_recorded_curve_of_their_hottest_values(tmp_path):
    """Ids of a square's law (``rand() ** 2 * rows``: hot rows, but not a Zipf law's) over a small
    table: the capture helper records the shares the hottest values took, two ranks to a doubling
    (``hot``), and the replay's ids take the same shares at every rank, not only the hottest one's.
    A Zipf law fitted to the hottest share and the distinct count gave the 10 hottest ids 23% of
    the lookups instead of 11%: more of them in the cache, a lookup 25% faster than the original's."""
    rows, n = 800, 20_000
    ids = (torch.rand(n, generator=torch.Generator().manual_seed(5)) ** 2 * rows).long()
    bag = torch.nn.EmbeddingBag(rows, 16, mode="sum")
    offsets = torch.arange(0, n, 10)
    path = tmp_path / "square.json.gz"
    capture_step(lambda: bag(ids, offsets).sum(), path, warmup=1, runs=1, min_warmup_s=0)
    [record] = [r for r in load_sidecar(path)["index_inputs"] if r["shape"] == [n]]

    def shares(t: torch.Tensor) -> torch.Tensor:  # the hottest values' shares of the elements, rank by rank
        counts = torch.sort(t.unique(return_counts=True)[1], descending=True).values
        return counts.cumsum(0).double() / t.numel()

    original = shares(ids)
    assert [r for r, _ in record["hot"]][:8] == [1, 2, 3, 4, 6, 8, 11, 16] and record["hot"][-1] == [len(original), 1.0]
    assert all(share == pytest.approx(float(original[r - 1]), abs=1e-6) for r, share in record["hot"])
    replay = Replay(load_trace(path), "cpu").prepare()
    [got] = [t for ref, t in replay.inputs() if ref.shape == (n,)]
    replayed = shares(got)
    assert replayed.numel() == original.numel() and 0 <= got.min() and got.max() < rows
    for rank in (1, 5, 10, 30, 100, 300):
        assert float(replayed[rank - 1]) == pytest.approx(float(original[rank - 1]), abs=0.01), rank

    side = load_sidecar(path)
    [bad] = [r for r in side["index_inputs"] if r["shape"] == [n]]
    bad["hot"][3][1] = bad["hot"][2][1] / 2  # a share that falls
    sidecar_path(path).write_text(json.dumps(side))
    with pytest.raises(ReplayError, match=r"square\.meta\.json: malformed timing sidecar: index_inputs"):
        Replay(load_trace(path), "cpu").prepare()


@pytest.mark.parametrize("transposed", [False, True])
def test_a_graph_s_edge_index_is_spread_row_by_row(tmp_path, transposed):
    """An index input of a few rows of coordinates (a graph's ``edge_index``: sources, then
    destinations) gets each row's spread recorded (``rows``) and drawn: the replay's destinations
    crowd on as few nodes, as hot, as the original's, and its sources stay spread, also where the
    rows are strided views of (source, destination) pairs (drawn in the allocation's order, the
    hubs were spread over both rows). One spread for the whole tensor mixed the two rows (the hubs'
    share moved into the sources); a record without rows still draws that way, and a malformed row
    is an error naming the sidecar."""
    step, edge_index = graph_step(transposed=transposed)
    path = tmp_path / "graph.json.gz"
    capture_step(step, path, warmup=1, runs=1, min_warmup_s=0)
    side = load_sidecar(path)
    [record] = [r for r in side["index_inputs"] if r["shape"] == list(edge_index.shape)]
    original = row_spreads(edge_index)
    assert [(r["distinct"], r["top"]) for r in record["rows"]] == [(d, pytest.approx(t, abs=1e-6)) for d, t in original]
    assert original[1][1] > 20 * original[0][1]  # (the hubs)

    def drawn(replay):
        [t] = [t for ref, t in replay.inputs() if ref.shape == tuple(edge_index.shape)]
        return row_spreads(t)

    replay = Replay(load_trace(path), "cpu").prepare()
    assert replay.report.ops_skipped == 0
    assert any("1 row by row" in note for note in replay.report.notes)
    for (d, top), (want_d, want_top) in zip(drawn(replay), original):
        assert d == want_d and top == pytest.approx(want_top, rel=0.1)
    replay.run()

    del record["rows"]  # (a sidecar of an earlier capture: one spread for both rows)
    sidecar_path(path).write_text(json.dumps(side))
    mixed = drawn(Replay(load_trace(path), "cpu").prepare())
    assert mixed[1][1] < 0.8 * original[1][1] and mixed[0][1] > 2 * original[0][1]

    for bad in ({"rows": [{"distinct": 1, "top": 1.0}]}, {"low": "x"}, {"low": 5, "high": 2}):
        sidecar_path(path).write_text(json.dumps({**side, "index_inputs": [{**record, **bad}]}))
        with pytest.raises(ReplayError, match=r"graph\.meta\.json: malformed timing sidecar: index_inputs"):
            Replay(load_trace(path), "cpu").prepare()


@pytest.mark.parametrize("padded", [False, True])
def test_a_batch_of_ids_of_one_law_is_drawn_whole_keeping_its_shared_hot_ids(tmp_path, padded):
    """A batch of four rows of ids of one power law (an embedding's lookups, sample by sample)
    looks like coordinates by its shape, and the capture records its rows, but they spread alike,
    or, right-padded to one length, share their hottest id (the pad's): the replay draws the batch
    as one tensor, so that its rows share their hot ids as the original's did (four rows drawn
    apart would read more distinct rows of the table)."""
    rows, n = 5000, 2048
    ranks = torch.distributions.Categorical(probs=1.0 / torch.arange(1, rows + 1) ** 1.1).sample((4, n))
    ids = torch.randperm(rows, generator=torch.Generator().manual_seed(2))[ranks]
    if padded:  # (sequences of 2048, 1024, 512 and 256 ids, padded with id 0)
        for i, length in enumerate((n, n // 2, n // 4, n // 8)):
            ids[i, length:] = 0
    table = torch.nn.Embedding(rows, 8)
    path = tmp_path / "batch.json.gz"
    capture_step(lambda: table(ids).sum().backward(), path, warmup=1, runs=1, min_warmup_s=0)
    [record] = [r for r in load_sidecar(path)["index_inputs"] if r["shape"] == [4, n]]
    assert len(record["rows"]) == 4
    replay = Replay(load_trace(path), "cpu").prepare()
    [got] = [t for ref, t in replay.inputs() if ref.shape == (4, n)]
    assert got.unique().numel() == ids.unique().numel() == record["distinct"]
    assert not any("row by row" in note for note in replay.report.notes)
    assert any("1 index input(s) spread" in note for note in replay.report.notes)


def test_bag_offsets_cut_bags_of_the_sizes_the_capture_recorded(tmp_path):
    """A recommender's bags hold between a few and a few tens of ids (here 3 to 7 in one table, 4
    each in the other). Offsets drawn as sorted uniform cut points make empty bags and bags many
    times the mean, which a GPU's embedding bag waits on. The capture helper records the smallest
    and largest bag of each sorted integer input, and the replay cuts bags in that band, the last
    beginning where the original's did: equal bags come out as the original's exactly. Without the
    record the offsets are still sorted from 0; a malformed record is an error naming the sidecar."""
    batch = 512
    lengths = torch.randint(3, 8, (batch,), generator=torch.Generator().manual_seed(5))
    uneven = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)[:-1]])
    even = torch.arange(0, 4 * batch, 4)
    bags = torch.nn.EmbeddingBag(1000, 8, mode="sum"), torch.nn.EmbeddingBag(300, 8, mode="sum")
    ids = torch.randint(0, 1000, (int(lengths.sum()),)), torch.randint(0, 300, (4 * batch,))
    path = tmp_path / "bags.json.gz"
    capture_step(lambda: (bags[0](ids[0], uneven).sum() + bags[1](ids[1], even).sum()).backward(), path,
                 warmup=1, runs=1, min_warmup_s=0)  # fmt: skip
    side = load_sidecar(path)
    assert [r["steps"] for r in side["index_inputs"] if r["shape"] == [batch]] == [[3, 7], [4, 4]]

    def offsets(replay):  # (in the order the step read them)
        return [t for ref, t in replay.inputs() if ref.shape == (batch,) and ref.dtype == "int64"]

    replay = Replay(load_trace(path), "cpu").prepare()
    assert replay.report.ops_skipped == 0
    assert any(note.startswith("2 offsets input(s) cut bags between") for note in replay.report.notes)
    got_uneven, got_even = offsets(replay)
    sizes = got_uneven.diff()
    assert got_uneven[0] == 0 and got_uneven[-1] == uneven[-1] and 2 <= sizes.min() and sizes.max() <= 8, sizes
    assert torch.equal(got_even, even)
    replay.run()

    for r in side["index_inputs"]:
        r.pop("steps", None)
    sidecar_path(path).write_text(json.dumps(side))
    cuts = offsets(Replay(load_trace(path), "cpu").prepare())[0]
    assert cuts[0] == 0 and bool((cuts.diff() >= 0).all()) and cuts.diff().max() > 8  # (sorted uniform cuts)

    side["index_inputs"][0]["steps"] = [7, 3]
    sidecar_path(path).write_text(json.dumps(side))
    with pytest.raises(ReplayError, match=r"bags\.meta\.json: malformed timing sidecar: index_inputs"):
        Replay(load_trace(path), "cpu").prepare()


def test_a_large_skewed_index_input_keeps_its_share_of_distinct_values():
    """Index tensors past TILE elements are otherwise filled by repeating one random block; a
    skewed one is drawn whole, or its distinct values would be capped at the block's."""
    from pytest_mystique.distributions import Skew
    from pytest_mystique.ranges import IntRange
    from pytest_mystique.tensors import TILE

    n = TILE + TILE // 2
    factory = TensorFactory(torch.device("cpu"))
    ref = TensorRef(1, 1, 0, n, 8, "cpu", "int64", (n,), (1,))
    factory.constrain(ref, IntRange(0, 10_000_000))
    factory.skews[ref] = Skew(0.6, 0.01)
    _, counts = factory.make(ref).unique(return_counts=True)
    assert counts.numel() == round(0.6 * n) and counts.max().item() / n == pytest.approx(0.01, rel=0.1)

def test_a_number_made_again_under_reused_ids_keeps_the_value_earlier_ops_read():
    """A writer gives two numbers of a step one storage id, made at different times at an address
    it recycled (Mixtral's ``sorted // top_k`` in two layers; LongT5's bucket scale and, later, a
    divisor). In one allocation of the replay, the second's draw, made when the build reached its
    op, replaced the value the first one's ops had been built with, and the iterations read it:
    Mixtral's index, checked against the first divisor, went out of range in every iteration;
    LongT5's scale, 1 at the build, became the divisor's 38 and its bucket indices negative. A
    number alone in its storage gets an allocation of its own. One that is an element of a larger
    input shares that input's: it keeps the values there that lie in its range."""
    from pytest_mystique.ranges import SIZES, IntRange

    factory = TensorFactory(torch.device("cpu"))
    first, second = (TensorRef(i, 7, 0, 1, 8, "cpu", "int64", (), ()) for i in (1, 2))
    for ref in (first, second):
        factory.constrain(ref, IntRange(0, 1000))
    a = factory.make(first)
    value = int(a)
    assert 0 <= int(factory.make(second)) < 1000 and int(a) == value
    scale, divisor = (TensorRef(i, 8, 0, 1, 8, "cpu", "int64", (), ()) for i in (3, 4))
    s = factory.make(scale)  # (no range of its own: 1 or 2)
    drawn = int(s)
    factory.constrain(divisor, SIZES)
    assert 8 <= int(factory.make(divisor)) < 65 and int(s) == drawn and drawn in (1, 2)

    row = TensorRef(5, 9, 0, 4, 8, "cpu", "int64", (4,), (1,))
    factory.reserve(row)
    factory.constrain(row, IntRange(0, 1000))
    whole = factory.make(row)
    element, narrower = (TensorRef(i, 9, 2, 1, 8, "cpu", "int64", (), ()) for i in (6, 7))
    factory.constrain(element, IntRange(0, 1000))
    assert int(factory.make(element)) == int(whole[2])
    factory.constrain(narrower, IntRange(int(whole[2]) + 1, int(whole[2]) + 2))  # (a narrower range draws again)
    assert int(factory.make(narrower)) == int(whole[2])


def test_numbers_a_writer_gave_one_storage_id_read_their_own_values_in_the_iterations(tmp_path):
    """The same, end to end: a step whose ``ids * 2`` indexes a table and whose ``y / 7`` divides,
    its trace edited so that the two numbers share a storage id (as LongT5's did). Without a record,
    the scale is drawn 1 or 2 and the divisor from 8 to 64: in one allocation, the build checked the
    indices with the scale, and the first iteration read the divisor's value there and failed on
    an index out of range."""
    table, ids, y = torch.randn(3, 4), torch.randint(0, 2, (16,)), torch.randn(8)

    def step():
        return table[ids * 2].sum() + (y / 7).sum()

    path = tmp_path / "numbers.json.gz"
    _captured_without_records(step, path)
    data = read_json(path)
    scale, divisor = (next(v for n in data["nodes"] if n["name"] == name
                           for v, shape in zip(n["inputs"]["values"], n["inputs"]["shapes"])
                           if _is_tensor_value(v) and shape == [])
                      for name in ("aten::mul", "aten::div"))  # fmt: skip
    assert scale[0] != divisor[0]
    divisor[1] = scale[1]
    replay = Replay(load_trace(write_json(path, data)), "cpu").prepare()
    assert replay.report.ops_skipped == 0, replay.report.skipped_list()
    replay.run()


def test_recorded_values_and_quantiles_fill_views_and_large_tensors():
    """A small input's recorded values go to its own elements even where it is a view into a larger
    allocation (the rest drawn from those values' spread); a tensor past TILE elements drawn from
    quantiles repeats one block that keeps their spread. Each level of the quantiles is a multiple
    of the cell width the draws are mapped through."""
    from pytest_mystique.sidecar import QUANTILE_LEVELS
    from pytest_mystique.tensors import QUANTILE_CELLS, TILE

    assert all((level * QUANTILE_CELLS).is_integer() for level in QUANTILE_LEVELS)
    factory = TensorFactory(torch.device("cpu"))
    factory.reserve(TensorRef(1, 7, 0, 64, 4, "cpu", "float32", (64,), (1,)))  # (the whole allocation)
    view = TensorRef(2, 7, 8, 4, 4, "cpu", "float32", (4,), (1,))
    factory.float_values[view] = (-3.0, 0.5, 2.0, 10.0)
    t = factory.make(view)
    assert t.tolist() == [-3.0, 0.5, 2.0, 10.0]
    whole = torch.empty(0).set_(t.untyped_storage(), 0, (64,), (1,))
    assert -3.0 <= float(whole.min()) and float(whole.max()) <= 10.0 and whole.unique().numel() > 8
    n = TILE + TILE // 2
    big = TensorRef(3, 8, 0, n, 4, "cpu", "float32", (n,), (1,))
    source = torch.log(torch.rand(1 << 16, generator=torch.Generator().manual_seed(0)))
    factory.float_quantiles[big] = tuple(torch.quantile(source, torch.tensor(QUANTILE_LEVELS)).tolist())
    drawn = factory.make(big)
    assert torch.equal(drawn[TILE:], drawn[: n - TILE])
    assert float(drawn[:TILE].median()) == pytest.approx(float(source.median()), abs=0.02)
    assert float(drawn.min()) >= float(source.min()) and float(drawn.max()) <= float(source.max())


def test_packed_sequences_get_consistent_lengths_and_batch_sizes(tmp_path):
    """A packed LSTM: ``_pack_padded_sequence`` needs lengths sorted from the longest down, each at
    most the padded length, summing to the packed rows; the recurrent kernel and
    ``_pad_packed_sequence`` trust the batch sizes (with 0s and 1s the latter reads outside its
    memory). The replay gives both exact values consistent with the recorded shapes, and every op
    replays with the recorded output shapes."""
    rnn, x = torch.nn.LSTM(8, 16, num_layers=2, batch_first=True), torch.randn(5, 12, 8)
    lengths = torch.tensor([12, 9, 9, 4, 1])

    def step():
        packed = torch.nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True)
        torch.nn.utils.rnn.pad_packed_sequence(rnn(packed)[0], batch_first=True)[0].sum().backward()

    replay = _captured(tmp_path, "packed", step)
    rep = replay.report
    assert rep.ops_skipped == 0 and rep.ops_replayed == rep.ops_total, rep.skipped_list()
    assert not any("differs from the trace" in n for n in rep.notes), rep.notes
    [lens] = [t for _, t in replay.inputs() if t.dtype == torch.int64 and t.shape == (5,)]
    assert lens.tolist() == sorted(lens.tolist(), reverse=True) and lens[0] <= 12 and int(lens.sum()) == 35
    replay.run()


def test_host_tensors_stay_in_host_memory_on_a_gpu(tmp_path, resnet_ddp):
    """Planned for a device other than the CPU (here ``meta``, which needs no GPU): a trace recorded
    on a GPU keeps the tensors it had in host memory there (the DDP ResNet's 0-dim counts and
    scales), so a copy between host and device stays one; a CPU trace's tensors all go to the
    device, except the arguments a GPU kernel reads on the host (a packed sequence's lengths,
    which ``pack_padded_sequence`` refuses on a GPU). On the CPU nothing is marked."""
    trace = parse_trace(resnet_ddp, "resnet_ddp")
    replay = Replay(trace, "meta")
    planned = replay._plan()
    refs = [ref for p in planned for v in p.values for ref in (getattr(v, "refs", None) or [getattr(v, "ref", None)])
            if ref is not None]  # fmt: skip
    on_host = {r for r in refs if r.device == "cpu"}
    assert replay._host_kept and on_host and len(on_host) < len(set(refs))
    assert replay.factory.host == on_host
    lstm, x, lengths = torch.nn.LSTM(8, 16, batch_first=True), torch.randn(5, 12, 8), torch.tensor([12, 9, 9, 4, 1])
    capture_step(lambda: lstm(torch.nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True)),
                 tmp_path / "packed.json.gz", warmup=1, runs=1, min_warmup_s=0)  # fmt: skip
    trace = load_trace(tmp_path / "packed.json.gz")
    replay = Replay(trace, "meta")
    planned = replay._plan()
    [pack] = [p for p in planned if p.node.name == "aten::_pack_padded_sequence"]
    [lstm_op] = [p for p in planned if p.node.name == "aten::lstm"]  # its .data overload: (data, batch_sizes, ...)
    assert not replay._host_kept and replay.factory.host == {pack.values[1].ref, lstm_op.values[1].ref}
    cpu = Replay(trace, "cpu")
    cpu._plan()
    assert not cpu.factory.host
    # Tensor by tensor: a host tensor and a device tensor of one storage id (a writer gives every
    # empty tensor the same one, and reuses freed ones) get allocations of their own. (Zeros: the
    # meta device draws no random numbers.)
    factory = TensorFactory(torch.device("meta"))
    host, dev = (TensorRef(i, 7, 0, 4, 4, d, "float32", (4,), (1,)) for i, d in ((1, "cpu"), (2, "cuda:0")))
    factory.host.add(host)
    factory.zeros |= {host, dev}
    assert factory.make(host).device.type == "cpu" and factory.make(dev).device.type == "meta"
    assert factory.make(host).device.type == "cpu"  # (the host allocation again)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU (MYSTIQUE_TEST_GPU=1 leaves it visible)")
def test_a_mask_made_from_host_lengths_reads_a_device_copy_on_a_gpu(tmp_path):
    """A CPU trace on a GPU: a packed sequence's lengths stay in host memory for
    ``pack_padded_sequence``, and the mask the step makes from them beside device tensors reads a
    copy on the device, made in each iteration before it; every op replays, and a sparse input
    of the step is rebuilt on the device. The capture helper's sidecar says the step ran on the
    CPU although the process had used the GPU before."""
    lstm, lengths = torch.nn.LSTM(8, 16, batch_first=True), torch.tensor([12, 9, 9, 4, 1])
    x = torch.randn(5, 12, 8, requires_grad=True)  # (the packing's backward reads the batch sizes on the host)
    adj = torch.eye(16).to_sparse()

    def step():
        packed = torch.nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True)
        out, _ = torch.nn.utils.rnn.pad_packed_sequence(lstm(packed)[0], batch_first=True, total_length=12)
        mask = torch.arange(12)[None, :] < lengths[:, None]
        (torch.sparse.mm(adj, (out * mask[..., None]).sum(1).t()).sum()).backward()

    torch.zeros(1, device="cuda")  # (this process uses the GPU: the sidecar still says the step ran on the CPU)
    capture_step(step, tmp_path / "masked.json.gz", warmup=1, runs=1, min_warmup_s=0)
    assert load_sidecar(tmp_path / "masked.json.gz")["device"] == "cpu"
    replay = Replay(load_trace(tmp_path / "masked.json.gz"), "cuda").prepare()
    rep = replay.report
    assert rep.ops_skipped == 0 and rep.ops_replayed == rep.ops_total, rep.skipped_list()
    assert any("copied to cuda" in n for n in rep.notes) and any("sparse COO tensor of 16 " in n for n in rep.notes)
    assert any(s.name == "aten::_pack_padded_sequence_backward" for s in replay.steps)
    copies = [s for s in replay.steps if s.name == "aten::_to_copy" and s.view]
    assert copies
    seen = []
    replay.run(lambda s, r: seen.append(r.device.type) if s in copies else None)
    assert seen and set(seen) == {"cuda"}
    replay.run()
    torch.cuda.synchronize()


def test_batch_norm_statistics_keep_relu_activations_mixed():
    """The CNN's first block (convolution, batch norm with its running statistics, ReLU): every
    channel after the ReLU holds both zeros and positive values, as in the original model (37-64%
    positive there). Running means drawn from [-1, 1) left channels all zero or all positive
    (0.07% to 99.99%), and the max pooling after them ran on constant data."""
    replay = Replay(load_trace(bundled("cnn_infer")), "cpu").prepare()
    positive = []

    def after(step, result):
        if step.name == "aten::relu":
            out = result[0] if isinstance(result, tuple) else result
            positive.append((out > 0).float().mean(dim=(0, 2, 3)))

    replay.run(after_step=after)
    assert len(positive) == 3 and positive[0].numel() == 32
    assert 0.1 < float(positive[0].min()) and float(positive[0].max()) < 0.9, positive[0]


def test_optimizer_state_starts_at_zero_and_follows_the_gradients():
    """AdamW's moments in the bundled transformer's training step: inputs only the optimizer's step
    uses and writes start at zero, as the optimizer makes them, so the second moment of the
    embedding (1000 rows, 256 tokens a step) keeps zero rows where no token's gradient reached it,
    as in the original, and the square root over it runs on them (seeded moments had none). The
    step counters keep their seeded values, and every iteration starts from zero again."""
    replay = Replay(load_trace(bundled("transformer_train")), "cpu").prepare()
    assert any("optimizer state tensor(s)" in n for n in replay.report.notes)
    assert replay.factory.zeros and all(len(r.shape) > 0 for r in replay.factory.zeros)
    roots = []

    def after(step, result):
        out = result[0] if isinstance(result, tuple) else result
        if step.name == "aten::sqrt" and tuple(out.shape) == (1000, 128):
            roots.append(out)

    for _ in range(2):
        replay.reset_state()
        replay.run(after_step=after)
    assert len(roots) == 2
    for root in roots:
        zero_rows = float((root == 0).all(dim=1).float().mean())
        assert 0.5 < zero_rows < 1.0, zero_rows


class _Preconditioned(torch.optim.Optimizer):
    """A Shampoo-like step (torch-optimizer's Shampoo computes its roots so): each matrix
    parameter's preconditioner, started at ``eps * I``, accumulates ``g g^T`` and is raised to
    the power -1/4 through its singular values."""

    def __init__(self, params, lr=1e-3, eps=1e-4):
        super().__init__(params, {"lr": lr, "eps": eps})

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            for p in group["params"]:
                g = p.grad.reshape(p.shape[0], -1)
                state = self.state[p]
                if not state:
                    state["precond"] = group["eps"] * torch.eye(p.shape[0])
                precond = state["precond"]
                precond.add_(g @ g.T)
                u, s, v = torch.svd(precond)
                p.add_((u @ s.pow(-0.25).diag() @ v.T @ g).view_as(p), alpha=-group["lr"])


def _trained_by(tmp_path, optimizer):
    """The prepared replay of a two-layer network's training step by ``optimizer`` (a class of
    one), every op of it replayed."""
    model = torch.nn.Sequential(torch.nn.Linear(8, 32, bias=False), torch.nn.Tanh(), torch.nn.Linear(32, 4, bias=False))
    opt = optimizer(model.parameters())
    x = torch.randn(16, 8)

    def step():
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()

    replay = _captured(tmp_path, "train", step)
    rep = replay.report
    assert rep.ops_skipped == 0 and rep.ops_replayed == rep.ops_total, rep.skipped_list()
    return replay


def test_a_preconditioner_the_optimizer_factorises_starts_nonsingular(tmp_path):
    """Optimizer state starts at zero (above), but for a square matrix the step factorises: a
    preconditioner, which the optimizer starts nonsingular (Shampoo's at ``eps * I``). From zero,
    its ``svd`` found zero singular values (``g g^T`` of a 32 x 8 gradient has rank 8), their
    -1/4th powers were infinite, and the next iteration's ``svd`` failed on infinite data
    (torch-optimizer's Shampoo did so). It starts, and is reset, at a small multiple of the
    identity, as the optimizer starts it."""
    replay = _trained_by(tmp_path, _Preconditioned)
    rep = replay.report
    assert any("2 optimizer state matri(ces) that its step factorises" in n and "times the identity" in n for n in rep.notes)
    assert {tuple(r.shape) for r in replay.factory.preconditioners} == {(32, 32), (4, 4)}, replay.factory.preconditioners
    assert not any(len(r.shape) == 2 and r.shape[0] == r.shape[1] for r in replay.factory.zeros), replay.factory.zeros
    for _ in range(3):
        replay.between_iterations()
        replay.run()
    params = [replay.env[slot] for (ref, _), slot in replay._externals.items() if tuple(ref.shape) in ((32, 8), (4, 32))]
    assert len(params) == 2 and all(bool(torch.isfinite(p).all()) for p in params), params
    replay.reset_state()
    roots = [replay.env[slot] for (ref, _), slot in replay._externals.items() if ref in replay.factory.preconditioners]
    assert len(roots) == 2 and all(torch.equal(m, PRECONDITIONER_START * torch.eye(len(m))) for m in roots), roots


class _PackedTriangular(torch.optim.Optimizer):
    """A PSGD-like step (heavyball's PSGDKron keeps its factors so by default): each matrix
    parameter's triangular factor, started at the identity, is kept as a line of its upper
    triangle, unpacked into a matrix each step, moved by the momentum's outer product, read on a
    log scale by its largest element, solved against the momentum, and packed back."""

    def __init__(self, params, lr=1e-3):
        super().__init__(params, {"lr": lr})

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            for p in group["params"]:
                g = p.grad.reshape(p.shape[0], -1)
                n = p.shape[0]
                rows, cols = torch.triu_indices(n, n)
                state = self.state[p]
                if not state:
                    state["line"], state["momentum"] = torch.eye(n)[rows, cols], torch.zeros_like(g)
                momentum = state["momentum"].mul_(0.9).add_(g)
                factor = torch.zeros(n, n)
                factor[rows, cols] = state["line"]
                factor.add_(1e-3 * torch.triu(momentum @ momentum.T))
                scale = factor.abs().amax().log()
                solved = torch.linalg.solve_triangular(factor, momentum, upper=True)
                p.add_(solved.view_as(p) * torch.exp(-scale), alpha=-group["lr"])
                state["line"].copy_(factor[rows, cols])


def test_a_preconditioner_kept_packed_starts_nonsingular(tmp_path):
    """Optimizer state whose values reach a matrix its step solves against is a preconditioner
    even where it is not that matrix: PSGD keeps each triangular factor as a line of its upper
    triangle and unpacks it (``index_put_``) into the matrix that ``linalg_solve_triangular``
    reads. From zero, the log of the factor's largest element was -inf and the solve divided by
    its zero diagonal: the replay's data went NaN (heavyball's PSGDKron did so). The line starts
    at a small value in every element, which unpacks into a nonsingular triangle. The momentum,
    whose outer product the step adds to the unpacked factor, reaches it only through arithmetic:
    it is no preconditioner, and starts at zero."""
    replay = _trained_by(tmp_path, _PackedTriangular)
    rep = replay.report
    assert {tuple(r.shape) for r in replay.factory.preconditioners} == {(528,), (10,)}, replay.factory.preconditioners
    assert {tuple(r.shape) for r in replay.factory.zeros} == {(32, 8), (4, 32)}, replay.factory.zeros
    assert any("2 optimizer state tensor(s) whose values reach a matrix its step factorises or solves against" in n
               for n in rep.notes), rep.notes  # fmt: skip
    for _ in range(3):
        replay.between_iterations()
        replay.run()
    assert not any("NaN" in n for n in rep.notes), rep.notes
    params = [replay.env[slot] for (ref, _), slot in replay._externals.items()
              if tuple(ref.shape) in ((32, 8), (4, 32)) and ref not in replay.factory.zeros]  # fmt: skip
    assert len(params) == 2 and all(bool(torch.isfinite(p).all()) for p in params), params
    replay.reset_state()
    lines = [replay.env[slot] for (ref, _), slot in replay._externals.items() if ref in replay.factory.preconditioners]
    assert len(lines) == 2 and all(bool((t == PRECONDITIONER_START).all()) for t in lines), lines


def test_optimizer_state_written_through_a_view_starts_at_zero(tmp_path):
    """Adam keeps a complex parameter's moments as complex tensors and updates them through
    ``view_as_real``: the step writes them only through that view. They are optimizer state all
    the same and start at zero; drawn at random, the second moment went negative and the square
    root over it made the replay's data NaN."""
    weight = torch.nn.Parameter(torch.randn(16, 8, dtype=torch.cfloat))
    x = torch.randn(32, 16, dtype=torch.cfloat)
    opt = torch.optim.Adam([weight], lr=1e-3)

    def step():
        opt.zero_grad()
        (x @ weight).abs().square().mean().backward()
        opt.step()

    path = tmp_path / "complex_adam.json.gz"
    capture_step(step, path, warmup=2, runs=1, min_warmup_s=0)
    replay = Replay(load_trace(path), "cpu").prepare()
    assert replay.report.ops_skipped == 0, replay.report.skipped_list()
    complex_zeros = [r for r in replay.factory.zeros if r.dtype.startswith("complex")]
    assert len(complex_zeros) == 2, sorted(replay.factory.zeros, key=str)  # the two moments
    roots = []

    def after(step, result):
        if step.name == "aten::sqrt":
            roots.append(result)

    replay.reset_state()
    replay.run(after_step=after)
    assert roots and all(bool(torch.isfinite(r).all()) for r in roots)
    assert not any("NaN" in n for n in replay.report.notes), replay.report.notes


@pytest.mark.parametrize("name", ["mlp_train", "transformer_train"])
def test_every_input_a_step_writes_is_refilled_between_iterations(name):
    """A training step writes its parameters, some through an alias autograd made of them (the
    optimizer's update lands in the parameter's memory through another tensor). Every input whose
    memory an iteration changed gets fresh data before the next, so values do not drift over many
    iterations; and the replay's data stays finite."""
    replay = Replay(load_trace(bundled(name)), "cpu").prepare()
    assert not any("NaN" in n for n in replay.report.notes), replay.report.notes
    replay.reset_state()
    before = [t.clone() for _, t in replay.inputs()]
    replay.run()
    after = [t.clone() for _, t in replay.inputs()]
    written = [i for i, (a, b) in enumerate(zip(before, after)) if not torch.equal(a, b)]
    assert written
    replay.reset_state()
    stale = [i for i in written if torch.equal(replay.inputs()[i][1], after[i])]
    assert not stale, [tuple(replay.inputs()[i][0].shape) for i in stale]


def test_written_state_is_reseeded_every_few_iterations_then_one_iteration_runs(monkeypatch):
    """Before each timed iteration the measurement calls ``between_iterations``: every
    ``RESEED_EVERY``-th call re-seeds the state the step writes and runs one untimed iteration, so
    that the timed ones find that state just read and written, as an original step finds it; the
    calls in between do nothing (re-seeding before every iteration rewrote a recommender's 256 MB
    table each time, and its step took 1.25 times its original's on a host whose cache held it).
    Over many iterations the parameters stay finite and near their seeded range. A step that
    writes no input (inference) runs nothing extra."""
    replay = Replay(load_trace(bundled("mlp_train")), "cpu").prepare()
    calls = []
    real_reset, real_run = replay.reset_state, replay.run
    monkeypatch.setattr(replay, "reset_state", lambda: (calls.append("reset"), real_reset())[1])
    monkeypatch.setattr(replay, "run", lambda *a, **k: (calls.append("run"), real_run(*a, **k))[1])
    n = replay_module.RESEED_EVERY
    for i in range(3 * n):
        calls.append(i)
        replay.between_iterations()
        replay.run()  # the timed iteration
    extra = [c for c in calls if c in ("reset", "run")]
    assert extra.count("reset") == 3 and len(extra) == 3 * n + 6, extra
    for k in range(3):  # re-seeded and run untimed before the timed iterations 0, n, 2n
        at = calls.index(k * n)
        assert calls[at + 1 : at + 4] == ["reset", "run", "run"], calls[at : at + 4]
    weights = [t for ref, t in replay.inputs() if len(ref.shape) == 2]
    assert weights and all(torch.isfinite(w).all() and float(w.abs().max()) < 1.0 for w in weights)
    inference = Replay(load_trace(bundled("cnn_infer")), "cpu").prepare()
    ran = []
    monkeypatch.setattr(inference, "run", lambda *a, **k: ran.append(1))
    for _ in range(n + 1):
        inference.between_iterations()
    assert not ran


def test_offsets_are_monotone(tmp_path):
    # A tiny embedding-bag step captured from torch itself.
    from pytest_mystique.recorder import capture

    bag = torch.nn.EmbeddingBag(100, 8, mode="sum")
    idx = torch.randint(0, 100, (40,))
    offsets = torch.tensor([0, 7, 15, 30])
    with capture(tmp_path / "bag.json"):
        bag(idx, offsets)
    trace = load_trace(tmp_path / "bag.json")
    replay = Replay(trace, "cpu").prepare()
    assert replay.report.ops_skipped == 0
    off = [t for r, t in replay.inputs() if r.shape == (4,) and r.dtype == "int64"]
    assert off
    values = off[0]
    assert values[0] == 0 and bool((values[1:] >= values[:-1]).all()) and int(values[-1]) <= 40


def test_duplicated_trace_runs_each_op_twice():
    data = read_json(corpus("vit_infer.json.gz"))
    base = Replay(parse_trace(data, "vit"), "cpu").prepare()
    double = Replay(parse_trace(duplicate_ops(data), "vit2"), "cpu").prepare()
    assert double.report.ops_total == 2 * base.report.ops_total
    assert double.report.ops_replayed == 2 * base.report.ops_replayed


@pytest.mark.parametrize(
    "schema",
    [
        "os::system(str command) -> int",
        "builtins::eval(str source) -> Any",
        "__import__::os(str x) -> Any",
        "aten::__class__(Tensor self) -> Tensor",
        "torch.nn::functional(Tensor self) -> Tensor",
        "aten::add.__dict__(Tensor self) -> Tensor",
        "aten::no_such_op(Tensor self) -> Tensor",
    ],
)
def test_resolution_never_leaves_torch_ops(schema):
    with pytest.raises(Unsupported):
        resolve(schema)


def test_resolution_finds_overloads():
    assert resolve("aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor") is torch.ops.aten.add.Tensor
    assert resolve("aten::cos(Tensor self) -> Tensor") is torch.ops.aten.cos.default
    assert resolve("aten::__and__.Tensor(Tensor self, Tensor other) -> Tensor") is torch.ops.aten.__and__.Tensor
    # names that Python's ``type`` also has (``X | Y`` unions): the operator, not the metaclass's method
    assert resolve("aten::__or__.Tensor(Tensor self, Tensor other) -> Tensor") is torch.ops.aten.__or__.Tensor


def test_bogus_op_is_skipped_with_reason(tmp_path):
    data = read_json(corpus("vit_infer.json.gz"))
    set_op_schema(data, "gelu", "os::system(str command) -> int")
    replay = Replay(parse_trace(data, "t"), "cpu").prepare()
    skipped = replay.report.skipped_list()
    assert skipped and skipped[0]["op"] == "aten::gelu"
    assert "not registered" in skipped[0]["reason"]
    replay.run()


def test_memory_guard_refuses_before_allocating(tmp_path):
    data = read_json(corpus("vit_infer.json.gz"))
    make_huge(data)
    path = write_json(tmp_path / "huge.json", data)
    with pytest.raises(ReplayError, match="memory limit"):
        Replay(load_trace(path), "cpu", max_memory=8 << 30).prepare()


LIMITED = pytest.mark.skipif(not limits_allocations(torch.device("cpu")),
                             reason="the build's allocation limit applies only on Linux without CUDA")


@LIMITED
def test_an_op_that_asks_for_more_than_the_memory_limit_is_skipped_not_run(tmp_path):
    """The inputs fit the limit, but a damaged padding makes ViT's patch convolution ask for a
    2 GB output (8 x 192 x 568 x 568 floats), which Linux would let it fill (and, with a few more,
    kill the session). The build's address-space limit refuses that allocation: the convolution
    is skipped with the reason, every other op replays, and the process's limit is put back."""
    import resource

    data = read_json(corpus("vit_infer.json.gz"))
    conv = next(n for n in data["nodes"] if n["name"] == "aten::conv2d")
    conv["inputs"]["values"][4] = [4500, 4500]  # padding
    before = resource.getrlimit(resource.RLIMIT_AS)
    replay = Replay(parse_trace(data, "damaged.json"), "cpu", max_memory=64 << 20).prepare()
    assert resource.getrlimit(resource.RLIMIT_AS) == before
    skipped = replay.report.skipped_list()
    assert [s["op"] for s in skipped] == ["aten::conv2d"], skipped
    assert skipped[0]["reason"] == ("out of memory: it asks for 1.8 GiB at once, more than the 64.0 MiB memory limit "
                                    "(--mystique-max-memory) leaves")  # fmt: skip
    assert replay.report.ops_replayed == replay.report.ops_total - 1
    replay.run()


@LIMITED
def test_the_builds_own_work_out_of_memory_is_an_error_naming_the_trace(monkeypatch):
    """Where the replay's own work (not an op) meets the limit, the build stops with an error that
    names the trace and the limit, and the process's limit is put back."""
    import resource

    def no_memory(self, slot):
        raise MemoryError

    before = resource.getrlimit(resource.RLIMIT_AS)
    monkeypatch.setattr(replay_module.Replay, "_release", no_memory)
    with pytest.raises(ReplayError, match=r"vit_infer.json.gz: the build ran out of memory: the 64.0 MiB memory limit"):
        Replay(load_trace(corpus("vit_infer.json.gz")), "cpu", max_memory=64 << 20).prepare()
    assert resource.getrlimit(resource.RLIMIT_AS) == before


def test_cuda_trace_maps_onto_cpu():
    trace = load_trace(corpus("param_linear_v101.json.gz"))
    assert any(isinstance(v, TensorRef) and v.device.startswith("cuda") for n in trace.nodes for v in n.inputs)
    replay = Replay(trace, "cpu").prepare()
    assert replay.report.ops_skipped == 0, json.dumps(replay.report.skipped_list())
    assert all(t.device.type == "cpu" for t in replay.env if isinstance(t, torch.Tensor))


def test_a_gpu_captured_mixture_of_experts_replays_whole_on_the_cpu(monkeypatch):
    """A Mixtral layer's inference captured on an H100 (tests/data/README.md): its experts take
    their tokens through a histogram of integer expert ids (which the CPU's kernel refuses: the
    report lists it counted as float64) and a grouped matrix product, and put them back through
    the sort's inverse permutation. Every op replays on the CPU; with the index check a GPU runs
    before each call, only the index whose divisor the trace records without a value reads seeded
    indices, and iterations read no unwritten memory."""
    trace = load_trace(ROOT / "tests" / "data" / "mixtral_infer_h100.json.gz")
    assert {ref.device for n in trace.nodes for v in n.inputs for ref in tensors_of([v])} >= {"cuda:0"}
    for checked_first in (False, True):
        if checked_first:
            monkeypatch.setattr(replay_module, "RAISES_ON_BAD_INDICES", set())
        replay = Replay(trace, "cpu").prepare()
        rep = replay.report
        assert rep.ops_skipped == 0 and rep.ops_replayed == rep.ops_total, rep.skipped_list()
        sdpa = "aten::scaled_dot_product_attention"
        older = [{"op": sdpa, "count": 2, "replacement": f"{sdpa} (enable_gqa=True, which this torch lacks: keys and "
                  f"values repeated to the query's heads, x2)"}]  # (before torch 2.5)  # fmt: skip
        assert sorted(rep.substitutions_list(), key=lambda s: s["op"]) == [
            {"op": "aten::histc", "count": 2, "replacement": "aten::histc (integers counted as float64, the counts "
             "converted back)"}, *(older if "enable_gqa" not in {a.name for a in arg_specs(resolve(sdpa + "("))} else [])]  # fmt: skip
        seeded = [n for n in rep.notes if "indices computed from the replay's data" in n]
        assert [n.split(":")[2] for n in seeded] == ["index"], rep.notes
        assert not any("NaN or inf" in n for n in rep.notes), rep.notes
        for _ in range(3):
            replay.reset_state()
            replay.run()


@pytest.fixture(scope="module")
def resnet_ddp():
    return read_json(corpus("param_resnet_ddp_1gpu.json.gz"))


def test_cudnn_only_ops_are_substituted_on_cpu(resnet_ddp):
    # batch_norm is replayed through its part that returns the statistics its backward reads
    data = extract_ops(resnet_ddp, {"aten::cudnn_batch_norm_backward", "aten::_batch_norm_impl_index"}, limit=2)
    replay = Replay(parse_trace(data, "bn"), "cpu").prepare()
    rep = replay.report
    assert rep.ops_skipped == 0, rep.skipped_list()
    assert rep.ops_replayed == rep.ops_total == 4
    assert rep.substitutions_list() == [
        {"op": "aten::cudnn_batch_norm_backward", "replacement": "aten::native_batch_norm_backward", "count": 2}
    ]
    replay.run()


_FLASH_BWD = ("aten::_scaled_dot_product_flash_attention_backward(Tensor grad_out, Tensor query, Tensor key, "
              "Tensor value, Tensor out, Tensor logsumexp, Tensor cum_seq_q, Tensor cum_seq_k, SymInt max_q, "
              "SymInt max_k, float dropout_p, bool is_causal, Tensor philox_seed, Tensor philox_offset, *, "
              "float? scale=None) -> (Tensor grad_query, Tensor grad_key, Tensor grad_value)")
_EFFICIENT_BWD = ("aten::_scaled_dot_product_efficient_attention_backward(Tensor grad_out_, Tensor query, Tensor key, "
                  "Tensor value, Tensor attn_bias, Tensor out, Tensor logsumexp, Tensor philox_seed, Tensor "
                  "philox_offset, float dropout_p, bool[4] grad_input_mask, bool is_causal=False, *, float? "
                  "scale=None) -> (Tensor, Tensor, Tensor, Tensor)")


@pytest.mark.parametrize("kernel", ["flash", "efficient"])
def test_gpu_attention_kernels_run_as_the_cpu_flash_kernel(tmp_path, kernel):
    """A transformer trained on a GPU records the backward of scaled dot-product attention as
    FlashAttention's or the memory-efficient kernel's, which have no CPU kernel. Here a CPU
    capture's attention backward is rewritten as the GPU kernel's node (its schema, its extra
    arguments: sequence bookkeeping, random-number state); the replay runs it as the CPU flash
    backward, arguments mapped by name, and lists the substitution."""
    q = torch.randn(2, 4, 16, 8, requires_grad=True)
    capture_step(lambda: torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True).sum().backward(),
                 tmp_path / "sdpa.json.gz", warmup=1, runs=1, min_warmup_s=0)  # fmt: skip
    data = read_json(tmp_path / "sdpa.json.gz")
    node = next(n for n in data["nodes"] if n["name"] == "aten::_scaled_dot_product_flash_attention_for_cpu_backward")
    ins = node["inputs"]
    # (torch 2.4's observer records no strides: then the node is written without them too)
    vals, shapes, types, strides = ins["values"], ins["shapes"], ins["types"], ins.get("strides", [[]] * len(ins["values"]))
    undefined, seed = ([0, 0, 0, 0, 0, ""], [], "Tensor(nullptr (uninitialized))", []), \
        ([99001, 99002, 0, 1, 8, "cpu"], [], "Tensor(long int)", [])  # fmt: skip
    offset = ([99003, 99004, 0, 1, 8, "cpu"], [], "Tensor(long int)", [])
    tensors = list(zip(vals[:6], shapes[:6], types[:6], strides[:6]))  # grad_out, q, k, v, out, logsumexp
    drop, causal = (vals[6], [], "Double", []), (vals[7], [], "Bool", [])
    if kernel == "flash":
        name, schema = "aten::_scaled_dot_product_flash_attention_backward", _FLASH_BWD
        new = tensors + [undefined, undefined, (16, [], "Int", []), (16, [], "Int", []), drop, causal, seed, offset]
    else:
        name, schema = "aten::_scaled_dot_product_efficient_attention_backward", _EFFICIENT_BWD
        mask = ([True, True, True, False], [[], [], [], []], "GenericList[Bool,Bool,Bool,Bool]", [[], [], [], []])
        new = tensors[:4] + [undefined] + tensors[4:] + [seed, offset, drop, mask, causal]
    new.append(("<None>", [], "None", []))  # scale
    node["name"] = name
    node["inputs"] = {k: [x[i] for x in new] for i, k in enumerate(("values", "shapes", "types", "strides")[:len(ins)])}
    for a in node["attrs"]:
        if a["name"] == "op_schema":
            a["value"] = schema
    replay = Replay(parse_trace(data, "gpu_sdpa"), "cpu").prepare()
    rep = replay.report
    assert rep.ops_skipped == 0 and rep.ops_replayed == rep.ops_total, rep.skipped_list()
    subs = {s["op"]: s["replacement"] for s in rep.substitutions_list()}
    assert subs == {name: "aten::_scaled_dot_product_flash_attention_for_cpu_backward"}
    grads = []
    replay.run(lambda s, r: grads.extend(r) if s.name == name else None)
    assert len(grads) == 3 and all(g.shape == (2, 4, 16, 8) and torch.isfinite(g).all() for g in grads)


def test_collectives_in_a_single_rank_trace_are_skipped_with_reason(resnet_ddp):
    data = extract_ops(resnet_ddp, {"c10d::allreduce_", "c10d::broadcast_", "aten::view"})
    replay = Replay(parse_trace(data, "c"), "cpu").prepare()
    skipped = {s["op"]: s["reason"] for s in replay.report.skipped_list()}
    assert set(skipped) == {"c10d::allreduce_", "c10d::broadcast_"}
    assert all(r.startswith("collective:") for r in skipped.values())
    assert replay.report.ops_replayed == 1


def test_stream_and_pinning_ops_have_portable_forms():
    data = read_json(corpus("multirank/dlrm_8rank/rank-0.json.gz"))
    replay = Replay(parse_trace(extract_ops(data, {"aten::record_stream", "aten::pin_memory"}), "s"), "cpu").prepare()
    subs = {s["op"]: s["replacement"] for s in replay.report.substitutions_list()}
    if torch.cuda.is_available():
        assert replay.report.ops_skipped == 0
    else:
        assert subs == {"aten::record_stream": subs["aten::record_stream"], "aten::pin_memory": "aten::clone"}
        assert subs["aten::record_stream"].startswith("nothing")
        assert replay.report.ops_replayed == replay.report.ops_total == 2


def test_triton_kernels_are_skipped_with_reason(tmp_path):
    data = read_json(corpus("vit_infer.json.gz"))
    first = next(n for n in select_ops(parse_trace(data, "t")) if n.name == "aten::gelu")
    node = next(n for n in data["nodes"] if n["id"] == first.id)
    for a in node["attrs"]:
        if a["name"] == "kernel_backend":
            a["value"] = "triton"
        if a["name"] == "kernel_file":
            a["value"] = "_resources/triton_poi_fused_gelu_0.py"
    replay = Replay(parse_trace(data, "t"), "cpu").prepare()
    [s] = replay.report.skipped_list()
    assert s["op"] == "aten::gelu" and "Triton kernel (_resources/triton_poi_fused_gelu_0.py)" in s["reason"]


def test_code_torch_compile_generated_for_a_cpu_is_reported_missing():
    """On a CPU, torch.compile's fused kernels are C++ functions, not operators: a trace holds the
    ``Torch-Compiled Region`` range and the operators the code called (an extern matrix product),
    not the fused kernels. The report says so; with Triton kernels recorded (a GPU's), their skip
    reasons say it instead."""
    data = read_json(corpus("vit_infer.json.gz"))
    gelu = next(n for n in data["nodes"] if n["name"] == "aten::gelu")
    region = {"id": max(n["id"] for n in data["nodes"]) + 1, "name": "Torch-Compiled Region: 0/0",
              "ctrl_deps": gelu["ctrl_deps"], "inputs": {"values": [], "shapes": [], "types": []},
              "outputs": {"values": [], "shapes": [], "types": []}, "attrs": []}  # fmt: skip
    data["nodes"].append(region)
    replay = Replay(parse_trace(data, "t"), "cpu").prepare()
    assert any("torch.compile'd code" in n and "not in the trace" in n for n in replay.report.notes)
    for a in gelu["attrs"]:
        if a["name"] == "kernel_backend":
            a["value"] = "triton"
    replay = Replay(parse_trace(data, "t"), "cpu").prepare()
    assert not any("torch.compile'd" in n for n in replay.report.notes)
    assert "Triton kernel" in replay.report.skipped_list()[0]["reason"]


def test_out_overloads_foreach_noarg_and_custom_namespace_ops(tmp_path):
    from pytest_mystique.recorder import capture

    lib = torch.library.Library("mystiquetest", "DEF")  # a loadable op outside aten
    lib.define("scale(Tensor x, float f) -> Tensor")
    lib.impl("scale", lambda x, f: x * f, "CompositeExplicitAutograd")
    lib.define("tick() -> Tensor")
    lib.impl("tick", lambda: torch.ones(4), "CompositeExplicitAutograd")
    a, b, out = torch.randn(64, 64), torch.randn(64, 64), torch.empty(64, 64)
    params = [torch.randn(8) for _ in range(3)]
    with capture(tmp_path / "mix.json"):
        torch.add(a, b, out=out)  # out= overload
        torch._foreach_add_(params, [torch.ones(8)] * 3, alpha=0.5)  # tensor lists, foreach
        torch.ops.mystiquetest.scale(out, 2.0)
        torch.ops.mystiquetest.tick()  # no arguments
    trace = load_trace(tmp_path / "mix.json")
    names = [n.name for n in select_ops(trace)]
    assert {"aten::add", "aten::_foreach_add_", "mystiquetest::scale", "mystiquetest::tick"} <= set(names)
    replay = Replay(trace, "cpu").prepare()
    assert replay.report.ops_skipped == 0, replay.report.skipped_list()
    add = next(s for s in replay.steps if s.name == "aten::add")
    # alpha=1 is its default, and left out of the call
    assert add.op == "aten::add.out" and add.kwnames == ("out",), (add.op, add.kwnames)
    replay.run()


def test_ops_are_called_through_the_python_binding_a_program_calls(tmp_path):
    """The replay calls ``torch.add``, ``torch._C._nn.linear``, ``Tensor.add_``: what the program
    called, without the boxed ``OpOverload`` call's cost, which made steps of small ops slower
    than their original. Arguments equal to their default are left out. An op whose binding does
    not take the recorded arguments (``Tensor.to`` with a memory format, keyword-only there) keeps
    the ``OpOverload``. Either way the outputs are the same."""
    lin = torch.nn.Linear(16, 8)
    x = torch.randn(4, 16)

    def step():
        y = lin(x).add(1.0)
        y.add_(x[:, :8], alpha=2.0)
        z = x.view(4, 4, 2, 2).to(torch.float64, memory_format=torch.channels_last)
        return y.sum() + z.sum()

    replay = _captured(tmp_path, "bindings", step)
    assert replay.report.ops_skipped == 0, replay.report.skipped_list()
    fns = {s.op: s for s in replay.steps}
    assert fns["aten::linear.default"].fn is torch._C._nn.linear
    add = fns["aten::add.Tensor"]
    assert add.fn is torch._C._VariableFunctions.add and add.kwnames == () and len(add.args) == 2, add
    assert fns["aten::add_.Tensor"].fn is torch._C.TensorBase.add_ and fns["aten::add_.Tensor"].kwnames == ("alpha",)
    to = fns["aten::to.dtype"]
    assert to.fn is torch.ops.aten.to.dtype._op, to.fn
    compared = []
    for s in replay.steps:  # each out-of-place op's output against the OpOverload's, on the same inputs
        name, overload = s.op.split("::")[1].split(".")
        if s.fn is not to.fn and not name.endswith("_"):
            op = getattr(getattr(torch.ops.aten, name), overload)

            def both(*a, _fn=s.fn, _op=op, **k):
                got, want = _fn(*a, **k), _op(*a, **k)
                compared.append(_op)
                assert got.dtype == want.dtype and torch.equal(got, want), _op
                return got

            s.fn = both
    replay.invalidate()
    replay.run()
    assert torch.ops.aten.linear.default in compared and torch.ops.aten.add.Tensor in compared, compared


@pytest.mark.parametrize("sequence_numbers", [True, False], ids=["seq_ids", "no_seq_ids"])
def test_a_training_steps_forward_records_autograd_as_the_original_did(tmp_path, sequence_numbers):
    """The original's forward ops ran with autograd recording a graph (a node per op, the tensors
    it saves): work that is part of the step's time and not an op of the trace. The replay gives
    the parameters (what the optimizer updates and the forward reads) requires_grad and runs the
    forward ops with grad mode on; the backward and the optimizer's ops run without, as the
    autograd engine and the optimizer ran them. An op of the forward pass that ran with grad mode
    off (an in-place clamp of a parameter, which the program did under no_grad: its autograd
    sequence number says so) runs without recording, with a note. From a trace whose writer left
    every sequence number -1, nothing shows grad mode: the clamp is tried with recording, which
    autograd refuses, and runs without, with a note. An inference step records nothing."""
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(8, 16)

    def step():
        opt.zero_grad()
        with torch.no_grad():
            model[0].weight.clamp_(-1, 1)  # a max-norm constraint
        model(x).square().mean().backward()
        opt.step()

    path = tmp_path / "train.json.gz"
    capture_step(step, path, warmup=1, runs=1, min_warmup_s=0)
    if not sequence_numbers:
        data = read_json(path)
        for node in data["nodes"]:
            for attr in node.get("attrs", []):
                if attr["name"] == "seq_id":
                    attr["value"] = -1
        write_json(path, data)
    replay = Replay(load_trace(path), "cpu").prepare()
    rep = replay.report
    assert rep.ops_skipped == 0, rep.skipped_list()
    assert any("forward op(s) run with autograd recording" in n and "4 parameter" in n for n in rep.notes), rep.notes
    shown = any("that ran with grad mode off" in n and "aten::clamp_ x1" in n for n in rep.notes)
    refused = any("aten::clamp_: run without autograd recording, which refused it" in n for n in rep.notes)
    assert (shown, refused) == (sequence_numbers, not sequence_numbers), rep.notes
    assert not any(s.grad for s in replay.steps if s.name == "aten::clamp_")
    leaves = [t for _, t in replay.inputs() if t.requires_grad]  # the parameters, and views of them
    assert len({t.untyped_storage().data_ptr() for t in leaves}) == 4, leaves
    assert {tuple(p.shape) for p in model.parameters()} <= {tuple(t.shape) for t in leaves}
    seen = {}

    def look(s, r):
        out = r[0] if isinstance(r, tuple) else r
        if isinstance(out, torch.Tensor):  # (a view written in place under no_grad has no grad_fn to read)
            seen.setdefault(s.name, []).append((s.grad, out.requires_grad, s.grad and out.grad_fn is not None))

    grad_before = torch.is_grad_enabled()
    replay.run(look)
    assert torch.is_grad_enabled() == grad_before  # the caller's grad mode is restored
    assert all(g and req and fn for g, req, fn in seen["aten::linear"]), seen["aten::linear"]
    backward = [v for name, vs in seen.items() for v in vs if name in ("aten::mm", "aten::threshold_backward", "aten::sum")]
    assert backward and not any(g or req for g, req, _ in backward), backward
    def infer_step():
        with torch.no_grad():
            model(x).sum()

    infer = _captured(tmp_path, "infer", infer_step)  # (with grad mode on, see test_an_inference_run_with_grad_mode_on...)
    assert not any(s.grad for s in infer.steps) and not any("autograd recording" in n for n in infer.report.notes)


class _ResizedBuffers(torch.autograd.Function):
    """A solver's forward as GPyTorch's conjugate gradients run it: buffers made of the input,
    resized and written with ``out=`` (grad mode is off inside a Function's forward)."""

    @staticmethod
    def forward(ctx, h):
        buf = h * 2
        buf.resize_(h.numel())  # (autograd refuses to resize a tensor that requires grad)
        torch.mul(buf, 0.5, out=buf)
        return buf.view_as(h)

    @staticmethod
    def backward(ctx, grad):
        return grad


def test_the_forward_ops_that_ran_with_grad_mode_off_record_nothing(tmp_path):
    """Grad mode is off inside an ``autograd.Function``'s forward and a ``no_grad`` block of the
    forward pass, and the trace shows it: the dispatcher gives an op an autograd sequence number
    only where it ran with grad mode on. Those ops run without recording, as they did. Recorded
    like the rest of the forward, ``h * 2`` made a tensor that requires grad, which autograd
    refused to resize: the op was skipped (GPyTorch's training step skipped 20 ``resize_as_``
    calls so)."""
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(8, 16)

    def step():
        opt.zero_grad()
        h = model[1](model[0](x))
        with torch.no_grad():
            scale = h.abs().mean()  # (a statistic of the activations, kept out of the graph)
        (model[2](_ResizedBuffers.apply(h)) * scale).square().mean().backward()
        opt.step()

    replay = _captured(tmp_path, "train", step)
    rep = replay.report
    assert rep.ops_skipped == 0 and rep.ops_replayed == rep.ops_total, rep.skipped_list()
    assert any("that ran with grad mode off" in n and "aten::resize_ x1" in n for n in rep.notes), rep.notes
    assert not any("which refused it" in n for n in rep.notes), rep.notes
    grad = {(s.name, s.grad) for s in replay.steps if s.name in ("aten::linear", "aten::tanh", "aten::resize_", "aten::abs")}
    assert grad == {("aten::linear", True), ("aten::tanh", True), ("aten::resize_", False), ("aten::abs", False)}, grad
    replay.run()
    assert not any("NaN" in n or "subnormal" in n for n in rep.notes), rep.notes


@pytest.mark.parametrize("reentrant", [True, False], ids=["reentrant", "non_reentrant"])
def test_activation_checkpointings_recomputed_forward_records_as_it_did(tmp_path, reentrant):
    """Activation checkpointing runs each block's forward again in the backward pass with grad
    mode on, recording the graph that the block's backward then uses; the first pass ran with
    grad mode off where the checkpoint is reentrant (the other kind records it and drops what it
    saves). The sequence numbers show both: the recomputed ``linear`` runs with recording, where
    before every backward op ran without, and the first pass as it ran."""
    blocks = torch.nn.ModuleList(torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.GELU()) for _ in range(3))
    opt = torch.optim.SGD(blocks.parameters(), lr=0.01)
    x = torch.randn(8, 32, requires_grad=True)

    def step():
        opt.zero_grad()
        h = x
        for block in blocks:
            h = torch.utils.checkpoint.checkpoint(block, h, use_reentrant=reentrant)
        h.sum().backward()
        opt.step()

    replay = _captured(tmp_path, "train", step)
    rep = replay.report
    assert rep.ops_skipped == 0 and rep.ops_replayed == rep.ops_total, rep.skipped_list()
    assert any("op(s) of the backward pass that ran with grad mode on" in n and "aten::linear x3" in n
               for n in rep.notes), rep.notes  # fmt: skip
    linears = [(s.grad, s.node_id in replay._backward) for s in replay.steps if s.name == "aten::linear"]
    first = not reentrant
    assert linears == [(first, False)] * 3 + [(True, True)] * 3, linears
    recorded = []
    replay.run(lambda s, r: recorded.append(r.grad_fn is not None) if s.name == "aten::linear" else None)
    assert recorded == [first] * 3 + [True] * 3, recorded
    for _ in range(2):
        replay.between_iterations()
        replay.run()


def test_a_step_without_an_optimizer_records_the_graph_of_what_ops_with_grad_mode_on_read(tmp_path):
    """Without an optimizer's step to show the parameters (a manual update under no_grad, MAML's
    inner steps in an evaluation under no_grad that turns grad mode back on), the sequence
    numbers still show which ops ran with grad mode on: the floating inputs they read require
    grad, but for a batch norm's running statistics, which autograd refuses a flag, and the ops
    record. Before, nothing recorded in such a step. MAML's next inner step and its query pass
    read the adapted weights and the task's data with their graphs (an inner backward with
    ``create_graph`` keeps them: its own ops record), as the original's did, where before every
    graph still held was let go where a backward pass started, and most of the ops after it made
    none."""
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.BatchNorm1d(32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    x, y = torch.randn(8, 16), torch.randn(8, 4)

    def manual():
        grads = torch.autograd.grad(model(x).square().mean(), list(model.parameters()))
        with torch.no_grad():
            for p, g in zip(model.parameters(), grads):
                p.sub_(0.01 * g)

    net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))
    tasks = torch.randn(2, 8, 16)

    def maml():  # (two tasks, two inner steps each)
        with torch.no_grad(), torch.enable_grad():
            for task in tasks.unbind():
                fast = dict(net.named_parameters())
                for _ in range(2):
                    loss = torch.nn.functional.mse_loss(torch.func.functional_call(net, fast, (task,)), y)
                    grads = torch.autograd.grad(loss, list(fast.values()), create_graph=True)
                    fast = {n: p - 0.1 * g for (n, p), g in zip(fast.items(), grads)}
                torch.nn.functional.mse_loss(torch.func.functional_call(net, fast, (task,)), y).item()

    for name, step, linears in (("manual", manual, 2), ("maml", maml, 12)):
        replay = _captured(tmp_path, name, step)
        rep = replay.report
        assert rep.ops_skipped == 0 and rep.ops_replayed == rep.ops_total, rep.skipped_list()
        assert any("require grad: the step has a backward pass and no optimizer's step" in n for n in rep.notes), rep.notes
        assert not any("which refused it" in n for n in rep.notes), rep.notes
        recorded, lost = [], set()

        def look(s, r, recorded=recorded, lost=lost):
            if s.name == "aten::linear":
                recorded.append(r.grad_fn is not None)
            if s.grad and isinstance(r, torch.Tensor) and r.is_floating_point() and r.grad_fn is None:
                lost.add(s.name)  # (a recording op that made no graph: what it read had lost theirs)

        replay.run(look)
        assert recorded == [True] * linears, (name, recorded)
        assert not lost & {"aten::linear", "aten::sub", "aten::mul", "aten::mm", "aten::t"}, (name, lost)
        if name == "manual":  # (the running statistics do not require grad: the batch norm records)
            assert [s.grad for s in replay.steps if "batch_norm" in s.name and s.node_id not in replay._backward] == [True]
            running = [t for _, t in replay.inputs() if t.shape == (32,) and not t.requires_grad]
            assert len(running) == 2, running
        for _ in range(2):
            replay.between_iterations()
            replay.run()


def test_an_inference_run_with_grad_mode_on_records_its_graph_where_the_original_made_one(tmp_path):
    """An inference step run without ``torch.no_grad`` (a model in eval mode called as it is)
    records each op's graph for the parameters, which require grad: a node per op, the tensors
    it saves. The trace has no backward pass, but its sequence numbers advance past an op that
    made a node, and the replay's ops record there, the inputs those ops read requiring grad.
    Where no parameter requires grad (a frozen model) grad mode is on, the numbers stand still,
    and nothing records; a frozen backbone's ops make no node, and only the head's weights
    require grad. Before, nothing recorded in a step without a backward pass: six transformers
    models' replays took 0.73-0.83 of their originals' time inside operators. The data that the
    first layer reads stays without the flag, as the capture recorded it; of a trace captured
    elsewhere, it gets the flag with the weights (the trace does not tell them apart)."""
    torch.manual_seed(0)
    backbone = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.LayerNorm(32), torch.nn.GELU())
    head = torch.nn.Linear(32, 4)
    x = torch.randn(8, 16)
    weights = [(32, 16), (32,), (32,), (32,), (4, 32), (4,)]
    cases = {"trainable": ([True, True], weights, True), "unrecorded": ([True, True], [*weights, (8, 16)], False),
             "frozen": ([False, False], [], True), "backbone_frozen": ([False, True], [(4, 32), (4,)], True)}  # fmt: skip
    for name, (graphs_made, flags, records) in cases.items():
        backbone.requires_grad_(name in ("trainable", "unrecorded"))
        head.requires_grad_(name != "frozen")
        replay = _captured(tmp_path, f"infer_{name}", lambda: head(backbone(x)).sum(), scales=records)
        rep = replay.report
        assert rep.ops_skipped == 0 and rep.ops_replayed == rep.ops_total, rep.skipped_list()
        graphs = []
        replay.run(lambda s, r, graphs=graphs: graphs.append(r.grad_fn is not None) if s.name == "aten::linear" else None)
        assert graphs == graphs_made, (name, graphs)
        noted = [n for n in rep.notes if "its ops' autograd sequence numbers advance" in n]
        assert len(noted) == (name != "frozen"), rep.notes
        assert any("1 more that the capture recorded without the flag (data)" in n for n in noted) == (name == "trainable"), noted
        flagged = [tuple(t.shape) for _, t in replay.inputs() if t.requires_grad]
        assert sorted(flagged) == sorted(flags), (name, flagged)
    side = load_sidecar(tmp_path / "infer_trainable.json.gz")
    assert [r["requires_grad"] for r in side["float_inputs"] if r["shape"] == [8, 16]] == [False]
    side["float_inputs"][0]["requires_grad"] = "yes"
    sidecar_path(tmp_path / "infer_trainable.json.gz").write_text(json.dumps(side))
    with pytest.raises(ReplayError, match=r"infer_trainable\.meta\.json: malformed timing sidecar: float_inputs"):
        Replay(load_trace(tmp_path / "infer_trainable.json.gz"), "cpu").prepare()


def test_iterations_run_with_anomaly_detection_as_the_original_did(tmp_path):
    """A library may turn autograd's anomaly detection on for the whole process (RecBole's import
    does), and every node the step's autograd makes then saves a traceback: time the trace does
    not show. The capture records the mode, and the replay's iterations run with it as the
    original had it, whatever the replaying process has, which gets its own back after."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
    x = torch.randn(8, 16)
    for anomaly in (True, False):
        with torch.autograd.set_detect_anomaly(anomaly):
            replay = _captured(tmp_path, f"anomaly_{anomaly}", lambda: model(x).sum())
        assert load_sidecar(tmp_path / f"anomaly_{anomaly}.json.gz")["anomaly_mode"] is anomaly
        noted = [n for n in replay.report.notes if "anomaly detection on" in n]
        assert len(noted) == anomaly, replay.report.notes
        for process in (True, False):
            tracebacks = []
            with torch.autograd.set_detect_anomaly(process):
                replay.run(lambda s, r, tracebacks=tracebacks: tracebacks.append("traceback_" in r.grad_fn.metadata) if s.name == "aten::linear" else None)
                assert torch.is_anomaly_enabled() is process
            assert tracebacks == [anomaly, anomaly], (anomaly, process, tracebacks)
    side = load_sidecar(tmp_path / "anomaly_True.json.gz")
    side["anomaly_mode"] = "on"
    sidecar_path(tmp_path / "anomaly_True.json.gz").write_text(json.dumps(side))
    with pytest.raises(ReplayError, match=r"anomaly_True\.meta\.json: malformed timing sidecar: anomaly_mode"):
        Replay(load_trace(tmp_path / "anomaly_True.json.gz"), "cpu").prepare()


def test_no_autograd_graph_outlives_the_forward_that_made_it(tmp_path):
    """What follows the last backward pass ran under no_grad in the original (an average of the
    weights, updated after the optimizer's step): it records nothing, or the average would chain
    one iteration's graph onto the next for ever. Where a backward pass starts, the forward's
    graphs are let go (the original's backward frees what they saved); an input the forward wrote
    in place (a buffer of activations) starts each iteration without the last one's graph."""
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    ema = [p.detach().clone() for p in model.parameters()]
    buf, x = torch.zeros(8, 32), torch.randn(8, 16)

    def step():
        opt.zero_grad()
        h = model[1](model[0](x))
        buf.copy_(h)  # kept for later, in the forward
        model[2](h).square().mean().backward()
        opt.step()
        with torch.no_grad():
            for e, p in zip(ema, model.parameters()):
                e.mul_(0.99).add_(p, alpha=0.01)

    replay = _captured(tmp_path, "ema", step)
    assert replay.report.ops_skipped == 0, replay.report.skipped_list()
    last = max(i for i, s in enumerate(replay.steps) if s.node_id in replay._backward)
    assert any(s.grad for s in replay.steps[:last]) and not any(s.grad for s in replay.steps[last:])
    held = lambda: [t for t in replay.env if isinstance(t, torch.Tensor) and t.grad_fn is not None]  # noqa: E731
    first_backward, at_start = [], []

    def look(s, r):
        if s is replay.steps[0]:  # the inputs, as the iteration starts
            at_start.append([t for t in held() if any(t is replay.env[i] for i in replay.permanent)])
        if s.node_id in replay._backward and not first_backward:
            first_backward.append(held())

    for _ in range(3):
        first_backward.clear()
        replay.reset_state()
        replay.run(look)
        assert first_backward == [[]], first_backward  # nothing held keeps the forward's graph
        assert held() == []  # the EMA's slots never get one
    assert at_start == [[], [], []], at_start


def test_indices_seeded_for_a_data_shaped_output_then_offset_in_place_are_seeded_anew_for_their_reader(tmp_path):
    """A neighbour list as a molecular potential (torchani) builds it in its step: the pairs
    within a cutoff, selected by a mask (their count follows the data), shifted in place by an
    offset, then used to index a table. The selection's readers read seeded pairs of the recorded
    shape, in the table's range; the in-place shift then took some past it, and the lookup was
    skipped (torchani's training and inference steps each skipped one). The lookup now reads
    seeded indices of its own, with a note, in every iteration; the shift still runs."""
    torch.manual_seed(0)
    coords, table, shift = torch.randn(40, 3), torch.randn(60), torch.tensor([20])
    pairs = torch.stack(torch.meshgrid(torch.arange(40), torch.arange(40), indexing="ij")).flatten(1)

    def step():
        close = (coords[pairs[0]] - coords[pairs[1]]).norm(dim=-1) < 1.0
        chosen = pairs[:, close]
        chosen.add_(shift)
        return table[chosen].sum()

    replay = _captured(tmp_path, "pairs", step)
    rep = replay.report
    assert rep.ops_skipped == 0 and rep.ops_replayed == rep.ops_total, rep.skipped_list()
    assert any("then written in place by an op of the replay" in n for n in rep.notes), rep.notes
    assert [s.name for s in replay.steps].count("aten::add_") == 1
    for _ in range(4):
        replay.between_iterations()
        replay.run()
    # the exported script draws the lookup's own indices as an input of the step too
    script = tmp_path / "bench.py"
    script.write_text(export_script(replay, str(tmp_path / "pairs.json.gz")))
    out = subprocess.run([sys.executable, "-I", str(script), "--device", "cpu", "--iters", "3", "--warmup", "1"],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path)  # fmt: skip
    assert out.returncode == 0, out.stderr


def test_shapes_the_data_decide_keep_their_consumers_on_the_recorded_shapes(tmp_path):
    """A router's choice (here a dropout mask) decides how many rows ``torch.where(mask)`` and
    boolean-mask indexing return, in the original and in every iteration of the replay. Their
    consumers read seeded inputs of the recorded shapes: bound to the replay's outputs they would
    fail when an iteration picks another count (``reshape`` to the recorded shape, as a Switch
    Transformer's experts do). The two index tensors ``torch.where`` returns lie in one
    allocation, and each gets values in its own consumer's range (the row index below 1, the
    column index below 64)."""
    x, probs = torch.randn(1, 64, 16), torch.rand(64, 1, 1)

    def step():
        keep = torch.nn.functional.dropout(torch.ones(1, 64), 0.5, training=True) > 0
        rows, cols = torch.where(keep)
        picked = x[:, cols].reshape(1, -1, 16)
        weights = probs[cols, rows]
        masked = x[0][keep[0]]
        return picked.sum() + weights.sum() + masked.sum()

    replay = _captured(tmp_path, "routed", step)
    assert replay.report.ops_skipped == 0, replay.report.skipped_list()
    assert any("shape depends on the data" in n and "aten::where" in n for n in replay.report.notes), replay.report.notes
    for _ in range(5):  # every iteration draws another mask
        replay.reset_state()
        replay.run()


def test_index_views_of_one_allocation_each_get_their_range_even_expanded(tmp_path):
    """Two index tensors of the step lie in one allocation: one picks rows of a 4-row table, the
    other, expanded (stride 0, so it cannot be written element by element), gathers from 64
    columns. Each reads values valid for its own consumer."""
    base = torch.randint(0, 4, (16,))
    rows, cols = base[:8], base[8:].view(1, 8).expand(4, 8)
    table, x = torch.randn(4, 32), torch.randn(4, 64)

    def step():
        return table[rows].sum() + x.gather(1, cols).sum()

    replay = _captured(tmp_path, "views", step)
    assert replay.report.ops_skipped == 0, replay.report.skipped_list()
    picked = [t for _, t in replay.inputs() if t.dtype == torch.int64 and t.shape == (8,)]
    assert picked and 0 <= int(picked[0].min()) and int(picked[0].max()) < 4, picked
    replay.run()


def test_strided_index_views_of_one_allocation_each_get_their_range(tmp_path):
    """The two columns of an [N, 2] index tensor (pairs of ids, row-major): strided views whose
    overlap torch cannot tell cheaply. The second column, read by a lookup in a 3-row table, gets
    values in its own range, not the first column's (10 rows)."""
    pairs = torch.stack([torch.randint(0, 10, (16,)), torch.randint(0, 3, (16,))], 1)
    first, second = pairs[:, 0], pairs[:, 1]
    big, small = torch.randn(10, 4), torch.randn(3, 4)

    def step():
        return big[first].sum() + small[second].sum()

    replay = _captured(tmp_path, "pairs", step)
    assert replay.report.ops_skipped == 0, replay.report.skipped_list()
    cols = [t for _, t in replay.inputs() if t.dtype == torch.int64 and t.shape == (16,)]
    assert len(cols) == 2 and int(cols[1].max()) < 3 and int(cols[0].max()) < 10, cols
    replay.run()


def test_index_requirements_pass_back_where_a_writer_reused_a_tensors_ids():
    """Two tensors of a trace with the same ids (the writer reused them after a free: other shapes)
    both need an index range and both come from an op: their requirements reach the op's input,
    and the order they are taken in never compares the tensors themselves (Longformer's inference
    stopped its build on it: '<' not supported between TensorRef instances)."""
    from pytest_mystique.ranges import IntRange
    from pytest_mystique.tensors import TensorFactory

    factory = TensorFactory(torch.device("cpu"), 0)
    first = TensorRef(5, 9, 0, 4, 8, "cpu", "int64", (4,), (1,))
    again = TensorRef(5, 9, 0, 8, 8, "cpu", "int64", (8,), (1,))
    source = TensorRef(2, 3, 0, 8, 8, "cpu", "int64", (8,), (1,))
    factory.constrain(first, IntRange(0, 10))
    factory.constrain(again, IntRange(0, 7))
    factory.pass_back(lambda ref: ([(source, "same")], 1) if ref.key == (5, 9) else None)
    assert factory.ranges[source].high in (7, 10)


def test_a_binding_that_declines_its_arguments_is_not_kept():
    """An operator dunder (``Tensor.__and__``...) answers arguments it does not take with
    ``NotImplemented`` rather than a TypeError. Kept as the op's call, it would do nothing in every
    iteration, and an op without a recorded output has nothing to check it against: the
    ``OpOverload`` is called instead, and stays the op's call."""
    from types import SimpleNamespace

    from pytest_mystique.steps import Step, bound_call

    overload = torch.ops.aten.bitwise_and.Tensor
    step = Step(overload, [], [], [], 2, (), [], True)
    facts = SimpleNamespace(binding=lambda *a: NotImplemented, returns=1)
    a, b = torch.tensor([True, False]), torch.tensor([True, True])
    result = bound_call(step, facts, [a, b], [])
    assert result is not NotImplemented and result.tolist() == [True, False] and step.fn is overload


@pytest.mark.parametrize("records", [True, False], ids=["recorded", "captured-elsewhere"])
def test_integer_divisors_computed_from_the_replays_data_are_never_zero(tmp_path, records):
    """Sizes a program computes with tensors (Longformer's chunk counts): a quotient of seeded
    numbers, which are 1 or 2, can be 0 where the original's was not, and a division by it
    raises. A divisor computed from the replay's data reads seeded values instead, in every
    iteration, and the report says so. One computed from the original's values alone (the
    capture's records of the numbers and of a small tensor of sizes) is the original's, which was
    not 0, and is kept: torchkbnufft takes its grid indices modulo its grid's sizes, and read as 1s
    and 2s they sent every interpolation to the grid's first rows."""
    a, b, c, grid = torch.tensor(0), torch.tensor(3), torch.tensor(12), torch.tensor([96, 64])
    at = torch.arange(300)

    def step():
        d = torch.div(b, a + b, rounding_mode="trunc")  # 1 in the original; 0 from seeded 1s and 2s
        q = torch.div(c, d, rounding_mode="floor") + torch.remainder(c, d)
        rows, cols = (torch.remainder(at, size) for size in grid)  # (each size an element of the grid)
        return q + torch.div(c, a + b), rows * grid[1] + cols  # (a true division: inf at worst, never raises)

    path = tmp_path / "sizes.json.gz"
    replay = _captured(tmp_path, "sizes", step) if records else _replayed_without_records(step, path)
    assert replay.report.ops_skipped == 0, replay.report.skipped_list()
    notes = {n.split(":")[2]: k for n, k in replay.report.notes.items() if "integer divisor computed" in n}
    if records:
        assert notes == {}, replay.report.notes
        assert _int_inputs(replay, (2,))[0].tolist() == [96, 64]
    else:  # (d, the first remainder's divisor, reads seeded values already; the grid's sizes do not)
        assert notes == {"div": 2, "remainder": 2}, replay.report.notes
    for _ in range(3):
        replay.reset_state()
        replay.run()


def test_op_library_is_loaded_for_its_namespace_or_the_reason_given(tmp_path, monkeypatch):
    """Ops of another namespace load their package (a fixed table, never a name from the trace);
    one that is installed but does not load says why in the skip reason."""
    from pytest_mystique import ops

    (tmp_path / "mystique_broken_oplib.py").write_text("raise ImportError('undefined symbol: _ZN5torch8autograd')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(ops.OP_LIBRARIES, "mystiquebroken", "mystique_broken_oplib")
    monkeypatch.setattr(ops, "_loaded", {})
    with pytest.raises(ops.Unsupported, match="mystique_broken_oplib is installed but does not load with this torch: "
                                              "undefined symbol"):  # fmt: skip
        ops.resolve("mystiquebroken::lookup(Tensor x) -> Tensor")
    with pytest.raises(ops.Unsupported, match=r"is the library that defines it installed and loaded\?"):
        ops.resolve("mystiquenolib::lookup(Tensor x) -> Tensor")
    # an aten operator this torch lacks was removed or renamed by torch itself: no library to install
    with pytest.raises(ops.Unsupported, match=rf"aten::mystique_gone is not registered in this torch \(torch "
                                              rf"{re.escape(torch.__version__)} does not have it: removed or renamed"):  # fmt: skip
        ops.resolve("aten::mystique_gone(Tensor self) -> Tensor")


@pytest.mark.filterwarnings("ignore:torch.cholesky is deprecated")
def test_cholesky_reads_a_positive_definite_matrix(tmp_path):
    """A Cholesky factorisation fails on a matrix that is not Hermitian positive-definite, as
    seeded draws are not: the input it factorises is made one (also a complex one, and a batch),
    and the factors it gives are finite."""
    s = torch.randn(16, 16)
    spd = s @ s.T + 16 * torch.eye(16)
    batch = torch.stack([spd, 2 * spd])
    h = torch.randn(8, 8, dtype=torch.complex64)
    herm = h @ h.mH + 8 * torch.eye(8)

    old = hasattr(torch.ops.aten, "cholesky")  # torch.cholesky's own operator (gone in torch 2.14)

    def step():
        return (torch.linalg.cholesky(spd).sum() + torch.linalg.cholesky_ex(batch)[0].sum()
                + torch.linalg.cholesky(herm).abs().sum() + (torch.ops.aten.cholesky(spd).sum() if old else 0))  # fmt: skip

    replay = _captured(tmp_path, "cholesky", step)
    rep = replay.report
    assert rep.ops_skipped == 0 and rep.ops_replayed == rep.ops_total, rep.skipped_list()
    factors = []
    replay.run(lambda s, r: factors.append(r) if "cholesky" in s.name else None)
    assert len(factors) == 3 + old
    for r in factors:
        L = r[0] if isinstance(r, tuple) else r
        assert torch.isfinite(L.abs()).all() and (L.diagonal(dim1=-2, dim2=-1).real > 0).all()
    _, info = factors[1]
    assert (info == 0).all()  # cholesky_ex's own report: every matrix of the batch factorised


def _extension_stand_ins(module: str, schemas: dict, key: str = "CPU"):
    """The operators of the extension ``module`` (torchvision, torch_scatter, torch_sparse): its own
    where it is installed (built for this torch; installed but built for another, the test is
    skipped); else, in a library of this module's, operators of the same ``schemas`` (schema ->
    kernel) whose kernels raise where the extension's would read or write outside their memory,
    registered for the dispatch ``key`` (``CompositeImplicitAutograd``: whole, for every key, as
    an extension's ``m.def(name, fn)`` registers them). (Defined once a module: torch keeps the
    operators it resolved.)"""
    if importlib.util.find_spec(module) is not None:
        try:
            importlib.import_module(module)
        except (ImportError, RuntimeError, OSError):  # (a build for another torch: PyPI's torchvision beside the CPU one)
            pytest.skip(f"{module} is installed but its operators do not load beside this torch")
        yield
        return
    lib = torch.library.Library(module, "DEF")
    for schema, kernel in schemas.items():
        lib.define(schema)
        lib.impl(schema.split("(")[0], kernel, key)
    yield
    lib._destroy()


@pytest.fixture(scope="module")
def region_ops():
    """``torchvision::roi_align`` and ``torchvision::_roi_align_backward`` (stand-ins that raise for
    a row whose image index is outside the batch or whose box is turned inside out)."""

    def rows(rois, images):
        index = rois[:, 0]
        if not (bool((index >= 0).all()) and bool((index < images).all())):
            raise IndexError(f"an image index outside the batch of {images}: {index.min()}..{index.max()}")
        if not bool((rois[:, 3:] >= rois[:, 1:3]).all()):
            raise ValueError("a box turned inside out")
        return index.long()

    def roi_align(x, rois, scale, ph, pw, ratio, aligned):
        index = rows(rois, x.shape[0])
        return x[index].mean((2, 3), keepdim=True).expand(-1, -1, ph, pw) * (rois[:, 3:].sum(1) * scale).view(-1, 1, 1, 1)

    def backward(grad, rois, scale, ph, pw, images, channels, height, width, ratio, aligned):
        index = rows(rois, images)
        return torch.zeros(images, channels, height, width).index_add_(0, index, grad.mean((2, 3), keepdim=True).expand(
            -1, -1, height, width).contiguous())  # fmt: skip

    yield from _extension_stand_ins("torchvision", {
        "roi_align(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, SymInt pooled_width, "
        "int sampling_ratio, bool aligned) -> Tensor": roi_align,
        "_roi_align_backward(Tensor grad, Tensor rois, float spatial_scale, SymInt pooled_height, SymInt pooled_width, "
        "SymInt batch_size, SymInt channels, SymInt height, SymInt width, int sampling_ratio, bool aligned) -> Tensor":
            backward})  # fmt: skip


@pytest.mark.parametrize("records", [True, False])
def test_regions_a_torchvision_op_pools_lie_in_its_images(tmp_path, records, region_ops):
    """torchvision's RoIAlign reads a table of regions, a row an image's index in the batch, then
    a box in that image's coordinates; its kernels trust the index. Drawn over the spread the
    capture recorded of the whole table (indices and coordinates together), the indices went past
    the batch and the replay's process died of a segmentation fault. Each row now holds an image
    of the batch (the forward op's features', the backward op's ``batch_size``) and a box inside
    that image (its size over the op's spatial scale): with the capture's records and without."""
    x, grad = torch.randn(3, 4, 16, 24), torch.randn(32, 4, 2, 2)
    boxes = torch.rand(32, 2) * torch.tensor([40.0, 24.0])
    rois = torch.cat([torch.randint(0, 3, (32, 1)).float(), boxes, boxes + 8], 1)  # (32 rows: no column records)
    later = torch.cat([torch.randint(0, 2, (32, 1)).float(), boxes, boxes + 4], 1)

    def step():
        pooled = torch.ops.torchvision.roi_align(x, rois, 0.5, 2, 2, 2, True)
        back = torch.ops.torchvision._roi_align_backward(grad, later, 0.25, 2, 2, 2, 4, 8, 12, 2, True)
        return pooled.sum() + back.sum()

    replay = _captured(tmp_path, "regions", step, scales=records)
    rep = replay.report
    assert rep.ops_skipped == 0 and rep.ops_replayed == rep.ops_total, rep.skipped_list()
    for name, images, extent in (("torchvision::roi_align", 3, (48.0, 32.0)),
                                 ("torchvision::_roi_align_backward", 2, (48.0, 32.0))):  # fmt: skip
        step_ = next(s for s in replay.steps if s.name == name)
        table = replay.env[dict(step_.fills)[1]]
        index = table[:, 0]
        assert table.shape == (32, 5) and torch.equal(index, index.floor()), table
        assert int(index.min()) >= 0 and int(index.max()) < images and len(index.unique()) > 1, index
        assert (table[:, 3:] >= table[:, 1:3]).all() and (table[:, 1:] >= 0).all(), table
        assert (table[:, 3:] <= torch.tensor(extent)).all(), (name, table[:, 3:].amax(0))
    replay.run()


def _with_records_and_without(tmp_path, name: str, step):
    """``step``'s prepared replay with the capture's records, then as a trace captured elsewhere
    (no sidecar), each with every op replayed: ``(records, replay)``."""
    for records in (True, False):
        replay = _captured(tmp_path, name, step) if records else _replayed_without_records(step, tmp_path / f"{name}_bare.json.gz")
        rep = replay.report
        assert rep.ops_skipped == 0 and rep.ops_replayed == rep.ops_total, rep.skipped_list()
        yield records, replay


def _check_offsets(ptr, total):
    if int(ptr[0]) != 0 or bool((ptr.diff() < 0).any()) or int(ptr[-1]) > total:
        raise IndexError(f"offsets that do not cut {total} rows: {ptr.tolist()}")


def _check_index(index, size):
    if int(index.min()) < 0 or int(index.max()) >= size:
        raise IndexError(f"an index outside the {size} rows: {index.min()}..{index.max()}")


@pytest.fixture(scope="module")
def scatter_ops():
    """torch_scatter's ``scatter_sum``, ``segment_sum_csr`` and ``gather_csr`` (stand-ins that raise
    for an index outside the output, or offsets that are not sorted or run past their rows)."""

    def scatter_sum(src, index, dim, out, dim_size):
        _check_index(index, dim_size)
        return torch.zeros(dim_size, *src.shape[1:]).index_add_(0, index, src)

    def segment_sum_csr(src, ptr, out):
        _check_offsets(ptr, src.shape[0])
        return torch.stack([src[a:b].sum(0) for a, b in zip(ptr[:-1].tolist(), ptr[1:].tolist())])

    def gather_csr(src, ptr, out):
        _check_offsets(ptr, 1 << 30)
        return src.repeat_interleave(ptr.diff(), 0)

    def segment_sum_coo(src, index, out, dim_size):
        _check_index(index, dim_size)
        return torch.zeros(dim_size, *src.shape[1:]).index_add_(0, index, src)

    yield from _extension_stand_ins("torch_scatter", {
        "scatter_sum(Tensor _0, Tensor _1, int _2, Tensor? _3, int? _4) -> Tensor": scatter_sum,
        "segment_sum_csr(Tensor _0, Tensor _1, Tensor? _2) -> Tensor": segment_sum_csr,
        "gather_csr(Tensor _0, Tensor _1, Tensor? _2) -> Tensor": gather_csr,
        "segment_sum_coo(Tensor _0, Tensor _1, Tensor? _2, int? _3) -> Tensor": segment_sum_coo})  # fmt: skip


def test_torch_scatters_indices_and_offsets_are_valid_for_its_kernels(tmp_path, scatter_ops):
    """torch_scatter's operators take their index by position (registered without argument names)
    and trust it. A trace captured elsewhere records no values: drawn as any small integers, the
    offsets of a batch's graphs were not sorted, and ``gather_csr`` read outside its memory (the
    process died). Now a scatter's index lies in the output's rows, and the offsets are sorted cuts
    from 0 to the rows they split (the source's for a segment reduction, the output's for a
    gather); a segment reduction's index by row (``segment_sum_coo``: each row's segment, sorted,
    as its kernel takes it) holds each segment's rows together, as many for each."""
    x, ptr = torch.randn(40, 8), torch.tensor([0, 7, 19, 30, 40])
    index, segments = torch.randint(0, 12, (40,)), torch.arange(4).repeat_interleave(ptr.diff())

    def step():
        pooled = torch.ops.torch_scatter.segment_sum_csr(x, ptr, None)
        spread = torch.ops.torch_scatter.gather_csr(pooled, ptr, None)
        by_row = torch.ops.torch_scatter.segment_sum_coo(x, segments, None, 4)
        return torch.ops.torch_scatter.scatter_sum(spread, index, 0, None, 12).sum() + by_row.sum()

    replay = _replayed_without_records(step, tmp_path / "scatter.json.gz")
    taken = {s.name: [replay.env[slot] for _, slot in sorted(s.fills)] for s in replay.steps if "torch_scatter" in s.name}
    for name, rows in (("torch_scatter::segment_sum_csr", 40), ("torch_scatter::gather_csr", 40)):
        offsets = taken[name][1]
        assert offsets[0] == 0 and offsets[-1] == rows and (offsets.diff() >= 0).all(), (name, offsets)
    drawn = taken["torch_scatter::scatter_sum"][1]
    assert int(drawn.min()) >= 0 and int(drawn.max()) < 12 and len(drawn.unique()) > 2, drawn
    assert taken["torch_scatter::segment_sum_coo"][1].tolist() == [i // 10 for i in range(40)]


@pytest.fixture(scope="module")
def sparse_ops():
    """torch_sparse's ``spmm_sum`` and ``ind2ptr`` (stand-ins that raise for row pointers that are
    not sorted or run past the nonzeros, or columns and indices outside their range)."""

    def spmm_sum(row, rowptr, col, value, colptr, csr2csc, mat):
        _check_index(row, rowptr.numel() - 1)
        _check_offsets(rowptr, col.numel())
        if int(rowptr[-1]) != col.numel():
            raise IndexError(f"row pointers that end at {int(rowptr[-1])}, not at the {col.numel()} nonzeros")
        _check_index(col, mat.shape[-2])
        rows = torch.repeat_interleave(torch.arange(rowptr.numel() - 1), rowptr.diff())
        return torch.zeros(rowptr.numel() - 1, mat.shape[-1]).index_add_(0, rows, mat[col] * value.unsqueeze(1))

    def ind2ptr(ind, m):
        _check_index(ind, m)
        return torch.searchsorted(ind.sort().values, torch.arange(m + 1))

    yield from _extension_stand_ins("torch_sparse", {
        "spmm_sum(Tensor? _0, Tensor _1, Tensor _2, Tensor? _3, Tensor? _4, Tensor? _5, Tensor _6) -> Tensor": spmm_sum,
        "ind2ptr(Tensor _0, int _1) -> Tensor": ind2ptr})  # fmt: skip


def test_torch_sparses_layout_is_valid_and_sorted_for_its_kernels(tmp_path, sparse_ops):
    """torch_sparse's sparse-dense product reads a matrix's row pointers, columns and values by
    position. Its row pointers, drawn with the original's spread as the capture recorded it but
    unsorted, made a graph network's products walk thousands of nonzeros for some rows and none for
    others (its training step took 12.8 times its original's); drawn as any small integers (no
    record), they end short of the nonzeros. Now the row pointers are sorted from 0 to the
    nonzeros, the columns lie within the dense matrix's rows, and ``ind2ptr``'s indices within its
    count: with the capture's records and without. With them, each row holds between the fewest
    and the most nonzeros the original's did (cut at uniform random points, some rows held many
    times the nonzeros of others, and a max over each row took 1.2 times as long)."""
    degree = torch.randint(2, 12, (300,))
    rowptr = torch.nn.functional.pad(degree.cumsum(0), (1, 0))
    col, value, mat = torch.randint(0, 300, (int(rowptr[-1]),)), torch.rand(int(rowptr[-1])), torch.randn(300, 16)
    sorted_col, row = col.sort().values, torch.repeat_interleave(torch.arange(300), degree)

    @torch.no_grad()  # (torch_sparse's autograd node, made with grad mode on, asks for the transpose's layout)
    def step():
        out = torch.ops.torch_sparse.spmm_sum(row, rowptr, col, value, None, None, mat)
        return out.sum() + torch.ops.torch_sparse.ind2ptr(sorted_col, 300).sum()

    for records, replay in _with_records_and_without(tmp_path, "spmm", step):
        spmm = next(s for s in replay.steps if s.name == "torch_sparse::spmm_sum")
        got = dict(spmm.fills)
        rows, pointers, columns = replay.env[got[0]], replay.env[got[1]], replay.env[got[2]]
        assert pointers[0] == 0 and pointers[-1] == columns.numel() and (pointers.diff() >= 0).all(), pointers
        if records:  # (each row as many nonzeros as the original's held, between its fewest and most)
            assert 2 <= int(pointers.diff().min()) and int(pointers.diff().max()) <= 11, pointers.diff()
        assert int(rows.min()) >= 0 and int(rows.max()) < 300, rows
        assert int(columns.min()) >= 0 and int(columns.max()) < 300 and len(columns.unique()) > 10, columns
        indices = replay.env[dict(next(s for s in replay.steps if s.name == "torch_sparse::ind2ptr").fills)[0]]
        assert (indices.diff() >= 0).all() and int(indices.max()) < 300, indices  # (its kernel walks them in order)
        replay.run()


def _raw(t: torch.Tensor):
    """``t``'s elements as an extension's C++ kernel reads them: its memory, through no operator
    (which a dispatch mode would see)."""
    return t.detach().numpy()


def _pointers(ptr: torch.Tensor, rows: int, op: str):
    got = _raw(ptr)
    if len(got) < 2 or got[0] != 0 or got[-1] != rows or (got[1:] < got[:-1]).any():
        raise IndexError(f"{op}: pointers that do not cut {rows} points: {got.tolist()}")
    return got.tolist()


@pytest.fixture(scope="module")
def cluster_ops():
    """torch_cluster's ``fps``, ``knn`` and ``random_walk``: stand-ins registered as torch_cluster's
    own are (whole, for every dispatch key), which read their tensors' memory as its C++ kernels
    do, and raise for pointers that do not cut their points, or nodes outside the graph."""
    import numpy as np

    def fps(src, ptr, ratio, random_start):
        cuts, share = _pointers(ptr, src.shape[0], "fps"), float(_raw(ratio).reshape(-1)[0])
        picked = [np.arange(a, a + math.ceil((b - a) * share)) for a, b in zip(cuts[:-1], cuts[1:])]
        return torch.from_numpy(np.concatenate(picked).astype(np.int64))

    def knn(x, y, ptr_x, ptr_y, k, cosine, workers):
        cx, cy, a, b = _pointers(ptr_x, x.shape[0], "knn"), _pointers(ptr_y, y.shape[0], "knn"), _raw(x), _raw(y)
        pairs = [(j, a0 + int(i)) for a0, a1, b0, b1 in zip(cx[:-1], cx[1:], cy[:-1], cy[1:]) for j in range(b0, b1)
                 for i in np.argsort(((a[a0:a1] - b[j]) ** 2).sum(1))[:k]]  # fmt: skip
        return torch.from_numpy(np.array(pairs, dtype=np.int64).reshape(-1, 2).T.copy())

    def random_walk(rowptr, col, start, length, p, q):
        cuts, to, walk = _pointers(rowptr, col.shape[0], "random_walk"), _raw(col), [_raw(start)]
        nodes = len(cuts) - 1
        if ((to < 0) | (to >= nodes)).any() or ((walk[0] < 0) | (walk[0] >= nodes)).any():
            raise IndexError(f"random_walk: nodes outside the graph's {nodes}")
        for _ in range(length):  # (each step to the first neighbour, where there is one)
            at = walk[-1]
            walk.append(np.array([to[cuts[v]] if cuts[v + 1] > cuts[v] else v for v in at], dtype=np.int64))
        return torch.from_numpy(np.stack(walk, 1)), torch.zeros(len(walk[0]), length, dtype=torch.int64)

    yield from _extension_stand_ins("torch_cluster", {
        "fps(Tensor _0, Tensor _1, Tensor _2, bool _3) -> Tensor": fps,
        "knn(Tensor _0, Tensor _1, Tensor? _2, Tensor? _3, int _4, bool _5, int _6) -> Tensor": knn,
        "random_walk(Tensor _0, Tensor _1, Tensor _2, int _3, float _4, float _5) -> (Tensor, Tensor)": random_walk},
        key="CompositeImplicitAutograd")  # fmt: skip


def test_torch_clusters_pointers_and_nodes_are_valid_for_its_kernels(tmp_path, cluster_ops):
    """torch_cluster's operators take a batch's pointers into its points (farthest point sampling
    and k-NN per point cloud), and a graph's CSR layout for its random walks, by position, and
    trust them. Drawn as any small integers (a trace captured elsewhere records no values), the
    pointers did not cut the points and the walks' nodes lay outside the graph. Now pointers are
    sorted cuts from 0 to their points' count, as each set's, and the graph's columns and the
    walks' start nodes lie within its nodes."""
    pos, ptr, query, qptr = torch.rand(40, 3), torch.tensor([0, 12, 25, 40]), torch.rand(15, 3), torch.tensor([0, 5, 9, 15])
    degree = torch.randint(1, 5, (30,))
    rowptr = torch.nn.functional.pad(degree.cumsum(0), (1, 0))
    col, start = torch.randint(0, 30, (int(rowptr[-1]),)), torch.randint(0, 30, (8,))

    def step():
        picked = torch.ops.torch_cluster.fps(pos, ptr, torch.tensor(0.5), False)
        pairs = torch.ops.torch_cluster.knn(pos, query, ptr, qptr, 3, False, 1)
        walks, _ = torch.ops.torch_cluster.random_walk(rowptr, col, start, 4, 1.0, 1.0)
        return pos[picked].sum() + query[pairs[0]].sum() + pos[pairs[1]].sum() + walks.sum()

    replay = _replayed_without_records(step, tmp_path / "cluster.json.gz")
    taken = {s.name: dict(s.fills) for s in replay.steps if s.name.startswith("torch_cluster::")}
    for op, pointers in (("fps", ((0, 1),)), ("knn", ((0, 2), (1, 3))), ("random_walk", ())):
        for points, at in pointers:
            cuts, rows = replay.env[taken[f"torch_cluster::{op}"][at]], replay.env[taken[f"torch_cluster::{op}"][points]]
            assert cuts[0] == 0 and cuts[-1] == rows.shape[0] and (cuts.diff() >= 0).all(), (op, cuts)
    walked = taken["torch_cluster::random_walk"]
    cuts, to, starts = (replay.env[walked[i]] for i in range(3))
    assert cuts[0] == 0 and cuts[-1] == to.numel() and (cuts.diff() >= 0).all(), cuts
    for nodes in (to, starts):
        assert int(nodes.min()) >= 0 and int(nodes.max()) < cuts.numel() - 1 and len(nodes.unique()) > 2, nodes


def test_a_batch_vector_cut_into_clouds_by_bucketize_samples_as_the_original_did(tmp_path, cluster_ops):
    """torch_cluster's Python turns a batch vector (each point's cloud, sorted) into pointers with
    ``bucketize(arange(clouds + 1), batch)``, and samples ``ceil(points * ratio)`` of each cloud
    with a ratio it made a 0-dim tensor of. A trace captured elsewhere records neither: the batch
    was drawn in random order, its pointers cut clouds of 25 to 1,312 points where the original's
    held 256 (DGCNN's k-NN took 2.4 times its time), and the ratio drawn at random sampled 3,072
    points of 4,096 where the original took 2,048 (PointNet++'s first iteration then went out of
    range). The batch is now drawn sorted, each cloud as large, and the ratio is the share of the
    points that the trace's output holds."""
    pos, batch = torch.rand(40, 3), torch.arange(4).repeat_interleave(10)

    def step():
        ptr = torch.bucketize(torch.arange(5), batch)
        picked = torch.ops.torch_cluster.fps(pos, ptr, torch.tensor(0.5), False)
        return pos[picked].sum() + torch.zeros(4, 3).index_add_(0, batch, pos).sum()

    replay = _replayed_without_records(step, tmp_path / "clouds.json.gz")
    assert not any("an output's shape" in n for n in replay.report.notes), replay.report.notes
    assert any("reads as a sorted sequence" in n for n in replay.report.notes), replay.report.notes
    drawn = [t for _, t in replay.inputs() if t.dtype == torch.int64 and t.shape == (40,)]
    assert len(drawn) == 1 and drawn[0].tolist() == batch.tolist(), drawn
    assert [float(t) for _, t in replay.inputs() if t.dim() == 0 and t.is_floating_point()] == [0.5]


def test_indices_of_index_reduce_put_and_renormalised_rows_span_their_tensors(tmp_path):
    """``index_reduce_``'s index (along ``dim`` of ``self``), ``put_``'s and ``take``'s positions (in
    the flattened tensor), ``embedding_renorm_``'s rows (the lookup rows a ``max_norm`` embedding
    renormalises) and ``_unsafe_index_put``'s indices (decomposed code's ``index_put``) had no
    rule: a trace captured elsewhere drew them as 0s and 1s, so each read two rows of its tensor.
    They span their tensors now."""
    i1, i2, i3, i4, i5 = (torch.randint(0, n, (k,)) for n, k in ((300, 500), (3000, 400), (250, 64), (3000, 90), (300, 70)))
    src, table, w = torch.randn(500, 8), torch.randn(300, 8), torch.randn(250, 16)

    def step():
        reduced = table.clone().index_reduce_(0, i1, src, "amax")
        put = torch.zeros(3000).put_(i2, torch.ones(400), accumulate=True)
        with torch.no_grad():
            torch.embedding_renorm_(w, i3, 1.0, 2.0)
        unsafe = torch.ops.aten._unsafe_index_put(table, [i5], torch.ones(70, 8), True)  # (decomposed code's)
        return reduced.sum() + put.take(i4).sum() + unsafe.sum()

    replay = _replayed_without_records(step, tmp_path / "indices.json.gz")
    drawn = {t.numel(): t for _, t in replay.inputs() if t.dtype == torch.int64}
    for count, rows in ((500, 300), (400, 3000), (64, 250), (90, 3000), (70, 300)):
        got = drawn[count]
        assert int(got.min()) >= 0 and int(got.max()) < rows and got.unique().numel() > count // 4, (count, got)


def test_an_lu_factorisations_pivots_given_with_the_step_are_rows_from_one(tmp_path):
    """``lu_solve`` and ``lu_unpack`` take an LU factorisation's pivots (LAPACK's rows, from 1 to
    the matrix's) and check them; a factorisation made once outside the step, as a solver's cached
    one, reaches it as an input. A trace captured elsewhere drew them as 0s and 1s, and both ops
    were skipped ("Pivots given to lu_solve must all be greater or equal to 1"). They are rows
    from 1 to the matrix's now."""
    lu, pivots = torch.linalg.lu_factor(torch.randn(8, 32, 32))
    rhs = torch.randn(8, 32, 4)

    def step():
        p, _, _ = torch.lu_unpack(lu, pivots)
        return torch.linalg.lu_solve(lu, pivots, rhs).sum() + p.sum()

    replay = _replayed_without_records(step, tmp_path / "lu.json.gz")
    drawn = next(t for _, t in replay.inputs() if t.dtype == torch.int32)
    assert int(drawn.min()) >= 1 and int(drawn.max()) <= 32 and drawn.unique().numel() > 8, drawn


def test_a_sparse_tensors_indices_given_with_the_step_span_its_dimensions(tmp_path):
    """A sparse COO tensor built in the step from index tensors it was given (a graph's rows and
    columns stacked, ``torch.sparse_coo_tensor(indices, values, size)``): its indices had no rule,
    and a trace captured elsewhere drew the columns as 0s and 1s, every nonzero in two columns of a
    200 x 200 matrix. They span its dimensions now (the least of them: one range for the whole)."""
    row, col, val, x = torch.randint(0, 200, (800,)), torch.randint(0, 200, (800,)), torch.rand(800), torch.randn(200, 16)

    def step():
        a = torch.sparse_coo_tensor(torch.stack([row, col]), val, (200, 200)).coalesce()
        return (a @ x).sum()

    replay = _replayed_without_records(step, tmp_path / "coo.json.gz")
    drawn = [t for _, t in replay.inputs() if t.dtype == torch.int64 and t.layout == torch.strided]
    assert len(drawn) == 2, drawn
    for t in drawn:
        assert int(t.min()) >= 0 and int(t.max()) < 200 and t.unique().numel() > 100, t


def test_a_nested_jagged_tensor_padded_replays_through_its_values(tmp_path):
    """``to_padded_tensor`` of a nested jagged tensor (a Python tensor subclass, recorded without
    storage) runs ``_nested_get_values``, which takes the wrapper apart, and the padding on its
    values and offsets. A part that reads a nested tensor's structure kept the call whole, and the
    replay, which has no wrapper to give it, skipped it; the wrapper's own accessors no longer
    do, and the padding replays on the values."""
    torch.manual_seed(0)
    lin, rows = torch.nn.Linear(32, 32), [torch.randn(n, 32) for n in (17, 40, 9, 23)]

    @torch.no_grad()
    def step():
        x = torch.nested.nested_tensor(rows, layout=torch.jagged)
        return lin(x).relu().to_padded_tensor(0.0).sum()

    replay = _replayed_without_records(step, tmp_path / "padded.json.gz")
    assert "aten::_jagged_to_padded_dense_forward" in {s.name for s in replay.steps}


def test_a_jagged_batchs_offsets_cut_its_rows_within_the_padded_length(tmp_path):
    """A jagged batch (nested tensors' layout, a recommender's sequences) is padded and unpadded
    by its offsets: sorted from 0 to its rows, each span at most the padded length, which the
    unpadding kernel checks. A trace captured elsewhere drew them as 0s and 1s, and both ops were
    skipped ("The size of tensor a (29) must match...", "final offset should match total_L").
    They are cuts from 0 to the rows now, each span within the padded length."""
    lengths = torch.randint(1, 30, (16,))
    offsets = torch.nn.functional.pad(lengths.cumsum(0), (1, 0))
    values = torch.randn(int(offsets[-1]), 32)

    def step():
        dense = torch.ops.aten._jagged_to_padded_dense_forward(values, [offsets], [30], 0.0)
        back = torch.ops.aten._padded_dense_to_jagged_forward(dense * 2, [offsets], values.shape[0])
        return dense.sum() + back.sum()

    replay = _replayed_without_records(step, tmp_path / "jagged.json.gz")
    cuts = next(t for _, t in replay.inputs() if t.dtype == torch.int64 and t.shape == (17,))
    spans = cuts.diff()
    assert cuts[0] == 0 and cuts[-1] == values.shape[0] and int(spans.min()) >= 0 and int(spans.max()) <= 30, cuts


def test_sequences_that_bucketize_and_searchsorted_read_as_sorted_are_drawn_sorted(tmp_path):
    """``bucketize``'s boundaries and ``searchsorted``'s sorted sequence (along its last dimension)
    are sorted, or their results are not positions in them, and a sparse matrix's row indices
    that ``_convert_indices_from_coo_to_csr`` makes row pointers of (PyG's ``index2ptr``) are
    sorted, or its pointers do not cut the nonzeros; a trace captured elsewhere does not say so,
    and they were drawn in random order (the row indices in [0, 2)). They are drawn sorted now,
    integers evenly over their range (the row indices over the matrix's rows); a sequence that
    searchsorted reads through a ``sorter`` is not."""
    edges, rows, loose = torch.rand(16).sort().values, torch.rand(3, 9).sort().values, torch.rand(12)
    perm, coo_rows = loose.argsort(), torch.randint(0, 6, (30,)).sort().values

    def step():
        a = torch.bucketize(torch.rand(50), edges).sum()
        b = torch.searchsorted(rows, torch.rand(3, 5)).sum()
        c = torch.searchsorted(loose, torch.rand(7), sorter=perm).sum()
        pointers = torch._convert_indices_from_coo_to_csr(coo_rows, 6)
        return a + b + c + pointers.diff().float().square().sum()

    replay = _replayed_without_records(step, tmp_path / "sorted.json.gz")
    drawn = {tuple(t.shape): t for _, t in replay.inputs() if t.dtype.is_floating_point}
    assert (drawn[(16,)].diff() >= 0).all() and (drawn[(3, 9)].diff(dim=-1) >= 0).all(), drawn
    assert not (drawn[(12,)].diff() >= 0).all(), drawn[(12,)]
    indices = [t for _, t in replay.inputs() if t.dtype == torch.int64 and t.shape == (30,)]
    assert len(indices) == 1 and indices[0].tolist() == [i // 5 for i in range(30)], indices
    assert any(n.startswith("3 input(s) that an op reads as a sorted sequence") for n in replay.report.notes), replay.report.notes


@pytest.fixture(scope="module")
def rnnt_op():
    """torchaudio's ``rnnt_loss_forward`` (registered without argument names): a stand-in that
    checks its lengths and labels as torchaudio's kernel does and raises where it would."""

    def rnnt_loss_forward(logits, targets, logit_lengths, target_lengths, blank, clamp, fused):
        frames, positions, classes = logits.shape[1:]
        if int(_raw(logit_lengths).max()) != frames:
            raise RuntimeError("input length mismatch")
        if int(_raw(target_lengths).max()) + 1 != positions:
            raise RuntimeError("output length mismatch")
        labels = _raw(targets)
        if ((labels < 0) | (labels >= classes) | (labels == blank)).any():
            raise IndexError(f"target labels outside the {classes} classes or blank")
        return logits.logsumexp(-1).sum((1, 2)), None

    yield from _extension_stand_ins("torchaudio", {
        "rnnt_loss_forward(Tensor _0, Tensor _1, Tensor _2, Tensor _3, int _4, float _5, bool _6) -> (Tensor, Tensor?)":
            rnnt_loss_forward})  # fmt: skip


def test_rnnt_lengths_and_labels_are_a_speech_batchs(tmp_path, rnnt_op):
    """torchaudio's RNN-T loss checks that the longest input is the logits' frames and the longest
    target their label positions less one. A trace captured elsewhere drew both as 0s and 1s:
    "input length mismatch", and the loss was skipped. As CTC's, every input now is as long as
    the frames and every target as its label positions, whose labels lie in the classes but the
    blank. Lengths the step computes (an encoder's frames, its inputs' lengths divided by its
    stride, by a number a trace records without its value) are read as seeded ones where the
    loss refuses the replay's."""
    logits = torch.randn(3, 20, 6, 9)
    targets = torch.randint(0, 8, (3, 5), dtype=torch.int32)
    frames, labelled = torch.full((3,), 20, dtype=torch.int32), torch.full((3,), 5, dtype=torch.int32)
    samples = torch.tensor([40, 36, 30])

    def step():
        costs, _ = torch.ops.torchaudio.rnnt_loss_forward(logits, targets, frames, labelled, 8, -1.0, True)
        subsampled = torch.div(samples, 2, rounding_mode="trunc").int()
        again, _ = torch.ops.torchaudio.rnnt_loss_forward(logits, targets, subsampled, labelled, 8, -1.0, True)
        return costs.sum() + again.sum()

    replay = _replayed_without_records(step, tmp_path / "rnnt.json.gz")
    assert any(n.startswith("torchaudio::rnnt_loss_forward: ") and "seeded" in n for n in replay.report.notes), replay.report.notes
    drawn = [t for _, t in replay.inputs() if t.dtype == torch.int32]
    assert sorted(t.shape for t in drawn) == [(3,), (3,), (3,), (3, 5)], drawn  # (the seeded frames too)
    lengths = sorted(t.tolist() for t in drawn if t.dim() == 1)
    assert lengths == [[5, 5, 5], [20, 20, 20], [20, 20, 20]], lengths
    labels = next(t for t in drawn if t.dim() == 2)
    assert int(labels.min()) >= 0 and int(labels.max()) < 8 and labels.unique().numel() > 2, labels


@pytest.fixture(scope="module")
def spline_ops():
    """torch_spline_conv's ``spline_basis`` (linear B-splines) and ``spline_weighting``: stand-ins
    registered whole, as torch_spline_conv's own are, which raise where its kernels crash: a kernel
    size below 1 (a division by zero: SIGFPE) or a weight index outside the weights."""
    import numpy as np

    def spline_basis(pseudo, kernel_size, is_open, degree):
        sizes, opened, v = _raw(kernel_size), _raw(is_open).astype(np.int64), _raw(pseudo).astype(np.float64)
        if (sizes < 1).any():
            raise ZeroDivisionError(f"spline_basis: kernel sizes {sizes.tolist()} (its kernel divides by each)")
        at = v * (sizes - degree * opened)
        low, frac = np.floor(at).astype(np.int64), at - np.floor(at)
        corners = 2 ** v.shape[1]
        basis, index = np.ones((len(v), corners), np.float32), np.zeros((len(v), corners), np.int64)
        for s in range(corners):
            step = 1
            for d in range(v.shape[1]):
                bit = (s >> d) & 1
                basis[:, s] *= frac[:, d] if bit else 1 - frac[:, d]
                index[:, s] += (low[:, d] + bit) % sizes[d] * step
                step *= int(sizes[d])
        return torch.from_numpy(basis), torch.from_numpy(index)

    def spline_weighting(x, weight, basis, index):
        at = _raw(index)
        if ((at < 0) | (at >= weight.shape[0])).any():
            raise IndexError(f"spline_weighting: weight indices {at.min()}..{at.max()} outside its {weight.shape[0]} weights")
        return torch.einsum("es,esio,ei->eo", basis, weight[index], x)

    yield from _extension_stand_ins("torch_spline_conv", {
        "spline_basis(Tensor _0, Tensor _1, Tensor _2, int _3) -> (Tensor, Tensor)": spline_basis,
        "spline_weighting(Tensor _0, Tensor _1, Tensor _2, Tensor _3) -> Tensor": spline_weighting},
        key="CompositeImplicitAutograd")  # fmt: skip


def test_spline_bases_kernel_sizes_are_the_originals_or_the_least_a_spline_takes(tmp_path, spline_ops):
    """A spline convolution's basis takes the kernel's size in each dimension, and its weighting
    reads the weights by the indices the basis made of them, both by position. The capture did not
    see the sizes: torch_spline_conv's operators, registered whole, read their tensors' memory in
    C++ before any dispatch mode, and only a function mode sees them called. Drawn as any small
    integers, a size of 0 ended the replay's process (SIGFPE), ``mystique replay``'s too. Now the
    capture records what such operators read, and the replay takes the original's sizes; without
    a record, the least the splines' degree takes (the weight indices then lie within any
    kernel's weights), whether each dimension is open 0 or 1, and the pseudo-coordinates within
    [0, 1]."""
    pseudo, sizes, opened = torch.rand(200, 2), torch.tensor([5, 5]), torch.tensor([1, 1], dtype=torch.uint8)
    x, weight = torch.randn(200, 4), torch.randn(25, 4, 8)

    @torch.no_grad()
    def step():
        basis, index = torch.ops.torch_spline_conv.spline_basis(pseudo, sizes, opened, 1)
        return torch.ops.torch_spline_conv.spline_weighting(x, weight, basis, index).sum()

    for records, replay in _with_records_and_without(tmp_path, "spline", step):
        basis = next(s for s in replay.steps if s.name == "torch_spline_conv::spline_basis")
        coordinates, drawn, open_drawn = (replay.env[dict(basis.fills)[i]] for i in range(3))
        assert drawn.tolist() == ([5, 5] if records else [2, 2]), drawn
        assert set(open_drawn.tolist()) <= {0, 1} and 0 <= float(coordinates.min()) and float(coordinates.max()) <= 1
        replay.run()
    side = load_sidecar(tmp_path / "spline.json.gz")
    assert [r["values"] for r in side["index_inputs"] if r["shape"] == [2]] == [[5, 5], [1, 1]], side["index_inputs"]
    # what the basis returned is known as made: no record of it as an input of the weighting
    assert not [r for r in side["float_inputs"] if r["shape"] == [200, 4] and "values" not in r][1:], side["float_inputs"]


def test_an_index_input_the_original_held_in_order_is_drawn_in_order(tmp_path):
    """A batch of graphs numbers each node's graph in order (PyG's batch vector); operators cut its
    runs by their counts (farthest point sampling per graph, over the pointers its counts make).
    The capture records that an integer input was sorted (its smallest and largest step); drawn
    with the original's spread but out of order, the nodes of one graph's range were another's,
    and a point cloud's sampling took 514 points where the original took 512. An input the
    original held in order is now drawn in order; one it did not, is not."""
    batch = torch.arange(6).repeat_interleave(torch.tensor([5, 9, 3, 12, 7, 4]))
    ids, x = torch.randint(0, 6, (40,)), torch.randn(40, 8)

    def step():
        return torch.zeros(6, 8).index_add_(0, batch, x).sum() + torch.zeros(6, 8).index_add_(0, ids, x).sum()

    replay = _captured(tmp_path, "batch", step)
    assert any("held in order (sorted)" in n for n in replay.report.notes), replay.report.notes
    given = [t for _, t in replay.inputs() if t.dtype == torch.int64 and t.shape == (40,)]
    assert len(given) == 2 and sorted(given[0].tolist()) == given[0].tolist(), given
    assert given[0].unique().numel() == 6 and sorted(given[1].tolist()) != given[1].tolist(), given


@pytest.fixture(scope="module")
def pairs_op():
    """``mystiquepairs::near(x, y, r)``: the pairs of a row of ``y`` and a row of ``x`` nearer than
    ``r`` (rows of ``y``, then rows of ``x``), as many as the data give (a radius graph's)."""
    lib = torch.library.Library("mystiquepairs", "DEF")

    def near(x, y, r):
        close = torch.cdist(y, x) < r
        return torch.stack(torch.nonzero(close, as_tuple=True))

    lib.define("near(Tensor x, Tensor y, float r) -> Tensor")
    lib.impl("near", near, "CPU")
    yield
    lib._destroy()


@pytest.mark.parametrize("ids", ["storage", "storage and tensor"])
def test_a_stand_in_for_an_output_of_another_shape_has_memory_of_its_own(tmp_path, pairs_op, ids):
    """An operator whose output's shape follows the data without saying so (an extension's radius
    graph) returns another count of pairs in the replay: its readers get a seeded stand-in. The
    original's allocator gave a later such output the first one's block, so the trace gives both
    one storage id; their stand-ins shared one allocation, and the later one's draw (indices under
    40) wrote over the earlier's, whose centres index 8 rows: PointNet++'s index_select went out
    of range in the first iteration. Each stand-in now has an allocation of its own, also where
    the writer gave the later one the earlier's tensor id too (PointNet++'s k-NN pairs and its
    radius pairs, in a trace without the capture's records: tensor 95 in storage 30892 both)."""
    a, b = torch.rand(40, 3), torch.rand(8, 3)

    def step():
        first = torch.ops.mystiquepairs.near(a, b, 0.4)
        centre, point = first.unbind(0)
        total = b.index_select(0, centre).sum() + a.index_select(0, point).sum()
        del first, centre, point
        second = torch.ops.mystiquepairs.near(b, a[:30], 0.3)  # (fewer: its stand-in fits in the first's block)
        centre, point = second.unbind(0)
        return total + a.index_select(0, centre).sum() + b.index_select(0, point).sum()

    path = tmp_path / "pairs.json.gz"
    trace = _captured_without_records(step, path)
    made = [n for n in trace.nodes if n.name == "mystiquepairs::near"]
    (kept, reused), (first, second) = ([getattr(n.outputs[0], f) for n in made] for f in ("storage_id", "tensor_id"))
    data = json.loads(gzip.decompress(path.read_bytes()))
    for node in data["nodes"]:  # (as the original's allocator gave the second the first one's block)
        for side in ("inputs", "outputs"):
            node[side]["values"] = _storage_renamed(node[side]["values"], reused, kept)
            if ids == "storage and tensor":  # (and the writer the first one's id)
                node[side]["values"] = _storage_renamed(node[side]["values"], second, first, at=0)
    path.write_bytes(gzip.compress(json.dumps(data).encode()))
    replay = Replay(load_trace(path), "cpu").prepare()
    assert [n for k, n in replay.report.notes.items() if k.startswith("mystiquepairs::near: an output's shape")] == [2]
    assert replay.report.ops_skipped == 0, replay.report.skipped_list()
    for _ in range(2):
        replay.run()


def _storage_renamed(values, old: int, new: int, at: int = 1):
    """A node's recorded argument values with the storage id ``old`` of each tensor written ``new``
    (its tensor id, with ``at=0``)."""
    if isinstance(values, list) and len(values) == 6 and all(isinstance(v, int) for v in values[:5]) and isinstance(values[5], str):
        return [new if i == at and v == old else v for i, v in enumerate(values)]
    return [_storage_renamed(v, old, new, at) for v in values] if isinstance(values, list) else values

_CPP_FUNCTION = r"""
#include <torch/extension.h>
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
// x times a learnt scale, forward and backward in loops over memory, as an extension's kernels
struct Scale : public torch::autograd::Function<Scale> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, torch::Tensor w) {
    ctx->save_for_backward({x});
    auto xs = x.contiguous();
    auto out = torch::empty_like(xs);
    const float* in = xs.data_ptr<float>();
    float* o = out.data_ptr<float>();
    const float s = w.item<float>();
    for (int64_t i = 0; i < xs.numel(); i++) o[i] = in[i] * s;
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto x = ctx->get_saved_variables()[0].contiguous();
    auto g = grads[0].contiguous();
    auto gw = torch::zeros({}, x.options());
    const float* gi = g.data_ptr<float>();
    const float* xi = x.data_ptr<float>();
    double total = 0;
    for (int64_t i = 0; i < x.numel(); i++) total += gi[i] * xi[i];
    gw.data_ptr<float>()[0] = static_cast<float>(total);
    return {torch::Tensor(), gw};
  }
};
torch::Tensor scale(torch::Tensor x, torch::Tensor w) { return Scale::apply(x, w); }
TORCH_LIBRARY(mystiquecpp, m) { m.def("scale(Tensor x, Tensor w) -> Tensor", &scale); }
"""


@pytest.fixture(scope="module")
def cpp_function():
    """``mystiquecpp::scale(x, w)``: an operator whose autograd node is a C++ ``torch::autograd::Function``
    (``CppNode<Scale>``) computing in loops over memory, forward and backward, as torch_spline_conv's
    do (built with this torch's C++ extension tools: a compiler and ninja, else the test is skipped)."""
    import shutil

    if shutil.which("c++") is None or shutil.which("ninja") is None:
        pytest.skip("no C++ compiler or ninja to build a C++ autograd Function with")
    from torch.utils.cpp_extension import load_inline

    load_inline("mystiquecpp", cpp_sources=_CPP_FUNCTION, is_python_module=False)


def test_an_autograd_node_whose_backward_computes_outside_operators_is_called(tmp_path, cpp_function):
    """A C++ extension's autograd Function (torch_spline_conv's ``CppNode<SplineWeighting>``) runs
    its backward in C++ loops, no operator: the trace holds the node, named by the profiler, and
    the allocation of its gradient (``aten::zeros``), nothing of the work. Replaying the allocation
    alone, a SplineCNN's training step took half its original's time (0.515). The replay now keeps
    the node that its forward op made (found by the autograd sequence number both record) and
    calls it on the gradient the trace shows it given, where the engine ran it, in each
    iteration; the allocation runs inside the call."""
    x, v = torch.randn(4096), torch.randn(4096)
    w = torch.nn.Parameter(torch.tensor(1.5))
    opt = torch.optim.SGD([w], lr=1e-3)

    def step():
        opt.zero_grad()
        (torch.ops.mystiquecpp.scale(x, w) * v).sum().backward()  # (its gradient a new tensor: v's product)
        opt.step()

    replay = _captured(tmp_path, "cpp_function", step)
    rep = replay.report
    assert rep.ops_skipped == 0 and rep.ops_replayed == rep.ops_total, rep.skipped_list()
    assert any(n.startswith("torch::autograd::CppNode<Scale>: an autograd node of a C++ extension's Function")
               for n in rep.notes), rep.notes  # fmt: skip
    assert not [s for s in replay.steps if s.name == "aten::zeros"], [s.name for s in replay.steps]
    called = []

    def after(step, result):
        if step.name == "torch::autograd::CppNode<Scale>":
            called.append(result)

    for _ in range(2):
        replay.run(after)
        replay.run()
    assert len(called) == 2 and all(r[0] is None and r[1].shape == () for r in called), called

def test_a_kernel_that_trusts_data_gone_nan_in_the_iterations_fails_the_canary_not_the_process(tmp_path):
    """A trace captured elsewhere has no record of its data: a detector's target boxes are drawn,
    a log of their widths' ratios is NaN, so are the gradients, and the optimizer's step makes the
    weights NaN. The build's own call of each op read the weights before that step; the first
    iterations read them NaN, and torchvision's RoIAlign took NaN coordinates for positions and
    ended the process (SIGSEGV) after the build canary had passed. Where the build's data went
    NaN or inf, the canary's child now also runs the iterations the warm-up starts with, so the
    crash fails that trace alone, naming the op and the iteration. (Here an op of this test's,
    whose kernel ends its process on a NaN, stands in for RoIAlign's.)"""
    import os
    import signal

    from pytest_mystique.runner import build_canary

    lib = torch.library.Library("mystiquecanary", "DEF")

    def trusting(x):
        if not bool(torch.isfinite(x).all()):
            os.kill(os.getpid(), signal.SIGSEGV)
        return x * 2

    lib.define("trusting(Tensor x) -> Tensor")
    lib.impl("trusting", trusting, "CPU")
    w = torch.randn(8, requires_grad=True)
    scale = torch.rand(8) + 3  # (drawn where the inner log's rule puts it, around 1: the outer log's is not met)
    opt = torch.optim.SGD([w], lr=0.1)

    def step():
        opt.zero_grad()
        kept = torch.ops.mystiquecanary.trusting(w.detach())
        (kept.sum() + (w * torch.log(torch.log(scale))).sum()).backward()
        opt.step()

    trace = _captured_without_records(step, tmp_path / "nan_weights.json.gz")
    with pytest.raises(ReplayError, match=r"replaying op mystiquecanary::trusting \(node \d+\), in an iteration after "
                                          r"the build, whose data had gone NaN or inf \(first in the output of "
                                          r"aten::log \(node \d+\)\) crashed the process \(SIGSEGV\)"):  # fmt: skip
        build_canary(Replay(trace, "cpu"))
    # a build whose data stayed finite runs no iteration in the child: the state the step reads is its own
    replay = Replay(_captured(tmp_path, "finite", step).trace, "cpu")
    assert build_canary(replay) and replay.nonfinite_at is None


#: The schemas of the operators torch 2.14 removed (``torch.cholesky``, ``torch.qr``), as a trace
#: recorded before that holds them, and the replacement each records the same call as.
_REMOVED_SCHEMAS = {
    "aten::linalg_cholesky": "aten::cholesky(Tensor self, bool upper=False) -> Tensor",
    "aten::linalg_cholesky.out": "aten::cholesky.out(Tensor self, bool upper=False, *, Tensor(a!) out) -> Tensor(a!)",
    "aten::linalg_qr": "aten::qr(Tensor self, bool some=True) -> (Tensor Q, Tensor R)",
    "aten::linalg_qr.out": "aten::qr.Q(Tensor self, bool some=True, *, Tensor(a!) Q, Tensor(b!) R) -> "
                           "(Tensor(a!) Q, Tensor(b!) R)",
}  # fmt: skip


def test_ops_a_newer_torch_removed_replay_through_their_replacement(tmp_path, monkeypatch):
    """A trace recorded before torch 2.14 holds ``aten::cholesky`` and ``aten::qr`` (and their
    out= overloads), which 2.14 no longer registers. After the upgrade the replay runs them as
    ``linalg_cholesky`` and ``linalg_qr`` (``some`` read as the mode), lists each substitution,
    and gives the factorisations of the recorded shapes. The trace is a capture of the
    replacements with their nodes written back as the old operators; where this torch still has
    them, its registry is made to refuse them, as 2.14's does."""
    s = torch.randn(6, 6)
    spd, a = s @ s.T + 6 * torch.eye(6), torch.randn(7, 5)
    L, Q, R = torch.empty(6, 6), torch.empty(7, 5), torch.empty(5, 5)

    def step():
        torch.linalg.cholesky(spd, upper=True)
        torch.linalg.cholesky(spd, out=L)
        torch.linalg.qr(a, mode="complete")
        torch.linalg.qr(a, out=(Q, R))

    capture_step(step, tmp_path / "linalg.json.gz", warmup=1, runs=1, min_warmup_s=0)
    data = read_json(tmp_path / "linalg.json.gz")
    rewritten = 0
    for node in data["nodes"]:
        schema = next((x for x in node["attrs"] if x["name"] == "op_schema"), None)
        key = schema and schema["value"].split("(")[0]
        if key in _REMOVED_SCHEMAS:
            schema["value"] = _REMOVED_SCHEMAS[key]
            node["name"] = schema["value"].split(".")[0].split("(")[0]
            ins = node["inputs"]
            if "qr" in key:  # mode -> some
                ins["values"][1], ins["types"][1] = ins["values"][1] == "reduced", "Bool"
            rewritten += 1
    assert rewritten == 4

    real = resolve

    def without_removed(op_schema):
        if op_schema.startswith(("aten::cholesky", "aten::qr")):
            raise Unsupported(f"operator {op_schema.split('(')[0]} is not registered in this torch")
        return real(op_schema)

    monkeypatch.setattr("pytest_mystique.plan.resolve", without_removed)
    replay = Replay(parse_trace(data, tmp_path / "linalg.json.gz"), "cpu").prepare()
    rep = replay.report
    assert rep.ops_skipped == 0 and rep.ops_replayed == rep.ops_total == 4, rep.skipped_list()
    assert sorted((x["op"], x["replacement"], x["count"]) for x in rep.substitutions_list()) == [
        ("aten::cholesky", "aten::linalg_cholesky", 1), ("aten::cholesky", "aten::linalg_cholesky.out", 1),
        ("aten::qr", "aten::linalg_qr", 1), ("aten::qr", "aten::linalg_qr.out", 1)]  # fmt: skip
    got = []
    replay.run(lambda step, r: got.append((step.fills, r)))
    (_, upper), (_, lower), (_, (q_full, r_full)), (_, (q, r)) = got
    inp = replay.env[got[0][0][0][1]]  # the matrix both factorisations read (made positive-definite)
    torch.testing.assert_close(upper.mH @ upper, inp, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(lower @ lower.mH, inp, rtol=1e-4, atol=1e-4)
    assert torch.equal(upper, upper.triu()) and torch.equal(lower, lower.tril())
    assert q_full.shape == (7, 7) and r_full.shape == (7, 5)  # some=False: the complete factorisation
    assert q.shape == (7, 5) and r.shape == (5, 5)
    torch.testing.assert_close(q_full @ r_full, q @ r, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", sorted(REMOVED))
def test_a_removed_op_and_its_replacement_compute_the_same(name):
    """Where this torch still has the removed operator, it and its replacement, called with the
    mapped arguments, give the same values (both ``upper`` and ``some`` settings)."""
    op, _, overload = name.partition(".")
    try:
        old = resolve(f"{name}(")
    except Unsupported:
        pytest.skip(f"{op} is not in this torch")
    s = torch.randn(5, 5)
    x = s @ s.T + 5 * torch.eye(5) if "cholesky" in op else torch.randn(6, 4)
    sub = substitute_for(op, overload or "default")
    names = [a.name for a in old._schema.arguments]  # (self, upper | some[, out | Q, R])
    outs = names[2:]  # the out= overloads' keyword-only outputs
    for flag in (False, True):
        want = old(x, flag, **{n: torch.empty(0) for n in outs})
        values = sub.map(names, [x, flag, *(torch.empty(0) for _ in outs)])
        npos = len(values) - len(sub.kwnames)
        got = sub.overload(*values[:npos], **dict(zip(sub.kwnames, values[npos:])))
        want, got = [(v,) if isinstance(v, torch.Tensor) else tuple(v) for v in (want, got)]
        assert len(got) == len(want) == len(old._schema.returns)
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w)


@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")
def test_dynamically_quantized_linears_get_packed_weights_of_their_shape(tmp_path):
    """``quantize_dynamic``'s linears pass their int8 (or float16) weights as an opaque packed
    object that a trace records without shape or data: rebuilt from the op's input and output
    shapes, with a note, so every op replays and gives the original's shapes."""
    model = torch.nn.Sequential(torch.nn.Linear(48, 96), torch.nn.ReLU(), torch.nn.Linear(96, 10)).eval()
    int8 = torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)
    fp16 = torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.float16)
    x = torch.randn(16, 48)
    replay = _captured(tmp_path, "qdyn", lambda: (int8(x), fp16(x)))
    rep = replay.report
    assert rep.ops_skipped == 0 and rep.ops_replayed == rep.ops_total, rep.skipped_list()
    linears = [n for n in rep.notes if "packed weights (an opaque object in a trace) rebuilt" in n]
    assert sorted(n.split(":")[2] for n in linears) == ["linear_dynamic", "linear_dynamic_fp16"]
    assert not any("differs from the trace" in n for n in rep.notes), rep.notes
    shapes = []
    def seen(s, r):
        if s.name.startswith("quantized::"):
            shapes.append((s.name, tuple((r[0] if isinstance(r, tuple) else r).shape)))

    replay.run(seen)
    assert sorted(shapes) == sorted([("quantized::linear_dynamic", (16, 96)), ("quantized::linear_dynamic", (16, 10)),
                                     ("quantized::linear_dynamic_fp16", (16, 96)),
                                     ("quantized::linear_dynamic_fp16", (16, 10))])  # fmt: skip


def test_tensors_a_composite_op_keeps_for_its_backward_are_the_ones_it_made(tmp_path):
    """``cross_entropy_loss`` returns the loss and keeps its ``log_softmax``'s log-probabilities
    for the backward; ``batch_norm`` keeps the batch statistics, ``max_pool2d`` the indices of the
    maxima, ``dropout`` its mask. Replayed whole, such an op makes them internally and the
    backward reads seeded data in their place. They are replayed through their parts, reported,
    and the backward reads what the parts made: the log-softmax gradient of each row sums to zero,
    as it does only for true log-probabilities."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                                torch.nn.MaxPool2d(2), torch.nn.Flatten(), torch.nn.Dropout(0.2),
                                torch.nn.Linear(8 * 7 * 7, 10))  # fmt: skip
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(16, 3, 16, 16), torch.randint(0, 10, (16,))

    def step():
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    replay = _captured(tmp_path, "composite", step)
    rep = replay.report
    assert rep.ops_skipped == 0 and rep.ops_replayed == rep.ops_total, rep.skipped_list()
    opened = {replay.trace.by_id[i].name for i in replay.trace.opened}
    assert {"aten::cross_entropy_loss", "aten::batch_norm", "aten::max_pool2d", "aten::dropout"} <= opened, opened
    [note] = [n for n in rep.notes if "replayed through their parts" in n]
    assert "aten::cross_entropy_loss x1" in note
    names = [s.name for s in replay.steps]
    assert "aten::cross_entropy_loss" not in names and "aten::log_softmax" in names
    grads = []
    for _ in range(3):
        replay.reset_state()
        replay.run(lambda s, r: grads.append(r[0] if isinstance(r, tuple) else r)
                   if s.name == "aten::_log_softmax_backward_data" else None)  # fmt: skip
    assert len(grads) == 3
    for g in grads:
        assert g.shape == (16, 10) and torch.isfinite(g).all()
        assert g.sum(dim=1).abs().max() < 1e-5 and g.abs().max() < 1.0


def test_an_op_whose_parts_do_not_make_its_output_is_replayed_whole(tmp_path):
    """``cumsum(x) - one`` with ``one`` an int64 0-dim tensor: ``aten::sub`` converts it with an
    ``aten::to`` inside and subtracts in its own kernel. A later 0-dim float in the converted
    number's memory (a recycled address: here the trace edited to say so) looked like a tensor the
    sub made inside and kept, and the sub was opened: replayed as its ``aten::to`` alone, it never
    subtracted, its reader read seeded data (TabNet's sparsemax compared against it, and its
    gather's indices went out of range). An op whose parts do not make what it returns stays
    whole."""
    x, one, scale = torch.randn(8, 24), torch.tensor(1), torch.tensor(0.5)
    path = tmp_path / "sub.json.gz"
    capture_step(lambda: ((x.cumsum(-1) - one) * scale).sum(), path, warmup=1, runs=1, min_warmup_s=0)
    data = read_json(path)
    nodes = {n["id"]: n for n in data["nodes"]}
    [sub] = [n for n in nodes.values() if n["name"] == "aten::sub"]
    [to] = [n for n in nodes.values() if n["name"] == "aten::to" and n["ctrl_deps"] == sub["id"]]
    [mul] = [n for n in nodes.values() if n["name"] == "aten::mul"]
    mul["inputs"]["values"][1][1] = to["outputs"]["values"][0][1]  # the scale in the converted number's memory
    write_json(path, data)
    trace = load_trace(path)
    replay = Replay(trace, "cpu").prepare()
    assert replay.report.ops_skipped == 0, replay.report.skipped_list()
    assert not any(trace.by_id[i].name == "aten::sub" for i in trace.opened), trace.opened
    seen = {}
    replay.run(lambda s, r: seen.setdefault(s.name, []).append(r))
    [summed], [diff] = seen["aten::cumsum"], seen["aten::sub"]
    assert torch.equal(diff, summed - 1)


def test_an_op_whose_parts_read_memory_its_own_code_made_is_not_opened(tmp_path):
    """torch_cluster's ``knn`` finds its pairs with a k-d tree in C++ memory of its own, then
    transposes and gathers them through operators (``aten::t``, ``index_select``): those parts
    return its result, but its work is not among them. A 0-dim int64 of an optimizer's, in memory
    the writer had given one of the parts, looked like a tensor the op made inside and kept for
    the backward pass, and the op was opened: DGCNN's first ``knn`` left the replay (its time
    inside operators 0.89 of the original's). An op whose parts read memory that neither its
    inputs nor an earlier part held (here a table the kernel keeps, sliced by its first part;
    the trace edited so that the backward pass reads its ``arange``'s memory) stays whole."""
    lib = torch.library.Library("mystiqueparts", "DEF")
    table = torch.randperm(100)  # (the kernel's own memory, as a C++ kernel's)

    def pairs(x):
        return table[: 2 * x.shape[0]].view(2, -1).index_select(1, torch.arange(x.shape[0] - 1, -1, -1))

    lib.define("pairs(Tensor x) -> Tensor")
    lib.impl("pairs", pairs, "CompositeImplicitAutograd")
    x, w = torch.randn(50, 2), torch.nn.Parameter(torch.ones(100))
    path = tmp_path / "pairs.json.gz"

    def step():
        (w[torch.ops.mystiqueparts.pairs(x)[0]] * 2).sum().backward()

    try:
        capture_step(step, path, warmup=1, runs=1, min_warmup_s=0)
        data = read_json(path)
        nodes = {n["id"]: n for n in data["nodes"]}
        [op] = [n for n in nodes.values() if n["name"] == "mystiqueparts::pairs"]
        [made] = [n for n in nodes.values() if n["name"] == "aten::arange" and n["ctrl_deps"] == op["id"]]
        backward = min(i for i, n in nodes.items() if n["name"].startswith("autograd::engine::evaluate_function"))
        returned, inside = op["outputs"]["values"][0][1], made["outputs"]["values"][0][1]
        for i, n in nodes.items():  # (the backward pass's read of the pairs, in the arange's memory: a recycled address)
            if i > backward:
                n["inputs"]["values"] = _storage_renamed(n["inputs"]["values"], returned, inside)
        write_json(path, data)
        trace = load_trace(path)
        replay = Replay(trace, "cpu").prepare()
        assert op["id"] not in trace.opened, trace.opened
        assert "mystiqueparts::pairs" in [s.name for s in replay.steps]
        replay.run()
    finally:
        lib._destroy()

@pytest.mark.parametrize("reader", ["forward", "backward"])
def test_a_forward_op_reading_recycled_memory_does_not_open_the_op_that_used_it(tmp_path, reader):
    """``masked_select`` counts its mask into a 0-dim int64 tensor inside it and frees it; a
    multiplication by the number 3 then reads a 0-dim int64 tensor that Python's argument parser
    made without an operator, in memory that may be the count's (Equiformer's inference, in one
    call of two: the trace edited here to say so). What an operator made inside and kept is read
    from the backward pass's start on (what autograd saved for it), so a reader before it leaves
    the masked select whole, and the replay multiplies by 3. The same read inside an
    ``autograd::engine::evaluate_function`` range (the trace edited to put one there) opened it
    until session 87, the rule the backward needs (a composite's saved statistics: see
    ``test_tensors_a_composite_op_keeps_for_its_backward_are_the_ones_it_made``); it stays whole
    there too since, as its parts do not do its work: its kernel resizes the output that its
    ``aten::empty`` made and fills it in its own code (the part after reads memory no part made),
    and replayed through its parts it selected nothing."""
    x = torch.randn(64)
    mask = x > 0
    path = tmp_path / "masked.json.gz"

    def step():
        with torch.no_grad():
            return torch.mul(torch.masked_select(x, mask), 3)

    capture_step(step, path, warmup=1, runs=1, min_warmup_s=0)
    data = read_json(path)
    nodes = {n["id"]: n for n in data["nodes"]}
    [select] = [n for n in nodes.values() if n["name"] == "aten::masked_select"]
    [count] = [n for n in nodes.values() if n["name"] == "aten::sum" and n["ctrl_deps"] == select["id"]]
    [mul] = [n for n in nodes.values() if n["name"] == "aten::mul" and n["ctrl_deps"] == select["ctrl_deps"]]
    number = mul["inputs"]["values"][1]
    assert mul["inputs"]["shapes"][1] == []
    number[1] = count["outputs"]["values"][0][1]  # the number in the count's freed memory (where it may be already)
    for n in nodes.values():  # (the ops inside the multiplication read it there too)
        for v in n["inputs"]["values"]:
            if isinstance(v, list) and v[:1] == [number[0]] and len(v) == 6:
                v[1] = number[1]
    if reader == "backward":  # (a range of its own id between the masked select's parts and the multiplication)
        inside = max(n["id"] for n in nodes.values() if n["id"] < mul["id"])
        assert inside + 1 < mul["id"], "the trace's ids leave no place for a range before the multiplication"
        engine = copy.deepcopy(nodes[select["ctrl_deps"]])
        engine.update(id=inside + 1, name="autograd::engine::evaluate_function: MulBackward0",
                      ctrl_deps=select["ctrl_deps"])  # fmt: skip
        mul["ctrl_deps"] = engine["id"]
        data["nodes"].append(engine)
    write_json(path, data)
    trace = load_trace(path)
    replay = Replay(trace, "cpu").prepare()
    opened = [trace.by_id[i].name for i in trace.opened]
    if reader == "backward":
        assert opened == [] and "aten::masked_select" in [s.name for s in replay.steps], opened
        return
    assert opened == [] and not any("through their parts" in n for n in replay.report.notes), replay.report.notes
    # (the masked select's output has a shape of the data's: the multiplication reads an input of
    # the recorded shape in its place)
    made = {ref.key: t for ref, t in replay.inputs()}
    seen = {}
    replay.run(lambda s, r: seen.setdefault(s.name, []).append(r))
    [product] = seen["aten::mul"]
    assert torch.equal(product, made[tuple(mul["inputs"]["values"][0][:2])] * 3)


@pytest.mark.parametrize("name", ["transformer_train", "embbag_rec"])
def test_straight_line_iteration_computes_what_the_loop_computes(name):
    """The timed iteration (straight-line code) against the interpreted loop, from the same input
    state: the inputs the step writes in place (weights, optimizer state) end bit for bit equal.
    These traces switch autograd recording per op, let go of graphs where the backward starts,
    pass keyword arguments, tensor lists and ops of several outputs. Built as a canary or an
    export builds (``timed=False``), the replay makes its straight-line code at its first use."""
    replay = Replay(load_trace(bundled(name)), "cpu").prepare(timed=False)
    assert replay._straight is None
    assert replay._mutated and any(s.release for s in replay.steps) and any(s.kwnames for s in replay.steps)
    replay.reset_state()
    start = {s: replay.env[s].detach().clone() for s in replay.permanent if isinstance(replay.env[s], torch.Tensor)}
    ends = []
    for instrumented in (True, False):
        with torch.no_grad():
            for s, t in start.items():
                replay.env[s].copy_(t)
        torch.manual_seed(0)
        replay.run(after_step=(lambda step, result: None) if instrumented else None)
        ends.append({s: replay.env[s].detach().clone() for s in replay._mutated})
    assert replay._straight is not None  # the second run was the straight-line one
    changed = [s for s in replay._mutated if not torch.equal(ends[0][s], start[s])]
    assert changed, "the step wrote its inputs"
    assert all(torch.equal(ends[0][s], ends[1][s]) for s in replay._mutated)
    assert all(v is None for i, v in enumerate(replay.env) if i not in replay.permanent)


def test_straight_line_iteration_of_more_ops_than_a_bytecode_argument_holds():
    """A trace of 70,000 ops: its timed iteration has 140,000 globals (the ops, their constant
    arguments) and 70,000 locals, past the 65,536 that a bytecode argument holds without an
    extension. It computes what the steps compute: a chain of additions whose sum lands in the
    input it writes in place."""
    from pytest_mystique.steps import Step
    from pytest_mystique.straightline import straight_line

    n = 70_000
    env: list = [torch.zeros((), dtype=torch.float64)]
    steps = []
    for i in range(n):
        env.append(None)
        prev = i  # slot 0 is the input; step i writes slot i + 1
        steps.append(Step(torch.add, [None, 0.5 + (i % 3)], [(0, prev)], [], 2, (), [(0, i + 1)], True, out=i + 1))
    steps.append(Step(torch.Tensor.copy_, [None, None], [(0, 0), (1, n)], [], 2, (), [], True))
    line = straight_line(steps, {0}, env)
    assert len(line.fn.__globals__) > 2 * n and line.fn.__code__.co_nlocals > n
    line.fn()
    assert env[0].item() == sum(0.5 + (i % 3) for i in range(n))


def test_straight_line_source_holds_no_text_from_the_trace():
    """The trace's strings (op names, keyword names, string arguments) reach the generated function
    through its namespace: its source has no string literal at all, only generated names."""
    replay = Replay(load_trace(corpus("llama_train.json.gz")), "cpu").prepare()
    assert any(isinstance(v, str) for s in replay.steps for v in s.args), "the trace has string arguments"
    assert any(s.kwnames for s in replay.steps)
    replay.run()
    source = replay._straight.source
    assert "'" not in source and '"' not in source
    names = set(re.findall(r"[A-Za-z_]\w*", source))
    allowed = re.compile(r"(v\d+|f\d+|c\d+_\d+|k\d+|r|env|_grad|_T|dict|zip|None|True|False|if|is|not|and|"
                         r"def|replay_iteration|data|grad_fn|__class__|try|finally|pass)$")  # fmt: skip
    assert all(allowed.match(n) for n in names), sorted(n for n in names if not allowed.match(n))


@pytest.mark.parametrize("name", ["llama_train", "distilbert_train"])
def test_letting_go_of_the_forward_graphs_calls_no_operator(name):
    """Where the backward pass starts, the replay lets go of the forward's autograd graphs
    (Step.release) without calling an operator: the profiled iteration's top-level operator
    events are exactly its steps, as in the original, whose backward frees its graph in C++."""
    replay = Replay(load_trace(corpus(f"{name}.json.gz")), "cpu").prepare()
    assert sum(len(s.release) for s in replay.steps) > 20
    replay.run()  # (the first uninstrumented run makes the straight-line function)
    steps = collections.Counter(s.name for s in replay.steps if s.name.startswith("aten::"))
    for run in (replay.run, lambda: replay.run(after_step=lambda step, result: None)):  # straight-line, interpreted
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            run()
        top = collections.Counter(e.name for e in prof.events() if e.cpu_parent is None and e.name.startswith("aten::"))
        if not replay.report.substitutions:
            assert top == steps
        else:  # (a torch whose CPU flash kernel does not group heads: the keys' repeat and the gradients' sum around it)
            assert set(replay.report.substitutions) == {(n, f"{n} (keys and values repeated to the query's heads, x2)")
                                                        for n in ("aten::_scaled_dot_product_flash_attention_for_cpu",
                                                                  "aten::_scaled_dot_product_flash_attention_for_cpu_backward")}  # fmt: skip
            assert top - steps == collections.Counter({"aten::repeat_interleave": 8, "aten::unflatten": 4, "aten::sum": 4})
            assert not steps - top


def test_an_op_failing_in_the_straight_line_iteration_is_named():
    replay = Replay(load_trace(bundled("mlp_train")), "cpu").prepare()
    replay.run()
    victim = replay.steps[len(replay.steps) // 2]

    def broken(*args, **kwargs):
        raise RuntimeError("a kernel failed")

    victim.fn = broken
    replay.run()  # the straight-line function made before still calls the op it was made with
    replay.invalidate()
    with torch.enable_grad():
        with pytest.raises(ReplayError, match=rf"op {victim.name} \(node {victim.node_id}\) failed during replay: "
                                              r".*a kernel failed"):  # fmt: skip
            replay.run()
        assert torch.is_grad_enabled()  # the caller's autograd mode, restored


def test_a_failed_straight_line_iteration_writes_back_its_rebound_inputs():
    """An input that the step lets go of its graph (detached where the backward pass starts) is
    rebound in the env by the interpreted loop at once; the straight-line iteration writes it back
    too when an op after that fails, so both leave the env alike. (An input written in place while
    autograd records is one; none of the bundled traces has one, so the test has the backward's
    first step of mlp_train release two weights.)"""
    replay = Replay(load_trace(bundled("mlp_train")), "cpu").prepare()
    first = next(i for i, s in enumerate(replay.steps) if s.release)
    rebound = sorted(s for s in replay._mutated if replay.env[s].is_floating_point())[:2]
    assert len(rebound) == 2 and not set(rebound) & set(replay.steps[first].release)
    replay.steps[first].release += tuple(rebound)
    victim = replay.steps[first + 1]

    def broken(*args, **kwargs):
        raise RuntimeError("a kernel failed")

    ends = []
    for instrumented in (True, False):
        replay.reset_state()
        for s in rebound:  # an input that still holds a graph, as one does when the step starts
            replay.env[s] = replay.env[s].detach().requires_grad_() * 1
        held = {s: replay.env[s] for s in rebound}
        victim.fn, fn = broken, victim.fn
        replay.invalidate()
        try:
            with pytest.raises(ReplayError, match="a kernel failed"):
                replay.run(after_step=(lambda step, result: None) if instrumented else None)
        finally:
            victim.fn = fn
        ends.append({s: (replay.env[s] is held[s], replay.env[s].grad_fn is None) for s in rebound})
    assert ends[0] == ends[1] == {s: (False, True) for s in rebound}


def test_an_unread_output_of_a_multi_output_op_is_freed_at_once(tmp_path):
    """``sort`` returns values and indices; the step reads only the values. The indices are freed
    as the op returns, as in the original program, not held until a later op of several outputs."""
    import weakref

    x = torch.randn(4096)

    def step():
        values, _ = torch.sort(x)
        return (values * 2).sum()

    replay = _captured(tmp_path, "sort", step)
    i = next(i for i, s in enumerate(replay.steps) if s.name == "aten::sort")
    sort, after = replay.steps[i], replay.steps[i + 1]
    held, seen = [], []

    def watched_sort(*a, _fn=sort.fn, **k):
        out = _fn(*a, **k)
        held.append(weakref.ref(out[1]))
        return out

    def check_then_call(*a, _fn=after.fn, **k):
        seen.append(held[-1]() is None)
        return _fn(*a, **k)

    sort.fn, after.fn = watched_sort, check_then_call
    replay.invalidate()
    replay.run()
    assert seen == [True]


def test_a_ctc_loss_replays_a_speech_batch(tmp_path):
    """A CTC loss (speech recognition's) reads integer labels and lengths that the trace records
    no values of. Seeded as a speech batch has them: no label is the blank, every input runs the
    whole time axis, every target its padded length (the loss's work grows with it; seeded 0 or
    1 it would do nearly none). Its table of log-probabilities holds -inf for the states no
    alignment reaches, in the original too: no NaN note. Its lengths given as numbers fix the
    table's shape, so the backward reads the forward's own outputs."""
    steps, batch, classes, length = 60, 3, 12, 8
    head = torch.nn.Linear(16, classes)
    feats = torch.randn(steps, batch, 16)
    targets = torch.randint(1, classes, (batch, length))
    in_lens, tg_lens = torch.full((batch,), steps), torch.full((batch,), length)

    def train():
        torch.nn.functional.ctc_loss(head(feats).log_softmax(-1), targets, in_lens, tg_lens).backward()

    def evaluate():
        with torch.no_grad():
            return torch.nn.functional.ctc_loss(head(feats).log_softmax(-1), targets, in_lens, tg_lens)

    replay = _captured(tmp_path, "ctc_train", train)
    assert replay.report.ops_skipped == 0, replay.report.skipped_list()
    assert not [n for n in replay.report.notes if "NaN or inf" in n or "depends on the data" in n], replay.report.notes
    made = [t for _, t in replay.inputs() if t.dtype == torch.int64 and tuple(t.shape) == (batch, length)]
    assert made and all(1 <= int(v) < classes for v in made[0].flatten()), made
    results = []
    replay.run(lambda s, r: results.append(r) if s.name == "aten::_ctc_loss_backward" else None)
    assert len(results) == 1 and torch.isfinite(results[0]).all() and results[0].abs().sum() > 0

    replay = _captured(tmp_path, "ctc_eval", evaluate)  # the loss whole: it reads the length tensors
    assert [n for n in select_ops(replay.trace) if n.name == "aten::ctc_loss"], "the composite is replayed whole"
    lengths = sorted(int(t[0]) for _, t in replay.inputs() if t.dtype == torch.int64 and tuple(t.shape) == (batch,))
    assert lengths == [length, steps], lengths
    losses = []
    replay.run(lambda s, r: losses.append(r) if s.name == "aten::ctc_loss" else None)
    assert len(losses) == 1 and torch.isfinite(losses[0]) and losses[0] > 0


@pytest.mark.parametrize("reused", ["storage", "storage and tensor ids"])
def test_an_input_in_memory_that_a_later_allocation_took_is_not_the_earlier_tensor(tmp_path, reused):
    """Trace writers name a storage by its memory, and some a tensor too, so a block freed and
    allocated again keeps its ids. Here the first linear's output is freed after the ReLU reads it
    and the layer norm's output takes its block (whether malloc gives the same block varies from
    run to run, so the captured trace gets the ids a reusing writer gives: the layer norm's
    storage takes the first linear's id, and the view below that linear output's tensor id). The
    second linear keeps a view of the layer norm's output for its backward (made inside the
    linear, which the replay does not run on its own), and the backward's mm reads it: same
    storage, place and shape as the first linear's output, but a later tensor. It must not be
    bound to that output, an earlier generation of the memory (in GPT-BigCode's and mT5's training
    steps: the attention scores, -inf or float32's lowest where masked, where the dropout's output
    was, and the gradients overflowed)."""
    torch.manual_seed(0)
    lin1, lin2, norm = torch.nn.Linear(64, 64), torch.nn.Linear(64, 64), torch.nn.LayerNorm(64)
    x = torch.randn(128, 64)

    def step():
        lin2(norm(lin1(x).relu().view(2, 64, 64))).sum().backward()

    path = tmp_path / "reused.json.gz"
    capture_step(step, path, warmup=1, runs=1, min_warmup_s=0)
    data = read_json(path)
    ops = {n["name"]: n for n in reversed(data["nodes"])}  # the first of each name
    tensors = [v for n in data["nodes"] for side in ("inputs", "outputs") for v in n[side]["values"]
               if _is_tensor_value(v)]  # fmt: skip
    made, old = ops["aten::linear"]["outputs"]["values"][0], ops["aten::native_layer_norm"]["outputs"]["values"][0][1]
    if old != made[1]:
        # where malloc gave the freed block to a later tensor instead (a backward mm's buffer, made
        # while the layer norm's output lives), that tensor gets a storage of its own first: moved
        # into the block, the layer norm's output would overlap it, which no trace writer records
        later, own = ops["aten::layer_norm"]["id"], 1 + max(v[1] for v in tensors)
        for n in data["nodes"]:
            for v in (v for side in ("inputs", "outputs") for v in n[side]["values"]):
                if n["id"] > later and _is_tensor_value(v) and v[1] == made[1]:
                    v[1] = own
    for v in tensors:
        if v[1] == old:
            v[1] = made[1]
    if reused != "storage":
        mm = [n for n in data["nodes"] if n["name"] == "aten::mm"]
        view = next(v[0] for n in mm for v, shape in zip(n["inputs"]["values"], n["inputs"]["shapes"])
                    if isinstance(v, list) and v[1] == made[1] and shape == [128, 64])  # fmt: skip
        for v in tensors:
            if v[0] == view and v[1] == made[1]:
                v[0] = made[0]
    replay = Replay(load_trace(write_json(path, data)), "cpu").prepare()
    first = next(n for n in select_ops(replay.trace) if n.name == "aten::linear")
    linear_slots = {slot for s in replay.steps if s.node_id == first.id for _, slot in s.outs}
    mm = [s for s in replay.steps if s.name == "aten::mm"]
    assert len(mm) == 3 and linear_slots
    assert not any(slot in linear_slots for s in mm for _, slot in s.fills), "a backward mm reads the old tensor"


def test_a_seeded_tensor_does_not_seed_an_earlier_one_of_its_ids(tmp_path):
    """An uninitialised allocation that its own views read before any op writes it (an
    ``empty_like`` whose slices take the box corners) is seeded for its readers. A writer gives the
    ids of a freed tensor to a later one, and YOLO's loss has its ids be those of an earlier slice
    of the targets, which the targets' scatter into a padded batch reads: seeded by ids alone, the
    scatter read a seeded slice, and the class ids it put there, drawn at random, indexed past the
    classes in the replay's first iteration. Here the trace gets the ids such a writer gives (the
    ``empty_like``'s output takes the slice's): the scatter reads the slice, and the labels it puts
    in the batch are the original's classes (or the padding's 0)."""
    image = torch.arange(4).repeat_interleave(3).float().view(-1, 1)
    cls = torch.tensor([5.0, 3, 4, 0, 7, 2, 1, 6, 3, 0, 5, 2]).view(-1, 1)
    boxes, place, scores = torch.rand(12, 4) * 0.5 + 0.1, torch.arange(3).repeat(4), torch.randn(4, 64, 8)

    def step():
        targets = torch.cat((image, cls, boxes), 1)
        out = torch.zeros(4, 3, 5)
        out[image.view(-1).long(), place] = targets[:, 1:]
        del targets
        xy, wh = out[..., 1:3], out[..., 3:5] / 2
        corners = torch.empty_like(out[..., 1:5])
        corners[..., :2] = xy - wh
        corners[..., 2:] = xy + wh
        return scores[torch.arange(4).view(-1, 1), :, out[..., 0].long()].sum() + corners.sum()

    path = tmp_path / "targets.json.gz"
    capture_step(step, path, warmup=1, runs=1, min_warmup_s=0)
    data = read_json(path)
    scatter = next(n for n in data["nodes"] if n["name"] == "aten::index_put_")
    sliced = scatter["inputs"]["values"][2]
    empty = next(n for n in data["nodes"] if n["name"] == "aten::empty_like")
    made = list(empty["outputs"]["values"][0])
    for n in data["nodes"]:
        for v in (v for side in ("inputs", "outputs") for v in n[side]["values"]):
            if n["id"] >= empty["id"] and _is_tensor_value(v) and v[1] == made[1]:
                v[0], v[1] = (sliced[0] if v[0] == made[0] else v[0]), sliced[1]
    replay = Replay(load_trace(write_json(path, data)), "cpu").prepare()
    assert replay.report.ops_skipped == 0, replay.report.skipped_list()
    assert any("read before any op wrote them" in n for n in replay.report.notes), replay.report.notes
    padded = []
    for _ in range(2):
        replay.run(lambda s, r: padded.append(r[..., 0].flatten().tolist()) if s.name == "aten::index_put_" else None)
    assert len(padded) == 2 and all(set(labels) <= {*cls.view(-1).tolist(), 0.0} for labels in padded), padded


@pytest.mark.skipif(not torch._C._dispatch_has_kernel_for_dispatch_key("aten::_scaled_dot_product_efficient_attention",
                                                                        "Meta"),
                    reason="this torch has no meta kernel of the memory-efficient attention (torch 2.4)")  # fmt: skip
@pytest.mark.parametrize("causal", [False, True])
def test_the_cpu_attention_kernels_map_onto_a_gpu_kernel(causal):
    """A CPU trace replayed on a GPU: the CPU's flash attention and its backward have no GPU
    kernel, and the GPU's FlashAttention takes half precision only (a float32 Llama trace had 4 of
    676 ops skipped on an H200). They map onto the memory-efficient kernels: the mapped arguments
    fit those kernels' schemas, and the outputs the trace's consumers read (the attention, its
    log-sum-exp; the three gradients) come in the same places with the same shapes. Checked on
    the meta device, as the target kernels run on a GPU only."""
    fwd, bwd = (torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default,
                torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward.default)  # fmt: skip
    q, k, v = (torch.empty(2, 4, 64, 32, device="meta") for _ in range(3))
    want_out, want_lse = fwd(q, k, v, 0.0, causal)
    want_grads = bwd(want_out, q, k, v, want_out, want_lse, 0.0, causal)

    def call(op, values):
        sub = substitute_for(op._schema.name)
        mapped = sub.map([a.name for a in op._schema.arguments], values)
        npos = len(mapped) - len(sub.kwnames)
        return sub.target, sub.overload(*mapped[:npos], **dict(zip(sub.kwnames, mapped[npos:])))

    target, (out, lse, *_) = call(fwd, [q, k, v, 0.0, causal, None, None])
    assert target == "aten::_scaled_dot_product_efficient_attention"
    assert out.shape == want_out.shape and lse.shape == want_lse.shape and lse.dtype == want_lse.dtype
    target, grads = call(bwd, [want_out, q, k, v, want_out, want_lse, 0.0, causal, None, None])
    assert target == "aten::_scaled_dot_product_efficient_attention_backward"
    assert [g.shape for g in grads[:3]] == [g.shape for g in want_grads]
    # That kernel pads its log-sum-exp to a multiple of 32 positions: for 37 the forward's would
    # not reach the backward, which would read a seeded one. Such lengths are refused.
    q37 = torch.empty(2, 4, 37, 32, device="meta")
    for op, values in ((fwd, [q37] * 3 + [0.0, causal, None, None]), (bwd, [q37] * 6 + [0.0, causal, None, None])):
        names = [a.name for a in op._schema.arguments]
        with pytest.raises(ValueError, match="pads the log-sum-exp of 37 positions to a multiple of 32"):
            substitute_for(op._schema.name).map(names, values)


def test_grouped_query_attention_maps_onto_the_gpu_kernel_with_its_heads_repeated():
    """Llama's attention has 4 query heads sharing 2 key/value heads, which the CPU flash kernel
    takes and the GPU's memory-efficient kernel refuses. Around that kernel the keys and values
    are repeated to the query's heads, and the gradients of the repeats summed back over each
    group; the report names the repeat. The shapes are checked on the meta device against the
    CPU kernel's; the repeat-and-sum's values on the CPU, with the CPU kernel (which does the
    same attention on repeated heads) standing in for the GPU one."""
    if not flash_takes_grouped_heads():  # (torch 2.4's to 2.8's read past the keys unchecked)
        pytest.skip("this torch's CPU flash kernel does not group heads: the values below need one that does")
    fwd, bwd = (torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default,
                torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward.default)  # fmt: skip
    names = ([a.name for a in fwd._schema.arguments], [a.name for a in bwd._schema.arguments])
    sub_f, sub_b = substitute_for(fwd._schema.name), substitute_for(bwd._schema.name)
    gen = torch.Generator().manual_seed(0)
    q, k, v, grad = (torch.randn(*s, generator=gen) for s in ((2, 4, 64, 32), (2, 2, 64, 32), (2, 2, 64, 32), (2, 4, 64, 32)))
    out, lse = fwd(q, k, v, 0.0, True)
    want = bwd(grad, q, k, v, out, lse, 0.0, True)
    meta = [t.to("meta") for t in (q, k, v, grad, out, lse)]
    mq, mk, mv, mg, mo, ml = meta
    f_args = sub_f.map(names[0], [mq, mk, mv, 0.0, True, None, None])
    m_out, m_lse, *_ = sub_f.overload._op(*f_args[:-1], scale=f_args[-1])
    assert (m_out.shape, m_lse.shape) == (out.shape, lse.shape)
    b_args = sub_b.map(names[1], [mg, mq, mk, mv, mo, ml, 0.0, True, None, None])
    m_grads = sub_b.overload._op(*b_args[:-1], scale=b_args[-1])
    assert [g.shape for g in m_grads[:3]] == [g.shape for g in want]
    repeat = "(keys and values repeated to the query's heads, x2)"
    assert sub_f.describe([mq, mk, mv]) == f"aten::_scaled_dot_product_efficient_attention {repeat}"
    assert sub_b.describe([mg, mq, mk, mv]).endswith(f"_backward {repeat}")
    assert sub_f.describe([mq, mq, mq]) == "aten::_scaled_dot_product_efficient_attention"  # one group: no repeat
    # The values: the same attention and gradients as the CPU kernel's own grouped-query ones.
    got_out, got_lse = sub_f.around(fwd, q, k, v, 0.0, True)
    torch.testing.assert_close((got_out, got_lse), (out, lse))
    got = sub_b.around(lambda *a: (*bwd(*a), None), grad, q, k, v, out, lse, 0.0, True)
    torch.testing.assert_close(got[:3], want)


def test_grouped_query_attention_repeats_its_heads_where_the_cpu_kernel_does_not_group_them(monkeypatch):
    """Torch 2.4's CPU flash kernel reads as many key heads as query heads, unchecked: the corpus's
    Llama (4 query heads on 2 key/value heads, recorded by a newer torch) ran past the keys'
    memory, and its backward corrupted the heap (the process died of a double free). Where the
    kernel does not group heads, as this test makes it seem, both run with the keys and values
    repeated to the query's heads, the gradients summed back, and the report lists it. On this
    torch the kernel groups them itself (the probe says so, and nothing is substituted); the
    repeat's values are checked against that kernel's own grouped-query ones."""
    from pytest_mystique import substitute

    fwd, bwd = (torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default,
                torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward.default)  # fmt: skip
    trace = load_trace(corpus("llama_train.json.gz"))
    native = Replay(trace, "cpu").prepare().report
    assert native.ops_replayed == native.ops_total and bool(native.substitutions) is not substitute.flash_takes_grouped_heads()
    if native.substitutions:
        pytest.skip("this torch's CPU flash kernel does not group heads: the values below need one that does")
    monkeypatch.setattr(substitute, "flash_takes_grouped_heads", lambda: False)
    rep = Replay(trace, "cpu").prepare().report
    assert rep.ops_replayed == rep.ops_total == native.ops_total and not rep.skipped
    repeat = "(keys and values repeated to the query's heads, x2)"
    assert rep.substitutions == {(fwd._schema.name, f"{fwd._schema.name} {repeat}"): 2,
                                 (bwd._schema.name, f"{bwd._schema.name} {repeat}"): 2}, rep.substitutions  # fmt: skip
    gen = torch.Generator().manual_seed(0)
    q, k, v, grad = (torch.randn(*s, generator=gen) for s in ((2, 4, 64, 32), (2, 2, 64, 32), (2, 2, 64, 32), (2, 4, 64, 32)))
    out, lse = fwd(q, k, v, 0.0, True)
    sub_f = substitute.grouped_heads_here(fwd._schema.name, [q, k, v, 0.0, True], torch.device("cpu"))
    sub_b = substitute.grouped_heads_here(bwd._schema.name, [grad, q, k, v, out, lse, 0.0, True], torch.device("cpu"))
    torch.testing.assert_close(sub_f.overload(q, k, v, 0.0, True), (out, lse))
    torch.testing.assert_close(sub_b.overload(grad, q, k, v, out, lse, 0.0, True), bwd(grad, q, k, v, out, lse, 0.0, True))
    assert sub_f.describe([q, k, v]) == f"{fwd._schema.name} {repeat}"
    assert substitute.grouped_heads_here(fwd._schema.name, [q, q, q, 0.0, True], torch.device("cpu")) is None  # one group


def test_a_failed_substitute_reports_the_recorded_ops_own_error_first():
    """Where the recorded op fails and so does its substitute, the skip gives the recorded op's
    error, then the substitute's: the CPU attention kernel given keys of another head size says
    so, not that the GPU kernel tried after it has no CPU kernel."""
    data = extract_ops(read_json(corpus("llama_train.json.gz")), {"aten::_scaled_dot_product_flash_attention_for_cpu"})
    node = next(n for n in data["nodes"] if n["name"] == "aten::_scaled_dot_product_flash_attention_for_cpu")
    node["inputs"]["shapes"][1][-1] = 32  # keys of head size 32 against queries of 64
    node["inputs"]["strides"][1] = [8192, 4096, 32, 1]
    node["inputs"]["values"][1][3] = 16384
    replay = Replay(parse_trace(data, "x"), "cpu").prepare()
    [skip] = replay.report.skipped_list()
    if not flash_takes_grouped_heads():  # (the kernel runs with repeated heads here, and gives its own error)
        assert skip["reason"].startswith("RuntimeError") and "head size" in skip["reason"], skip
        return
    own, _, then = skip["reason"].partition("; its substitute aten::_scaled_dot_product_efficient_attention "
                                            "(keys and values repeated to the query's heads, x2) failed too: ")
    assert skip["op"] == "aten::_scaled_dot_product_flash_attention_for_cpu" and then, skip["reason"]
    assert own.startswith("RuntimeError") and "CPU" not in own and "'CPU' backend" in then, skip["reason"]


def test_a_number_wrapped_where_a_freed_output_lay_is_still_a_number(tmp_path):
    """``idx.mul(2.5)`` after a float64 ``sum`` was freed: the 2.5, wrapped as a 0-dim float64
    tensor outside the ops, often takes the freed output's address and storage id. Taken for that
    output (a tensor read through another object), it was no longer passed as a number, and the
    product came out float64 instead of float32. It is left an input, passed as a number. Whether
    the allocator reuses the place varies from process to process, so the trace is made to say it
    did: each number is given the storage of the sum freed just before it (and a tensor id of its
    own, as a new tensor object)."""
    v, idx = torch.randn(16, dtype=torch.float64), torch.arange(16)

    def step():
        keep = []
        for _ in range(12):
            s = v.sum()
            keep.append(float(s))
            del s
            keep.append(idx.mul(2.5).sum())

    capture_step(step, tmp_path / "number.json.gz", warmup=1, runs=1, min_warmup_s=0)
    data = read_json(tmp_path / "number.json.gz")
    freed, moved, fresh = None, 0, 1 << 40
    for node in data["nodes"]:
        if node["name"] == "aten::sum" and node["outputs"]["types"] == ["Tensor(double)"]:
            freed = node["outputs"]["values"][0]
        elif node["name"] == "aten::mul" and freed is not None:
            number = node["inputs"]["values"][1]
            assert node["inputs"]["types"][1] == "Tensor(double)" and number[3] == 1, node["inputs"]
            number[:3] = [fresh + moved, *freed[1:3]]  # storage id and offset: where the freed sum lay
            moved += 1
    assert moved == 12, moved
    replay = Replay(parse_trace(data, "number"), "cpu").prepare()
    assert not any("differs from the trace" in n for n in replay.report.notes), replay.report.notes
    dtypes = set()
    replay.run(lambda s, r: dtypes.add(r.dtype) if s.name == "aten::mul" else None)
    assert dtypes == {torch.float32}


def test_a_saved_zero_dim_float64_result_stays_linked_to_its_op(tmp_path):
    """The other side of the rule above: a float64 model's loss, ``sqrt`` of a mean, saves its
    0-dim float64 result, which the backward reads under another id at the same place. Beside
    float64 tensors a number and a tensor give the same type, so nothing says it was a number: it
    stays the forward's output, not a seeded input (the gradient then scales by the loss itself)."""
    w = torch.randn(16, dtype=torch.float64, requires_grad=True)
    x = torch.randn(16, dtype=torch.float64)

    def step():
        ((w * x) ** 2).mean().sqrt().backward()

    replay = _captured(tmp_path, "rmse", step)
    assert [ref.shape for ref, _ in replay.inputs() if ref.shape == ()] == []


def test_inputs_that_ops_write_whole_before_any_read_are_left_unfilled():
    """The PARAM linear trace zeroes each gradient (``aten::zero_``) before its first accumulation
    reads it: those allocations get no seeded data (the report says how many and their size), the
    others do, and the iteration's accumulations start from the op's zeros, not leftover memory."""
    replay = Replay(load_trace(corpus("param_linear_v101.json.gz")), "cpu").prepare()
    unfilled = replay.factory.overwritten
    assert unfilled, replay.report.notes
    assert any(re.match(rf"{len(unfilled)} input allocation\(s\) \(.* MiB\) that an op writes whole", n)
               for n in replay.report.notes), replay.report.notes  # fmt: skip
    ref_of = {slot: ref for (ref, _), slot in replay._externals.items()}
    first_use = {}
    for step in replay.steps:
        for pos, slot in step.fills:
            if slot in ref_of:
                first_use.setdefault((ref_of[slot].storage_id, ref_of[slot].dtype), (step.name, pos))
    assert {first_use[key] for key in unfilled} == {("aten::zero_", 0)}
    assert any(key not in unfilled for key in first_use)
    for key, expect_changed in ((next(iter(unfilled)), False), (next(k for k in first_use if k not in unfilled), True)):
        ref = next(r for r in ref_of.values() if (r.storage_id, r.dtype) == key and r.shape)
        t = torch.full(ref.shape, 7.0)
        replay.factory.fill(t, ref)
        assert bool((t != 7.0).any()) is expect_changed, key
    zeroed = []
    replay.run(after_step=lambda step, result: zeroed.append(result.clone()) if step.name == "aten::zero_" else None)
    assert len(zeroed) == len(unfilled) and all(not z.any() for z in zeroed)


def test_an_out_argument_read_before_it_is_written_whole_keeps_its_seeded_data(tmp_path):
    """Captured: one buffer the step writes whole through ``out=`` before reading it, one it
    accumulates into first (``add_`` reads it), and one of which ``out=`` writes only the first half
    while the whole is read. Only the first is left unfilled."""
    x = torch.randn(64, 64)
    whole, accumulated, half = torch.empty(64, 64), torch.ones(64, 64), torch.ones(128, 64)

    def step():
        torch.mul(x, 2.0, out=whole)
        accumulated.add_(x)
        torch.mul(x, 3.0, out=half[:64])
        return whole.sum() + accumulated.sum() + half.sum()

    path = tmp_path / "outs.json.gz"
    capture_step(step, path, warmup=1, runs=1, min_warmup_s=0)
    replay = Replay(load_trace(path), "cpu").prepare()
    assert replay.report.ops_skipped == 0, replay.report.skipped_list()
    sizes = {key: replay.factory.storage_bytes[key] for key in replay.factory.overwritten}
    assert list(sizes.values()) == [64 * 64 * 4], sizes
    replay.run()


def _potential_step(layout: str):
    """A message-passing potential's step over four 10-atom molecules, every pair of a molecule's
    atoms a neighbour pair (never an atom with itself): distances, directions (divided by the
    distance), a cosine cutoff whose radius is a one-element buffer, messages summed back by
    ``index_add``. ``layout``: the pairs as two inputs (views of one tensor, as
    ``torch.tensor(pairs).T`` unbinds) or as one edge list of two rows."""
    torch.manual_seed(0)
    molecules, atoms = 4, 10
    pairs = torch.tensor([(m * atoms + a, m * atoms + b) for m in range(molecules)
                          for a in range(atoms) for b in range(atoms) if a != b]).T.contiguous()  # fmt: skip
    pos, feats, cutoff = torch.randn(molecules * atoms, 3) * 1.2, torch.randn(molecules * atoms, 16), torch.tensor([5.0])
    weight = torch.randn(16, 16) * 0.25

    def messages(i, j):
        rij = pos[j] - pos[i]
        d = rij.norm(dim=1, keepdim=True)
        direction = rij / d
        fcut = 0.5 * (torch.cos(d * math.pi / cutoff) + 1.0) * (d < cutoff).float()
        out = torch.zeros_like(feats).index_add(0, i, (feats[j] @ weight) * fcut)
        return out, direction.sum(0)

    idx_i, idx_j = pairs  # (views made outside the step: two inputs of one allocation)

    def step():
        with torch.no_grad():
            return messages(idx_i, idx_j) if layout == "two inputs" else messages(pairs[0], pairs[1])

    return step


@pytest.mark.parametrize("layout", ["two inputs", "edge rows"])
def test_a_neighbour_lists_pairs_stay_apart_and_a_one_element_buffer_keeps_its_value(tmp_path, layout):
    """A potential's neighbour list pairs atoms ``i`` and ``j``, never an atom with itself, and its
    cosine cutoff divides the distances by a radius held in a one-element buffer. Each of the
    pair's halves was drawn by its own spread: a few pairs met an atom with itself, whose
    distance 0 made its direction NaN, and the NaN spread through a PaiNN potential's step (0.61
    of its original's time inside operators). The radius had no record (one element), and was
    drawn at 1.34 for 5: most pairs fell outside the cutoff. The capture now records that the
    halves never agree (``differs_from``; for one tensor of two rows, ``rows_differ``) and a
    one-element input's value, and the replay keeps them so. A malformed pair record is an error
    naming the sidecar."""
    path = tmp_path / "potential.json.gz"
    capture_step(_potential_step(layout), path, warmup=1, runs=1, min_warmup_s=0)
    side = load_sidecar(path)
    ints = side["index_inputs"]
    if layout == "two inputs":
        assert [r.get("differs_from") for r in ints if r["shape"] == [360]] == [None, 0], ints
    else:
        assert [r.get("rows_differ") for r in ints if r["shape"] == [2, 360]] == [True], ints
    assert [r["values"] for r in side["float_inputs"] if r["shape"] == [1]] == [[5.0]]
    replay = Replay(load_trace(path), "cpu").prepare()
    rep = replay.report
    assert rep.ops_skipped == 0, rep.skipped_list()
    replay.run()
    assert not any("NaN" in n for n in rep.notes), rep.notes
    assert any("kept apart element by element" in n for n in rep.notes), rep.notes
    if layout == "two inputs":
        first, second = _int_inputs(replay, (360,))
    else:
        ((first, second),) = _int_inputs(replay, (2, 360))
    assert not bool((first == second).any()) and first.unique().numel() > 20 and second.unique().numel() > 20
    radius = [t for s in sorted(replay.permanent) if isinstance(t := replay.env[s], torch.Tensor)
              and t.is_floating_point() and tuple(t.shape) == (1,)]  # fmt: skip
    assert [float(t) for t in radius] == [5.0]
    # the same trace as one captured elsewhere: no record says the halves never agree
    if layout == "two inputs":
        later = next(r for r in ints if r.get("differs_from") is not None)
        later["differs_from"] = len(ints)  # (a place that is not before it)
        sidecar_path(path).write_text(json.dumps(side))
        with pytest.raises(ReplayError, match=r"potential\.meta\.json: malformed timing sidecar: an index record's differs_from"):
            Replay(load_trace(path), "cpu").prepare()
