#!/usr/bin/env bash
# Creates .venv (if missing) and installs pytest-mystique with its test tools, on the CPU build of torch.
# Usage: bash scripts/setup.sh        (idempotent: a second run only checks the install)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -c constraints-cpu.txt -e '.[test]'
