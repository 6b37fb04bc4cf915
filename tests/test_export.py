"""mystique export: a standalone benchmark script that needs only torch."""

import ast
import re
import subprocess
import sys

from pytest_mystique.cli import main

from conftest import corpus


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


def test_export_of_a_broken_trace_is_a_clear_error(tmp_path, capsys):
    bad = tmp_path / "broken.json"
    bad.write_text('{"schema": "1.0.1", "nodes": [')
    assert main(["export", str(bad), "-o", str(tmp_path / "x.py")]) == 2
    err = capsys.readouterr().err
    assert "broken.json" in err and "invalid JSON" in err
    assert not (tmp_path / "x.py").exists()
