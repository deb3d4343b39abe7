"""A torch.distributed (gloo, CPU) program with no profiling code: each rank runs annotated steps of a
small matmul + all_reduce. Used under `torchrun --nproc-per-node 2`.

Optional crash of one rank after some work (argv): --crash-rank R --crash {exit,raise,kill} --crash-after K
  exit  os._exit(7) (no atexit, no cleanup)
  raise an uncaught RuntimeError (atexit runs)
  kill  SIGKILL itself
"""
import argparse
import os
import signal

import torch
import torch.distributed as dist

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=4)
ap.add_argument("--crash-rank", type=int, default=-1)
ap.add_argument("--crash", choices=["exit", "raise", "kill"], default="exit")
ap.add_argument("--crash-after", type=int, default=2)
args = ap.parse_args()

dist.init_process_group("gloo")
rank = dist.get_rank()
w = torch.randn(32, 32)
for i in range(args.steps):
    if rank == args.crash_rank and i == args.crash_after:
        print(f"rank {rank}: crashing ({args.crash})", flush=True)
        if args.crash == "exit":
            os._exit(7)
        if args.crash == "raise":
            raise RuntimeError("deliberate crash")
        os.kill(os.getpid(), signal.SIGKILL)
    with torch.profiler.record_function(f"mmprof.step.{i}"):
        x = torch.randn(4, 32) @ w
        if args.crash_rank < 0 or i < args.crash_after:  # no collective with a peer that is about to die
            dist.all_reduce(x)
    if args.crash_rank < 0 or args.crash == "raise":
        dist.barrier()
print(f"rank {rank}: ok {float(x.sum()) == float(x.sum())}", flush=True)
dist.destroy_process_group()
