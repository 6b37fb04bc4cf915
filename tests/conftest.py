import functools
import gzip
import json
import os
import shutil
from pathlib import Path

# The tests check behaviour on the CPU: what they assert (timings in samples of a set size, the
# crash canary and the machine-speed probe of a CPU build, "replayed on cpu") is the CPU path's.
# On a host with a GPU, device "auto" would replay there instead, and 13 tests failed on an H200
# for that alone. The CUDA path is checked on a GPU by benchmarks/gpu_check.py;
# MYSTIQUE_TEST_GPU=1 leaves the GPUs visible to the tests. (Set before any test initialises CUDA.)
if os.environ.get("MYSTIQUE_TEST_GPU") != "1":
    os.environ["CUDA_VISIBLE_DEVICES"] = ""

import pytest

# A test that uses pytester gets sys.modules restored when it ends. Extension modules (numpy, scipy,
# torch, msgspec) cannot be loaded twice, and torch's C++ op registry outlives a dropped module (a
# second import of one that defines a library fails: "Only a single TORCH_LIBRARY ..."). So
# everything the plugin or a test imports lazily is imported here first. torch._inductor is among
# them: torch.profiler's start reads `torch._inductor`, which imports it (and torch._dynamo) on
# first use, e.g. in the capture helper's time-inside-operators measurement.
import scipy.stats  # noqa: F401
import torch._inductor  # noqa: F401

import pytest_mystique.recorder  # noqa: F401
import pytest_mystique.report  # noqa: F401
import pytest_mystique.runner  # noqa: F401
import pytest_mystique.trace  # noqa: F401

ROOT = Path(__file__).resolve().parent.parent
TRACES = ROOT / "traces"
CORPUS = ROOT.parent / "shared" / "corpus"


#: This torch's release, (major, minor): workloads some tests capture are written with APIs of a
#: newer one than the oldest pyproject.toml states (2.4), and skip before it, saying why.
TORCH = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])


@functools.cache
def hops_run_under_a_mode() -> bool:
    """Whether this torch runs an eager ``torch.cond`` under a dispatch mode that takes
    higher-order operators (torch 2.4's prototype asserted that such a mode was "not registered";
    2.6's to 2.8's have "no rule registered" for one, nor for flex_attention)."""
    from pytest_mystique.measure import OperatorWatch

    class Passing(OperatorWatch):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    x = torch.ones(2)
    try:
        with Passing():
            torch.cond(x.sum() > 0, torch.sin, torch.cos, (x,))
    except Exception:  # noqa: BLE001 - whatever that torch raises
        return False
    return True


@functools.cache
def observer_records_strides() -> bool:
    """Whether this torch's execution trace observer records the tensors' strides (torch 2.4's
    does not: a path that shows only in a layout, a batch matmul folded where its transposed input
    could not be viewed as a matrix, does not show in its traces)."""
    import tempfile

    from pytest_mystique import capture

    with tempfile.TemporaryDirectory() as tmp:
        with capture(Path(tmp) / "t.json"):
            torch.ones(2).sum()
        data = json.loads((Path(tmp) / "t.json").read_text())
    return any("strides" in n.get("inputs", {}) for n in data["nodes"] if n["name"] == "aten::sum")


@functools.cache
def autocast_copies_require_grad() -> bool:
    """Whether this torch's ``torch.autocast`` makes its kept copy of a parameter with autograd on
    under ``no_grad`` too (2.11's and later do; 2.4's to 2.10's do not): a ``matmul`` of a transposed batch
    by the copy then folds the batch into one ``mm``, a path that shows the flag."""
    w, x = torch.nn.Parameter(torch.randn(8, 4)), torch.randn(3, 2, 8).transpose(0, 1)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16), torch.profiler.profile() as prof:
        torch.matmul(x, w)
    return any(e.name == "aten::mm" for e in prof.events())


def corpus(name: str) -> Path:
    path = CORPUS / name
    if not path.exists():
        pytest.skip(f"shared corpus trace {path} is not present beside this checkout")
    return path


def bundled(name: str) -> Path:
    path = TRACES / f"{name}.json.gz"
    assert path.exists(), f"bundled trace {path} missing: run python scripts/make_traces.py"
    return path


def printed_json(out: str) -> dict:
    """The last JSON object a script printed on a line of its own, whatever else is on its stdout
    (gloo's "[Gloo] Rank 0 is connected to ..." under torch 2.7-2.10)."""
    return json.loads([line for line in out.splitlines() if line.startswith("{")][-1])


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


def capture_attention_inference(path: Path) -> Path:
    """Capture the inference step of a batch-first ``nn.MultiheadAttention`` (64 wide, 4 heads,
    in training mode, so it takes no fast path) at ``path``: its in-projection's matmul folds the
    sequence-first transpose of its input only because the weight requires grad."""
    import torch

    from pytest_mystique import capture_step

    attention = torch.nn.MultiheadAttention(64, 4, batch_first=True)
    x = torch.randn(4, 32, 64)

    def step():
        with torch.no_grad():
            attention(x, x, x, need_weights=False)

    capture_step(step, path, warmup=1, runs=1, min_warmup_s=0)
    return path


def tbe_step(train: bool, rows: tuple[int, ...]):
    """A CPU step of FBGEMM's table-batched embedding module (FBGEMM 1.x records its lookup as
    ``split_embedding_codegen_lookup_sgd_function_pt2``, the tables packed in a list argument):
    tables of ``rows`` rows of 64, weights as a trained model's, bags of 1-40 ids over a shuffled power
    law."""
    import torch
    from fbgemm_gpu.split_embedding_configs import EmbOptimType
    from fbgemm_gpu.split_table_batched_embeddings_ops_common import EmbeddingLocation
    from fbgemm_gpu.split_table_batched_embeddings_ops_training import (
        ComputeDevice,
        SplitTableBatchedEmbeddingBagsCodegen,
    )

    batch = 512
    tbe = SplitTableBatchedEmbeddingBagsCodegen([(n, 64, EmbeddingLocation.HOST, ComputeDevice.CPU) for n in rows],
                                                optimizer=EmbOptimType.EXACT_SGD, learning_rate=0.01)  # fmt: skip
    tbe.init_embedding_weights_uniform(-0.01, 0.01)  # (zeros until then, as FBGEMM makes them)
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(1, 41, (len(rows) * batch,), generator=g)
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)])
    ids = []
    for t, n in enumerate(rows):  # each table's bags in turn, its ids over its own rows
        count = int(lengths[t * batch : (t + 1) * batch].sum())
        ids.append(torch.randperm(n, generator=g)[torch.multinomial(1.0 / torch.arange(1, 20_001) ** 1.05, count,
                                                                   replacement=True, generator=g)])  # fmt: skip
    ids = torch.cat(ids)

    def step():
        if train:
            tbe(ids, offsets).sum().backward()
        else:
            with torch.no_grad():
                tbe(ids, offsets)

    return step, ids, offsets


def graph_step(nodes: int = 1000, edges: int = 12_000, features: int = 16, *, transposed: bool = False):
    """A graph layer's step on a graph whose edges leave uniformly spread sources and reach a few
    crowded destinations (``rand() ** 3``: hub nodes): features gathered at the sources, summed
    at the destinations (a GIN or GCN layer's message passing). The step and its edge index
    (``transposed``: a view of a tensor of (source, destination) pairs, its rows strided)."""
    gen = torch.Generator().manual_seed(7)
    src = torch.randint(0, nodes, (edges,), generator=gen)
    dst = (torch.rand(edges, generator=gen) ** 3 * nodes).long()
    edge_index = torch.stack([src, dst], 1).t() if transposed else torch.stack([src, dst])
    x = torch.randn(nodes, features, generator=gen)

    def step():
        messages = x.index_select(0, edge_index[0])
        return torch.zeros(nodes, features).index_add_(0, edge_index[1], messages).sum()

    return step, edge_index


def row_spreads(t: torch.Tensor) -> list[tuple[int, float]]:
    """Each row's distinct values and its hottest value's share."""
    return [(row.unique().numel(), row.unique(return_counts=True)[1].max().item() / row.numel()) for row in t]


def tbe_rows_read(indices, offsets, tables: int) -> int:
    """Distinct (table, row) pairs of a TBE lookup's ids: each table's lie between two of its offsets."""
    cuts = offsets[:: len(offsets) // tables].tolist()
    return sum(len(indices[a:b].unique()) for a, b in zip(cuts, cuts[1:]))


class ImageTokens(torch.nn.Module):
    """A vision-language model's merge of image features into its text embeddings, three ways:
    at the positions of its image token (a mask computed from the ids, ``index_put_``), through
    ``masked_scatter`` (LLaVA's, here of other features at the other tokens), and at the positions
    of a mask given with the batch (Kosmos-2's ``image_embeds_position_mask``)."""

    IMAGE = 99

    def __init__(self):
        super().__init__()
        self.embed, self.project = torch.nn.Embedding(100, 16), torch.nn.Linear(8, 16)

    def forward(self, ids, patches, others, given):
        feats = self.project(patches)  # (12, 16): 6 image tokens in each of 2 rows
        text = self.embed(ids)
        merged = text.clone()
        merged[ids == self.IMAGE] = feats
        scattered = text.masked_scatter((ids != self.IMAGE).unsqueeze(-1).expand_as(text), self.project(others))
        placed = text.clone()
        placed[given] = feats
        return (merged + scattered + placed).sum()


def capture_image_tokens(path: Path) -> None:
    """A step of :class:`ImageTokens` captured into ``path``: its ids hold 6 image tokens in a
    run in each of their 2 rows (at 3 to 8), its mask given with the batch 6 true elements a row."""
    from pytest_mystique import capture_step

    ids = torch.randint(0, 90, (2, 20))
    ids[:, 3:9] = ImageTokens.IMAGE
    model, patches, others = ImageTokens(), torch.randn(12, 8), torch.randn(28, 8)
    given = torch.zeros(2, 20, dtype=torch.bool)
    given[:, 10:16] = True
    capture_step(lambda: model(ids, patches, others, given).backward(), path, warmup=1, runs=1, min_warmup_s=0)


def padded_attention_step():
    """A training step of ``nn.MultiheadAttention`` over 8 rows of 6 keys, the last two of each
    row padding (its key padding mask, given with the batch, true there), and that mask."""
    mha, x = torch.nn.MultiheadAttention(32, 4, batch_first=True), torch.randn(8, 6, 32)
    pads = torch.zeros(8, 6, dtype=torch.bool)
    pads[:, 4:] = True
    return lambda: mha(x, x, x, key_padding_mask=pads)[0].square().mean().backward(), pads


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


@pytest.fixture(scope="session")
def postgres_url():
    """A throwaway PostgreSQL server (Debian's postgresql package), or a skip saying why not."""
    import glob
    import os
    import socket
    import subprocess
    import tempfile

    bindir = next(iter(sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)), None)
    initdb = os.path.join(bindir, "initdb") if bindir else shutil.which("initdb")
    pg_ctl = os.path.join(bindir, "pg_ctl") if bindir else shutil.which("pg_ctl")
    if not initdb or not os.path.exists(initdb):
        pytest.skip("PostgreSQL is not installed (Debian: apt-get install postgresql; .ci/run does it)")
    # not under pytest's temporary root: that is private to this user, and the server runs as another
    base = Path(tempfile.mkdtemp(prefix="mystique-pg-"))
    data, sock = base / "data", base / "sock"
    sock.mkdir()
    as_user = []
    if os.geteuid() == 0:  # the server refuses to run as root: run it as the package's user
        import pwd

        try:
            pw = pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip("running as root and there is no 'postgres' user to run the server as")
        os.chmod(base, 0o755)
        os.chown(sock, pw.pw_uid, pw.pw_gid)
        data.mkdir()
        os.chown(data, pw.pw_uid, pw.pw_gid)
        as_user = ["runuser", "-u", "postgres", "--"]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = base / "server.log"
    try:
        subprocess.run([*as_user, initdb, "-D", str(data), "-A", "trust", "-U", "mystique"], check=True,
                       capture_output=True, timeout=120)  # fmt: skip
        log.touch()
        if as_user:
            os.chown(log, pw.pw_uid, pw.pw_gid)
        subprocess.run([*as_user, pg_ctl, "-D", str(data), "-l", str(log), "-w", "-t", "60", "-o",
                        f"-k {sock} -p {port} -c listen_addresses=''", "start"],
                       check=True, capture_output=True, timeout=120)  # fmt: skip
    except (subprocess.SubprocessError, OSError) as e:
        shutil.rmtree(base, ignore_errors=True)
        pytest.skip(f"could not start a PostgreSQL server: {e}")
    yield f"postgresql://mystique@/postgres?host={sock}&port={port}"
    subprocess.run([*as_user, pg_ctl, "-D", str(data), "-m", "fast", "-w", "stop"], capture_output=True, timeout=120)
    shutil.rmtree(base, ignore_errors=True)
