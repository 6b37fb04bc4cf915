"""Record a DDP training step (gloo, CPU) of N ranks with pytest-mystique's capture helper: one
trace per rank, ``OUT/rank-<N>.json.gz``, each with its timing sidecar.

Usage: python scripts/capture_ddp.py OUT_DIR [--world 2]

The ranks are started with torch's multiprocessing and join through a ``file://`` rendezvous, so
nothing listens on a port. The traces hold the job's process groups (``process_group:init``)
and the gradient all-reduce that DDP issues, which ``pytest --mystique`` replays with one
process per rank.
"""

from __future__ import annotations

import argparse
import datetime
import os
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def rank_main(rank: int, world: int, rendezvous: str, out_dir: str) -> None:
    from pytest_mystique import capture_step

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + rendezvous, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=120))  # fmt: skip
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 10))  # fmt: skip
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
    x, y = torch.randn(64, 64), torch.randint(0, 10, (64,))

    def step():
        opt.zero_grad()
        torch.nn.functional.cross_entropy(ddp(x), y).backward()
        opt.step()

    capture_step(step, os.path.join(out_dir, f"rank-{rank}.json.gz"), warmup=3, runs=10,
                 what=f"DDP MLP training step, rank {rank} of {world} (gloo)")  # fmt: skip
    dist.destroy_process_group()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--world", type=int, default=2)
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        mp.start_processes(rank_main, args=(args.world, os.path.join(tmp, "rendezvous"), os.path.abspath(args.out)),
                           nprocs=args.world, start_method="spawn")  # fmt: skip


if __name__ == "__main__":
    main()
