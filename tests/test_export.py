"""mystique export: a standalone benchmark script that needs only torch."""

import ast
import importlib.util
import json
import re
import subprocess
import sys

import pytest

from pytest_mystique.cli import main
from pytest_mystique.sidecar import load_sidecar, sidecar_path

from conftest import (
    ROOT,
    ImageTokens,
    bundled,
    capture_attention_inference,
    capture_image_tokens,
    corpus,
    graph_step,
    observer_records_strides,
    padded_attention_step,
    row_spreads,
    tbe_rows_read,
    tbe_step,
)


def _exported(trace, tmp_path, name: str):
    """``mystique export`` of ``trace`` into ``tmp_path``, loaded as the module ``name``."""
    script = tmp_path / "bench.py"
    assert main(["export", str(trace), "-o", str(script)]) == 0
    spec = importlib.util.spec_from_file_location(name, script)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def test_exported_script_replays_the_trace_with_only_torch(tmp_path, capsys):
    script = tmp_path / "bench.py"
    assert main(["export", str(corpus("vit_infer.json.gz")), "-o", str(script)]) == 0
    assert "56 of 56 ops" in capsys.readouterr().out
    tree = ast.parse(script.read_text())
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert imported <= {"argparse", "ctypes", "statistics", "time", "torch"}, imported
    # its imports are torch and the standard library only (above); run it isolated from the cwd
    out = subprocess.run([sys.executable, "-I", str(script), "--device", "cpu", "--iters", "6", "--warmup", "2",
                          "--threads", "1"], capture_output=True, text=True, timeout=300, cwd=tmp_path)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "ops per iteration: 56" in out.stdout
    times = [float(x) for x in re.findall(r"iteration \d+: (\d+\.\d+) ms", out.stdout)]
    assert len(times) == 6 and all(t > 0 for t in times)
    median = float(re.search(r"median: (\d+\.\d+) ms", out.stdout).group(1))
    assert min(times) <= median <= max(times)


def test_exported_script_keeps_an_embedding_bags_offsets(tmp_path, capsys):
    """The recommender's bag offsets must start at 0 and rise: drawn uniformly between their
    lowest and highest value, as other integers are, the embedding bag refused them and the
    script stopped at its first iteration. It takes the values the replay made to fit the op."""
    import torch

    bench = _exported(bundled("embbag_rec"), tmp_path, "bench_bags")
    assert "86 of 86 ops" in capsys.readouterr().out
    laid_out = [v for v in bench.VIEWS if v[9] is not None and v[9][0] == "values"]
    assert len(laid_out) == 4  # the four tables' offsets
    made = bench.make_inputs(torch.device("cpu"), torch.Generator().manual_seed(0))
    for v in laid_out:
        offsets = made[v[0]]
        assert offsets[0] == 0 and bool((offsets.diff() >= 0).all()) and offsets.tolist() == list(v[9][1])
    out = subprocess.run([sys.executable, "-I", bench.__file__, "--device", "cpu", "--iters", "3", "--warmup", "1",
                          "--threads", "1"], capture_output=True, text=True, timeout=300, cwd=tmp_path)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert "ops per iteration: 86" in out.stdout


def test_exported_script_takes_a_substitutes_own_ops_along(tmp_path, capsys):
    """A mixture of experts captured on a GPU counts its tokens with aten::histc over integers,
    which the CPU's kernel refuses: the replay there counts them as float64 around the op
    (substitute.Composite). The script calls that function, its source written into the script,
    and runs on the CPU; the bare op would have stopped it."""
    import torch

    script = tmp_path / "bench.py"
    assert main(["export", str(ROOT / "tests" / "data" / "mixtral_infer_h100.json.gz"), "-o", str(script)]) == 0
    said = capsys.readouterr().out
    assert "substituted 2x aten::histc" in said
    # (329 ops on a torch without aten::_grouped_mm, or without its CPU kernel, replayed through the
    # ops it ran: 2.4's, 2.8's)
    ops = int(re.search(r": (\d+) of \1 ops", said).group(1))
    grouped = hasattr(torch.ops.aten, "_grouped_mm") and torch._C._dispatch_has_computed_kernel_for_dispatch_key(
        "aten::_grouped_mm", "CPU")  # fmt: skip
    assert ops == (229 if grouped else 329), said
    source = script.read_text()
    assert source.count("def _histc_of_integers(") == 1
    assert source.count("_histc_of_integers(torch.ops.aten.histc.default, ") == 2
    out = subprocess.run([sys.executable, "-I", str(script), "--device", "cpu", "--iters", "2", "--warmup", "1",
                          "--threads", "1"], capture_output=True, text=True, timeout=300, cwd=tmp_path)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert f"ops per iteration: {ops}\n" in out.stdout


def test_export_of_a_broken_trace_is_a_clear_error(tmp_path, capsys):
    bad = tmp_path / "broken.json"
    bad.write_text('{"schema": "1.0.1", "nodes": [')
    assert main(["export", str(bad), "-o", str(tmp_path / "x.py")]) == 2
    err = capsys.readouterr().err
    assert "broken.json" in err and "invalid JSON" in err
    assert not (tmp_path / "x.py").exists()


def test_exported_inputs_keep_the_optimizer_state_at_zero(tmp_path):
    """The bundled transformer's AdamW moments start at zero in the replay; the exported script's
    inputs do too, before every iteration, and the other inputs keep their spread."""
    import torch

    bench = _exported(bundled("transformer_train"), tmp_path, "bench")
    gen = torch.Generator().manual_seed(0)
    e = bench.make_inputs(torch.device("cpu"), gen)
    constant = [v for v in bench.VIEWS if v[2].startswith("float") and v[6] == v[7] == 0 and len(v[4]) > 0]
    assert len(constant) >= 54 and all(v[8] for v in constant)  # 54 moments, all written by the step
    with torch.no_grad():  # (as the script's main runs it: its parameters require grad)
        bench.step(e)
        bench.refill(e, gen)
    assert all(bool((e[v[0]] == 0).all()) for v in constant)
    spread = [v for v in bench.VIEWS if v[2] == "float32" and v[6] < v[7]]
    assert spread and all(float(e[v[0]].detach().min()) < float(e[v[0]].detach().max())
                          for v in spread if e[v[0]].numel() > 1)  # fmt: skip


def test_exported_script_calls_operators_with_special_names(tmp_path, capsys):
    """``mask_a | mask_b`` records ``aten::__or__``: a real operator whose name is a Python special
    name. The script calls it (only aten's few such operators pass; others are refused)."""
    import torch

    from pytest_mystique import capture_step

    a, b = torch.rand(64, 64) > 0.5, torch.rand(64, 64) > 0.5
    capture_step(lambda: ((a | b) ^ a).sum(), tmp_path / "masks.json.gz", warmup=1, runs=1, min_warmup_s=0)
    script = tmp_path / "bench.py"
    assert main(["export", str(tmp_path / "masks.json.gz"), "-o", str(script)]) == 0
    assert "torch.ops.aten.__or__.Tensor(" in script.read_text()
    out = subprocess.run([sys.executable, "-I", str(script), "--device", "cpu", "--iters", "2", "--warmup", "1"],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path)  # fmt: skip
    assert out.returncode == 0, out.stderr


def test_exported_script_keeps_the_count_a_mask_selects(tmp_path, capsys):
    """``x[mask] = values`` needs a mask with as many true elements as there are values: the
    replay draws a given mask so, and seeds one computed from its data that selects another
    count (here ``masked_scatter``'s expanded mask, of more than its source holds). The script
    drew every boolean input half true, and its first iteration failed with a shape error; it
    takes the masks the replay made, an expanded one's repeats written once."""
    import torch

    from pytest_mystique import capture_step

    text, feats, ids = torch.randn(2, 20, 16), torch.randn(12, 16), torch.randint(0, 90, (2, 20))
    ids[:, 3:9] = 99
    given = torch.zeros(2, 20, dtype=torch.bool)
    given[:, 10:16] = True

    def step():
        placed = text.clone()
        placed[given] = feats
        return placed.masked_scatter((ids != 99).unsqueeze(-1).expand_as(text), torch.randn(28, 16)).sum()

    capture_step(step, tmp_path / "masks.json.gz", warmup=1, runs=1, min_warmup_s=0)
    # the ids hold the original's spread (its 99s where they stood): the computed mask selects as
    # many as the original's, and only the given one is an input
    counts = _mask_counts(tmp_path / "masks.json.gz", tmp_path, "bench_masks", capsys)
    assert counts == [12], counts
    # as of a trace captured elsewhere (no record of the ids): the computed mask is seeded
    side = load_sidecar(tmp_path / "masks.json.gz")
    assert side.pop("index_inputs", None)
    sidecar_path(tmp_path / "masks.json.gz").write_text(json.dumps(side))
    counts = _mask_counts(tmp_path / "masks.json.gz", tmp_path, "bench_masks_elsewhere", capsys)
    assert counts == [12, 28 * 16], counts


def _mask_counts(trace, tmp_path, name: str, capsys) -> list[int]:
    """The true elements of each boolean input of ``trace``'s exported script, which runs."""
    import torch

    bench = _exported(trace, tmp_path, name)
    assert "8 of 8 ops" in capsys.readouterr().out
    made = bench.make_inputs(torch.device("cpu"), torch.Generator().manual_seed(0))
    out = subprocess.run([sys.executable, "-I", bench.__file__, "--device", "cpu", "--iters", "2", "--warmup", "1"],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    return sorted(int(made[v[0]].count_nonzero()) for v in bench.VIEWS if v[2] == "bool")


def test_exported_script_rebuilds_a_sparse_input_of_the_step(tmp_path):
    """A graph step's sparse adjacency matrix, rebuilt by the replay from the capture's record,
    is drawn anew by the exported script with the same shape and element count."""
    import torch

    from pytest_mystique import capture_step

    gen = torch.Generator().manual_seed(2)
    adj = torch.sparse_coo_tensor(torch.randint(0, 200, (2, 900), generator=gen), torch.rand(900, generator=gen),
                                  (200, 200)).coalesce()  # fmt: skip
    x, w = torch.randn(200, 16), torch.randn(16, 4, requires_grad=True)
    capture_step(lambda: torch.sparse.mm(adj, x @ w).sum().backward(), tmp_path / "g.json", warmup=1, runs=1,
                 min_warmup_s=0)  # fmt: skip
    bench = _exported(tmp_path / "g.json", tmp_path, "bench")
    assert [s[1:] for s in bench.SPARSE] == [((200, 200), "float32", adj._nnz(), 2, True)]
    made = bench.make_inputs(torch.device("cpu"), torch.Generator().manual_seed(0))[bench.SPARSE[0][0]]
    assert made.shape == adj.shape and made._nnz() == adj._nnz() and made.is_coalesced()
    assert made._indices().unique(dim=1).shape[1] == adj._nnz()
    out = subprocess.run([sys.executable, "-I", bench.__file__, "--device", "cpu", "--iters", "2", "--warmup", "1"],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "median:" in out.stdout


def test_exported_script_rebuilds_mkldnn_inputs_and_draws_from_its_own_generator(tmp_path):
    """A model converted to MKL-DNN reads weights of that layout, and a sampling op draws from the
    program's generator: the script draws the weights anew in that layout, and gives the op a
    seeded generator of its own (it could write neither as code before)."""
    import torch
    from torch.utils import mkldnn

    from pytest_mystique import capture_step

    conv = mkldnn.to_mkldnn(torch.nn.Conv2d(3, 8, 3).eval())
    x, gen = torch.randn(2, 3, 16, 16), torch.Generator().manual_seed(5)

    def step():
        with torch.no_grad():
            y = conv(x.to_mkldnn()).to_dense()
            return y + torch.randn(y.shape, generator=gen)

    capture_step(step, tmp_path / "m.json", warmup=1, runs=1, min_warmup_s=0)
    bench = _exported(tmp_path / "m.json", tmp_path, "bench_mkldnn")
    assert sorted(m[1:] for m in bench.MKLDNN) == [((8,), "float32"), ((8, 3, 3, 3), "float32")]
    made = bench.make_inputs(torch.device("cpu"), torch.Generator().manual_seed(0))
    assert all(made[slot].layout == torch._mkldnn for slot, _, _ in bench.MKLDNN)
    assert "generator=OP_GEN" in open(bench.__file__).read()
    out = subprocess.run([sys.executable, "-I", bench.__file__, "--device", "cpu", "--iters", "2", "--warmup", "1"],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "ops per iteration: 5" in out.stdout


def test_exported_script_draws_index_inputs_with_the_replays_spread(tmp_path):
    """Ids of a power law, recorded by the capture helper: the exported script draws them with
    the distinct values and the hottest share the replay gave them, not uniformly, and its
    hottest ids are the original's."""
    import torch

    from pytest_mystique import capture_step

    rows, n = 20_000, 4096
    ranks = torch.distributions.Categorical(probs=1.0 / torch.arange(1, rows + 1) ** 1.2).sample((n,))
    ids, offsets = torch.randperm(rows)[ranks], torch.arange(0, n, 16)
    bag = torch.nn.EmbeddingBag(rows, 8, mode="sum")
    capture_step(lambda: bag(ids, offsets).sum().backward(), tmp_path / "r.json", warmup=1, runs=1, min_warmup_s=0)
    bench = _exported(tmp_path / "r.json", tmp_path, "bench_ids")
    [view] = [v for v in bench.VIEWS if v[9] is not None and v[9][0] == "skew"]
    assert view[4] == (n,)
    made = bench.make_inputs(torch.device("cpu"), torch.Generator().manual_seed(0))[view[0]]
    _, counts = made.unique(return_counts=True)
    _, original = ids.unique(return_counts=True)
    assert counts.numel() == original.numel() and 0 <= made.min() and made.max() < rows
    assert counts.max().item() == pytest.approx(original.max().item(), rel=0.25)
    top10 = torch.sort(counts, descending=True).values[:10].sum().item()
    assert view[9][3] and top10 == pytest.approx(torch.sort(original, descending=True).values[:10].sum().item(), rel=0.05)
    assert made.bincount().argmax() == ids.bincount().argmax()


def test_exported_script_puts_the_originals_hottest_ids_where_they_stood(tmp_path):
    """A vision-language step's ids, whose image tokens stood in one run a row: the exported
    script's ids hold the image token as often and in the same runs, as the replay's do."""
    import torch

    capture_image_tokens(tmp_path / "vlm.json.gz")
    bench = _exported(tmp_path / "vlm.json.gz", tmp_path, "bench_vlm")
    [view] = [v for v in bench.VIEWS if v[9] is not None and v[9][0] == "skew" and v[4] == (2, 20)]
    made = bench.make_inputs(torch.device("cpu"), torch.Generator().manual_seed(0))[view[0]]
    assert torch.nonzero(made == ImageTokens.IMAGE)[:, 1].tolist() == [3, 4, 5, 6, 7, 8] * 2, made


def test_exported_script_gives_a_padding_mask_the_originals_pads(tmp_path):
    """A key padding mask given with the batch, whose true elements the capture recorded: the
    exported script's mask is the original's, as the replay's is (not half true at random)."""
    import torch

    from pytest_mystique import capture_step

    step, pads = padded_attention_step()
    capture_step(step, tmp_path / "kpm.json.gz", warmup=1, runs=1, min_warmup_s=0)
    bench = _exported(tmp_path / "kpm.json.gz", tmp_path, "bench_kpm")
    [view] = [v for v in bench.VIEWS if v[2] == "bool"]
    assert torch.equal(bench.make_inputs(torch.device("cpu"), torch.Generator().manual_seed(0))[view[0]], pads)


def test_exported_script_draws_a_graph_s_edge_index_row_by_row(tmp_path):
    """A graph's edge index, whose sources are spread and whose destinations crowd on hubs: the
    exported script draws each row with the spread the capture recorded for it, as the replay does."""
    import torch

    from pytest_mystique import capture_step

    step, edge_index = graph_step()
    capture_step(step, tmp_path / "g.json", warmup=1, runs=1, min_warmup_s=0)
    bench = _exported(tmp_path / "g.json", tmp_path, "bench_graph")
    [view] = [v for v in bench.VIEWS if v[9] is not None and v[9][0] == "skew" and v[4] == tuple(edge_index.shape)]
    assert len(view[9][5]) == 2
    made = bench.make_inputs(torch.device("cpu"), torch.Generator().manual_seed(0))[view[0]]
    for (d, top), (want_d, want_top) in zip(row_spreads(made), row_spreads(edge_index)):
        assert d == want_d and top == pytest.approx(want_top, rel=0.1)


def test_exported_script_keeps_each_table_batched_id_in_one_table(tmp_path):
    """A TBE lookup's ids, as the replay draws them, belong to one table each (a hot id is one
    table's row, not a row of every table): the exported script draws them so too, and reads as
    many (table, row) pairs as the original did."""
    import torch

    from pytest_mystique import capture_step
    from pytest_mystique.ops import load_op_library

    if load_op_library("fbgemm") is not True:
        pytest.skip("fbgemm_gpu is not installed for this torch")
    step, ids, offsets = tbe_step(False, (300_000, 60_000))
    capture_step(step, tmp_path / "tbe.json.gz", warmup=1, runs=1, min_warmup_s=0)
    bench = _exported(tmp_path / "tbe.json.gz", tmp_path, "bench_tbe")
    [view] = [v for v in bench.VIEWS if v[9] is not None and v[9][0] == "skew" and v[4] == tuple(ids.shape)]
    assert view[9][4] == 2 and view[4] == tuple(ids.shape)
    [cuts] = [v for v in bench.VIEWS if v[9] is not None and v[9][0] == "values" and v[4] == tuple(offsets.shape)]
    made = bench.make_inputs(torch.device("cpu"), torch.Generator().manual_seed(0))
    pairs = tbe_rows_read(made[view[0]], torch.tensor(cuts[9][1]), 2)
    original = tbe_rows_read(ids, offsets, 2)
    assert abs(pairs - original) < 0.1 * original, (pairs, original)


@pytest.mark.skipif(not observer_records_strides(), reason="this torch's observer records no strides (2.4): the "
                    "layout that shows the path is not in its traces")  # fmt: skip
def test_exported_script_gives_the_original_s_parameters_their_grad_flag(tmp_path):
    """An inference step's attention weight required grad in the original (a parameter), which
    made its matmul fold a batch-first input into one mm (pytest_mystique.grad_flags): the exported
    script's inputs carry the flag too, and its step runs that path."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    trace = capture_attention_inference(tmp_path / "attention.json.gz")
    bench = _exported(trace, tmp_path, "bench_flag")
    with torch.no_grad():
        e = bench.make_inputs(torch.device("cpu"), torch.Generator().manual_seed(0))
        assert [tuple(e[s].shape) for s in bench.GRAD] == [(192, 64)]  # the in-projection's weight
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            bench.step(e)
    ran = {ev.key for ev in prof.key_averages()}
    assert "aten::mm" in ran and "aten::bmm" not in ran, ran


def test_exported_script_gives_tensors_the_step_made_from_its_numbers_their_values(tmp_path):
    """``torch.tensor([32, 24, ...])`` inside the step, divisors: the exported script holds the
    original's values, as the replay does (not drawn between their lowest and highest)."""
    import torch

    from pytest_mystique import capture_step

    offsets, sizes = torch.randn(16, 8), [32, 24, 16, 8, 4, 2, 1, 64]
    capture_step(lambda: offsets / torch.tensor(sizes), tmp_path / "div.json.gz", warmup=1, runs=1, min_warmup_s=0)
    bench = _exported(tmp_path / "div.json.gz", tmp_path, "bench_div")
    [view] = [v for v in bench.VIEWS if v[2] == "int64"]
    made = bench.make_inputs(torch.device("cpu"), torch.Generator().manual_seed(0))[view[0]]
    assert made.tolist() == sizes
