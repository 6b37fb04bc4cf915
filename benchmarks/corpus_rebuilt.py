"""The corpus's traces replayed against their original steps rebuilt and run on this machine.

A corpus trace's ``.meta.json`` holds the median of its original step, timed on the machine that
captured it. The replay runs here, and a shared host's speed differs from another machine's (and
from itself over minutes) by more than the replay's own error, so that ratio mixes the two. The
sidecars also say what each step was ("transformers DistilBERT (2 layers) masked-LM training step
with SGD+momentum"), and the trace gives every size: the embedding tables, the linear layers,
the attention's heads, the batch. From those this script builds the same model (transformers,
from a config: no weights downloaded), and checks that the step it makes is the one traced: its
own trace must hold the same operators with the same input shapes, counted, as the corpus's
trace. Then it alternates blocks of that original step and of the corpus trace's replay in one
process (as fidelity_interleaved.py does) and prints, per trace:

- the stored original median (the capture machine's), the rebuilt original's median here, the
  replay's median here;
- ``replay/orig``: the replay against the original on the same machine at the same time, the
  replay's own fidelity;
- ``here/stored``: the rebuilt original against the stored timing: the two machines' speeds;
- with ``--ops N``, the time inside operators of each side (profiled, alternated), their ratio and
  each side's share of the step outside them (the original's Python, which a trace does not hold).

A recipe whose step differs from the trace's is reported as such and not timed.

    python benchmarks/corpus_rebuilt.py [--rounds 15] [--block 5] [--ops 6] [NAME ...]
"""

from __future__ import annotations

import argparse
import collections
import statistics
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "scripts"))

from fidelity_interleaved import alternate, op_timer_option, summary, timer_label  # noqa: E402

from pytest_mystique.measure import inside_operators_alternated, steady_allocator  # noqa: E402
from pytest_mystique.recorder import capture_step  # noqa: E402
from pytest_mystique.replay import Replay  # noqa: E402
from pytest_mystique.sidecar import load_sidecar  # noqa: E402
from pytest_mystique.trace import load_trace  # noqa: E402

CORPUS = ROOT.parent / "shared" / "corpus"


def _lm_training(model, vocab: int, batch: int, seq: int, opt):
    ids = torch.randint(0, vocab, (batch, seq))

    def step():
        opt.zero_grad()
        model(input_ids=ids, labels=ids).loss.backward()
        opt.step()

    return step


def _distilbert_train(tf):
    # sizes from the trace: word embeddings 7000x256, positions 512, two layers of four 64-wide
    # heads, a 1024-wide feed-forward, input ids 4x96; the sidecar: masked LM, SGD with momentum
    model = tf.DistilBertForMaskedLM(tf.DistilBertConfig(vocab_size=7000, dim=256, hidden_dim=1024, n_layers=2,
                                                         n_heads=4))  # fmt: skip
    return _lm_training(model, 7000, 4, 96, torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9))


def _llama_train(tf):
    # embeddings 6000x256, two layers, 4 query heads and 2 key/value heads of 64, a 688-wide MLP,
    # input ids 2x128; the sidecar: causal LM, AdamW
    model = tf.LlamaForCausalLM(tf.LlamaConfig(vocab_size=6000, hidden_size=256, intermediate_size=688,
                                               num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2))  # fmt: skip
    return _lm_training(model, 6000, 2, 128, torch.optim.AdamW(model.parameters(), lr=1e-4))


def _vit_infer(tf):
    # 8 images of 3x96x96 in 16x16 patches (a 192-wide convolution), two layers of three heads,
    # a 768-wide MLP, a 2-class head; the sidecar: inference
    model = tf.ViTForImageClassification(tf.ViTConfig(image_size=96, patch_size=16, hidden_size=192,
                                                      num_hidden_layers=2, num_attention_heads=3,
                                                      intermediate_size=768, num_labels=2)).eval()  # fmt: skip
    x = torch.randn(8, 3, 96, 96)

    def infer():
        with torch.no_grad():
            model(pixel_values=x)

    return infer


RECIPES = {"distilbert_train": _distilbert_train, "llama_train": _llama_train, "vit_infer": _vit_infer}


def signature(path) -> collections.Counter:
    """The trace's aten operators with the shapes of their inputs, counted."""
    return collections.Counter((n.name, str([getattr(v, "shape", None) for v in n.inputs]))
                               for n in load_trace(path).nodes if n.name.startswith("aten::"))  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--block", type=int, default=5)
    ap.add_argument("--ops", type=int, default=0, metavar="N", help="then N profiled calls of each side")
    op_timer_option(ap)
    args = ap.parse_args()
    try:
        import transformers as tf
    except ImportError:
        print("transformers is not installed: nothing to rebuild", file=sys.stderr)
        return 1
    torch.set_num_threads(1)
    steady_allocator()
    tmp = Path(tempfile.mkdtemp(prefix="rebuilt."))
    head = (f"{'trace':<18} {'ops':>5} {'same ops':>8} {'stored ms':>9} {'orig here':>9} {'replay ms':>9} "
            f"{'replay/orig':>11} {'block IQR':>13} {'here/stored':>11}")  # fmt: skip
    print(head + (f" {'ops ratio':>9} {'host orig':>9} {'host repl':>9}" if args.ops else ""))
    errors, op_errors = [], []
    for name in args.names or sorted(RECIPES):
        trace = CORPUS / f"{name}.json.gz"
        side = load_sidecar(trace)
        if name not in RECIPES or side is None or side.get("threads", 1) != 1:
            print(f"{name:<18} no rebuild recipe, or no single-thread original timing")
            continue
        torch.manual_seed(0)
        step = RECIPES[name](tf)
        own = tmp / f"{name}.json.gz"
        capture_step(step, own, warmup=2, runs=2, min_warmup_s=0.0)
        want, got = signature(trace), signature(own)
        if want != got:
            print(f"{name:<18} the rebuilt step differs from the trace: {sum((want - got).values())} op(s) only in "
                  f"the trace, {sum((got - want).values())} only in the rebuilt step; not timed")  # fmt: skip
            continue
        replay = Replay(load_trace(trace), "cpu").prepare()

        def run_replay(replay=replay):
            with torch.no_grad():
                replay.run()

        orig, rep, ratios = alternate(step, run_replay, replay.between_iterations, args.rounds, args.block)
        o_med, r_med = statistics.median(orig), statistics.median(rep)
        errors.append(abs(r_med / o_med - 1))
        q = statistics.quantiles(ratios, n=4)
        line = (f"{name:<18} {replay.report.ops_replayed:>5} {sum(want.values()):>8} "
                f"{side['original_median_s'] * 1e3:>9.2f} {o_med * 1e3:>9.2f} {r_med * 1e3:>9.2f} "
                f"{r_med / o_med:>11.3f} {q[0]:>6.3f}-{q[2]:<6.3f} {o_med / side['original_median_s']:>11.3f}")  # fmt: skip
        if args.ops:
            o, r = inside_operators_alternated((step, run_replay), args.ops, (None, replay.between_iterations),
                                               timer=args.op_timer)  # fmt: skip
            op_errors.append(abs(r.ops_s / o.ops_s - 1))
            line += f" {r.ops_s / o.ops_s:>9.3f} {1 - o.share:>9.1%} {1 - r.share:>9.1%}"
        print(line, flush=True)
    summary("replay/original here", errors)
    summary(f"time inside operators{timer_label(args.op_timer)}", op_errors)
    return 0


if __name__ == "__main__":
    sys.exit(main())
