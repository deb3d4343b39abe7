"""Record tests/data/kineto_own/gloo_rank{0,1}.json.gz: two CPU ranks running gloo collectives under
torch.profiler(record_shapes=True). torch 2.13 writes no record_param_comms events for gloo, so these traces
exercise the importer's c10d-op / gloo-range path.

Run from the repo root:  python tests/data/kineto_own/make_gloo_traces.py
Known facts the tests check, per rank, all inside mmprof.decode > mmprof.step.1 (group: default_pg, 2 ranks):
    all_reduce       1000 float32           -> allreduce,      4000 B in / 4000 B out
    all_gather       [10, 3] float32        -> allgather,       120 B in /  240 B out
    broadcast        7 float64 from rank 0  -> broadcast,        56 B in /   56 B out
    barrier                                 -> barrier,           0 B
    all_gather_into_tensor 10 -> 20 float32 -> allgather,        40 B in /   80 B out
    reduce_scatter_tensor 10 -> 5 float32   -> reduce_scatter,   40 B in /   20 B out
    all_to_all_single 4 float32             -> all_to_all,       16 B in /   16 B out
    rank 0 sends 3 float32 to rank 1        -> send (rank 0) / recv (rank 1), 12 B
    async all_reduce 6 bfloat16, then wait  -> allreduce,        12 B in / 12 B out
"""

from __future__ import annotations

import gzip
import os
import shutil
import socket
import sys
import tempfile
import warnings
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.profiler import ProfilerActivity, profile, record_function

HERE = Path(__file__).resolve().parent
WORLD = 2


def worker(rank: int, port: int, tmp: str) -> None:
    warnings.simplefilter("ignore")
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    torch.set_num_threads(1)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        with record_function("mmprof.decode"), record_function("mmprof.step.1"):
            dist.all_reduce(torch.ones(1000))
            dist.all_gather([torch.empty(10, 3) for _ in range(WORLD)], torch.ones(10, 3))
            dist.broadcast(torch.ones(7, dtype=torch.float64), 0)
            dist.barrier()
            dist.all_gather_into_tensor(torch.empty(10 * WORLD), torch.ones(10))
            dist.reduce_scatter_tensor(torch.empty(5), torch.ones(10))
            dist.all_to_all_single(torch.empty(4), torch.ones(4))
            if rank == 0:
                dist.send(torch.ones(3), 1)
            else:
                dist.recv(torch.empty(3), 0)
            dist.all_reduce(torch.ones(6, dtype=torch.bfloat16), async_op=True).wait()
    raw = os.path.join(tmp, f"rank{rank}.json")
    prof.export_chrome_trace(raw)
    with open(raw, "rb") as f, gzip.open(HERE / f"gloo_rank{rank}.json.gz", "wb", compresslevel=9) as g:
        shutil.copyfileobj(f, g)
    dist.destroy_process_group()


def main() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(worker, args=(port, tmp), nprocs=WORLD)
    for r in range(WORLD):
        out = HERE / f"gloo_rank{r}.json.gz"
        print(f"wrote {out} ({out.stat().st_size:,} bytes) with torch {torch.__version__}", file=sys.stderr)


if __name__ == "__main__":
    main()
