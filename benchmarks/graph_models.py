"""Small graph neural networks of PyTorch Geometric, for the model zoo
(``python benchmarks/model_zoo.py --family graphs``): message passing over a graph's edges, whose
operators (``index_select`` at the sources, ``scatter_add_``/``scatter_reduce_`` at the
destinations, softmax over each node's edges) read an edge index whose rows spread unlike each
other: sources evenly, destinations crowding on hub nodes (``rand() ** 3``: a power law's head).

``GRAPHS[name]()`` gives ``(model, x, loss)``: ``model(**x)`` is one forward pass over 2,000 nodes
of 64 features and 20,000 edges, ``loss(out)`` a node classification's cross entropy over 8
classes. Each builder seeds torch first, so two calls give the same model and graph.
"""

from collections.abc import Callable

import torch
import torch_geometric.nn as gnn

NODES, EDGES, FEATURES, CLASSES = 2000, 20_000, 64, 8


def _graph() -> tuple[dict, Callable]:
    """The node features and edge index, and the loss against the nodes' labels."""
    g = torch.Generator().manual_seed(0)
    src = torch.randint(0, NODES, (EDGES,), generator=g)
    dst = (torch.rand(EDGES, generator=g) ** 3 * NODES).long()
    x = torch.randn(NODES, FEATURES, generator=g)
    labels = torch.randint(0, CLASSES, (NODES,), generator=g)
    return {"x": x, "edge_index": torch.stack([src, dst])}, lambda out: torch.nn.functional.cross_entropy(out, labels)


class _Transformer(torch.nn.Module):
    """Two graph transformer layers (attention over each node's incoming edges)."""

    def __init__(self):
        super().__init__()
        self.first, self.second = gnn.TransformerConv(FEATURES, 16, heads=4), gnn.TransformerConv(64, CLASSES)

    def forward(self, x, edge_index):
        return self.second(self.first(x, edge_index).relu(), edge_index)


def _built(make) -> Callable[[], tuple[torch.nn.Module, dict, Callable]]:
    def build():
        torch.manual_seed(0)
        x, loss = _graph()
        return make(x), x, loss

    return build


def _pna(x):
    degrees = torch.bincount(torch.bincount(x["edge_index"][1], minlength=NODES))
    return gnn.PNA(FEATURES, 64, 2, CLASSES, aggregators=["mean", "max", "std"],
                   scalers=["identity", "amplification"], deg=degrees)  # fmt: skip


GRAPHS: dict[str, Callable[[], tuple[torch.nn.Module, dict, Callable]]] = {
    "gcn": _built(lambda x: gnn.GCN(FEATURES, 64, 2, CLASSES)),  # graph convolutions (normalised sums)
    "graphsage": _built(lambda x: gnn.GraphSAGE(FEATURES, 64, 2, CLASSES)),  # mean of neighbours
    "gat": _built(lambda x: gnn.GAT(FEATURES, 32, 2, CLASSES, heads=4)),  # attention over each node's edges
    "gatv2": _built(lambda x: gnn.GAT(FEATURES, 32, 2, CLASSES, heads=4, v2=True)),
    "gin": _built(lambda x: gnn.GIN(FEATURES, 64, 2, CLASSES)),  # sums of neighbours through MLPs
    "pna": _built(_pna),  # several aggregations (mean, max, deviation) scaled by degree
    "graph_transformer": _built(lambda x: _Transformer()),
}
