"""The capture helper: a user's step becomes a trace plus its timing sidecar."""

import gzip
import json

import pytest
import torch

from pytest_mystique import capture, capture_step
from pytest_mystique.sidecar import load_sidecar, sidecar_path
from pytest_mystique.trace import load_trace


def tiny_step():
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2))
    x = torch.randn(4, 16)
    return lambda: model(x).sum().backward()


def test_capture_step_writes_gzipped_trace_and_sidecar(tmp_path):
    res = capture_step(tiny_step(), tmp_path / "t.json.gz", warmup=1, runs=7, what="tiny", min_warmup_s=0)
    with gzip.open(res.path, "rt") as f:
        data = json.load(f)
    assert data["schema"].startswith("1.")
    assert any(n["name"].startswith("aten::") for n in data["nodes"])
    side = load_sidecar(res.path)
    assert res.sidecar_path == sidecar_path(res.path) == tmp_path / "t.meta.json"
    assert len(side["original_samples_s"]) == 7 and side["original_median_s"] > 0
    assert side["torch"] == str(torch.__version__) and side["what"] == "tiny"
    assert side["threads"] == torch.get_num_threads()
    assert load_trace(res.path).schema == data["schema"]


def test_capture_plain_json(tmp_path):
    step = tiny_step()
    with capture(tmp_path / "t.json") as res:
        step()
    assert json.loads(res.path.read_text())["nodes"]
    assert len(load_sidecar(res.path)["original_samples_s"]) == 1


def test_failed_capture_leaves_nothing(tmp_path):
    with pytest.raises(ZeroDivisionError), capture(tmp_path / "t.json.gz"):
        torch.ones(2).sum()
        raise ZeroDivisionError("step failed")
    assert list(tmp_path.iterdir()) == []


def test_malformed_sidecar_names_the_file(tmp_path):
    (tmp_path / "t.meta.json").write_text('{"original_median_s": -1}')
    with pytest.raises(ValueError, match=r"t\.meta\.json.*positive"):
        load_sidecar(tmp_path / "t.json.gz")
    (tmp_path / "t.meta.json").write_text("{oops")
    with pytest.raises(ValueError, match=r"t\.meta\.json: malformed"):
        load_sidecar(tmp_path / "t.json.gz")
