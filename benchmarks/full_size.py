"""Replay fidelity on models of their published sizes, against the live original in one process.

The corpus's and the model zoo's steps are of small models (two layers, hidden sizes of 64-256),
which is what keeps a 2-core host's benchmarks short; in such a step the original's Python (its
module code, the autograd engine's and the optimizer's own work) is 5-45% of the time, and no
replay of a trace's operators takes that time. A team's real step is of a model of its real size,
where the operators are nearly all of it. This script builds such models from their default
configurations (no weights downloaded): BERT-base, GPT-2 (124M), T5-small, ViT-base, ResNet-50,
and a DLRM-like recommender over tables of 50,000-1,000,000 rows read through skewed ids, its
tables in PyTorch's embedding bags or in FBGEMM's table-batched module (where ``fbgemm_gpu`` is
installed); for each, a training step (AdamW; SGD with sparse gradients for the recommender) and an inference
step. Each is captured with the capture helper, then blocks of original steps and replay
iterations alternate (``fidelity_interleaved.alternate``; a block covers at least ``BLOCK_S`` of
steps: the host's drift hits both sides), and with ``--ops N`` the time inside operators of N or
more alternated profiled calls of each side (``model_zoo.zoo_calls``) is compared too. The columns:

  * ``ratio``: replay median / original median of the whole step (target 1 of issue 3);
  * ``ops ratio``: the same for the time inside operators;
  * ``host orig`` / ``host repl``: each side's share of its profiled step outside operators.

    python benchmarks/full_size.py [--rounds 4] [--block 3] [--ops 3] [NAME ...]
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "scripts"))

import make_traces  # noqa: E402
from fidelity_interleaved import alternate, op_timer_option, summary, timer_label  # noqa: E402
from model_zoo import PRECISIONS, hf_step, zoo_calls  # noqa: E402

from pytest_mystique.measure import inside_operators_alternated, steady_allocator  # noqa: E402
from pytest_mystique.recorder import capture_step  # noqa: E402
from pytest_mystique.replay import Replay  # noqa: E402
from pytest_mystique.trace import load_trace  # noqa: E402


def _transformers(kind: str):
    """A transformers model of its published size, built from its default configuration, and
    its inputs (labels included; left out at inference where the model has no decoder)."""
    import transformers as tf

    tf.logging.set_verbosity_error()
    g = torch.Generator().manual_seed(0)
    if kind == "bert_base":  # 12 layers, hidden 768: 110M parameters; one sequence of 128 tokens
        ids = torch.randint(1000, 30000, (1, 128), generator=g)
        return tf.BertForMaskedLM(tf.BertConfig()), {"input_ids": ids, "labels": ids}
    if kind == "gpt2":  # 12 layers, hidden 768: 124M parameters
        ids = torch.randint(0, 50257, (1, 128), generator=g)
        return tf.GPT2LMHeadModel(tf.GPT2Config()), {"input_ids": ids, "labels": ids}
    if kind == "t5_small":  # 6 + 6 layers, d_model 512: 60M parameters
        return tf.T5ForConditionalGeneration(tf.T5Config(decoder_start_token_id=0, pad_token_id=0)), \
            {"input_ids": torch.randint(1, 32128, (1, 128), generator=g),
             "labels": torch.randint(1, 32128, (1, 32), generator=g)}  # fmt: skip
    if kind == "vit_base":  # 12 layers, hidden 768, 224x224 images in 16x16 patches: 86M parameters
        return tf.ViTForImageClassification(tf.ViTConfig(num_labels=1000)), \
            {"pixel_values": torch.randn(1, 3, 224, 224, generator=g), "labels": torch.tensor([7])}  # fmt: skip
    if kind == "resnet50":  # bottleneck blocks [3, 4, 6, 3]: 26M parameters
        return tf.ResNetForImageClassification(tf.ResNetConfig(num_labels=1000)), \
            {"pixel_values": torch.randn(2, 3, 224, 224, generator=g), "labels": torch.tensor([3, 9])}  # fmt: skip
    raise KeyError(kind)


def _hf(kind: str, train: bool, precision: str = "fp32"):
    model, inputs = _transformers(kind)
    if not train and not model.config.is_encoder_decoder:  # (a decoder needs its input)
        inputs = {k: v for k, v in inputs.items() if k != "labels"}
    return hf_step(model, inputs, train, lr=1e-5, precision=precision)


DLRM_ROWS = (1_000_000, 500_000, 300_000, 100_000, 50_000)


def _dlrm(train: bool):
    """A DLRM-like recommender: five embedding-bag tables of 1,000,000 down to 50,000 rows of 64
    (350 MB), bags of 1-40 ids drawn from a power law over a shuffled vocabulary (a few rows take
    most lookups, spread over the table), dense features through an MLP, batch 2048. Training
    uses sparse gradients and SGD, as such models do."""
    rows = DLRM_ROWS
    g = torch.Generator().manual_seed(0)
    model = make_traces.TinyDLRM(tables=rows, dim=64, dense_in=13)
    for bag in model.bags:
        bag.sparse = train
    batch = 2048
    dense = torch.randn(batch, 13, generator=g)
    sparse = []
    for n in rows:
        lengths = torch.randint(1, 41, (batch,), generator=g)
        offsets = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)[:-1]])
        hot = min(n, 100_000)
        ranks = torch.multinomial(1.0 / torch.arange(1, hot + 1) ** 1.05, int(lengths.sum()), replacement=True,
                                  generator=g)  # fmt: skip
        sparse.append((torch.randperm(n, generator=g)[ranks], offsets))
    if not train:
        model.eval()

        def infer():
            with torch.no_grad():
                model(dense, sparse)

        return infer
    y = torch.rand(batch, generator=g)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def step():
        opt.zero_grad()
        torch.nn.functional.binary_cross_entropy_with_logits(model(dense, sparse), y).backward()
        opt.step()

    return step


#: Seconds of steps a block of one side covers, at least: a block of 3 steps of a few milliseconds
#: is at the mercy of one disturbance of the host.
BLOCK_S = 0.3

def _dlrm_tbe(train: bool):
    """The same recommender with its tables in FBGEMM's table-batched embedding module (one lookup
    for all five, as TorchRec's DLRM does), trained with the module's fused exact SGD; needs
    ``fbgemm_gpu``."""
    from fbgemm_gpu.split_embedding_configs import EmbOptimType
    from fbgemm_gpu.split_table_batched_embeddings_ops_common import EmbeddingLocation
    from fbgemm_gpu.split_table_batched_embeddings_ops_training import (
        ComputeDevice,
        SplitTableBatchedEmbeddingBagsCodegen,
    )

    rows, dim, batch = DLRM_ROWS, 64, 2048
    g = torch.Generator().manual_seed(0)
    tbe = SplitTableBatchedEmbeddingBagsCodegen([(n, dim, EmbeddingLocation.HOST, ComputeDevice.CPU) for n in rows],
                                                optimizer=EmbOptimType.EXACT_SGD, learning_rate=0.01)  # fmt: skip
    tbe.init_embedding_weights_uniform(-0.05, 0.05)  # (FBGEMM makes them zeros)
    bottom = torch.nn.Sequential(torch.nn.Linear(13, 64), torch.nn.ReLU(), torch.nn.Linear(64, dim), torch.nn.ReLU())
    top = torch.nn.Sequential(torch.nn.Linear(dim * (len(rows) + 1), 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    dense = torch.randn(batch, 13, generator=g)
    ids, lengths = [], []
    for n in rows:  # table-major: each table's bags, then the next table's
        count = torch.randint(1, 41, (batch,), generator=g)
        ranks = torch.multinomial(1.0 / torch.arange(1, min(n, 100_000) + 1) ** 1.05, int(count.sum()),
                                  replacement=True, generator=g)  # fmt: skip
        ids.append(torch.randperm(n, generator=g)[ranks])
        lengths.append(count)
    indices = torch.cat(ids)
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), torch.cat(lengths).cumsum(0)])

    def forward():
        return top(torch.cat([bottom(dense), tbe(indices, offsets)], dim=1)).squeeze(1)

    if not train:
        def infer():
            with torch.no_grad():
                forward()

        return infer
    y = torch.rand(batch, generator=g)
    opt = torch.optim.SGD([*bottom.parameters(), *top.parameters()], lr=0.01)

    def step():
        opt.zero_grad()
        torch.nn.functional.binary_cross_entropy_with_logits(forward(), y).backward()
        opt.step()

    return step


MODELS = {f"{k}_{'train' if t else 'infer'}": (k, t)
          for k in ("bert_base", "gpt2", "t5_small", "vit_base", "resnet50", "dlrm", "dlrm_tbe")
          for t in (True, False)}  # fmt: skip


def make(name: str, precision: str = "fp32"):
    kind, train = MODELS[name]
    torch.manual_seed(0)
    if kind.startswith("dlrm"):
        if precision != "fp32":
            raise ImportError(f"the recommenders run in float32 only, not {precision}")
        return (_dlrm_tbe if kind == "dlrm_tbe" else _dlrm)(train)
    return _hf(kind, train, precision)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", help="some of: " + ", ".join(MODELS))
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--block", type=int, default=3)
    ap.add_argument("--ops", type=int, default=0, metavar="N",
                    help="then compare the time inside operators over N profiled calls of each side")  # fmt: skip
    op_timer_option(ap)
    ap.add_argument("--precision", choices=tuple(PRECISIONS), default="fp32",
                    help="the transformers models' weights and inputs in float32 (the default) or bfloat16 (bf16), or "
                         "float32 with the forward pass under torch.autocast (the recommenders: float32 only)")  # fmt: skip
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    steady_allocator()  # as the plugin does before timing
    tmp = Path(tempfile.mkdtemp(prefix="full_size."))
    extra = f" {'ops ratio':>9} {'host orig':>9} {'host repl':>9}" if args.ops else ""
    print(f"{'trace':<16} {'ops':>11} {'skip':>4} {'build s':>7} {'original ms':>11} {'replay ms':>9} {'ratio':>6} "
          f"{'block ratio IQR':>15}{extra}")  # fmt: skip
    errors, op_errors = [], []
    for name in args.names or list(MODELS):
        try:
            step = make(name, args.precision)
        except ImportError as e:  # (fbgemm_gpu not installed; a recommender in another precision)
            print(f"{name:<16} left out: {e}")
            continue
        path = tmp / f"{name}.json.gz"
        capture_step(step, path, warmup=2, runs=3, min_warmup_s=0)
        t0 = time.perf_counter()
        replay = Replay(load_trace(path), "cpu").prepare()
        build = time.perf_counter() - t0
        rep = replay.report

        def run_replay(replay=replay):
            with torch.no_grad():
                replay.run()

        t0 = time.perf_counter()
        step()
        size = max(args.block, math.ceil(BLOCK_S / (time.perf_counter() - t0)))  # (a short step: longer blocks)
        orig, reps, ratios = alternate(step, run_replay, replay.between_iterations, args.rounds, size)
        ratio = statistics.median(reps) / statistics.median(orig)
        errors.append(abs(ratio - 1))
        q = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
        extra = ""
        if args.ops:
            calls = zoo_calls(args.ops, statistics.median(orig))
            got = inside_operators_alternated((step, run_replay), calls, (None, replay.between_iterations),
                                              timer=args.op_timer)  # fmt: skip
            if got is not None:
                o, r = got
                op_errors.append(abs(r.ops_s / o.ops_s - 1))
                extra = f" {r.ops_s / o.ops_s:>9.3f} {1 - o.share:>9.1%} {1 - r.share:>9.1%}"
        print(f"{name:<16} {f'{rep.ops_replayed}/{rep.ops_total}':>11} {rep.ops_skipped:>4} {build:>7.1f} "
              f"{statistics.median(orig) * 1e3:>11.1f} {statistics.median(reps) * 1e3:>9.1f} {ratio:>6.3f} "
              f"{q[0]:>7.3f}-{q[2]:<7.3f}{extra}", flush=True)  # fmt: skip
        for s in rep.skipped_list()[:3]:
            print(f"   skipped {s['count']}x {s['op']}: {s['reason'][:120]}")
        del replay, step
    summary("whole steps", errors)
    summary(f"time inside operators{timer_label(args.op_timer)}", op_errors)
    return 0


if __name__ == "__main__":
    sys.exit(main())
