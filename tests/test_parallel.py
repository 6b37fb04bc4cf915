"""pytest-xdist: workers on a CPU prepare in parallel and take turns timing; results merge."""

import json
import shutil
import subprocess
import sys

import torch

from pytest_mystique.parallel import worker_device, worker_index

from conftest import bundled


def test_cpu_workers_take_turns_timing_and_merge(tmp_path):
    d = tmp_path / "traces"
    d.mkdir()
    for name in ("mlp_train", "embbag_rec", "cnn_infer", "transformer_train"):
        shutil.copyfile(bundled(name), d / f"{name}.json.gz")
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--mystique", "traces", "-n", "2",
           "--mystique-device=cpu", "--mystique-threads=1", "--mystique-budget=1", "--mystique-iters=5", "--mystique-json=out.json",
           "--junitxml=j.xml"]  # fmt: skip
    out = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:]
    assert "pytest-xdist on the CPU: 2 workers loaded and prepared traces in parallel and took turns timing" in out.stdout
    bench = json.loads((tmp_path / "out.json").read_text())["benchmarks"]
    assert sorted(b["name"] for b in bench) == ["cnn_infer", "embbag_rec", "mlp_train", "transformer_train"]
    infos = [b["extra_info"] for b in bench]
    assert {i["xdist_worker"] for i in infos} == {"gw0", "gw1"}
    windows = sorted(i["timed"] for i in infos)
    for (_, a1), (b0, _) in zip(windows, windows[1:]):
        assert a1 <= b0 + 1e-3, f"timed windows overlap: {windows}"
    assert (tmp_path / "j.xml").read_text().count("mystique_median_s") == 4


def test_worker_placement():
    assert worker_index({"workerid": "gw3"}) == 3 and worker_index(None) is None
    # an explicit device is never changed
    assert worker_device("cpu", 1) == ("cpu", None)
    if not torch.cuda.is_available():
        assert worker_device("auto", 1) == ("cpu", None)  # resolved, so that CPU workers take turns timing
    assert worker_device("auto", None) == ("auto", None)
