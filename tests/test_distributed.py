"""Multi-rank traces: one process per rank over torch.distributed (gloo), collectives replayed."""

import json
import shutil
import subprocess
import sys

import pytest

from pytest_mystique.collectives import Comms, backend_for
from pytest_mystique.distributed import rank_of, resolve_job
from pytest_mystique.errors import TraceError
from pytest_mystique.graph import select_ops
from pytest_mystique.ops import load_op_library
from pytest_mystique.trace import load_trace

from conftest import ROOT, TORCH, corpus, printed_json, read_json, write_json


def run_pytest(cwd, *args, timeout=600):
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--mystique", "traces", "--mystique-budget=2",
           "--mystique-json=out.json", *args]  # fmt: skip
    out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    results = json.loads((cwd / "out.json").read_text())["benchmarks"] if (cwd / "out.json").exists() else []
    return out, {b["name"]: b["extra_info"] for b in results}


def capture_job(out, world: int = 2, wrap: str = "ddp") -> None:
    """Record ``scripts/capture_ddp.py``'s job of ``world`` ranks under ``wrap`` into ``out``."""
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "capture_ddp.py"), str(out), "--world", str(world),
                           "--wrap", wrap], capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]


def replayed(path, iters: int = 2, warmup: int | None = 1) -> dict:
    """``mystique replay PATH --json``'s summary (every rank of a multi-rank job: one process each)."""
    more = ["--warmup", str(warmup)] if warmup is not None else []
    done = subprocess.run([sys.executable, "-m", "pytest_mystique.cli", "replay", str(path), "--json", "--iters",
                           str(iters), *more], capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def ddp_job(tmp_path_factory):
    """A 2-rank DDP training step recorded by the capture helper (gloo, one trace per rank)."""
    # torch's ExecutionTraceObserver now and then records, on one rank, a node whose parent it did
    # not record (seen once in CI: "node 263 names parent 262"); such a file is rightly refused, so
    # the job is recorded again, at most three times in all
    for _ in range(3):
        out = tmp_path_factory.mktemp("ddp") / "ddp_2rank"
        capture_job(out)
        try:
            for rank_file in sorted(out.glob("rank-*.json.gz")):
                load_trace(rank_file)
        except TraceError as e:
            problem = e
            continue
        return out
    pytest.fail(f"three captures of the DDP job gave an invalid trace; the last: {problem}")


def test_rank_file_names():
    assert rank_of("rank-3.json.gz") == ("", 3)
    assert rank_of("job_rank_12.json") == ("job", 12)
    assert rank_of("et.rank1.json") == ("et", 1)
    assert rank_of("rank-0.meta.json") is None and rank_of("vit.json.gz") is None


def test_ddp_two_ranks_one_item(tmp_path, ddp_job):
    shutil.copytree(ddp_job, tmp_path / "traces" / "ddp_2rank")
    out, res = run_pytest(tmp_path)
    assert out.returncode == 0, out.stdout[-3000:]
    assert "collected 1 item" in out.stdout  # two files, one job
    info = res["ddp_2rank"]
    assert info["world_size"] == 2 and info["ops_skipped"] == 0
    assert [r["rank"] for r in info["ranks"]] == [0, 1]
    for r in info["ranks"]:
        assert r["ops_replayed"] == r["ops_total"] > 20 and r["collectives"] >= 1  # DDP's gradient all-reduce
    assert info["ops_total"] == sum(r["ops_total"] for r in info["ranks"])
    # the step time is the slowest rank's in each iteration: never below a rank's own median
    assert info["median_s"] >= max(r["median_s"] for r in info["ranks"]) * 0.999
    assert "rank 1: " in out.stdout or "new baseline" in out.stdout
    # a second run compares with the recorded baseline of the job
    out, res = run_pytest(tmp_path)
    assert res["ddp_2rank"]["status"] in ("same", "faster", "unsure", "slower"), out.stdout[-2000:]


@pytest.mark.skipif(TORCH < (2, 7), reason="the FSDP2 job on CPU runs from torch 2.7 (2.4 has no fully_shard; 2.6's "
                    "fails on a CPU stream's record_event)")  # fmt: skip
def test_fsdp2_two_ranks_replay_their_all_gathers_and_reduce_scatters(tmp_path):
    """FSDP2 (``fully_shard``, one unit per linear layer) all-gathers each unit's parameters before
    its forward and backward passes and reduce-scatters its gradients, copying them into the
    collectives' buffers with its own ``fsdp::`` operators (which a rank loads from
    torch.distributed.fsdp): both ranks replay every op, collectives included."""
    out = tmp_path / "fsdp2_2rank"
    capture_job(out, wrap="fsdp2")
    names = {n["name"] for n in read_json(out / "rank-0.json.gz")["nodes"]}
    # (its gradients' copy into the reduce-scatter's buffer: fsdp::chunk_cat to torch 2.14, chunk_cat_mixed_dtype in 2.15)
    assert {"c10d::_allgather_base_", "c10d::_reduce_scatter_base_"} <= names, sorted(names)
    assert names & {"fsdp::chunk_cat", "fsdp::chunk_cat_mixed_dtype"}, sorted(names)
    got = replayed(out / "rank-0.json.gz", iters=2)
    assert got["world_size"] == 2 and got["ops_skipped"] == 0 and got["ops_replayed"] == got["ops_total"], got["skipped"]
    assert [r["rank"] for r in got["ranks"]] == [0, 1]
    # each of the 3 units: all-gathers before its forward and its backward pass, a reduce-scatter after; gloo
    # runs the reduce-scatter as an all-reduce of a clone of its input, which FSDP2 reads: replayed whole
    assert [r["collectives"] for r in got["ranks"]] == [9, 9], got["ranks"]
    assert any("collective(s) replayed whole" in n for n in got["notes"]), got["notes"]


@pytest.mark.skipif(TORCH < (2, 8), reason="the HSDP job on CPU runs from torch 2.8 (2.4 has no fully_shard; 2.6's "
                    "fails on a CPU stream's record_event; 2.7's all-reduces with AVG, which gloo refuses)")  # fmt: skip
def test_collectives_of_a_job_with_groups_of_different_ranks_are_not_guessed_onto_the_world(tmp_path):
    """HSDP on 4 ranks (FSDP2 over a 2x2 mesh: parameters sharded along a row, gradients all-
    reduced across the rows) runs its collectives on 4 groups of 2 ranks besides the world; a
    trace written over gloo records no ``record_param_comms``, so none says which group it ran on
    (a rank lists only the groups it is a member of, and counts the others). Each was run on the
    whole world: the all-gathers and reduce-scatters failed on their sizes, and the all-reduces
    ran over 4 ranks instead of 2, counted as replayed (where the world's collectives interleave
    otherwise, the ranks wait on each other until gloo's timeout). They are skipped on every rank,
    with the reason, and the rest of each rank's step replays."""
    out = tmp_path / "hsdp_4rank"
    capture_job(out, world=4, wrap="hsdp")
    got = replayed(out / "rank-0.json.gz", iters=2)
    assert got["world_size"] == 4 and [r["collectives"] for r in got["ranks"]] == [0, 0, 0, 0], got["ranks"]
    assert {s["op"] for s in got["skipped"]} == {"c10d::_allgather_base_", "c10d::_reduce_scatter_base_",
                                                 "c10d::allreduce_"}, got["skipped"]  # fmt: skip
    assert all(s["reason"].startswith("collective whose process group the trace does not record") for s in got["skipped"])
    assert got["ops_replayed"] == got["ops_total"] - got["ops_skipped"] and got["ops_replayed"] > 700


GROUP_OP = """
import torch
import torch.distributed as dist


@torch.library.custom_op("mystique_test::times_group_size", mutates_args=())
def times_group_size(x: torch.Tensor, group_name: str) -> torch.Tensor:
    return x * dist.distributed_c10d._resolve_process_group(group_name).size()
"""

GROUP_CAPTURE = """
import sys
import torch
import torch.distributed as dist
sys.path.insert(0, sys.argv[2])
import group_op
from pytest_mystique.recorder import capture_step
dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
group = dist.new_group([0])
x = torch.randn(64, 64)

def step():
    y = torch.ops.mystique_test.times_group_size(x @ x, group.group_name)
    dist.all_reduce(y, group=group)
    return y.sum()

capture_step(step, sys.argv[1], warmup=1, runs=3)
"""

GROUP_REPLAY = """
import json
import sys
sys.path.insert(0, sys.argv[2])
import group_op
from pytest_mystique.runner import Options, prepare_file
replay = prepare_file(sys.argv[1], Options(device="cpu"))[0].prepare()
replay.run()
print(json.dumps({"skipped": replay.report.skipped_list(), "total": replay.report.ops_total,
                  "replayed": replay.report.ops_replayed}))
"""


def test_an_op_that_names_a_process_group_gets_the_name_of_the_replays_group_made_for_it(tmp_path):
    """An op that is no collective but looks a process group up by its name (``str group_name``:
    torch 2.8's ``fsdp::all_gather_copy_in``, which allocates the all-gather's buffer from its
    group) records the original job's name of it. The replay makes the original's groups in their
    order, but a group of all ranks is its world, so the others' names differ: an HSDP job's all-
    gather copies, on row group "4", failed to resolve that name and were skipped. The name is now
    that of the replay's group made for the recorded one. Here a program's own op of that kind,
    on a sub-group of a world of one (named "1" where it ran; the replay's world, "0", stands for
    it); a name the trace's groups do not hold skips the op, saying so."""
    for name, text in (("group_op.py", GROUP_OP), ("capture.py", GROUP_CAPTURE), ("replay.py", GROUP_REPLAY)):
        (tmp_path / name).write_text(text)

    def run(script: str, path) -> str:
        done = subprocess.run([sys.executable, str(tmp_path / script), str(path), str(tmp_path)], capture_output=True,
                              text=True, timeout=300, cwd=ROOT)  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout

    path = tmp_path / "group_op.json.gz"
    run("capture.py", path)
    data = read_json(path)
    [op] = [n for n in data["nodes"] if n["name"] == "mystique_test::times_group_size"]
    assert op["inputs"]["values"][1] == "1", op["inputs"]
    got = printed_json(run("replay.py", path))
    assert got["skipped"] == [] and got["replayed"] == got["total"] == 4, got
    op["inputs"]["values"][1] = "9"
    write_json(path, data)
    got = printed_json(run("replay.py", path))
    [skip] = got["skipped"]
    assert skip["op"] == "mystique_test::times_group_size" and skip["reason"].startswith(
        "argument 'group_name' names process group '9', which the trace's process_group:init node does not describe"), skip


def test_tensor_parallel_ranks_call_the_same_collective_however_the_writer_nested_it(tmp_path):
    """Tensor parallelism (DTensor) all-reduces a row-split layer's partial sums through torch's
    functional collective, ``_c10d_functional::all_reduce``, which runs ``c10d::allreduce_`` on a
    clone inside it and returns a ``_wrap_tensor_autograd`` of the clone. In one capture the writer
    recorded that wrapping inside the all-reduce on rank 0 and beside it on rank 1: rank 0 replayed
    the all-reduce through its parts (a later op reads the clone), rank 1 whole, on a group named as
    the original job's, and the two ranks waited on each other until killed. An operator that ran
    a collective is now always replayed through its parts, the collective on the replay's groups;
    ``_wrap_tensor_autograd`` loads from torch's functional collectives (it was skipped)."""
    out = tmp_path / "tp_2rank"
    capture_job(out, wrap="tp")
    data = read_json(out / "rank-1.json.gz")
    nodes = {n["id"]: n for n in data["nodes"]}
    [reduce] = [n for n in data["nodes"] if n["name"] == "_c10d_functional::all_reduce"]
    for n in data["nodes"]:
        if n["name"] == "_c10d_functional::_wrap_tensor_autograd" and n["ctrl_deps"] == reduce["id"]:
            n["ctrl_deps"] = nodes[reduce["id"]]["ctrl_deps"]  # (as rank 1's was in that capture)
    write_json(out / "rank-1.json.gz", data)
    for rank in (0, 1):
        names = [n.name for n in select_ops(load_trace(out / f"rank-{rank}.json.gz"))]
        assert "c10d::allreduce_" in names and "_c10d_functional::all_reduce" not in names, (rank, names)
    got = replayed(out / "rank-0.json.gz", iters=2)
    assert got["world_size"] == 2 and got["ops_skipped"] == 0 and got["ops_replayed"] == got["ops_total"], got["skipped"]
    assert [r["collectives"] for r in got["ranks"]] == [1, 1], got["ranks"]
    assert any("ran a collective inside them" in n for n in got["notes"]), got["notes"]


@pytest.mark.skipif(TORCH < (2, 8), reason="the pipeline job on CPU runs from torch 2.8 (2.4's PipelineStage needs its "
                    "inputs' shapes given; 2.6's and 2.7's stall in gloo's receive)")  # fmt: skip
def test_pipeline_stages_replay_their_sends_and_receives_without_waiting_on_each_other(tmp_path):
    """Pipeline parallelism (torch.distributed.pipelining, 1F1B over 4 microbatches): stage 0
    sends activations and receives gradients, stage 1 the reverse, each pair in one batch
    (``batch_isend_irecv``). The trace's writer recorded each receive of a batch inside the send
    before it, so only 5 and 1 of the ranks' 8 point-to-point ops were selected; and gloo ends a
    send only once its peer posted the receive, so sends replayed one by one left both stages
    sending, for ever. A collective is now never taken as another's part, nor is an operator that
    reads none of its tensors (the writer nests the program's next operators in an asynchronous
    send), and sends and receives start without waiting (the receives are waited on where their run of them ends, the sends at
    the step's end): both ranks replay every op and 8 point-to-point ops each."""
    out = tmp_path / "pp_2rank"
    capture_job(out, wrap="pp")
    # After an asynchronous send the writer nests the program's next operators in it until it
    # completes (seen once: stage 0's forward pass of its next microbatch inside its first send,
    # which was then kept whole and those operators never ran); the first send's next linear layer
    # is moved inside it here, as it was there
    data = read_json(out / "rank-0.json.gz")
    nodes = {n["id"]: n for n in data["nodes"]}
    send = min(n["id"] for n in data["nodes"] if n["name"] == "c10d::send")
    moved = min(n["id"] for n in data["nodes"] if n["name"] == "aten::linear" and n["id"] > send
                and nodes[n["ctrl_deps"]]["name"].startswith("[pytorch|profiler"))  # fmt: skip
    nodes[moved]["ctrl_deps"] = send
    write_json(out / "rank-0.json.gz", data)
    trace = load_trace(out / "rank-0.json.gz")
    assert moved in {n.id for n in select_ops(trace)} and not trace.kept_collectives
    for rank in (0, 1):
        trace = load_trace(out / f"rank-{rank}.json.gz")
        recorded = [n.name for n in trace.nodes if n.name in ("c10d::send", "c10d::recv_")]
        selected = [n.name for n in select_ops(trace) if n.name in ("c10d::send", "c10d::recv_")]
        assert recorded.count("c10d::send") == recorded.count("c10d::recv_") == 4 and selected == recorded, (rank, selected)
    got = replayed(out / "rank-0.json.gz", iters=3)
    assert got["world_size"] == 2 and got["ops_skipped"] == 0 and got["ops_replayed"] == got["ops_total"], got["skipped"]
    assert [r["collectives"] for r in got["ranks"]] == [8, 8], got["ranks"]
    # stage 0's file alone, its process group made a world of one: its peer is no rank there, and
    # each of its sends and receives is skipped with that reason (not sent to rank 0, itself)
    data = read_json(out / "rank-0.json.gz")
    for node in data["nodes"]:
        if node["name"] == "## process_group:init ##":
            node["inputs"]["values"] = [v.replace('"group_size": 2', '"group_size": 1') for v in node["inputs"]["values"]]
    write_json(tmp_path / "stage0.json.gz", data)
    skipped = replayed(tmp_path / "stage0.json.gz")["skipped"]
    assert {(s["op"], s["count"]) for s in skipped} == {("c10d::send", 4), ("c10d::recv_", 4)}, skipped
    assert all("its peer rank (1) is not another rank of its group of 1" in s["reason"] for s in skipped), skipped


def test_broken_rank_fails_its_job_only(tmp_path, ddp_job):
    job = tmp_path / "traces" / "ddp_2rank"
    shutil.copytree(ddp_job, job)
    (job / "rank-1.json.gz").write_bytes(b"\x1f\x8b not really gzip")
    shutil.copyfile(corpus("vit_infer.json.gz"), tmp_path / "traces" / "vit.json.gz")
    out, res = run_pytest(tmp_path, timeout=300)
    assert out.returncode == 1
    assert "1 failed, 1 passed" in out.stdout
    assert "rank 1:" in out.stdout and "rank-1.json.gz" in out.stdout


def test_single_rank_collectives_replay_on_a_one_process_group(tmp_path):
    """A world-size-1 DDP trace: its all-reduce runs on an in-process group, nothing skipped."""
    job = tmp_path / "solo"
    capture_job(job, world=1)
    summary = replayed(job / "rank-0.json.gz", iters=3, warmup=None)
    assert "ranks" not in summary  # one process
    assert summary["ops_skipped"] == 0 and summary["ops_replayed"] == summary["ops_total"]


def test_allgather_corpus_trace_on_two_ranks():
    """One rank's file of a 2-rank job: both ranks replay it, every all_gather runs."""
    folder = corpus("multirank/allgather_2rank")
    first, ranks, _ = resolve_job(folder)
    assert ranks is None and first.name.endswith(".json.gz")
    s = replayed(folder, iters=3, warmup=None)
    assert s["world_size"] == 2 and s["ops_skipped"] == 0
    assert [r["collectives"] for r in s["ranks"]] == [10, 10]
    assert any("rank 0's trace" in note for note in s["notes"])


@pytest.mark.slow
def test_dlrm_eight_ranks(tmp_path):
    """8 ranks on a small machine: slow, but every rank replays its file, FBGEMM's operators
    included (the CUDA lookup as FBGEMM's CPU one); without FBGEMM they are the only skips, each
    with its reason."""
    shutil.copytree(corpus("multirank/dlrm_8rank"), tmp_path / "traces" / "dlrm_8rank")
    out, res = run_pytest(tmp_path, "--mystique-budget=1", "--mystique-iters=2")
    assert out.returncode == 0, out.stdout[-3000:]
    info = res["dlrm_8rank"]
    assert info["world_size"] == 8 and len(info["ranks"]) == 8
    assert {r["file"].rsplit("/", 1)[1] for r in info["ranks"]} == {f"rank-{i}.json.gz" for i in range(8)}
    assert all(r["collectives"] == 8 for r in info["ranks"])  # 5 all_to_all(v) + 3 all_reduce per rank
    if load_op_library("fbgemm") is True:
        assert info["skipped"] == [] and info["ops_replayed"] == info["ops_total"] == 5160
        subs = {s["op"]: (s["replacement"], s["count"]) for s in info["substitutions"]}
        assert subs["fbgemm::split_embedding_codegen_lookup_adagrad_function"][1] == 8
    else:
        assert {s["op"].split("::")[0] for s in info["skipped"]} == {"fbgemm"}
        assert all("not registered" in s["reason"] for s in info["skipped"])


def test_missing_peer_group_is_reported(tmp_path):
    """A collective on a group the process_group:init node does not describe is skipped with the
    reason on every rank (never a hang)."""
    src = corpus("multirank/allgather_2rank/chakra_allgather_v102.json.gz")
    data = read_json(src)
    for node in data["nodes"]:
        if node["name"] == "record_param_comms" and node["inputs"]["values"][4] == "all_gather":
            node["inputs"]["values"][2] = 12345  # an unknown backend id
    job = tmp_path / "job"
    job.mkdir()
    write_json(job / "allgather.json.gz", data)
    s = replayed(job, warmup=None)
    assert s["ops_skipped"] == 20
    assert all("process group 12345" in x["reason"] for x in s["skipped"])


def test_ranks_sharing_a_gpu_run_their_collectives_through_gloo():
    """NCCL takes one GPU per rank: an 8-rank job replayed on a 1-GPU machine failed every
    collective with NCCL's "invalid usage" (seen on an H200). Ranks that share a GPU use gloo,
    which moves CUDA tensors through host memory; ranks with GPUs of their own keep NCCL."""
    import torch

    gpu = torch.device("cuda", 0)
    assert backend_for(gpu, shared_gpu=True) == "cpu:gloo,cuda:gloo"
    assert backend_for(gpu) == "cpu:gloo,cuda:nccl"
    assert backend_for(torch.device("cpu"), shared_gpu=True) == "gloo"


def test_the_one_process_group_is_destroyed_at_exit():
    """The in-process group a single-rank trace's collectives run on is destroyed when the process
    ends: NCCL warned "destroy_process_group() was not called before program exit" after the DDP
    ResNet's replay on an H200. (atexit runs its functions last registered first, so the check,
    registered before the group is made, sees the state after the group's own exit handler.)"""
    code = (
        "import atexit, torch, torch.distributed as dist\n"
        "from pytest_mystique.collectives import local_world\n"
        "atexit.register(lambda: print('initialized at exit:', dist.is_initialized()))\n"
        "assert local_world(torch.device('cpu')) and dist.is_initialized()\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "initialized at exit: False" in done.stdout


def test_sends_and_receives_left_pending_are_waited_on_at_the_end_of_an_iteration():
    """The step's last point-to-point op waits on the sends and receives started before it; where
    that op was skipped, none did, and a rank's pending handles piled up iteration after
    iteration. Each iteration's end (and the build's) waits on what is left, receives first."""
    waited = []

    class Work:
        def __init__(self, name):
            self.name = name

        def wait(self):
            waited.append(self.name)

    comms = Comms.__new__(Comms)  # (its groups need a world; the pending handles do not)
    comms.sends, comms.recvs = [Work("send 1"), Work("send 2")], [Work("receive 1")]
    comms.settle()
    assert waited == ["receive 1", "send 1", "send 2"] and comms.sends == comms.recvs == []
    comms.settle()
    assert len(waited) == 3
