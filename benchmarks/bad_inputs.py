"""The bad-input matrix as a table: kind of bad input -> what the user sees.

Writes every case of tests/bad_inputs.py beside a good trace, runs `pytest --mystique` once over
them, and prints for each kind the outcome and the line pytest showed.

    python benchmarks/bad_inputs.py
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

from bad_inputs import CASES, write_cases  # noqa: E402


def main() -> int:
    good_path = ROOT.parent / "shared" / "corpus" / "vit_infer.json.gz"
    good = json.loads(gzip.decompress(good_path.read_bytes()))
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp) / "traces"
        write_cases(d, good)
        (d / "good.json.gz").write_bytes(good_path.read_bytes())
        out = subprocess.run(
            [sys.executable, "-m", "pytest", "--mystique", "traces", "--mystique-iters=3", "--mystique-warmup=1",
             "--mystique-threads=1", "--mystique-tolerance=5", "--mystique-max-trace-size=32MiB",
             "--mystique-max-memory=4GiB", "-p", "no:cacheprovider", "-rA"],
            cwd=tmp, capture_output=True, text=True,
        ).stdout.replace(tmp + "/", "")  # fmt: skip
    lines = out.splitlines()
    print(f"{'kind':<46} {'outcome':<8} what the user sees")
    seen = 0
    for case in CASES:
        line = next((ln.strip() for ln in lines if case.expect in ln), None)
        seen += line is not None
        print(f"{case.kind:<46} {case.outcome:<8} {line or 'NOT FOUND'}"[:220])
    final = next((ln for ln in reversed(lines) if " in " in ln and ("passed" in ln or "failed" in ln)), "")
    print(f"{seen}/{len(CASES)} kinds reported as expected; session: {final.strip('= ')}")
    return 0 if seen == len(CASES) and "INTERNALERROR" not in out else 1


if __name__ == "__main__":
    sys.exit(main())
