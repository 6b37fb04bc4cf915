"""Record a data-parallel training step (gloo, CPU) of N ranks with pytest-mystique's capture
helper: one trace per rank, ``OUT/rank-<N>.json.gz``, each with its timing sidecar.

Usage: python scripts/capture_ddp.py OUT_DIR [--world 2] [--wrap ddp|fsdp2|hsdp|tp|pp]

The ranks are started with torch's multiprocessing and join through a ``file://`` rendezvous, so
nothing listens on a port. The traces hold the job's process groups (``process_group:init``)
and the collectives of the wrapper, which ``pytest --mystique`` replays with one process per rank:
DDP's gradient all-reduce (SGD with momentum), FSDP2's (``fully_shard``, each linear layer a
unit of its own, AdamW) all-gathers of the parameters and reduce-scatters of the gradients (HSDP:
the same on a 2-D mesh of world/2 rows of 2, sharded along a row and the gradients all-reduced
across the rows: groups of different ranks), or
tensor parallelism's (DTensor: the first two linear layers split by columns, then rows, SGD) all-
reduce of the second one's partial sums, through torch's functional collectives, or pipeline
parallelism's (``torch.distributed.pipelining``: rank r runs stage r of the layers, a 1F1B schedule
over 4 microbatches, SGD) sends and receives of activations and gradients between the stages.
"""

from __future__ import annotations

import argparse
import datetime
import os
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def rank_main(rank: int, world: int, rendezvous: str, out_dir: str, wrap: str = "ddp") -> None:
    from pytest_mystique import capture_step

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + rendezvous, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=120))  # fmt: skip
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 10))  # fmt: skip
    x, y = torch.randn(64, 64), torch.randint(0, 10, (64,))
    if wrap == "pp":  # pipeline parallelism: rank r runs stage r of the layers, 4 microbatches (1F1B)
        from torch.distributed.pipelining import PipelineStage, Schedule1F1B

        layers = list(model)
        cut = [0, *[len(layers) * (r + 1) // world for r in range(world)]]
        stage_model = torch.nn.Sequential(*layers[cut[rank] : cut[rank + 1]])
        stage = PipelineStage(stage_model, rank, world, torch.device("cpu"))
        schedule = Schedule1F1B(stage, n_microbatches=4, loss_fn=torch.nn.functional.cross_entropy)
        opt = torch.optim.SGD(stage_model.parameters(), lr=0.01, momentum=0.9)
        inputs, target = ((x,) if rank == 0 else ()), ({"target": y} if rank == world - 1 else {})

        def forward_backward():
            schedule.step(*inputs, **target)

    else:
        if wrap != "ddp":
            from torch.distributed.device_mesh import init_device_mesh

            if wrap == "hsdp":
                mesh = init_device_mesh("cpu", (world // 2, 2), mesh_dim_names=("replicate", "shard"))
            else:
                mesh = init_device_mesh("cpu", (world,))
        if wrap == "tp":  # tensor parallelism (DTensor): the hidden layer's columns, then rows, split across the ranks
            from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

            wrapped = parallelize_module(model, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
            opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        elif wrap in ("fsdp2", "hsdp"):  # (hsdp: replicated across the mesh's rows, sharded along each row)
            from torch.distributed.fsdp import fully_shard

            for layer in (*(m for m in model if isinstance(m, torch.nn.Linear)), model):
                fully_shard(layer, mesh=mesh)
            wrapped, opt = model, torch.optim.AdamW(model.parameters(), lr=1e-3)
        else:
            wrapped = torch.nn.parallel.DistributedDataParallel(model)
            opt = torch.optim.SGD(wrapped.parameters(), lr=0.01, momentum=0.9)

        def forward_backward():
            torch.nn.functional.cross_entropy(wrapped(x), y).backward()

    def step():
        opt.zero_grad()
        forward_backward()
        opt.step()

    capture_step(step, os.path.join(out_dir, f"rank-{rank}.json.gz"), warmup=3, runs=10,
                 what=f"{wrap.upper()} MLP training step, rank {rank} of {world} (gloo)")  # fmt: skip
    dist.destroy_process_group()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--wrap", choices=("ddp", "fsdp2", "hsdp", "tp", "pp"), default="ddp")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        mp.start_processes(rank_main, args=(args.world, os.path.join(tmp, "rendezvous"), os.path.abspath(args.out),
                                            args.wrap),
                           nprocs=args.world, start_method="spawn")  # fmt: skip


if __name__ == "__main__":
    main()
