#!/usr/bin/env bash
# The whole GPU check of a session, in one call of about 8.5 minutes (a lent GPU's time is short:
# prepare here, run once, read the logs). Each step has its own time limit, writes its log under
# $OUT (default ./gpu_out) and the next step runs whatever the last one did.
#
# On the machine this project's sessions are lent (python3 with torch, CUDA, transformers and
# pytest there; no network), from the repository root:
#   here, once:  echo /.whl/ >> .git/info/exclude; echo /.dev/ >> .git/info/exclude
#                python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#                  --implementation cp --platform manylinux_2_17_x86_64 -d .whl msgspec ruptures
#                mkdir -p .dev && cp -r ../shared/corpus .dev/corpus
#   there:       bash scripts/gpu_session.sh      (carry: .whl and .dev)
#
# Steps: gpu_check.py --jobs (every corpus and bundled trace on cuda:0, the multi-rank jobs); the
# plugin on cuda twice (baselines, then verdicts); mystique replay --json of two corpus traces;
# an A/A mystique ab on cuda; fidelity_interleaved.py --device cuda (kernel time against the live
# original); the replay, CLI, capture, trace and export tests with the GPU visible.
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-$PWD/gpu_out}
mkdir -p "$OUT"
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
if [ ! -d ../shared/corpus ] && [ -d .dev/corpus ]; then mkdir -p ../shared && cp -r .dev/corpus ../shared/corpus; fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/env.txt"
python3 -c "import sys, torch; print(sys.version.split()[0], torch.__version__, torch.version.cuda, torch.cuda.get_device_name())" | tee -a "$OUT/env.txt"
python3 -m pip install -q --no-deps --no-index --no-build-isolation -e . >"$OUT/pip.txt" 2>&1
el "pip install -e: rc $?"

el "== gpu_check --jobs"
timeout 230 python3 benchmarks/gpu_check.py --jobs >"$OUT/gpu_check.txt" 2>&1
grep -v "^#" "$OUT/gpu_check.txt" | tail -16

el "== the plugin on cuda, twice"
for i in 1 2; do
  timeout 90 python3 -m pytest -p no:cacheprovider --mystique traces/ --mystique-device cuda --mystique-budget 4 -q \
    >"$OUT/plugin_$i.txt" 2>&1
  el "plugin run $i: rc $?"; grep -E "passed|failed|unsure|error" "$OUT/plugin_$i.txt" | tail -4
done

el "== mystique replay --json on cuda"
for t in llama_train distilbert_train; do
  timeout 60 python3 -m pytest_mystique.cli replay "../shared/corpus/$t.json.gz" --device cuda --json >"$OUT/replay_$t.json" 2>"$OUT/replay_$t.err"
  el "$t: rc $?"
done

el "== mystique ab, the same Python twice, on cuda"
timeout 90 python3 -m pytest_mystique.cli ab traces/mlp_train.json.gz traces/cnn_infer.json.gz --python python3 --python python3 \
  --device cuda --budget 12 --workers 2 >"$OUT/ab.txt" 2>&1
el "ab: rc $?"; tail -5 "$OUT/ab.txt"

el "== fidelity_interleaved --device cuda"
timeout 200 python3 benchmarks/fidelity_interleaved.py --device cuda --rounds 3 --block 5 --ops 3 >"$OUT/interleaved.txt" 2>"$OUT/interleaved.err"
el "interleaved: rc $?"; tail -4 "$OUT/interleaved.txt"

el "== tests with the GPU visible"
MYSTIQUE_TEST_GPU=1 timeout 170 python3 -m pytest -p no:cacheprovider -q -n 14 -W ignore tests/test_replay.py tests/test_cli.py \
  tests/test_capture.py tests/test_trace.py tests/test_export.py >"$OUT/tests.txt" 2>&1
el "tests: rc $? (124: stopped at the limit)"; tail -3 "$OUT/tests.txt"
el "done"
