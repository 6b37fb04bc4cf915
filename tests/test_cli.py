"""The `mystique` command line."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from bad_inputs import set_op_schema

from pytest_mystique.cli import main
from pytest_mystique.report import json_text

from conftest import corpus, read_json, write_json

MYSTIQUE = [sys.executable, "-m", "pytest_mystique.cli"]


def strict_json_refuses(constant: str):
    raise AssertionError(f"{constant} is not JSON: other readers than Python's refuse it")


def test_json_output_is_strict_json():
    """An interval without an upper end or an infinite count of degrees of freedom is written
    null: jq and JavaScript refuse Infinity and NaN."""
    text = json_text({"ci_high": math.inf, "df": -math.inf, "x": [math.nan, 1.5, (2, 3.0)], "path": Path("a/b")})
    assert json.loads(text, parse_constant=strict_json_refuses) == {"ci_high": None, "df": None,
                                                                    "x": [None, 1.5, [2, 3.0]], "path": "a/b"}  # fmt: skip


@pytest.mark.parametrize("name", ["llama_train", "vit_infer", "distilbert_train"])
def test_replay_json_replays_every_op_of_cpu_corpus(name, capsys):
    assert main(["replay", str(corpus(f"{name}.json.gz")), "--device", "cpu", "--iters", "3", "--warmup", "1",
                 "--threads", "1", "--json"]) == 0  # fmt: skip
    out = json.loads(capsys.readouterr().out, parse_constant=strict_json_refuses)
    assert out["trace"] == name and out["device"] == "cpu"
    assert out["ops_total"] > 0 and out["ops_replayed"] == out["ops_total"]
    assert out["ops_skipped"] == 0 and out["skipped"] == []
    assert len(out["samples_s"]) == 3 and all(s > 0 for s in out["samples_s"])
    assert out["median_s"] == sorted(out["samples_s"])[1]
    assert out["original_median_s"] > 0 and out["fidelity_ratio"] > 0  # from the .meta.json sidecar


def test_replay_json_is_the_only_thing_on_stdout_whatever_else_prints_there(capfd, monkeypatch):
    """What a C library or a process started during the replay prints to stdout goes to stderr
    under ``--json``: gloo under torch 2.7-2.10 prints "[Gloo] Rank 0 is connected to 0 peer
    ranks ..." there (a trace with collectives, in its one-process world and in each rank process),
    and the answer was no JSON. Here the replay's start prints such lines three ways: from C into
    its stdio buffer, unflushed; from a child process; straight to file descriptor 1."""
    import ctypes

    import pytest_mystique.cli as cli

    real = cli.replay_file

    def noisy(*args, **kwargs):
        ctypes.CDLL(None).printf(b"[Gloo] from C, buffered\n")
        subprocess.run([sys.executable, "-c", "print('[Gloo] from a child process')"], check=True)
        os.write(1, b"[Gloo] to fd 1\n")
        return real(*args, **kwargs)

    monkeypatch.setattr(cli, "replay_file", noisy)
    before = os.fstat(1)
    assert main(["replay", str(corpus("vit_infer.json.gz")), "--device", "cpu", "--iters", "2", "--warmup", "0",
                 "--threads", "1", "--json"]) == 0  # fmt: skip
    ctypes.CDLL(None).fflush(None)
    got = capfd.readouterr()
    assert json.loads(got.out)["ops_replayed"] == 56, got.out[:300]
    for line in ("[Gloo] from C, buffered", "[Gloo] from a child process", "[Gloo] to fd 1"):
        assert line in got.err
    assert os.path.samestat(os.fstat(1), before)  # (pointed back)
    monkeypatch.setattr(cli, "replay_file", real)
    assert main(["replay", str(corpus("vit_infer.json.gz")), "--device", "cpu", "--iters", "2", "--warmup", "0",
                 "--threads", "1"]) == 0  # fmt: skip
    assert "56/56 ops replayed on cpu" in capfd.readouterr().out  # (the text report, without --json)


def test_replay_takes_the_captures_thread_count(capsys, monkeypatch):
    from pytest_mystique.measure import torch_threads

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    with torch_threads(3):  # vit_infer.meta.json: captured at 1 thread
        assert main(["replay", str(corpus("vit_infer.json.gz")), "--device", "cpu", "--iters", "2", "--warmup", "0",
                     "--json"]) == 0  # fmt: skip
    out = json.loads(capsys.readouterr().out)
    assert out["threads"] == 1 and out["original_threads"] == 1 and out["fidelity_ratio"] > 0
    assert "fidelity_unlike" not in out


def test_a_step_recorded_on_another_kind_of_device_gets_no_fidelity_ratio(capsys, tmp_path):
    """A step's time on a GPU says nothing of its time on a CPU: where the sidecar says the original
    ran on another kind of device than the replay (a CPU step replayed where the default device is
    a GPU), the original's timing is shown, the ratio is not, and the reason is given."""
    import shutil

    trace = shutil.copy(corpus("vit_infer.json.gz"), tmp_path / "vit_infer.json.gz")
    side = read_json(corpus("vit_infer.meta.json"))
    assert side["device"] == "cpu"

    def replayed(device: str, *json_flag: str) -> str:
        (tmp_path / "vit_infer.meta.json").write_text(json.dumps(dict(side, device=device)))
        assert main(["replay", str(trace), "--device", "cpu", "--iters", "2", "--warmup", "0", "--threads", "1",
                     *json_flag]) == 0  # fmt: skip
        return capsys.readouterr().out

    out = json.loads(replayed("cpu", "--json"))
    assert out["fidelity_ratio"] > 0 and out["original_device"] == "cpu" and "fidelity_unlike" not in out
    out = json.loads(replayed("cuda", "--json"))
    assert out["original_median_s"] == side["original_median_s"] and out["original_device"] == "cuda"
    assert "fidelity_ratio" not in out
    assert any(n.startswith("the original ran on cuda, the replay on cpu") for n in out["fidelity_unlike"])
    text = replayed("cuda")
    assert "on cuda: replay on cpu is not comparable (use --device)" in text and ": ratio" not in text


def test_replay_lists_skipped_ops(capsys, tmp_path):
    data = read_json(corpus("vit_infer.json.gz"))
    set_op_schema(data, "gelu", "mystique_test::gelu(Tensor self, *, str approximate='none') -> Tensor")
    path = write_json(tmp_path / "vit_renamed.json.gz", data)
    assert main(["replay", str(path), "--device", "cpu", "--iters", "2", "--warmup", "0", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ops_skipped"] == 2  # the two layers' GELUs
    assert out["ops_replayed"] + out["ops_skipped"] == out["ops_total"]
    [skip] = out["skipped"]
    assert skip["op"] == "aten::gelu" and "mystique_test::gelu is not registered" in skip["reason"]
    assert skip["count"] == 2


def test_replay_human_output_and_errors(tmp_path):
    import torch

    out = subprocess.run([*MYSTIQUE, "replay", str(corpus("vit_infer.json.gz")), "--iters", "2", "--warmup", "0"],
                         capture_output=True, text=True)  # fmt: skip
    assert out.returncode == 0, out.stderr
    default = "cuda:0" if torch.cuda.is_available() else "cpu"  # (MYSTIQUE_TEST_GPU=1 leaves a GPU visible)
    assert f"vit_infer: 56/56 ops replayed on {default}" in out.stdout
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": "1.1.1-chakra.0.0.4", "nodes": [')
    out = subprocess.run([*MYSTIQUE, "replay", str(bad)], capture_output=True, text=True)
    assert out.returncode == 2
    assert f"{bad}: invalid JSON" in out.stderr


def test_capture_cli_records_a_replayable_trace(tmp_path):
    script = tmp_path / "step.py"
    script.write_text(
        "import torch\n"
        "def make():\n"
        "    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))\n"
        "    x = torch.randn(16, 32)\n"
        "    def step():\n"
        "        model(x).sum().backward()\n"
        "    return step\n"
    )
    out_path = tmp_path / "mine.json.gz"
    res = subprocess.run([*MYSTIQUE, "capture", f"{script}:make", "--factory", "-o", str(out_path), "--runs", "5"],
                         capture_output=True, text=True)  # fmt: skip
    assert res.returncode == 0, res.stderr
    meta = json.loads(Path(tmp_path / "mine.meta.json").read_text())
    assert len(meta["original_samples_s"]) == 5
    res = subprocess.run([*MYSTIQUE, "replay", str(out_path), "--device", "cpu", "--iters", "2", "--warmup", "0",
                          "--json"],
                         capture_output=True, text=True)  # fmt: skip
    data = json.loads(res.stdout)
    assert data["ops_total"] > 5 and data["ops_replayed"] == data["ops_total"]
    assert "fidelity_ratio" in data


def test_replay_names_an_op_whose_kernel_crashed_the_build_and_lives_on(tmp_path, capsys):
    """``mystique replay`` builds in a child process first, as the plugin does: an op whose kernel
    crashes its process on the replay's data (torch_spline_conv's basis given a kernel size of 0
    ended on SIGFPE) is an error naming the trace and the op, and the command returns 2. (Here an
    op of this test's ends its process on a negative number, which the original never gave it.)"""
    import signal

    import torch

    from pytest_mystique.recorder import capture_step
    from pytest_mystique.sidecar import sidecar_path

    lib = torch.library.Library("mystiquecli", "DEF")

    def fragile(x):
        if bool((x < 0).any()):
            os.kill(os.getpid(), signal.SIGSEGV)
        return x * 2

    lib.define("fragile(Tensor x) -> Tensor")
    lib.impl("fragile", fragile, "CPU")
    try:
        x = torch.rand(64)
        path = tmp_path / "fragile.json.gz"
        capture_step(lambda: torch.ops.mystiquecli.fragile(x).sum(), path, warmup=1, runs=1, min_warmup_s=0)
        sidecar_path(path).unlink()  # (a trace captured elsewhere: its input is drawn, negative numbers too)
        assert main(["replay", str(path), "--iters", "2", "--warmup", "1"]) == 2
    finally:
        lib._destroy()
    err = capsys.readouterr().err
    assert "fragile.json.gz: replaying op mystiquecli::fragile (node" in err and "crashed the process (SIGSEGV)" in err, err
