"""Regenerate the bundled traces in traces/ with the capture helper.

    python scripts/make_traces.py [--out traces] [--runs 20]

Four small models built from torch.nn only, one CPU thread, seeded: an MLP training step, a CNN
inference, a transformer-encoder training step and an embedding-bag recommendation step. Each
trace is written gzipped with its timing sidecar (`<name>.meta.json`).
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from pytest_mystique.measure import steady_allocator  # noqa: E402
from pytest_mystique.recorder import capture_step  # noqa: E402


def mlp_train():
    model = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x, y = torch.randn(128, 256), torch.randint(0, 10, (128,))
    loss_fn = nn.CrossEntropyLoss()

    def step():
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()

    return step, "MLP (3 Linear+ReLU, hidden 1024, batch 128) training step, CrossEntropy, SGD with momentum"


def cnn_infer():
    model = nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(64, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10),
    ).eval()  # fmt: skip
    x = torch.randn(8, 3, 64, 64)

    def step():
        with torch.no_grad():
            model(x)

    return step, "CNN (3 conv/batchnorm/relu blocks, pooling, linear head) inference, batch 8 of 3x64x64"


class TokenTagger(nn.Module):
    def __init__(self, vocab=1000, d=128, heads=4, layers=2, classes=16):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        layer = nn.TransformerEncoderLayer(d, heads, dim_feedforward=4 * d, dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d, classes)

    def forward(self, tokens):
        return self.head(self.encoder(self.embed(tokens)))


def transformer_train():
    model = TokenTagger().train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    tokens, tags = torch.randint(0, 1000, (8, 32)), torch.randint(0, 16, (8, 32))
    loss_fn = nn.CrossEntropyLoss()

    def step():
        opt.zero_grad()
        loss_fn(model(tokens).reshape(-1, 16), tags.reshape(-1)).backward()
        opt.step()

    return step, "transformer encoder (2 layers, d=128, 4 heads) token tagging training step, AdamW"


class TinyDLRM(nn.Module):
    def __init__(self, tables=(5000, 2000, 1000, 500), dim=32, dense_in=13):
        super().__init__()
        self.bags = nn.ModuleList(nn.EmbeddingBag(n, dim, mode="sum") for n in tables)
        self.bottom = nn.Sequential(nn.Linear(dense_in, 64), nn.ReLU(), nn.Linear(64, dim), nn.ReLU())
        self.top = nn.Sequential(nn.Linear(dim * (len(tables) + 1), 64), nn.ReLU(), nn.Linear(64, 1))

    def forward(self, dense, sparse):
        feats = [self.bottom(dense)] + [bag(idx, off) for bag, (idx, off) in zip(self.bags, sparse)]
        return self.top(torch.cat(feats, dim=1)).squeeze(1)


def embbag_rec():
    batch, pooling = 1024, 8
    model = TinyDLRM()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    dense = torch.randn(batch, 13)
    sparse = []
    for bag in model.bags:
        lengths = torch.randint(1, 2 * pooling, (batch,))
        offsets = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)[:-1]])
        # Skewed (Zipf-like) ids, as recommendation traffic has.
        ids = (torch.rand(int(lengths.sum())) ** 3 * bag.num_embeddings).long()
        sparse.append((ids, offsets))
    labels = torch.randint(0, 2, (batch,)).float()
    loss_fn = nn.BCEWithLogitsLoss()

    def step():
        opt.zero_grad()
        loss_fn(model(dense, sparse), labels).backward()
        opt.step()

    return step, "embedding-bag recommender (4 EmbeddingBag tables + MLPs, DLRM-like) training step, SGD"


MODELS = {"mlp_train": mlp_train, "cnn_infer": cnn_infer, "transformer_train": transformer_train,
          "embbag_rec": embbag_rec}  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent.parent / "traces"))
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("names", nargs="*", default=list(MODELS))
    args = ap.parse_args()
    torch.set_num_threads(1)
    # the C heap's regime the replay uses: the originals' timings then compare like with like (the
    # sidecar records the regime; glibc's default one alone moves a CPU step by up to 30%)
    steady_allocator()
    out = Path(args.out)
    print(f"{'trace':<20} {'nodes':>6} {'KB':>7} {'original median ms':>19}")
    for name in args.names:
        torch.manual_seed(0)
        step, what = MODELS[name]()
        res = capture_step(step, out / f"{name}.json.gz", warmup=3, runs=args.runs, what=what)
        with gzip.open(res.path, "rt") as f:
            nodes = len(json.load(f)["nodes"])
        print(f"{name:<20} {nodes:>6} {res.path.stat().st_size / 1024:>7.1f} {res.median_s * 1e3:>19.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
