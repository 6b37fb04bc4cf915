"""When a replay frees an op's output, against the live original: a table of the two rules.

A trace does not record when the original freed a tensor. It does say where the original's memory
went to a later output: a trace writer names memory at an address with the storage id of the last
tensor there, so an op's output in a storage id seen before (and in none of its op's inputs') is
where an older tensor's memory was handed out again. The original let go of that tensor somewhere
between its last read and that op. ``last-read`` frees each output after its last read;
``until-reuse`` holds it until just before the op that reused its memory, where the trace shows one
(``Replay(liveness=...)``). The replay's default is ``until-reuse`` for an inference step and
``last-read`` for a step with a backward pass.

For each model (the model zoo's, or the interleaved benchmark's), this script captures a step with
the capture helper, builds both replays of it, then profiles the original and the two replays,
alternated, ``--ops N`` calls a side in each of ``--rounds`` rounds, and prints for each rule the
median over the rounds of the time inside operators, replay / original, with how many outputs the
rule frees later than their last read and its peak of held tensor bytes.

    python benchmarks/liveness.py [--ops 10] [--rounds 3] [MODEL ...]
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import warnings
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from pytest_mystique.measure import inside_operators_alternated, steady_allocator  # noqa: E402
from pytest_mystique.memory import replay_peak_bytes, trace_peak_bytes  # noqa: E402
from pytest_mystique.recorder import capture_step  # noqa: E402
from pytest_mystique.replay import LIVENESS, Replay  # noqa: E402
from pytest_mystique.steps import read_slots  # noqa: E402
from pytest_mystique.trace import load_trace  # noqa: E402

#: Small inference and training steps of the model zoo, and the two loops over positions whose
#: training steps overshoot with ``until-reuse``.
DEFAULT_MODELS = ("opt_infer", "roberta_infer", "olmo_infer", "resnet_infer", "opt_train", "mbart_train",
                  "mamba_train", "jamba_train")  # fmt: skip


def make_step(name: str):
    """The step of ``name``: a model of the interleaved benchmark's table, else of the model zoo's
    (``<model>_train`` or ``<model>_infer``)."""
    import fidelity_interleaved

    table = fidelity_interleaved.models()
    if name in table:
        return table[name]()[0]
    import model_zoo
    import transformers

    model_zoo.tf = transformers
    model, mode = name.rsplit("_", 1)
    return model_zoo.make(model, mode == "train")


def held_later(replay: Replay) -> int:
    """How many of the replay's outputs it frees after the step of their last read."""
    last = {}
    for i, step in enumerate(replay.steps):
        for slot in read_slots(step):
            last[slot] = i
    return sum(1 for i, step in enumerate(replay.steps) for slot in step.frees if last.get(slot, i) < i)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", default=list(DEFAULT_MODELS))
    ap.add_argument("--ops", type=int, default=10, help="profiled calls a side in each round")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    steady_allocator()
    tmp = Path(tempfile.mkdtemp(prefix="liveness."))
    cols = "".join(f" {rule + ' ops':>16} {'held':>5} {'peak MiB':>8}" for rule in LIVENESS)
    print(f"{'model':<18} {'trace MiB':>9}{cols}")
    errors: dict[str, list[float]] = {rule: [] for rule in LIVENESS}
    for name in args.models:
        torch.manual_seed(0)
        step = make_step(name)
        path = tmp / f"{name}.json.gz"
        capture_step(step, path, warmup=3, runs=3)
        trace = load_trace(path)
        replays = [Replay(trace, "cpu", liveness=rule).prepare() for rule in LIVENESS]

        def side(replay):
            def run():
                with torch.no_grad():
                    replay.run()

            return run

        ratios: list[list[float]] = [[] for _ in LIVENESS]
        for _ in range(args.rounds):
            original, *replayed = inside_operators_alternated(
                (step, *map(side, replays)), args.ops, (None, *(r.between_iterations for r in replays)))
            for got, r in zip(ratios, replayed):
                got.append(r.ops_s / original.ops_s)
        row = f"{name:<18} {trace_peak_bytes(trace) / 2**20:>9.1f}"
        for rule, replay, got in zip(LIVENESS, replays, ratios):
            ratio = statistics.median(got)
            errors[rule].append(abs(ratio - 1))
            row += f" {ratio:>16.3f} {held_later(replay):>5} {replay_peak_bytes(replay) / 2**20:>8.1f}"
        print(row, flush=True)
    for rule, errs in errors.items():
        geo = math.exp(statistics.mean(math.log(max(e, 1e-6)) for e in errs))
        print(f"{rule}: time inside operators, replay / original: geomean |ratio-1| = {geo:.1%}, "
              f"within 5%: {sum(e <= 0.05 for e in errs)}/{len(errs)}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
